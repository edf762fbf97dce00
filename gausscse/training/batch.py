"""One contrastive batch: the ``2N + K`` layout of its single forward pass (premises, entailments, present
contradictions), padded or packed by the collator, and split back into an ``NLIBatchEmbeddings`` for the loss."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch

from gausscse.data.sources import EXAMPLE_COLUMNS
from gausscse.data.tokenize import TRAIN_MAX_LENGTH, text_id
from gausscse.model.encoding_gausscse import ENCODER_POSITIONS, pad_token_ids, position_offset
from gausscse.model.gaussian import GaussianEmbeddings

from .losses import NLIBatchEmbeddings

Item = TypeVar("Item")  # a sentence as text or as token ids


@dataclass
class BatchLayout(Generic[Item]):
    """The ``2N + K`` ``sentences`` of one forward pass; ``contradiction_index`` ``(N,)``: the row of example i's
    contradiction among them, or −1; ``text_ids`` ``(N, 3)``: [`gausscse.data.tokenize.text_id`] of (premise,
    entailment, contradiction), −1 where missing."""

    sentences: list[Item]
    contradiction_index: torch.Tensor
    text_ids: torch.Tensor


def batch_layout(
    premises: Sequence[Item], entailments: Sequence[Item], contradictions: Sequence[Item | None], text_ids: torch.Tensor
) -> BatchLayout[Item]:
    """Lay N examples out for one forward pass (a ``None`` contradiction is missing; its text id must be −1)."""
    size = len(premises)
    present = [contradiction is not None for contradiction in contradictions]
    contradiction_index = torch.full((size,), -1, dtype=torch.long)
    contradiction_index[torch.tensor(present, dtype=torch.bool)] = torch.arange(sum(present)) + 2 * size
    sentences = [*premises, *entailments, *(item for item in contradictions if item is not None)]
    return BatchLayout(sentences, contradiction_index, text_ids.reshape(size, len(EXAMPLE_COLUMNS)))


def text_batch_layout(examples: Sequence[dict[str, str | None]], with_contradictions: bool = True) -> BatchLayout[str]:
    """[`batch_layout`] of examples given as texts (``premise``, ``entailment``, ``contradiction`` or ``None``)."""
    contradictions = [example["contradiction"] if with_contradictions else None for example in examples]
    columns = [[example["premise"] for example in examples], [example["entailment"] for example in examples]]
    text_ids = torch.tensor(
        [
            [text_id(premise), text_id(entailment), text_id(contradiction) if contradiction is not None else -1]
            for premise, entailment, contradiction in zip(*columns, contradictions, strict=True)
        ],
        dtype=torch.long,
    )
    return batch_layout(*columns, contradictions, text_ids)


def split_batch_embeddings(
    mu: torch.Tensor, logvar: torch.Tensor, contradiction_index: torch.Tensor, text_ids: torch.Tensor | None = None
) -> NLIBatchEmbeddings:
    """The ``2N + K`` rows of one forward pass as an [`NLIBatchEmbeddings`] (the collator's ``contradiction_index``)."""
    size = contradiction_index.shape[0]
    rows = contradiction_index.clamp_min(0)  # placeholder row for a missing contradiction: masked out of V_C
    return NLIBatchEmbeddings(
        premise=GaussianEmbeddings(mu[:size], logvar[:size]),
        entailment=GaussianEmbeddings(mu[size : 2 * size], logvar[size : 2 * size]),
        contradiction=GaussianEmbeddings(mu[rows], logvar[rows]),
        contradiction_mask=contradiction_index >= 0,
        text_ids=text_ids,
    )


def pack_sentences(token_ids: Sequence[Sequence[int]], row_length: int, position_offset: int) -> dict:
    """Pack tokenized sentences into rows of ``row_length`` tokens (first-fit decreasing).

    Returns ``input_ids`` ``(R, row_length)`` (0 = padding), ``token_type_ids`` (zeros), ``position_ids``
    (``position_offset + 0, 1, ...``, restarting per sentence), a block-diagonal ``attention_mask``
    ``(R, 1, row_length, row_length)`` (a token sees its own sentence; padding sees itself, so no row is empty) and
    ``sentence_index`` ``(R, row_length)`` (−1 = padding) for [`GaussCSEModel.pool`].
    """
    too_long = [index for index, ids in enumerate(token_ids) if len(ids) > row_length]
    if too_long:
        raise ValueError(
            f"pack_length={row_length} is shorter than sentence {too_long[0]} ({len(token_ids[too_long[0]])} tokens): "
            "use at least max_seq_length"
        )
    rows: list[list[int]] = []  # sentence indices per row
    free: list[int] = []
    for index in sorted(range(len(token_ids)), key=lambda index: -len(token_ids[index])):
        row = next((row for row, space in enumerate(free) if space >= len(token_ids[index])), len(rows))
        if row == len(rows):  # no row has room: a new one
            rows.append([])
            free.append(row_length)
        rows[row].append(index)
        free[row] -= len(token_ids[index])
    shape = (len(rows), row_length)
    input_ids = torch.zeros(shape, dtype=torch.long)
    position_ids = torch.zeros(shape, dtype=torch.long)
    sentence_index = torch.full(shape, -1, dtype=torch.long)
    for row, members in enumerate(rows):
        start = 0
        for index in members:
            length = len(token_ids[index])
            input_ids[row, start : start + length] = torch.as_tensor(token_ids[index])
            position_ids[row, start : start + length] = torch.arange(length) + position_offset
            sentence_index[row, start : start + length] = index
            start += length
    same_sentence = sentence_index[:, :, None] == sentence_index[:, None, :]
    padding = sentence_index < 0
    attention_mask = (same_sentence & ~padding[:, :, None]) | torch.eye(row_length, dtype=torch.bool)[None]
    return {
        "input_ids": input_ids,
        "token_type_ids": torch.zeros_like(input_ids),
        "position_ids": position_ids,
        "attention_mask": attention_mask[:, None],
        "sentence_index": sentence_index,
    }


def packing_position_offset(encoder_config: Any) -> int:
    """The first position id of a packed sentence (0 for BERT, ``pad_token_id + 1`` for RoBERTa-style encoders);
    ``ValueError`` for an encoder whose positions the model does not know (``ENCODER_POSITIONS``)."""
    if encoder_config.model_type not in ENCODER_POSITIONS:
        raise ValueError(
            f"--pack_sequences supports encoders with absolute position ids {tuple(ENCODER_POSITIONS)}, not "
            f"{encoder_config.model_type!r}; drop the flag"
        )
    return position_offset(encoder_config)


def packs_by_default(device: torch.device, encoder_config: Any) -> bool:
    """``--pack_sequences`` unset: packed on the CPU (faster there), not on a GPU (slower there), if the encoder can."""
    return device.type == "cpu" and encoder_config.model_type in ENCODER_POSITIONS


@dataclass
class TripletCollator:
    """Collate tokenised examples into one forward pass over their ``2N + K`` sentences: the model inputs plus
    ``contradiction_index`` and ``text_ids`` ([`BatchLayout`]); ``with_contradictions=False`` leaves the
    contradictions out (K = 0); ``pack=True`` packs the sentences ([`pack_sentences`]). See [`for_tokenizer`]."""

    pad_token_id: int = 0
    token_type_ids: bool = True
    with_contradictions: bool = True
    pack: bool = False
    pack_length: int = 2 * TRAIN_MAX_LENGTH
    position_offset: int | None = None

    def __post_init__(self) -> None:
        if self.pack and self.position_offset is None:
            raise ValueError("packing needs the encoder's first position id: pass encoder_config to for_tokenizer")

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, encoder_config: Any = None, **kwargs: Any) -> TripletCollator:
        """A collator with the tokenizer's padding id and input names; to pack, ``encoder_config`` (the backbone's
        config) gives the position offset."""
        if kwargs.get("pack") and encoder_config is not None:
            kwargs["position_offset"] = packing_position_offset(encoder_config)
        token_type_ids = "token_type_ids" in tokenizer.model_input_names
        return cls(pad_token_id=tokenizer.pad_token_id or 0, token_type_ids=token_type_ids, **kwargs)

    def __call__(self, examples: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        text_ids = torch.tensor([example["text_ids"] for example in examples], dtype=torch.long)
        contradictions = [example["contradiction_input_ids"] or None for example in examples]
        if not self.with_contradictions:
            contradictions = [None] * len(examples)
            text_ids[:, 2] = -1
        layout = batch_layout(
            [example["premise_input_ids"] for example in examples],
            [example["entailment_input_ids"] for example in examples],
            contradictions,
            text_ids,
        )
        if self.pack:
            features = pack_sentences(layout.sentences, self.pack_length, self.position_offset)
        else:
            features = pad_token_ids(layout.sentences, self.pad_token_id, self.token_type_ids)
        return {**features, "contradiction_index": layout.contradiction_index, "text_ids": layout.text_ids}
