"""Token ids of the training examples: each example is tokenised once, by a cached ``datasets.map``.

[`tokenize_examples`] turns the examples of [`gausscse.data.sources.build_examples`] into token-id columns (and
[`text_id`]s that mark equal sentences across a batch); the collator of ``gausscse.training.batch`` only pads or packs
them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets

from gausscse.data.sources import EXAMPLE_COLUMNS

TOKENIZED_COLUMNS = tuple(f"{column}_input_ids" for column in EXAMPLE_COLUMNS)

_SPACES = re.compile(r"\s+")


def text_id(text: str) -> int:
    """A 63-bit id of the text after lower-casing and collapsing whitespace: equal ids mark the same sentence."""
    normalized = _SPACES.sub(" ", text.strip().lower())
    return int.from_bytes(hashlib.blake2b(normalized.encode("utf-8"), digest_size=8).digest(), "little") >> 1


def tokenize_batch(tokenizer: Any, batch: Mapping[str, Sequence[str | None]], max_length: int) -> dict[str, list]:
    """Token ids and [`text_id`]s of a batch of examples (columns of [`EXAMPLE_COLUMNS`]): one tokenizer call per
    column over the present sentences. A missing contradiction gets ``[]`` and text id −1.

    Returns ``premise_input_ids``, ``entailment_input_ids``, ``contradiction_input_ids`` and ``text_ids``
    (``[id(premise), id(entailment), id(contradiction)]`` per example).
    """
    size = len(batch["premise"])
    output: dict[str, list] = {}
    for column in EXAMPLE_COLUMNS:
        texts = batch[column]
        present = [text for text in texts if text is not None]
        encoded = iter(tokenizer(present, truncation=True, max_length=max_length)["input_ids"] if present else [])
        output[f"{column}_input_ids"] = [next(encoded) if text is not None else [] for text in texts]
    output["text_ids"] = [
        [text_id(batch[column][k]) if batch[column][k] is not None else -1 for column in EXAMPLE_COLUMNS]
        for k in range(size)
    ]
    return output


def examples_fingerprint(examples: datasets.Dataset, tokenizer: Any, max_length: int) -> str:
    """A hash of the example texts, the tokenizer (class, name, vocabulary size) and ``max_length``: the cache key
    of [`tokenize_examples`]."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{type(tokenizer).__name__}|{tokenizer.name_or_path}|{len(tokenizer)}|{max_length}".encode())
    for column in EXAMPLE_COLUMNS:
        for text in examples[column]:
            digest.update(b"\x00" if text is None else text.encode("utf-8") + b"\x01")
    return digest.hexdigest()


def tokenize_examples(
    examples: datasets.Dataset,
    tokenizer: Any,
    max_length: int,
    cache_dir: str | Path | None = None,
    num_proc: int | None = None,
) -> datasets.Dataset:
    """Tokenise every example once (``datasets.map``, batched) into the columns of [`tokenize_batch`].

    With ``cache_dir`` the result is an Arrow file there, keyed by [`examples_fingerprint`]: memory-mapped rather
    than held in RAM, and a rerun on the same data, tokenizer and ``max_length`` loads it instead of tokenising.
    """
    features = datasets.Features(
        {
            **{name: datasets.Sequence(datasets.Value("int32")) for name in TOKENIZED_COLUMNS},
            "text_ids": datasets.Sequence(datasets.Value("int64"), length=len(EXAMPLE_COLUMNS)),
        }
    )
    cache_file = None
    if cache_dir is not None:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        cache_file = str(Path(cache_dir) / f"tokenized-{examples_fingerprint(examples, tokenizer, max_length)}.arrow")
    return examples.map(
        lambda batch: tokenize_batch(tokenizer, batch, max_length),
        batched=True,
        batch_size=1000,
        remove_columns=list(EXAMPLE_COLUMNS),
        features=features,
        cache_file_name=cache_file,
        num_proc=num_proc,
        desc="Tokenizing the training examples",
    )
