"""Evaluation of GaussCSE models the way the paper measured them, plus STS and point-embedding baselines.

* ``gausscse-evaluate --model PATH --tasks nli,direction,sts --output DIR`` — the full suite (see ``__main__``).
* :class:`SNLIDevEvaluator` — fast SNLI-dev AUPRC / accuracy / direction accuracy for use inside training.
* :class:`BackboneFeatures` / :class:`FrozenBackboneEncoder` — a frozen backbone's pooled vectors computed once, and
  a GaussCSE model scored from them (only its heads run).
* :func:`load_metric` — the repository's ``evaluate`` modules, loaded from their local path (no Hub).
"""

from __future__ import annotations

from pathlib import Path

from gausscse.data.features import BackboneFeatures

from .encoders import FrozenBackboneEncoder
from .fast import SNLIDevEvaluator

EVALUATE_MODULES_DIR = Path(__file__).resolve().parent / "evaluate_modules"
METRIC_NAMES = ("binary_nli", "mcnemar", "spearman")


def load_metric(name: str):
    """Load one of the repository's ``evaluate`` modules (``binary_nli``, ``mcnemar``, ``spearman``) from disk."""
    import evaluate  # imported here: only the evaluate-module users pay its import time

    if name not in METRIC_NAMES:
        raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRIC_NAMES)}")
    return evaluate.load(str(EVALUATE_MODULES_DIR / name))


__all__ = [
    "EVALUATE_MODULES_DIR",
    "METRIC_NAMES",
    "BackboneFeatures",
    "FrozenBackboneEncoder",
    "SNLIDevEvaluator",
    "load_metric",
]
