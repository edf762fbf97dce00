"""The repository's evaluate modules (binary NLI, Spearman, McNemar) against independent formulations: sklearn,
scipy, brute-force loops written here, and hand-worked examples (threshold search and ties included)."""

import math
import statistics

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import accuracy_score, auc, average_precision_score, precision_recall_curve

from gausscse.evaluation import METRIC_NAMES, load_metric, metrics

# The paper's grid (§3.1), written out here rather than taken from the code: 0, 0.001, …, 1.
PAPER_GRID = [step / 1000 for step in range(1001)]


@pytest.fixture(scope="module")
def binary_nli():
    return load_metric("binary_nli")


@pytest.fixture(scope="module")
def spearman():
    return load_metric("spearman")


@pytest.fixture(scope="module")
def mcnemar():
    return load_metric("mcnemar")


def random_scores(seed: int, count: int = 500, decimals: int | None = 3) -> tuple[np.ndarray, np.ndarray]:
    """Scores in [0, 1] that lean towards the positives; rounded to ``decimals`` to create ties."""
    rng = np.random.default_rng(seed)
    labels = rng.random(count) < 0.35
    scores = np.clip(rng.normal(0.45 + 0.2 * labels, 0.2), 0.0, 1.0)
    return (np.round(scores, decimals) if decimals is not None else scores), labels


def brute_force_best_threshold(scores, labels) -> tuple[float, float]:
    """Try every grid threshold in turn and keep the first (smallest) one with the most correct predictions."""
    best_correct, best_threshold = -1, None
    for threshold in PAPER_GRID:
        correct = sum(
            (score >= threshold) == bool(label) for score, label in zip(scores.tolist(), labels.tolist(), strict=True)
        )
        if correct > best_correct:
            best_correct, best_threshold = correct, threshold
    return best_correct / len(scores), best_threshold


def brute_force_sweep_auprc(scores, labels) -> float:
    """Precision/recall counted at every grid threshold (precision 1 when nothing is predicted positive), the
    (recall 0, precision 1) anchor appended, area by sklearn's trapezoid ``auc``."""
    precision, recall = [], []
    for threshold in PAPER_GRID:
        predicted = scores >= threshold
        true_positives = int(np.sum(predicted & labels))
        precision.append(true_positives / int(predicted.sum()) if predicted.any() else 1.0)
        recall.append(true_positives / int(labels.sum()))
    return auc([*recall, 0.0], [*precision, 1.0])


def test_load_metric_knows_the_four_modules_and_loads_each_once() -> None:
    assert set(METRIC_NAMES) == {"binary_nli", "mcnemar", "retrieval", "spearman"}
    for name in METRIC_NAMES:
        assert load_metric(name) is load_metric(name)
    with pytest.raises(ValueError, match="unknown metric 'f1'"):
        load_metric("f1")


def test_best_threshold_hand_worked_with_ties(binary_nli) -> None:
    # t <= 0.2: all positive, 2/4; 0.2 < t <= 0.4: [0,1,1,1] → 3/4; 0.4 < t <= 0.8: [0,0,0,1] → 3/4; t > 0.8: 2/4.
    scores, labels = [0.2, 0.4, 0.4, 0.8], [0, 1, 0, 1]
    result = binary_nli.compute(predictions=scores, references=labels)
    assert result["accuracy"] == result["best_accuracy"] == 0.75
    assert result["threshold"] == result["best_threshold"] == pytest.approx(0.201)  # smallest of the equals
    # a given threshold is used as is; a score equal to the threshold counts as entailment
    at_04 = binary_nli.compute(predictions=scores, references=labels, threshold=0.4)
    assert (at_04["accuracy"], at_04["threshold"], at_04["best_accuracy"]) == (0.75, 0.4, 0.75)
    assert binary_nli.compute(predictions=[0.5, 0.9], references=[1, 1], threshold=0.5)["accuracy"] == 1.0
    assert binary_nli.compute(predictions=[0.5, 0.9], references=[0, 1], threshold=0.5)["accuracy"] == 0.5


@pytest.mark.parametrize(
    ("scores", "labels", "accuracy", "threshold"),
    [
        ([0.3004, 0.3010], [0, 1], 1.0, 0.301),  # only the grid point 0.301 separates them (not 0.300 or 0.302)
        ([0.7000, 0.7005], [0, 1], 0.5, 0.0),  # no grid point in (0.7, 0.7005]: all thresholds tie at ½ → 0
        ([0.9995, 1.0], [0, 1], 1.0, 1.0),  # the grid ends at 1 inclusive
        ([0.0, 0.25], [1, 1], 1.0, 0.0),  # the grid starts at 0 inclusive
    ],
)
def test_best_threshold_lies_on_the_papers_0_001_grid(binary_nli, scores, labels, accuracy, threshold) -> None:
    result = binary_nli.compute(predictions=scores, references=labels)
    assert (result["best_accuracy"], result["best_threshold"]) == (accuracy, threshold)


@pytest.mark.parametrize(("seed", "decimals"), [(0, 3), (1, 3), (2, None)])
def test_best_threshold_matches_a_brute_force_search(binary_nli, seed: int, decimals: int | None) -> None:
    scores, labels = random_scores(seed, count=300, decimals=decimals)
    result = binary_nli.compute(predictions=scores, references=labels)
    accuracy, threshold = brute_force_best_threshold(scores, labels)
    assert result["best_accuracy"] == pytest.approx(accuracy, abs=1e-12)
    assert result["best_threshold"] == threshold
    assert result["best_accuracy"] == pytest.approx(accuracy_score(labels, scores >= threshold), abs=1e-12)


@pytest.mark.parametrize("threshold", [0.0, 0.37, 0.5, 0.612, 1.0])
def test_accuracy_at_a_given_threshold_matches_sklearn(binary_nli, threshold: float) -> None:
    scores, labels = random_scores(8, decimals=2)
    result = binary_nli.compute(predictions=scores, references=labels, threshold=threshold)
    assert result["accuracy"] == pytest.approx(accuracy_score(labels, scores >= threshold), abs=1e-12)
    assert result["threshold"] == threshold


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sweep_auprc_equals_sklearn_auc_when_scores_lie_on_the_grid(binary_nli, seed: int) -> None:
    # with every score on the grid, the sweep visits exactly sklearn's distinct-score thresholds (plus no-ops)
    scores, labels = random_scores(seed, decimals=3)
    precision, recall, _ = precision_recall_curve(labels, scores)
    result = binary_nli.compute(predictions=scores, references=labels)
    assert result["auprc"] == pytest.approx(auc(recall, precision), abs=1e-12)


@pytest.mark.parametrize("seed", [3, 4])
def test_sweep_auprc_matches_a_brute_force_sweep_for_continuous_scores(binary_nli, seed: int) -> None:
    scores, labels = random_scores(seed, count=300, decimals=None)
    result = binary_nli.compute(predictions=scores, references=labels)
    assert result["auprc"] == pytest.approx(brute_force_sweep_auprc(scores, labels), abs=1e-12)
    precision, recall, _ = precision_recall_curve(labels, scores)
    assert result["auprc"] == pytest.approx(auc(recall, precision), abs=5e-3)  # close to, not equal to, sklearn's


def test_sweep_hand_worked(binary_nli) -> None:
    # positives at 0.9 and 0.3, a negative at 0.6. Sweep points (recall, precision):
    # t <= 0.3: (1, 2/3); 0.3 < t <= 0.6: (1/2, 1/2); 0.6 < t <= 0.9: (1/2, 1); t > 0.9: (0, 1) and the anchor.
    sweep = binary_nli.precision_recall_sweep([0.9, 0.6, 0.3], [1, 0, 1])  # the plots' entry point
    assert (sweep.precision[0], sweep.recall[0]) == (pytest.approx(2 / 3), 1.0)
    assert (sweep.precision[400], sweep.recall[400]) == (0.5, 0.5)
    assert (sweep.precision[700], sweep.recall[700]) == (1.0, 0.5)
    assert (sweep.precision[-2], sweep.recall[-2]) == (1.0, 0.0)
    assert sweep.precision[-1] == 1.0 and sweep.recall[-1] == 0.0 and np.isinf(sweep.thresholds[-1])
    assert sweep.thresholds.size == 1002
    # area: (1 − ½)(2/3 + ½)/2 + 0 + (½ − 0)(1 + 1)/2
    result = binary_nli.compute(predictions=[0.9, 0.6, 0.3], references=[1, 0, 1])
    assert result["auprc"] == pytest.approx(0.5 * (7 / 6) / 2 + 0.5)


@pytest.mark.parametrize("decimals", [None, 1, 2])
def test_average_precision_matches_sklearn(binary_nli, decimals: int | None) -> None:
    scores, labels = random_scores(4, decimals=decimals)
    result = binary_nli.compute(predictions=scores, references=labels)
    assert result["average_precision"] == pytest.approx(average_precision_score(labels, scores), abs=1e-12)


def test_average_precision_hand_worked(binary_nli) -> None:
    # ranking 0.9 (pos), 0.6 (neg), 0.3 (pos): AP = ½·1 + ½·(2/3); a tie at the top counts as one step
    assert binary_nli.compute(predictions=[0.9, 0.6, 0.3], references=[1, 0, 1])["average_precision"] == pytest.approx(
        0.5 + 1 / 3
    )
    assert binary_nli.compute(predictions=[0.8, 0.8, 0.1], references=[1, 0, 1])["average_precision"] == pytest.approx(
        0.5 * 0.5 + 0.5 * (2 / 3)
    )


@pytest.mark.parametrize("decimals", [None, 1])
def test_spearman_matches_scipy(spearman, decimals: int | None) -> None:
    scores, gold = random_scores(5, decimals=decimals)
    gold = gold + np.random.default_rng(6).random(gold.size)
    result = spearman.compute(predictions=scores, references=gold)["spearman"]
    assert result == pytest.approx(stats.spearmanr(scores, gold).statistic, abs=1e-12)


def test_spearman_hand_worked_and_constant_input(spearman) -> None:
    # ranks (1, 2, 3) vs (1, 3, 2): ρ = 1 − 6 Σd² / (n(n² − 1)) = 1 − 6·2/24 = ½
    assert spearman.compute(predictions=[1, 2, 3], references=[1, 3, 2])["spearman"] == pytest.approx(0.5)
    assert spearman.compute(predictions=[0.3, 0.1, 0.2], references=[3.0, 1.0, 2.0])["spearman"] == pytest.approx(1)
    assert math.isnan(spearman.compute(predictions=[0.5, 0.5, 0.5], references=[1.0, 2.0, 3.0])["spearman"])


@pytest.mark.parametrize(("seed", "rate_a", "rate_b"), [(7, 0.75, 0.68), (8, 0.6, 0.7), (9, 0.8, 0.8)])
def test_mcnemar_matches_scipy_in_both_directions(mcnemar, seed: int, rate_a: float, rate_b: float) -> None:
    rng = np.random.default_rng(seed)
    correct_a, correct_b = rng.random(300) < rate_a, rng.random(300) < rate_b
    b = sum(a and not o for a, o in zip(correct_a.tolist(), correct_b.tolist(), strict=True))
    c = sum(o and not a for a, o in zip(correct_a.tolist(), correct_b.tolist(), strict=True))
    for first, second, expected_b, expected_c in ((correct_a, correct_b, b, c), (correct_b, correct_a, c, b)):
        result = mcnemar.compute(correct_a=first, correct_b=second)
        assert (result["only_a_correct"], result["only_b_correct"]) == (expected_b, expected_c)
        exact = stats.binomtest(expected_b, expected_b + expected_c, 0.5, alternative="two-sided").pvalue
        assert result["p_value"] == pytest.approx(exact, rel=1e-9)
        # χ² with 1 df and continuity correction = the square of z = (|b − c| − 1)/√(b + c): p = 2·Φ(−|z|)
        z = (abs(expected_b - expected_c) - 1) / math.sqrt(expected_b + expected_c)
        assert result["chi2"] == pytest.approx(z * z, rel=1e-9)
        assert result["chi2_p_value"] == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-9)


def test_mcnemar_hand_worked_and_no_discordant_pairs(mcnemar) -> None:
    # b = 2, c = 0: p = 2 · (½)² = ½; χ² = (2 − 1)²/2
    result = mcnemar.compute(correct_a=[1, 1, 0, 1], correct_b=[0, 1, 0, 0])
    assert (result["only_a_correct"], result["only_b_correct"], result["p_value"], result["chi2"]) == (2, 0, 0.5, 0.5)
    # b = 1, c = 5: P[X <= 1] = (1 + 6)/64, two-sided 14/64
    result = mcnemar.compute(correct_a=[1, 0, 0, 0, 0, 0, 1], correct_b=[0, 1, 1, 1, 1, 1, 1])
    assert (result["only_a_correct"], result["only_b_correct"]) == (1, 5)
    assert result["p_value"] == pytest.approx(14 / 64)
    assert mcnemar.compute(correct_a=[1, 0], correct_b=[1, 0]) == {
        "only_a_correct": 0,
        "only_b_correct": 0,
        "p_value": 1.0,
        "chi2": 0.0,
        "chi2_p_value": 1.0,
    }


def test_mean_and_std_uses_the_sample_std() -> None:
    values = [1.0, 2.0, 4.0]
    assert metrics.mean_and_std(values) == pytest.approx((statistics.mean(values), statistics.stdev(values)))
    assert metrics.mean_and_std([3.0]) == (3.0, 0.0)


def test_bad_input_raises_value_errors_naming_the_problem(binary_nli, spearman, mcnemar) -> None:
    with pytest.raises(ValueError, match="same length"):
        binary_nli.precision_recall_sweep([0.1, 0.2], [1])
    with pytest.raises(ValueError):
        binary_nli.compute(predictions=[0.1, 0.2], references=[1])
    with pytest.raises(ValueError, match=r"scores\[1\] is NaN"):
        binary_nli.compute(predictions=[0.1, float("nan")], references=[1, 0])
    with pytest.raises(ValueError, match="no positive"):
        binary_nli.compute(predictions=[0.1, 0.2], references=[0, 0])
    with pytest.raises(ValueError, match="labels must be booleans"):
        binary_nli.compute(predictions=[0.1, 0.2], references=[2, 0])
    with pytest.raises(ValueError, match="strictly increasing"):
        binary_nli.precision_recall_sweep([0.1], [1], thresholds=[0.5, 0.2])
    with pytest.raises(ValueError, match="at least 2 pairs"):
        spearman.compute(predictions=[0.1], references=[1.0])
    with pytest.raises(ValueError):
        mcnemar.compute(correct_a=[1, 0], correct_b=[1])
