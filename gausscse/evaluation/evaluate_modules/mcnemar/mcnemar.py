"""McNemar's test on two models' paired correctness (`correct_a`, `correct_b`: 1 where A / B is correct) as a
self-contained `evaluate` module (numpy and scipy only). With b = `only_a_correct`, c = `only_b_correct`: `p_value`
(exact two-sided binomial test of b out of b + c at ½), `chi2` = (|b − c| − 1)² / (b + c) and `chi2_p_value` (χ²(1));
with no discordant pair p = 1 and χ² = 0."""

import datasets
import evaluate
import numpy as np
from scipy import stats

CITATION = "McNemar. Note on the sampling error of the difference between correlated proportions. Psychometrika 1947."


class McNemar(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        flags = datasets.Features({"correct_a": datasets.Value("int32"), "correct_b": datasets.Value("int32")})
        return evaluate.MetricInfo(description=__doc__, citation=CITATION, features=flags)

    def _compute(self, correct_a, correct_b) -> dict[str, float]:
        correct_a, correct_b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
        if correct_a.shape != correct_b.shape:
            raise ValueError(f"correct_a and correct_b must have the same shape: {correct_a.shape}, {correct_b.shape}")
        only_a, only_b = int(np.sum(correct_a & ~correct_b)), int(np.sum(~correct_a & correct_b))
        discordant = only_a + only_b
        chi2 = float((abs(only_a - only_b) - 1) ** 2 / discordant) if discordant else 0.0
        return {
            "only_a_correct": only_a,
            "only_b_correct": only_b,
            "p_value": float(stats.binomtest(only_a, discordant, 0.5).pvalue) if discordant else 1.0,
            "chi2": chi2,
            "chi2_p_value": float(stats.chi2.sf(chi2, df=1)) if discordant else 1.0,
        }
