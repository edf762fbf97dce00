"""Binary NLI metric (Yoda et al., EACL 2024, §3.1) as an `evaluate` module, kept in the repository.

Self-contained (numpy, scikit-learn, datasets, evaluate only): ``evaluate.load("<this folder>")`` works in a process
that cannot import ``gausscse``; inside the project use ``gausscse.evaluation.load_metric("binary_nli")``.

All scores are "higher means more likely positive"; labels are booleans or 0/1 (1 = entailment); every value is a
fraction in [0, 1] (the report multiplies by 100). Conventions, stated once:

* **Prediction rule**: a pair is predicted positive when ``score >= threshold`` (equal counts as positive).
* **Threshold grid** (paper §3.1): 0, 0.001, …, 1 (1001 values), :data:`THRESHOLD_GRID`.
* **Best threshold**: the grid value with the highest accuracy; among equally accurate thresholds the *smallest*
  one wins (deterministic tie break).
* **AUPRC** (:func:`sweep_auprc`): the paper's protocol — precision and recall at every grid threshold, plus the
  anchor point (recall 0, precision 1) that ``sklearn.metrics.precision_recall_curve`` also appends; area by the
  trapezoid rule over recall (= ``sklearn.metrics.auc(recall, precision)``). A threshold with no predicted
  positive has precision 1 by the same convention.
* **Average precision** (:func:`average_precision`): AP = Σ_n (R_n − R_{n−1}) P_n over the distinct scores, no
  interpolation (= ``sklearn.metrics.average_precision_score``). Threshold free; not the paper's number.
"""

from dataclasses import dataclass

import datasets
import evaluate
import numpy as np
from sklearn.metrics import average_precision_score

THRESHOLD_GRID = np.round(np.arange(1001) / 1000.0, 3)

_DESCRIPTION = """Entailment vs. rest from a score s (e.g. sim(hyp‖pre)); a pair is predicted entailment iff
s >= threshold. Returns (fractions in [0, 1]): `accuracy` at `threshold` (if not given: the best threshold of the
grid 0, 0.001, …, 1 on these data, the smallest among ties), the `threshold` used, `best_accuracy` and
`best_threshold` (that grid search on these data, whether or not `threshold` is given), `auprc` (area under the
precision–recall curve of the 0.001-step threshold sweep, trapezoid over recall, with sklearn's (0, 1) anchor)
and `average_precision` (sklearn's step-wise AP)."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `float`): scores in [0, 1], higher = more likely entailment.
    references (`list` of `int`): 1 for entailment, 0 for neutral/contradiction.
    threshold (`float`, *optional*): a fixed threshold (e.g. the best one on SNLI dev).
Returns:
    dict with `accuracy`, `threshold`, `best_accuracy`, `best_threshold`, `auprc`, `average_precision`.
Example:
    >>> metric = evaluate.load("gausscse/evaluation/evaluate_modules/binary_nli")
    >>> metric.compute(predictions=[0.9, 0.2, 0.6], references=[1, 0, 0], threshold=0.5)
"""

_CITATION = """@inproceedings{yoda-etal-2024-sentence,
  title = {Sentence Representations via {G}aussian Embedding},
  author = {Yoda, Shohei and Tsukagoshi, Hayato and Sasano, Ryohei and Takeda, Koichi},
  booktitle = {Proceedings of EACL 2024 (Volume 2: Short Papers)},
  year = {2024}
}"""


def _as_scores_and_labels(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    """Validate and convert ``scores`` (finite floats) and ``labels`` (booleans / 0-1) to 1-D arrays."""
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    labels = np.asarray(labels).reshape(-1)
    if scores.shape != labels.shape:
        raise ValueError(f"scores and labels must have the same length, got {scores.size} and {labels.size}")
    if scores.size == 0:
        raise ValueError("scores is empty")
    if not np.isfinite(scores).all():
        raise ValueError(f"scores[{int(np.flatnonzero(~np.isfinite(scores))[0])}] is NaN or inf")
    if labels.dtype != bool:
        if not np.isin(labels, (0, 1)).all():
            raise ValueError(f"labels must be booleans or 0/1, got {labels[~np.isin(labels, (0, 1))][0]!r}")
        labels = labels.astype(bool)
    return scores, labels


def _check_thresholds(thresholds) -> np.ndarray:
    thresholds = np.asarray(thresholds, dtype=np.float64).reshape(-1)
    if thresholds.size == 0 or np.any(np.diff(thresholds) <= 0):
        raise ValueError("thresholds must be a non-empty, strictly increasing sequence")
    return thresholds


def _counts_at_thresholds(
    scores: np.ndarray, labels: np.ndarray, thresholds: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """True-positive and false-positive counts of the rule ``score >= t`` at every threshold t."""
    positive_scores = np.sort(scores[labels])
    negative_scores = np.sort(scores[~labels])
    true_positives = positive_scores.size - np.searchsorted(positive_scores, thresholds, side="left")
    false_positives = negative_scores.size - np.searchsorted(negative_scores, thresholds, side="left")
    return true_positives, false_positives


def threshold_accuracy(scores, labels, threshold: float) -> float:
    """Accuracy of the rule "positive iff score >= threshold": (TP + TN) / N."""
    scores, labels = _as_scores_and_labels(scores, labels)
    return float(np.mean((scores >= threshold) == labels))


def best_threshold_accuracy(scores, labels, thresholds=THRESHOLD_GRID) -> tuple[float, float]:
    """The threshold t* = argmax_t accuracy(t) over ``thresholds`` and that accuracy.

    accuracy(t) = (TP(t) + TN(t)) / N with TP(t) = #{positive, s >= t}, TN(t) = #{negative, s < t}.
    Ties between thresholds go to the smallest t. Returns ``(accuracy, threshold)``.
    """
    scores, labels = _as_scores_and_labels(scores, labels)
    thresholds = _check_thresholds(thresholds)
    true_positives, false_positives = _counts_at_thresholds(scores, labels, thresholds)
    true_negatives = (~labels).sum() - false_positives
    correct = true_positives + true_negatives
    best = int(np.argmax(correct))  # first maximum = smallest threshold
    return float(correct[best] / scores.size), float(thresholds[best])


@dataclass
class PrecisionRecallSweep:
    """Precision and recall of "score >= t" at each threshold t, ordered by increasing threshold.

    The last point is the anchor (recall 0, precision 1) with threshold ``inf``.
    """

    thresholds: np.ndarray
    precision: np.ndarray
    recall: np.ndarray


def precision_recall_sweep(scores, labels, thresholds=THRESHOLD_GRID) -> PrecisionRecallSweep:
    """Precision P(t) = TP/(TP+FP) (1 when nothing is predicted positive) and recall R(t) = TP/#positives."""
    scores, labels = _as_scores_and_labels(scores, labels)
    thresholds = _check_thresholds(thresholds)
    positives = int(labels.sum())
    if positives == 0:
        raise ValueError("labels has no positive example: precision and recall are undefined")
    true_positives, false_positives = _counts_at_thresholds(scores, labels, thresholds)
    predicted = true_positives + false_positives
    precision = np.divide(true_positives, predicted, out=np.ones(thresholds.size), where=predicted > 0)
    return PrecisionRecallSweep(
        thresholds=np.append(thresholds, np.inf),
        precision=np.append(precision, 1.0),
        recall=np.append(true_positives / positives, 0.0),
    )


def sweep_auprc(scores, labels, thresholds=THRESHOLD_GRID) -> float:
    """Area under the precision–recall curve of the threshold sweep (paper's protocol).

    AUPRC = Σ_i (R_i − R_{i+1}) (P_i + P_{i+1}) / 2 over the sweep points ordered by threshold
    (recall falls as the threshold rises), the anchor (R=0, P=1) included.
    """
    sweep = precision_recall_sweep(scores, labels, thresholds)
    # np.trapezoid over decreasing recall gives the negative area.
    return float(-np.trapezoid(sweep.precision, sweep.recall))


def average_precision(scores, labels) -> float:
    """AP = Σ_n (R_n − R_{n−1}) P_n, n over distinct score values from the highest down, R_0 = 0
    (``sklearn.metrics.average_precision_score``)."""
    scores, labels = _as_scores_and_labels(scores, labels)
    if not labels.any():
        raise ValueError("labels has no positive example: average precision is undefined")
    return float(average_precision_score(labels, scores))


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class BinaryNLI(evaluate.Metric):
    """Accuracy at a threshold, threshold-sweep AUPRC and average precision of entailment scores.

    ``precision_recall_sweep`` (the points behind ``auprc``, for plots) is reachable from a loaded instance:
    ``load_metric("binary_nli").precision_recall_sweep(scores, labels)``.
    """

    THRESHOLD_GRID = THRESHOLD_GRID
    precision_recall_sweep = staticmethod(precision_recall_sweep)

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("float64"), "references": datasets.Value("int32")}
            ),
        )

    def _compute(self, predictions, references, threshold: float | None = None) -> dict[str, float]:
        best_accuracy, best_threshold = best_threshold_accuracy(predictions, references)
        if threshold is None:
            accuracy, threshold = best_accuracy, best_threshold
        else:
            accuracy = threshold_accuracy(predictions, references, threshold)
        return {
            "accuracy": accuracy,
            "threshold": float(threshold),
            "best_accuracy": best_accuracy,
            "best_threshold": best_threshold,
            "auprc": sweep_auprc(predictions, references),
            "average_precision": average_precision(predictions, references),
        }
