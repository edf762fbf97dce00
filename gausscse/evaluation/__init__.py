"""Evaluation of GaussCSE models the way the paper measured them, plus STS and point-embedding baselines.

* ``gausscse-evaluate --model PATH --tasks nli,direction,sts --output DIR`` — the full suite (see ``__main__``).
* :class:`SNLIDevEvaluator` — fast SNLI-dev AUPRC / accuracy / direction accuracy for use inside training.
* :class:`BackboneFeatures` / :class:`FrozenBackboneEncoder` — a frozen backbone's pooled vectors computed once, and
  a GaussCSE model scored from them (only its heads run).
* :func:`load_metric` — the repository's ``evaluate`` modules (binary NLI, McNemar, Spearman), loaded once from their
  local path (no Hub); the whole suite computes those metrics through them.
"""

from __future__ import annotations

from gausscse.data.features import BackboneFeatures

from .encoders import FrozenBackboneEncoder
from .fast import SNLIDevEvaluator
from .metrics import EVALUATE_MODULES_DIR, METRIC_NAMES, load_metric

__all__ = [
    "EVALUATE_MODULES_DIR",
    "METRIC_NAMES",
    "BackboneFeatures",
    "FrozenBackboneEncoder",
    "SNLIDevEvaluator",
    "load_metric",
]
