"""NLI training data: load and validate sources, build (premise, entailment, contradiction) examples, collate.

Examples are built as SimCSE builds its NLI triplets: rows are grouped by premise; each entailment hypothesis of a
premise becomes one example, paired with a contradiction hypothesis of the same premise (cycling through them when
there are fewer) or with none. Examples without a contradiction are kept: the loss masks them out of V_C.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import datasets
import torch

from evaluation.data import HUB_SOURCES, LOCAL_FILES, NLI_LABELS, default_data_dir, load_split

logger = logging.getLogger(__name__)

TRAIN_SOURCES = ("snli", "mnli", "sick")
EXAMPLE_COLUMNS = ("premise", "entailment", "contradiction")


class BadRowError(ValueError):
    """A training row with a missing field, an unknown label or empty text."""


@dataclass
class SourceRows:
    """One NLI source: its rows and where each row comes from, for error messages.

    Attributes:
        name: e.g. ``snli``.
        location: the file (or Hub id) the rows come from.
        rows: ``datasets.Dataset`` with ``premise``, ``hypothesis``, ``label``.
        line_numbers: whether row k is line k + 1 of ``location`` (else rows are reported by index).
    """

    name: str
    location: str
    rows: datasets.Dataset
    line_numbers: bool

    def where(self, index: int) -> str:
        return f"{self.location}: line {index + 1}" if self.line_numbers else f"{self.location}: row {index}"


@dataclass
class DataStats:
    """Counts logged when the training examples are built."""

    rows: int = 0
    bad_rows_dropped: int = 0
    neutral_rows: int = 0
    examples: int = 0
    complete_triplets: int = 0
    entailment_only: int = 0
    premises_without_entailment: int = 0
    per_source: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_source(name: str, data_dir: str | Path | None = None) -> SourceRows:
    """The train split of ``snli``, ``mnli`` or ``sick`` from ``data_dir`` (layout of ``shared/data``) or the Hub."""
    if name not in TRAIN_SOURCES:
        raise ValueError(f"Unknown training source {name!r}; valid sources: {', '.join(TRAIN_SOURCES)}")
    folder = Path(data_dir) if data_dir is not None else default_data_dir()
    rows = load_split(name, "train", folder)
    if folder is not None:
        relative_path, row_filter = LOCAL_FILES[(name, "train")]
        return SourceRows(name, str(folder / relative_path), rows, line_numbers=row_filter is None)
    hub_id, config, split = HUB_SOURCES[(name, "train")]
    return SourceRows(name, f"{hub_id}{'/' + config if config else ''} ({split})", rows, line_numbers=False)


def _row_problem(premise: Any, hypothesis: Any, label: Any) -> str | None:
    for column, value in (("premise", premise), ("hypothesis", hypothesis)):
        if value is None:
            return f"missing {column}"
        if not isinstance(value, str):
            return f"{column} is not a string: {value!r}"
        if not value.strip():
            return f"empty {column}"
    if label not in NLI_LABELS:
        return f"unknown label {label!r} (expected one of {', '.join(NLI_LABELS)})"
    return None


def valid_rows(source: SourceRows, drop_bad_rows: bool, stats: DataStats) -> Iterable[tuple[str, str, str]]:
    """Yield (premise, hypothesis, label) of each row; a bad row raises [`BadRowError`] naming file and line, or
    is counted in ``stats.bad_rows_dropped`` and skipped when ``drop_bad_rows``."""
    missing = [column for column in ("premise", "hypothesis", "label") if column not in source.rows.column_names]
    if missing:
        raise BadRowError(f"{source.location}: no {', '.join(missing)} field in any row")
    columns = source.rows.select_columns(["premise", "hypothesis", "label"]).to_dict()
    for index, row in enumerate(zip(columns["premise"], columns["hypothesis"], columns["label"], strict=True)):
        stats.rows += 1
        problem = _row_problem(*row)
        if problem is None:
            yield row
        elif drop_bad_rows:
            stats.bad_rows_dropped += 1
        else:
            raise BadRowError(f"{source.where(index)}: {problem} (pass --drop_bad_rows to skip such rows)")


def build_examples(sources: Sequence[SourceRows], drop_bad_rows: bool = False) -> tuple[datasets.Dataset, DataStats]:
    """Group rows by premise and build one example per entailment hypothesis (see the module docstring).

    Returns the examples (columns ``premise``, ``entailment``, ``contradiction``; the last is ``None`` when the
    premise has no contradiction hypothesis) in first-seen order, and the counts.
    """
    stats = DataStats()
    groups: dict[str, tuple[list[str], list[str]]] = {}
    for source in sources:
        before = stats.rows
        for premise, hypothesis, label in valid_rows(source, drop_bad_rows, stats):
            entailments, contradictions = groups.setdefault(premise, ([], []))
            if label == "entailment":
                entailments.append(hypothesis)
            elif label == "contradiction":
                contradictions.append(hypothesis)
            else:
                stats.neutral_rows += 1
        stats.per_source[source.name] = stats.rows - before
    examples: dict[str, list[str | None]] = {column: [] for column in EXAMPLE_COLUMNS}
    for premise, (entailments, contradictions) in groups.items():
        if not entailments:
            stats.premises_without_entailment += 1
        for position, entailment in enumerate(entailments):
            contradiction = contradictions[position % len(contradictions)] if contradictions else None
            examples["premise"].append(premise)
            examples["entailment"].append(entailment)
            examples["contradiction"].append(contradiction)
    stats.examples = len(examples["premise"])
    stats.complete_triplets = sum(contradiction is not None for contradiction in examples["contradiction"])
    stats.entailment_only = stats.examples - stats.complete_triplets
    if stats.examples == 0:
        raise ValueError("The training data holds no (premise, entailment hypothesis) pair")
    features = datasets.Features({column: datasets.Value("string") for column in EXAMPLE_COLUMNS})
    return datasets.Dataset.from_dict(examples, features=features), stats


def load_training_examples(
    source_names: Sequence[str], data_dir: str | Path | None = None, drop_bad_rows: bool = False
) -> tuple[datasets.Dataset, DataStats]:
    """Load the named sources and build the examples; logs how many of each kind were built."""
    dataset, stats = build_examples([load_source(name, data_dir) for name in source_names], drop_bad_rows)
    logger.info(
        "Training examples: %d (%d complete triplets, %d without a contradiction hypothesis) from %d rows %s; "
        "%d neutral rows unused, %d bad rows dropped, %d premises without an entailment hypothesis",
        stats.examples,
        stats.complete_triplets,
        stats.entailment_only,
        stats.rows,
        stats.per_source,
        stats.neutral_rows,
        stats.bad_rows_dropped,
        stats.premises_without_entailment,
    )
    return dataset, stats


_SPACES = re.compile(r"\s+")


def text_id(text: str) -> int:
    """A 63-bit id of the text after lower-casing and collapsing whitespace: equal ids mark the same sentence."""
    normalized = _SPACES.sub(" ", text.strip().lower())
    return int.from_bytes(hashlib.blake2b(normalized.encode("utf-8"), digest_size=8).digest(), "little") >> 1


def pack_sentences(token_ids: Sequence[Sequence[int]], row_length: int, position_offset: int = 0) -> dict:
    """Pack tokenized sentences into rows of ``row_length`` tokens (first-fit decreasing), for one forward pass
    with far less padding than one sentence per row.

    Returns ``input_ids`` ``(R, row_length)`` (0 = padding), ``token_type_ids`` (zeros), ``position_ids``
    (``position_offset + 0, 1, ...`` restarting at each sentence; RoBERTa-style models need
    ``pad_token_id + 1``), a block-diagonal ``attention_mask`` ``(R, 1, row_length, row_length)`` (a token sees only
    its own sentence; a padding token sees only itself, so no attention row is empty) and ``sentence_index``
    ``(R, row_length)`` (−1 = padding) for [`GaussCSEModel.pool_packed`].
    """
    too_long = [index for index, ids in enumerate(token_ids) if len(ids) > row_length]
    if too_long:
        raise ValueError(
            f"pack_length={row_length} is shorter than sentence {too_long[0]} ({len(token_ids[too_long[0]])}"
            " tokens): use a pack_length of at least max_seq_length"
        )
    rows: list[list[int]] = []  # sentence indices per row
    free: list[int] = []
    for index in sorted(range(len(token_ids)), key=lambda index: -len(token_ids[index])):
        row = next((row for row, space in enumerate(free) if space >= len(token_ids[index])), None)
        if row is None:
            rows.append([])
            free.append(row_length)
            row = len(rows) - 1
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
            input_ids[row, start : start + length] = torch.tensor(token_ids[index])
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


@dataclass
class TripletCollator:
    """Tokenize all sentences of a batch in one call: the premises, the entailment hypotheses, then the present
    contradiction hypotheses (so the model runs one forward pass over ``2N + K`` sentences).

    Returns the tokenizer's tensors plus ``contradiction_index`` (``(N,)``, the row of example i's contradiction
    among the ``2N + K`` sentences, or −1) and ``text_ids`` (``(N, 3)``, see [`text_id`]; −1 where missing).
    ``with_contradictions=False`` (losses without V_C: ``ent``, ``ent+rev``) leaves the contradictions out (K = 0).
    ``pack=True`` packs the sentences several to a row (see [`pack_sentences`]; rows of ``pack_length``, default
    ``2 * max_length``): the same single forward pass over far fewer padding tokens.
    """

    tokenizer: Any
    max_length: int = 32
    with_contradictions: bool = True
    pack: bool = False
    pack_length: int | None = None
    position_offset: int = 0

    def __call__(self, examples: list[dict[str, str | None]]) -> dict[str, torch.Tensor]:
        layout = batch_layout(examples, self.with_contradictions)
        if self.pack:
            token_ids = self.tokenizer(layout.sentences, truncation=True, max_length=self.max_length)
            features = pack_sentences(
                token_ids["input_ids"], self.pack_length or 2 * self.max_length, self.position_offset
            )
        else:
            features = dict(
                self.tokenizer(
                    layout.sentences, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
                )
            )
        features["contradiction_index"] = layout.contradiction_index
        features["text_ids"] = layout.text_ids
        return features


@dataclass
class BatchLayout:
    """The ``2N + K`` sentences of one forward pass and how the loss finds its parts.

    Attributes:
        sentences: the N premises, the N entailment hypotheses, then the K present contradiction hypotheses.
        contradiction_index: ``(N,)`` row of example i's contradiction among ``sentences``, or −1.
        text_ids: ``(N, 3)`` [`text_id`] of (premise, entailment, contradiction); −1 where missing.
    """

    sentences: list[str]
    contradiction_index: torch.Tensor
    text_ids: torch.Tensor


def batch_layout(examples: Sequence[dict[str, str | None]], with_contradictions: bool = True) -> BatchLayout:
    """Lay a batch of examples out for one forward pass; ``with_contradictions=False`` drops every contradiction."""
    if not with_contradictions:
        examples = [{**example, "contradiction": None} for example in examples]
    size = len(examples)
    contradictions = [example["contradiction"] for example in examples if example["contradiction"] is not None]
    sentences = [example["premise"] for example in examples] + [example["entailment"] for example in examples]
    contradiction_index = torch.full((size,), -1, dtype=torch.long)
    present = torch.tensor([example["contradiction"] is not None for example in examples], dtype=torch.bool)
    contradiction_index[present] = torch.arange(len(contradictions), dtype=torch.long) + 2 * size
    text_ids = torch.tensor(
        [
            [text_id(example[column]) if example[column] is not None else -1 for column in EXAMPLE_COLUMNS]
            for example in examples
        ],
        dtype=torch.long,
    ).reshape(size, len(EXAMPLE_COLUMNS))
    return BatchLayout(sentences + contradictions, contradiction_index, text_ids)


__all__ = [
    "TRAIN_SOURCES",
    "BadRowError",
    "BatchLayout",
    "DataStats",
    "SourceRows",
    "TripletCollator",
    "batch_layout",
    "build_examples",
    "load_source",
    "load_training_examples",
    "pack_sentences",
    "text_id",
    "valid_rows",
]
