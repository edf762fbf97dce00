"""Spearman's ρ for STS as an `evaluate` module, kept in the repository.

Load it from its local path, no Hub needed: ``evaluation.load_metric("spearman")``.
"""

import datasets
import evaluate

from gausscse.evaluation import metrics

_DESCRIPTION = """Spearman's rank correlation ρ in [-1, 1] between predicted similarities and gold STS scores:
the Pearson correlation of the ranks, ties given their average rank (= scipy.stats.spearmanr). For SimCSE's
"all" aggregation pass the concatenation of every subset of a year's file."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `float`): predicted similarities.
    references (`list` of `float`): gold scores.
Returns:
    dict with `spearman`.
Example:
    >>> metric = evaluation.load_metric("spearman")
    >>> metric.compute(predictions=[0.1, 0.5, 0.9], references=[1.0, 2.5, 4.0])
"""

_CITATION = """@inproceedings{gao-etal-2021-simcse,
  title = {{S}im{CSE}: Simple Contrastive Learning of Sentence Embeddings},
  author = {Gao, Tianyu and Yao, Xingcheng and Chen, Danqi},
  booktitle = {Proceedings of EMNLP 2021}, year = {2021}
}"""


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
        return {"spearman": metrics.spearman(predictions, references)}
