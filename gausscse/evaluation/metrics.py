"""Where the evaluation gets its metrics: the repository's ``evaluate`` modules, plus seed aggregation.

The metric math lives in one place each, the self-contained ``evaluate`` modules under
:data:`EVALUATE_MODULES_DIR` (they load in a process that cannot import ``gausscse``):

* ``binary_nli`` — accuracy at a threshold or at the best threshold of the grid 0, 0.001, …, 1 (smallest among
  ties; entailment iff score ≥ threshold), the paper's threshold-sweep AUPRC and sklearn-style average precision;
* ``retrieval`` — accuracy@1, MRR@10, nDCG@10, recall@10, MAP@100 of ranked retrieval (binary relevance), as
  sentence-transformers' ``InformationRetrievalEvaluator``;
* ``spearman`` — Spearman's ρ (ties get their average rank);
* ``mcnemar`` — McNemar's exact two-sided binomial test (and the continuity-corrected χ²).

The tasks, the suite and the plots call them through :func:`load_metric`, which loads each module once per
process. Every metric returns fractions in [0, 1] (or raw statistics); the report multiplies by 100.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

EVALUATE_MODULES_DIR = Path(__file__).resolve().parent / "evaluate_modules"
METRIC_NAMES = ("binary_nli", "mcnemar", "retrieval", "spearman")


@functools.cache
def load_metric(name: str):
    """Load one of the repository's ``evaluate`` modules (``binary_nli``, ``mcnemar``, ``spearman``) from disk.

    Loaded once per process and name (the same object is returned afterwards); no Hub access. The module keeps
    its inputs in memory (``keep_in_memory=True``): no cache or lock files are written by ``compute``.
    """
    import evaluate  # imported here: only the metric users pay its import time

    if name not in METRIC_NAMES:
        raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRIC_NAMES)}")
    return evaluate.load(str(EVALUATE_MODULES_DIR / name), keep_in_memory=True)


def precision_recall_sweep(scores, labels):
    """The precision–recall points behind the ``binary_nli`` module's ``auprc`` (for plots): precision and recall
    of "score >= t" at every grid threshold t, then the anchor (recall 0, precision 1)."""
    return load_metric("binary_nli").precision_recall_sweep(scores, labels)


def mean_and_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1) over seeds; the std is 0 for a single run."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise ValueError("values is empty")
    return float(values.mean()), float(values.std(ddof=1)) if values.size > 1 else 0.0
