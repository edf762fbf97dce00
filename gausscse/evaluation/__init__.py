"""Evaluation of GaussCSE models the way the paper measured them, plus STS and point-embedding baselines.

* ``gausscse-evaluate --model PATH --tasks nli,direction,sts --output DIR`` — the full suite (see ``gausscse.cli``).
* :class:`SNLIDevEvaluator` (``dev_evaluator``) — SNLI-dev AUPRC / accuracy / direction accuracy, used inside
  training.
* :class:`SentenceEncoder` / :class:`EncodedSentences` — the protocol every task scores through: anything with
  ``encode_unique(sentences) -> EncodedSentences`` can be evaluated (``encoders``: a GaussCSE model, any ``AutoModel``;
  ``encoding``: their loop over distinct sentences in token-sorted batches).
* :func:`load_metric` — the repository's ``evaluate`` modules (binary NLI, McNemar, Spearman), loaded once from their
  local path (no Hub); the whole suite computes those metrics through them.
"""

from __future__ import annotations

from .dev_evaluator import SNLIDevEvaluator
from .encoders import EncodedSentences, SentenceEncoder
from .metrics import EVALUATE_MODULES_DIR, METRIC_NAMES, load_metric

__all__ = [
    "EVALUATE_MODULES_DIR",
    "METRIC_NAMES",
    "EncodedSentences",
    "SNLIDevEvaluator",
    "SentenceEncoder",
    "load_metric",
]
