"""The repository's `evaluate` modules (the metric math), loaded once per process, and the mean ± std over seeds."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

EVALUATE_MODULES_DIR = Path(__file__).resolve().parent / "evaluate_modules"
METRIC_NAMES = ("binary_nli", "mcnemar", "retrieval", "spearman")


@functools.cache
def load_metric(name: str):
    """One of :data:`METRIC_NAMES` from its local folder (no Hub), kept in memory (no cache or lock files)."""
    import evaluate  # here: only the metric users pay its import time

    if name not in METRIC_NAMES:
        raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRIC_NAMES)}")
    return evaluate.load(str(EVALUATE_MODULES_DIR / name), keep_in_memory=True)


def mean_and_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1) over seeds; the std is 0 for a single run."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise ValueError("values is empty")
    return float(values.mean()), float(values.std(ddof=1)) if values.size > 1 else 0.0
