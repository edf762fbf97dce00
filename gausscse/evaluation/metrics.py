"""Small pure metric functions (numpy in, Python floats out), shared by the tasks and the ``evaluate`` modules.

All scores are "higher means more likely positive"; all labels are booleans (``True`` = positive, e.g.
entailment). Percentages are not applied here: every function returns fractions in [0, 1] (or raw
statistics); the report multiplies by 100.

Conventions, stated once:

* **Prediction rule**: a pair is predicted positive when ``score >= threshold`` (a score equal to the
  threshold counts as positive).
* **Threshold grid** (paper §3.1): 0, 0.001, …, 1 (1001 values), :data:`THRESHOLD_GRID`.
* **Best threshold**: the grid value with the highest accuracy; among equally accurate thresholds the
  *smallest* one wins (deterministic tie break).
* **AUPRC** (:func:`sweep_auprc`): the paper's protocol — precision and recall at every grid threshold, plus
  the anchor point (recall 0, precision 1) that ``sklearn.metrics.precision_recall_curve`` also appends; area
  by the trapezoid rule over recall (= ``sklearn.metrics.auc(recall, precision)``). A threshold with no
  predicted positive has precision 1 by the same convention.
* **Average precision** (:func:`average_precision`): AP = Σ_n (R_n − R_{n−1}) P_n over the distinct scores,
  no interpolation (= ``sklearn.metrics.average_precision_score``). Threshold free; not the paper's number.
* **McNemar** (:func:`mcnemar`): exact two-sided binomial test on the discordant pairs (the default), plus
  the χ² statistic with continuity correction for reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

THRESHOLD_GRID = np.round(np.arange(1001) / 1000.0, 3)


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
    """AP = Σ_n (R_n − R_{n−1}) P_n, n over distinct score values from the highest down, R_0 = 0."""
    scores, labels = _as_scores_and_labels(scores, labels)
    positives = int(labels.sum())
    if positives == 0:
        raise ValueError("labels has no positive example: average precision is undefined")
    order = np.argsort(-scores, kind="stable")
    sorted_scores, sorted_labels = scores[order], labels[order]
    # the last index of each run of equal scores: every tied example is predicted positive together
    last_of_run = np.r_[np.flatnonzero(np.diff(sorted_scores) != 0), sorted_scores.size - 1]
    true_positives = np.cumsum(sorted_labels)[last_of_run]
    precision = true_positives / (last_of_run + 1)
    recall_gain = np.diff(np.r_[0, true_positives]) / positives
    return float(np.sum(recall_gain * precision))


def spearman(predicted, gold) -> float:
    """Spearman's ρ: the Pearson correlation of the ranks (ties get their average rank)."""
    predicted, gold = np.asarray(predicted, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if predicted.shape != gold.shape or predicted.ndim != 1:
        raise ValueError(f"predicted and gold must be 1-D of the same length, got {predicted.shape}, {gold.shape}")
    if predicted.size < 2:
        raise ValueError(f"Spearman needs at least 2 pairs, got {predicted.size}")
    predicted_ranks, gold_ranks = stats.rankdata(predicted), stats.rankdata(gold)
    if predicted_ranks.std() == 0 or gold_ranks.std() == 0:
        return float("nan")
    return float(np.corrcoef(predicted_ranks, gold_ranks)[0, 1])


@dataclass
class McNemarResult:
    """McNemar's test on paired correctness.

    Attributes:
        only_a_correct: b, pairs model A got right and model B wrong.
        only_b_correct: c, pairs model B got right and model A wrong.
        p_value: exact two-sided binomial p = min(1, 2 · P[X <= min(b, c)]), X ~ Bin(b + c, ½).
        chi2: continuity-corrected statistic (|b − c| − 1)² / (b + c) (0 when b + c = 0).
        chi2_p_value: its p-value under χ² with 1 degree of freedom.
    """

    only_a_correct: int
    only_b_correct: int
    p_value: float
    chi2: float
    chi2_p_value: float


def mcnemar(correct_a, correct_b) -> McNemarResult:
    """McNemar's test between two models' per-example correctness (the paper's significance test)."""
    correct_a, correct_b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    if correct_a.shape != correct_b.shape:
        raise ValueError(f"correct_a and correct_b must have the same shape, got {correct_a.shape}, {correct_b.shape}")
    only_a = int(np.sum(correct_a & ~correct_b))
    only_b = int(np.sum(~correct_a & correct_b))
    discordant = only_a + only_b
    if discordant == 0:
        return McNemarResult(only_a, only_b, p_value=1.0, chi2=0.0, chi2_p_value=1.0)
    p_value = min(1.0, 2.0 * float(stats.binom.cdf(min(only_a, only_b), discordant, 0.5)))
    chi2 = (abs(only_a - only_b) - 1) ** 2 / discordant
    return McNemarResult(only_a, only_b, p_value, float(chi2), float(stats.chi2.sf(chi2, df=1)))


def mean_and_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1) over seeds; the std is 0 for a single run."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise ValueError("values is empty")
    return float(values.mean()), float(values.std(ddof=1)) if values.size > 1 else 0.0
