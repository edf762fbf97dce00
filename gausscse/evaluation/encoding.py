"""Pooled vectors of any ``AutoModel`` encoder, and the distinct-sentence bookkeeping of the encoders.

:func:`encode_hidden` runs an ``AutoModel`` once over the token-sorted batches of ``encode`` (padded ahead of the
forward, as there) and pools with the model's
[`gausscse.model.encoding_gausscse.pool_tokens`]; evaluation's ``PointEncoder`` (the ``--baseline`` of
``gausscse-evaluate``) encodes with it, and :func:`unique_sentences` / :func:`index_of` / :func:`rows_of` are how
every encoder of ``gausscse.evaluation.encoders`` keeps one row per distinct sentence. (The study's cache of a frozen
backbone's vectors, ``studies/frozen_features.py``, is built on the same function.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import nullcontext

import torch
from tqdm.auto import tqdm

from gausscse.model.configuration_gausscse import TOKEN_POOLINGS
from gausscse.model.encoding_gausscse import length_sorted_batches, padded_batches, pool_tokens, resolve_max_length

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
    batches = length_sorted_batches(token_ids, batch_size)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
    inputs = padded_batches(token_ids, batches, tokenizer)
    for rows, features in tqdm(inputs, total=len(batches), desc="Encoding", disable=not show_progress_bar):
        features = {name: tensor.to(device) for name, tensor in features.items()}
        with autocast:
            hidden = backbone(**features).last_hidden_state
        for pooling, embeddings in pooled.items():
            embeddings[rows] = pool_tokens(hidden.float(), features["attention_mask"], pooling).cpu()
    return pooled
