"""A frozen backbone's pooled vectors of a set of sentences, computed once, and the encoding primitives behind them.

Training (``gausscse.training.heads_only``) and evaluation (the point and frozen-backbone encoders) both use these:
:func:`encode_hidden` runs an ``AutoModel`` once over token-sorted batches and pools with the model's
[`gausscse.model.modeling_gausscse.pool_tokens`]; :class:`BackboneFeatures` keeps the result per distinct sentence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from gausscse.model.modeling_gausscse import TOKEN_POOLINGS, pad_token_ids, pool_tokens, resolve_max_length

DEFAULT_BATCH_SIZE = 128


def unique_sentences(sentences: Iterable[str]) -> list[str]:
    """The distinct sentences in first-seen order."""
    return list(dict.fromkeys(sentences))


def index_of(distinct: Sequence[str]) -> dict[str, int]:
    """sentence → row of a list of distinct sentences."""
    return {sentence: row for row, sentence in enumerate(distinct)}


def rows_of(index: dict[str, int], sentences: Sequence[str]) -> torch.Tensor:
    """Row indices of ``sentences`` in ``index``; ``KeyError`` names the first sentence that is not there."""
    try:
        return torch.tensor([index[sentence] for sentence in sentences], dtype=torch.long)
    except KeyError as error:
        raise KeyError(f"sentence was not encoded in this run: {error.args[0]!r}") from None


@torch.inference_mode()
def encode_hidden(
    backbone: torch.nn.Module,
    tokenizer,
    sentences: Sequence[str],
    poolings: Sequence[str] = ("cls",),
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_length: int | None = None,
    bf16: bool = False,
    show_progress_bar: bool = False,
) -> dict[str, torch.Tensor]:
    """Pooled last hidden states of an ``AutoModel`` encoder: ``{pooling: (N, h) float32}``, rows in the order of
    ``sentences``, every pooling from the same forward pass (each sentence tokenised once, in one call; batches
    sorted by token count so they pad little; no grad)."""
    for pooling in poolings:
        if pooling not in TOKEN_POOLINGS:
            raise ValueError(f"pooling must be one of {TOKEN_POOLINGS}, got {pooling!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    max_length = resolve_max_length(tokenizer, backbone.config, max_length)
    device = next(backbone.parameters()).device
    pooled = {pooling: torch.empty(len(sentences), backbone.config.hidden_size) for pooling in poolings}
    if not sentences:
        return pooled
    token_ids = tokenizer(list(sentences), truncation=True, max_length=max_length)["input_ids"]
    order = sorted(range(len(sentences)), key=lambda row: -len(token_ids[row]))
    with_token_types = "token_type_ids" in tokenizer.model_input_names
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
    for start in tqdm(range(0, len(order), batch_size), desc="Encoding", disable=not show_progress_bar):
        rows = order[start : start + batch_size]
        features = pad_token_ids([token_ids[row] for row in rows], tokenizer.pad_token_id or 0, with_token_types)
        features = {name: tensor.to(device) for name, tensor in features.items()}
        with autocast:
            hidden = backbone(**features).last_hidden_state
        for pooling, embeddings in pooled.items():
            embeddings[rows] = pool_tokens(hidden.float(), features["attention_mask"], pooling).cpu()
    return pooled


@dataclass
class BackboneFeatures:
    """A frozen backbone's pooled last hidden states of a set of distinct sentences, computed once.

    A GaussCSE model whose backbone is frozen maps each sentence to the same pooled vector v at every step and
    in every run, so its heads can be trained (``gausscse.training.heads_only``) and evaluated
    (``gausscse.evaluation.encoders.FrozenBackboneEncoder``) from these vectors without running the backbone again.

    Attributes:
        index: sentence → row.
        pooled: ``{pooling: (N, h) float32}`` (``cls`` for the GaussCSE heads, ``mean`` for a sentence-transformers
            baseline such as all-MiniLM-L6-v2).
        max_length: the truncation length (tokens) the vectors were computed with.
    """

    index: dict[str, int]
    pooled: dict[str, torch.Tensor]
    max_length: int | None

    @classmethod
    def compute(
        cls,
        backbone: torch.nn.Module,
        tokenizer,
        sentences: Iterable[str],
        poolings: Sequence[str] = ("cls", "mean"),
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_length: int | None = None,
        show_progress_bar: bool = False,
    ) -> BackboneFeatures:
        """Run ``backbone`` (in eval mode: no dropout) once over the distinct ``sentences``."""
        distinct = unique_sentences(sentences)
        was_training = backbone.training
        backbone.eval()
        pooled = encode_hidden(
            backbone,
            tokenizer,
            distinct,
            poolings=poolings,
            batch_size=batch_size,
            max_length=max_length,
            show_progress_bar=show_progress_bar,
        )
        backbone.train(was_training)
        return cls(index=index_of(distinct), pooled=pooled, max_length=max_length)

    def rows(self, sentences: Sequence[str]) -> torch.Tensor:
        """Row indices of ``sentences``; ``KeyError`` names the first one that is not cached."""
        return rows_of(self.index, sentences)

    def vectors(self, sentences: Sequence[str], pooling: str) -> torch.Tensor:
        """``(len(sentences), h)`` pooled vectors; ``KeyError`` for a pooling that was not computed."""
        if pooling not in self.pooled:
            raise KeyError(f"pooling {pooling!r} was not computed; cached: {sorted(self.pooled)}")
        return self.pooled[pooling][self.rows(sentences)]
