"""McNemar's test between two models' per-example correctness as an `evaluate` module, kept in the repository.

Self-contained (numpy, scipy, datasets, evaluate only): ``evaluate.load("<this folder>")`` works in a process that
cannot import ``gausscse``; inside the project use ``gausscse.evaluation.load_metric("mcnemar")``.
"""

import datasets
import evaluate
import numpy as np
from scipy import stats

_DESCRIPTION = """McNemar's test on paired correctness (the GaussCSE paper's significance test). With b = #pairs
only model A got right and c = #pairs only model B got right: `p_value` is the exact two-sided binomial
p = min(1, 2·P[X <= min(b, c)]), X ~ Bin(b + c, ½) (1 when b + c = 0); `chi2` = (|b − c| − 1)² / (b + c)
(continuity-corrected, 0 when b + c = 0) and `chi2_p_value` its χ²(1) p-value."""

_KWARGS_DESCRIPTION = """
Args:
    correct_a (`list` of `int`): 1 where model A is correct.
    correct_b (`list` of `int`): 1 where model B is correct, same examples in the same order.
Returns:
    dict with `only_a_correct` (b), `only_b_correct` (c), `p_value`, `chi2`, `chi2_p_value`.
Example:
    >>> metric = evaluate.load("gausscse/evaluation/evaluate_modules/mcnemar")
    >>> metric.compute(correct_a=[1, 1, 0, 1], correct_b=[0, 1, 0, 0])
"""

_CITATION = """@article{mcnemar1947,
  title = {Note on the sampling error of the difference between correlated proportions or percentages},
  author = {McNemar, Quinn},
  journal = {Psychometrika}, volume = {12}, number = {2}, pages = {153--157}, year = {1947}
}"""


def mcnemar(correct_a, correct_b) -> dict[str, float]:
    """McNemar's test between two models' per-example correctness (the paper's significance test)."""
    correct_a, correct_b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    if correct_a.shape != correct_b.shape:
        raise ValueError(f"correct_a and correct_b must have the same shape, got {correct_a.shape}, {correct_b.shape}")
    only_a = int(np.sum(correct_a & ~correct_b))
    only_b = int(np.sum(~correct_a & correct_b))
    discordant = only_a + only_b
    if discordant == 0:
        p_value, chi2, chi2_p_value = 1.0, 0.0, 1.0
    else:
        p_value = float(stats.binomtest(only_a, discordant, 0.5).pvalue)  # the exact test
        chi2 = float((abs(only_a - only_b) - 1) ** 2 / discordant)
        chi2_p_value = float(stats.chi2.sf(chi2, df=1))
    return {
        "only_a_correct": only_a,
        "only_b_correct": only_b,
        "p_value": p_value,
        "chi2": chi2,
        "chi2_p_value": chi2_p_value,
    }


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class McNemar(evaluate.Metric):
    """McNemar's exact and χ² tests on two models' per-example correctness."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"correct_a": datasets.Value("int32"), "correct_b": datasets.Value("int32")}),
        )

    def _compute(self, correct_a, correct_b) -> dict[str, float]:
        return mcnemar(correct_a, correct_b)
