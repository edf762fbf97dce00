"""Evaluation as the paper measured it, plus STS, entailment retrieval and point-embedding baselines: the suite
(``gausscse-evaluate``), :class:`SNLIDevEvaluator` for training, the :class:`SentenceEncoder` protocol."""

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
