"""Spearman's ρ for STS as an `evaluate` module, kept in the repository.

Self-contained (numpy, scipy, datasets, evaluate only): ``evaluate.load("<this folder>")`` works in a process that
cannot import ``gausscse``; inside the project use ``gausscse.evaluation.load_metric("spearman")``.
"""

import datasets
import evaluate
import numpy as np
from scipy import stats

_DESCRIPTION = """Spearman's rank correlation ρ in [-1, 1] between predicted similarities and gold STS scores:
the Pearson correlation of the ranks, ties given their average rank (= scipy.stats.spearmanr); NaN when either
side is constant. For SimCSE's "all" aggregation pass the concatenation of every subset of a year's file."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `float`): predicted similarities.
    references (`list` of `float`): gold scores.
Returns:
    dict with `spearman`.
Example:
    >>> metric = evaluate.load("gausscse/evaluation/evaluate_modules/spearman")
    >>> metric.compute(predictions=[0.1, 0.5, 0.9], references=[1.0, 2.5, 4.0])
"""

_CITATION = """@inproceedings{gao-etal-2021-simcse,
  title = {{S}im{CSE}: Simple Contrastive Learning of Sentence Embeddings},
  author = {Gao, Tianyu and Yao, Xingcheng and Chen, Danqi},
  booktitle = {Proceedings of EMNLP 2021}, year = {2021}
}"""


def spearman(predicted, gold) -> float:
    """Spearman's ρ (``scipy.stats.spearmanr``: the Pearson correlation of the ranks, ties given their average
    rank)."""
    predicted, gold = np.asarray(predicted, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if predicted.shape != gold.shape or predicted.ndim != 1:
        raise ValueError(f"predicted and gold must be 1-D of the same length, got {predicted.shape}, {gold.shape}")
    if predicted.size < 2:
        raise ValueError(f"Spearman needs at least 2 pairs, got {predicted.size}")
    if np.ptp(predicted) == 0 or np.ptp(gold) == 0:  # a constant side: no correlation (scipy warns and gives NaN)
        return float("nan")
    return float(stats.spearmanr(predicted, gold).statistic)


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Spearman(evaluate.Metric):
    """Spearman's ρ between predicted and gold similarity scores."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("float64"), "references": datasets.Value("float64")}
            ),
        )

    def _compute(self, predictions, references) -> dict[str, float]:
        return {"spearman": spearman(predictions, references)}
