"""The SNLI-dev evaluator used inside training for best-checkpoint selection."""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from pathlib import Path

from gausscse.model.encoding_gausscse import DEFAULT_MAX_LENGTH

from .encoders import DEFAULT_BATCH_SIZE, EncodedSentences, GaussianEncoder
from .tasks import NLI_DEV, NLIPairs, binary_nli, entailment_direction, load_nli


@dataclass(eq=False)
class SNLIDevEvaluator:
    """``evaluator(model, tokenizer=None)`` → ``{name}_auprc``, ``{name}_accuracy`` and ``{name}_threshold`` (the
    smallest best grid threshold) and, Gaussian models, ``{name}_direction_accuracy`` (similarity rule), in percent, on
    SNLI dev (its first ``max_examples`` pairs) or ``pairs``; a point model (SimCSE loss) by the cosine of μ."""

    data_dir: InitVar[str | Path | None] = None
    max_examples: InitVar[int | None] = None
    batch_size: int = DEFAULT_BATCH_SIZE
    max_length: int | None = DEFAULT_MAX_LENGTH
    pairs: NLIPairs | None = field(default=None, repr=False)
    name: str = "snli_dev"
    last_encoded: EncodedSentences | None = field(default=None, init=False, repr=False)  # the latest call's sentences

    def __post_init__(self, data_dir: str | Path | None, max_examples: int | None) -> None:
        if self.pairs is None:
            self.pairs = load_nli(self.name, *NLI_DEV, data_dir, max_examples)

    def __call__(self, model, tokenizer=None) -> dict[str, float]:
        options = {"batch_size": self.batch_size, "max_length": self.max_length}
        self.last_encoded = GaussianEncoder(model, tokenizer, **options).encode_unique(self.pairs.sentences)
        return dev_metrics(self.last_encoded, self.pairs, self.name)


def dev_metrics(encoded: EncodedSentences, pairs: NLIPairs, name: str = "snli_dev") -> dict[str, float]:
    """The metrics of :class:`SNLIDevEvaluator` from already encoded sentences."""
    nli = binary_nli(encoded, pairs).metrics
    metrics = {f"{name}_{key}": nli[key] for key in ("auprc", "accuracy", "threshold")}
    if encoded.is_gaussian:
        metrics[f"{name}_direction_accuracy"] = entailment_direction(encoded, pairs).metrics["similarity_rule"]
    return metrics
