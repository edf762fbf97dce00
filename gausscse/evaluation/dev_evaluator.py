"""The SNLI-dev evaluator used inside training (best-checkpoint selection every N steps).

>>> evaluator = SNLIDevEvaluator(max_examples=2000)
>>> evaluator(model, tokenizer)
{'snli_dev_auprc': ..., 'snli_dev_accuracy': ..., 'snli_dev_threshold': ..., 'snli_dev_direction_accuracy': ...}
"""

from __future__ import annotations

from pathlib import Path

from gausscse.model.encoding_gausscse import DEFAULT_MAX_LENGTH

from .encoders import EncodedSentences, GaussianEncoder
from .tasks import NLI_DEV, NLIPairs, binary_nli, dev_threshold, entailment_direction, load_nli


class SNLIDevEvaluator:
    """Binary-NLI AUPRC and best-threshold accuracy, and direction accuracy, on SNLI dev (or on ``pairs``).

    The dev pairs are loaded once; each call encodes every distinct sentence once (no grad, the model's
    train/eval mode is restored) and scores pairs with sim(hyp‖pre) under ``config.similarity_reduction``.

    Args:
        data_dir: folder in the layout of ``shared/data`` (default [`gausscse.data.registry.default_data_dir`]).
        max_examples: use only the first N dev pairs (all 9,842 by default).
        batch_size: sentences per forward pass.
        max_length: truncation length in tokens (default: the encoder's limit, as every entry point that encodes).
        pairs: NLI pairs to evaluate on instead of SNLI dev (e.g. from ``--validation_file``).
        name: prefix of the metric names (``snli_dev``; ``validation`` for ``--validation_file``).
        point: score by the cosine of μ (a model trained with the supervised SimCSE loss).
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        max_examples: int | None = None,
        batch_size: int = 128,
        max_length: int | None = DEFAULT_MAX_LENGTH,
        pairs: NLIPairs | None = None,
        name: str = "snli_dev",
        point: bool = False,
    ):
        if pairs is None:
            pairs = load_nli(name, *NLI_DEV, data_dir=data_dir, max_examples=max_examples)
        self.pairs = pairs
        self.name = name
        self.point = point
        self.batch_size = batch_size
        self.max_length = max_length
        self.last_encoded: EncodedSentences | None = None  # the sentences of the latest call, for its figures

    def __call__(self, model, tokenizer=None) -> dict[str, float]:
        """Evaluate a GaussCSE model (or a ``DistributedDataParallel`` wrapping one).

        Returns (percentages 0–100 as in the paper's tables; the threshold in [0, 1]):
            ``snli_dev_auprc``: area under the precision–recall curve of the 0.001-step threshold sweep;
            ``snli_dev_accuracy``: accuracy at the best grid threshold (entailment iff sim >= threshold);
            ``snli_dev_threshold``: that threshold (the smallest among equally good ones);
            ``snli_dev_direction_accuracy``: similarity rule sim(hyp‖pre) > sim(pre‖hyp) on entailment pairs.
        """
        encoder = GaussianEncoder(
            model, tokenizer=tokenizer, batch_size=self.batch_size, max_length=self.max_length, point=self.point
        )
        self.last_encoded = encoder.encode_unique(self.pairs.sentences)
        return dev_metrics(self.last_encoded, self.pairs, self.name)


def dev_metrics(encoded: EncodedSentences, pairs: NLIPairs, name: str = "snli_dev") -> dict[str, float]:
    """The metrics of :class:`SNLIDevEvaluator` from already encoded dev sentences (direction only for a
    Gaussian encoder)."""
    accuracy, threshold = dev_threshold(encoded, pairs)
    metrics = {
        f"{name}_auprc": binary_nli(encoded, pairs, threshold).metrics["auprc"],
        f"{name}_accuracy": 100.0 * accuracy,
        f"{name}_threshold": threshold,
    }
    if encoded.is_gaussian:
        metrics[f"{name}_direction_accuracy"] = entailment_direction(encoded, pairs).metrics["similarity_rule"]
    return metrics
