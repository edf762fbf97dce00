"""Binary NLI metric (Yoda et al., EACL 2024, §3.1) as an `evaluate` module, kept in the repository.

Load it from its local path, no Hub needed: ``evaluation.load_metric("binary_nli")``.
"""

import datasets
import evaluate

from gausscse.evaluation import metrics

_DESCRIPTION = """Entailment vs. rest from a score s (e.g. sim(hyp‖pre)); a pair is predicted entailment iff
s >= threshold. Returns (fractions in [0, 1]): `accuracy` at `threshold` (if not given: the best threshold of the
grid 0, 0.001, …, 1 on these data, the smallest among ties), the `threshold` used, `auprc` (area under the
precision–recall curve of the 0.001-step threshold sweep, trapezoid over recall, with sklearn's (0, 1) anchor)
and `average_precision` (sklearn's step-wise AP)."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `float`): scores in [0, 1], higher = more likely entailment.
    references (`list` of `int`): 1 for entailment, 0 for neutral/contradiction.
    threshold (`float`, *optional*): a fixed threshold (e.g. the best one on SNLI dev).
Returns:
    dict with `accuracy`, `threshold`, `auprc`, `average_precision`.
Example:
    >>> metric = evaluation.load_metric("binary_nli")
    >>> metric.compute(predictions=[0.9, 0.2, 0.6], references=[1, 0, 0], threshold=0.5)
"""

_CITATION = """@inproceedings{yoda-etal-2024-sentence,
  title = {Sentence Representations via {G}aussian Embedding},
  author = {Yoda, Shohei and Tsukagoshi, Hayato and Sasano, Ryohei and Takeda, Koichi},
  booktitle = {Proceedings of EACL 2024 (Volume 2: Short Papers)},
  year = {2024}
}"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class BinaryNLI(evaluate.Metric):
    """Accuracy at a threshold, threshold-sweep AUPRC and average precision of entailment scores."""

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
        if threshold is None:
            accuracy, threshold = metrics.best_threshold_accuracy(predictions, references)
        else:
            accuracy = metrics.threshold_accuracy(predictions, references, threshold)
        return {
            "accuracy": accuracy,
            "threshold": float(threshold),
            "auprc": metrics.sweep_auprc(predictions, references),
            "average_precision": metrics.average_precision(predictions, references),
        }
