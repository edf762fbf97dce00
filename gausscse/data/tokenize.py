"""Token ids of the training examples ([`gausscse.data.sources.build_examples`]), each tokenised once by a cached
``datasets.map``, with [`text_id`]s that mark equal sentences across a batch."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
from datasets.fingerprint import Hasher

from gausscse.data.sources import EXAMPLE_COLUMNS

# The training truncation default (--max_seq_length, the precision probe, the pack length), as the paper's code and
# SimCSE's; encoding and evaluation take all the encoder takes (gausscse.model.encoding_gausscse.DEFAULT_MAX_LENGTH).
TRAIN_MAX_LENGTH = 32

# Tokenizer attributes the fingerprint leaves out: the backend (hashed on its own) and what a fast tokenizer built it
# from, and what using a tokenizer changes (a BPE cache, the warnings given, the switch to target texts).
_BACKEND_SOURCES = frozenset({"_tokenizer", "_vocab", "_merges"})
_USE_STATE = frozenset({"cache", "deprecation_warnings", "_in_target_context_manager"})
# init_kwargs that say where and how the tokenizer was loaded (local_files_only follows HF_HUB_OFFLINE), not its ids
_LOADING_KWARGS = frozenset(
    {
        "local_files_only",
        "cache_dir",
        "force_download",
        "proxies",
        "token",
        "revision",
        "trust_remote_code",
        "_from_auto",
    }
)


def text_id(text: str) -> int:
    """A 63-bit id of the text after lower-casing and collapsing whitespace: equal ids mark the same sentence."""
    normalized = " ".join(text.lower().split())
    return int.from_bytes(hashlib.blake2b(normalized.encode("utf-8"), digest_size=8).digest(), "little") >> 1


def tokenize_batch(tokenizer: Any, batch: Mapping[str, Sequence[str | None]], max_length: int) -> dict[str, list]:
    """``<column>_input_ids`` per column of ``EXAMPLE_COLUMNS`` (one tokenizer call per column) and ``text_ids``
    (``[id(premise), id(entailment), id(contradiction)]``) of a batch; a missing contradiction gets ``[]`` and −1."""
    output: dict[str, list] = {}
    for column in EXAMPLE_COLUMNS:
        texts = batch[column]
        present = [text for text in texts if text is not None]
        encoded = iter(tokenizer(present, truncation=True, max_length=max_length)["input_ids"] if present else [])
        output[f"{column}_input_ids"] = [next(encoded) if text is not None else [] for text in texts]
    rows = zip(*(batch[column] for column in EXAMPLE_COLUMNS), strict=True)
    output["text_ids"] = [[text_id(text) if text is not None else -1 for text in row] for row in rows]
    return output


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A hash of what decides the token ids ``tokenizer`` gives: equal for the same tokenizer loaded twice, different
    once it is changed in place (normaliser, vocabulary, special tokens, truncation side, ...): its class, a fast
    one's serialised backend without the per-call truncation and padding, and the rest by ``Hasher``."""
    from transformers import PreTrainedTokenizerBase

    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{type(tokenizer).__module__}.{type(tokenizer).__qualname__}\x00".encode())
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        digest.update(Hasher.hash(tokenizer).encode())
        return digest.hexdigest()
    state, left_out = vars(tokenizer), _USE_STATE
    if hasattr(state.get("_tokenizer"), "to_str"):
        serialised = json.loads(state["_tokenizer"].to_str())  # less what each call sets (truncation, padding)
        kept = {key: value for key, value in serialised.items() if key not in ("truncation", "padding")}
        digest.update(json.dumps(kept, ensure_ascii=False).encode())
        left_out |= _BACKEND_SOURCES
    python_state = {name: value for name, value in state.items() if name not in left_out}
    if isinstance(python_state.get("init_kwargs"), dict):  # how it was loaded (HF_HUB_OFFLINE, ...), not its ids
        kwargs = python_state["init_kwargs"]
        python_state["init_kwargs"] = {key: value for key, value in kwargs.items() if key not in _LOADING_KWARGS}
    digest.update(b"\x00" + Hasher.hash(python_state).encode())
    return digest.hexdigest()


def tokenize_examples(
    examples: datasets.Dataset,
    tokenizer: Any,
    max_length: int,
    cache_dir: str | Path | None = None,
    num_proc: int | None = None,
) -> datasets.Dataset:
    """Every example tokenised once into the columns of [`tokenize_batch`]; with ``cache_dir``, a memory-mapped Arrow
    file there keyed by a hash of the texts, the tokenizer and ``max_length``, which a rerun with the same loads."""
    token_ids = datasets.Sequence(datasets.Value("int32"))
    features = datasets.Features({f"{column}_input_ids": token_ids for column in EXAMPLE_COLUMNS})
    features["text_ids"] = datasets.Sequence(datasets.Value("int64"), length=len(EXAMPLE_COLUMNS))
    cache_file = None
    if cache_dir is not None:
        digest = hashlib.blake2b(f"{tokenizer_fingerprint(tokenizer)}|{max_length}".encode(), digest_size=16)
        for column in EXAMPLE_COLUMNS:
            for text in examples[column]:
                digest.update(b"\x00" if text is None else text.encode("utf-8") + b"\x01")
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        cache_file = str(Path(cache_dir) / f"tokenized-{digest.hexdigest()}.arrow")
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
