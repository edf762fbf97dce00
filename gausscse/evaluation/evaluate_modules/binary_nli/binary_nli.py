"""Binary NLI (Yoda et al., EACL 2024, §3.1) as a self-contained `evaluate` module (numpy and sklearn only).
`predictions`: scores (higher = entailment), `references`: 1/True = entailment, optional `threshold`. Fractions in
[0, 1]: `accuracy` of "entailment iff score >= threshold" at `threshold` (returned too; default `best_threshold`),
`best_accuracy` and `best_threshold` (the most accurate of the grid 0, 0.001, …, 1, the smallest among ties), `auprc`
(the paper's sweep: precision/recall at each grid threshold, precision 1 where nothing is predicted positive, then the
(recall 0, precision 1) anchor; trapezoid over recall) and `average_precision` (sklearn's AP, threshold free)."""

from collections import namedtuple

import datasets
import evaluate
import numpy as np
from sklearn.metrics import average_precision_score

THRESHOLD_GRID = np.round(np.arange(1001) / 1000.0, 3)
CITATION = "Yoda, Tsukagoshi, Sasano, Takeda. Sentence Representations via Gaussian Embedding. EACL 2024."
PrecisionRecallSweep = namedtuple("PrecisionRecallSweep", "thresholds precision recall")


def _inputs_and_counts(scores, labels, thresholds) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(scores, labels, TP, FP)`` of the rule "score >= t" at every threshold t, the inputs checked."""
    scores, labels = np.asarray(scores, dtype=np.float64).reshape(-1), np.asarray(labels).reshape(-1)
    if scores.shape != labels.shape:
        raise ValueError(f"scores and labels must have the same length, got {scores.size} and {labels.size}")
    if scores.size == 0:
        raise ValueError("scores is empty")
    if not np.isfinite(scores).all():
        raise ValueError(f"scores[{int(np.flatnonzero(~np.isfinite(scores))[0])}] is NaN or inf")
    if labels.dtype != bool and not np.isin(labels, (0, 1)).all():
        raise ValueError(f"labels must be booleans or 0/1, got {labels[~np.isin(labels, (0, 1))][0]!r}")
    if np.size(thresholds) == 0 or np.any(np.diff(thresholds) <= 0):
        raise ValueError("thresholds must be a non-empty, strictly increasing sequence")
    labels = labels.astype(bool)
    positive, negative = np.sort(scores[labels]), np.sort(scores[~labels])
    true_positives = positive.size - np.searchsorted(positive, thresholds, side="left")
    return scores, labels, true_positives, negative.size - np.searchsorted(negative, thresholds, side="left")


class BinaryNLI(evaluate.Metric):
    @staticmethod  # the points behind `auprc`, for plots
    def precision_recall_sweep(scores, labels, thresholds=THRESHOLD_GRID) -> PrecisionRecallSweep:
        """By increasing threshold t: P(t) = TP/(TP+FP) (1 when nothing is predicted positive), R(t) = TP/#positives;
        then the anchor (R=0, P=1) at t = inf."""
        thresholds = np.asarray(thresholds, dtype=np.float64).reshape(-1)
        scores, labels, true_positives, false_positives = _inputs_and_counts(scores, labels, thresholds)
        positives = int(labels.sum())
        if positives == 0:
            raise ValueError("labels has no positive example: precision and recall are undefined")
        predicted = true_positives + false_positives
        precision = np.divide(true_positives, predicted, out=np.ones(thresholds.size), where=predicted > 0)
        return PrecisionRecallSweep(
            np.append(thresholds, np.inf), np.append(precision, 1.0), np.append(true_positives / positives, 0.0)
        )

    def _info(self) -> evaluate.MetricInfo:
        features = {"predictions": datasets.Value("float64"), "references": datasets.Value("int32")}
        return evaluate.MetricInfo(description=__doc__, citation=CITATION, features=datasets.Features(features))

    def _compute(self, predictions, references, threshold: float | None = None) -> dict[str, float]:
        scores, labels, true_positives, false_positives = _inputs_and_counts(predictions, references, THRESHOLD_GRID)
        correct = true_positives + (~labels).sum() - false_positives
        best = int(np.argmax(correct))  # the first maximum: the smallest threshold
        best_accuracy, best_threshold = float(correct[best] / scores.size), float(THRESHOLD_GRID[best])
        sweep = self.precision_recall_sweep(scores, labels)
        return {
            "accuracy": best_accuracy if threshold is None else float(np.mean((scores >= threshold) == labels)),
            "threshold": best_threshold if threshold is None else float(threshold),
            "best_accuracy": best_accuracy,
            "best_threshold": best_threshold,
            "auprc": float(-np.trapezoid(sweep.precision, sweep.recall)),  # recall decreases along the sweep
            "average_precision": float(average_precision_score(labels, scores)),
        }
