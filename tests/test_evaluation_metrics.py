"""evaluation.metrics against sklearn / scipy and hand-worked examples (threshold search and ties included)."""

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import accuracy_score, auc, average_precision_score, precision_recall_curve

from gausscse.evaluation import metrics
from gausscse.evaluation.metrics import THRESHOLD_GRID


def random_scores(seed: int, count: int = 500, decimals: int | None = 3) -> tuple[np.ndarray, np.ndarray]:
    """Scores in [0, 1] that lean towards the positives; rounded to ``decimals`` to create ties."""
    rng = np.random.default_rng(seed)
    labels = rng.random(count) < 0.35
    scores = np.clip(rng.normal(0.45 + 0.2 * labels, 0.2), 0.0, 1.0)
    return (np.round(scores, decimals) if decimals is not None else scores), labels


def test_threshold_grid_is_the_papers() -> None:
    assert THRESHOLD_GRID.size == 1001
    assert THRESHOLD_GRID[0] == 0.0 and THRESHOLD_GRID[-1] == 1.0
    np.testing.assert_allclose(np.diff(THRESHOLD_GRID), 0.001, atol=1e-12)


def test_best_threshold_hand_worked_with_ties() -> None:
    # t <= 0.2: all positive, 2/4; 0.2 < t <= 0.4: [0,1,1,1] → 3/4; 0.4 < t <= 0.8: [0,0,0,1] → 3/4; t > 0.8: 2/4.
    scores, labels = [0.2, 0.4, 0.4, 0.8], [0, 1, 0, 1]
    accuracy, threshold = metrics.best_threshold_accuracy(scores, labels)
    assert accuracy == 0.75
    assert threshold == pytest.approx(0.201)  # the smallest of the equally accurate thresholds
    # a score equal to the threshold counts as entailment
    assert metrics.threshold_accuracy(scores, labels, 0.4) == 0.75
    assert metrics.threshold_accuracy([0.5], [1], 0.5) == 1.0
    assert metrics.threshold_accuracy([0.5], [0], 0.5) == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_threshold_matches_a_brute_force_search_with_sklearn(seed: int) -> None:
    scores, labels = random_scores(seed)
    expected = [accuracy_score(labels, scores >= threshold) for threshold in THRESHOLD_GRID]
    accuracy, threshold = metrics.best_threshold_accuracy(scores, labels)
    assert accuracy == pytest.approx(max(expected))
    assert threshold == THRESHOLD_GRID[int(np.argmax(expected))]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sweep_auprc_equals_sklearn_auc_when_scores_lie_on_the_grid(seed: int) -> None:
    scores, labels = random_scores(seed, decimals=3)
    precision, recall, _ = precision_recall_curve(labels, scores)
    assert metrics.sweep_auprc(scores, labels) == pytest.approx(auc(recall, precision), abs=1e-12)


def test_sweep_auprc_is_close_to_sklearn_for_continuous_scores() -> None:
    scores, labels = random_scores(3, decimals=None)
    precision, recall, _ = precision_recall_curve(labels, scores)
    assert metrics.sweep_auprc(scores, labels) == pytest.approx(auc(recall, precision), abs=5e-3)


def test_sweep_hand_worked() -> None:
    # positives at 0.9 and 0.3, a negative at 0.6. Sweep points (recall, precision):
    # t <= 0.3: (1, 2/3); 0.3 < t <= 0.6: (1/2, 1/2); 0.6 < t <= 0.9: (1/2, 1); t > 0.9: (0, 1) and the anchor.
    sweep = metrics.precision_recall_sweep([0.9, 0.6, 0.3], [1, 0, 1])
    assert sweep.precision[0] == pytest.approx(2 / 3) and sweep.recall[0] == 1.0
    assert sweep.precision[-1] == 1.0 and sweep.recall[-1] == 0.0 and np.isinf(sweep.thresholds[-1])
    # area: (1 − ½)(2/3 + ½)/2 + 0 + (½ − 0)(1 + 1)/2
    assert metrics.sweep_auprc([0.9, 0.6, 0.3], [1, 0, 1]) == pytest.approx(0.5 * (7 / 6) / 2 + 0.5)


@pytest.mark.parametrize("decimals", [None, 1, 2])
def test_average_precision_matches_sklearn(decimals: int | None) -> None:
    scores, labels = random_scores(4, decimals=decimals)
    assert metrics.average_precision(scores, labels) == pytest.approx(average_precision_score(labels, scores))


def test_average_precision_hand_worked() -> None:
    # ranking 0.9 (pos), 0.6 (neg), 0.3 (pos): AP = ½·1 + ½·(2/3)
    assert metrics.average_precision([0.9, 0.6, 0.3], [1, 0, 1]) == pytest.approx(0.5 + 1 / 3)


@pytest.mark.parametrize("decimals", [None, 1])
def test_spearman_matches_scipy(decimals: int | None) -> None:
    scores, gold = random_scores(5, decimals=decimals)
    gold = gold + np.random.default_rng(6).random(gold.size)
    assert metrics.spearman(scores, gold) == pytest.approx(stats.spearmanr(scores, gold).statistic)


def test_mcnemar_matches_scipy() -> None:
    rng = np.random.default_rng(7)
    correct_a, correct_b = rng.random(300) < 0.75, rng.random(300) < 0.68
    result = metrics.mcnemar(correct_a, correct_b)
    b, c = int(np.sum(correct_a & ~correct_b)), int(np.sum(~correct_a & correct_b))
    assert (result.only_a_correct, result.only_b_correct) == (b, c)
    assert result.p_value == pytest.approx(stats.binomtest(b, b + c, 0.5, alternative="two-sided").pvalue)
    assert result.chi2 == pytest.approx((abs(b - c) - 1) ** 2 / (b + c))
    assert result.chi2_p_value == pytest.approx(stats.chi2.sf(result.chi2, df=1))


def test_mcnemar_hand_worked_and_no_discordant_pairs() -> None:
    result = metrics.mcnemar([1, 1, 0, 1], [0, 1, 0, 0])  # b = 2, c = 0: p = 2 · (½)² = ½
    assert (result.only_a_correct, result.only_b_correct, result.p_value) == (2, 0, 0.5)
    assert metrics.mcnemar([1, 0], [1, 0]).p_value == 1.0


def test_mean_and_std_uses_the_sample_std() -> None:
    assert metrics.mean_and_std([1.0, 2.0, 4.0]) == pytest.approx((7 / 3, np.std([1.0, 2.0, 4.0], ddof=1)))
    assert metrics.mean_and_std([3.0]) == (3.0, 0.0)


def test_bad_input_raises_value_errors_naming_the_problem() -> None:
    with pytest.raises(ValueError, match="same length"):
        metrics.best_threshold_accuracy([0.1, 0.2], [1])
    with pytest.raises(ValueError, match=r"scores\[1\] is NaN"):
        metrics.sweep_auprc([0.1, float("nan")], [1, 0])
    with pytest.raises(ValueError, match="no positive"):
        metrics.sweep_auprc([0.1, 0.2], [0, 0])
    with pytest.raises(ValueError, match="labels must be booleans"):
        metrics.average_precision([0.1, 0.2], [2, 0])
    with pytest.raises(ValueError, match="strictly increasing"):
        metrics.best_threshold_accuracy([0.1], [1], thresholds=[0.5, 0.2])
