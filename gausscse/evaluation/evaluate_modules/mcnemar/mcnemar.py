"""McNemar's test between two models' per-example correctness as an `evaluate` module, kept in the repository.

Load it from its local path, no Hub needed: ``evaluation.load_metric("mcnemar")``.
"""

import datasets
import evaluate

from gausscse.evaluation import metrics

_DESCRIPTION = """McNemar's test on paired correctness (the GaussCSE paper's significance test). With b = #pairs
only model A got right and c = #pairs only model B got right: `p_value` is the exact two-sided binomial
p = min(1, 2·P[X <= min(b, c)]), X ~ Bin(b + c, ½); `chi2` = (|b − c| − 1)² / (b + c) (continuity-corrected)
and `chi2_p_value` its χ²(1) p-value."""

_KWARGS_DESCRIPTION = """
Args:
    correct_a (`list` of `int`): 1 where model A is correct.
    correct_b (`list` of `int`): 1 where model B is correct, same examples in the same order.
Returns:
    dict with `only_a_correct`, `only_b_correct`, `p_value`, `chi2`, `chi2_p_value`.
Example:
    >>> metric = evaluation.load_metric("mcnemar")
    >>> metric.compute(correct_a=[1, 1, 0, 1], correct_b=[0, 1, 0, 0])
"""

_CITATION = """@article{mcnemar1947,
  title = {Note on the sampling error of the difference between correlated proportions or percentages},
  author = {McNemar, Quinn},
  journal = {Psychometrika}, volume = {12}, number = {2}, pages = {153--157}, year = {1947}
}"""


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
        return vars(metrics.mcnemar(correct_a, correct_b))
