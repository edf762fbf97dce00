"""Encodings kept between evaluations: a baseline that does not change (the untouched backbone, a released model) is
encoded once per set of sentences and settings, and a later ``gausscse-evaluate`` reads its vectors back instead of
encoding them again (``--no_cache`` recomputes them, ``--cache_dir`` moves the folder).

The key is what decides the vectors: the model's weights and config (``model_fingerprint``), its tokenizer, the
encoder's settings (pooling, normalisation, truncation, batch size, precision, backend, device kind), the torch
version and the sentences in their order; the scores' settings (λ, α: no vector depends on them) are the encoder's
at each read. An entry is one safetensors file of μ (and log σ²), written atomically; one that cannot be read is encoded
again and replaced."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import torch
from huggingface_hub import constants
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from gausscse.data.tokenize import tokenizer_fingerprint
from gausscse.io import atomic_path
from gausscse.model.utils_gausscse import model_fingerprint

from .encoders import EncodedSentences, GaussianEncoder, PointEncoder, SentenceEncoder, unique_sentences

logger = logging.getLogger(__name__)

CACHE_FORMAT = 1  # bump when what an entry holds, or how an encoder computes it, changes
CACHE_ENV = "GAUSSCSE_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$GAUSSCSE_CACHE_DIR``, else ``gausscse/encodings`` under the Hugging Face home (``$HF_HOME``)."""
    return Path(os.environ.get(CACHE_ENV) or Path(constants.HF_HOME) / "gausscse" / "encodings")


def encoder_identity(encoder: SentenceEncoder) -> dict | None:
    """What decides ``encoder``'s vectors but the sentences; ``None`` for an encoder kind the cache does not know."""
    if isinstance(encoder, PointEncoder):
        model, tokenizer = encoder.model, encoder.tokenizer
        settings = {"pooling": encoder.pooling, "normalize": encoder.normalize}
    elif isinstance(encoder, GaussianEncoder):
        model, tokenizer = encoder.model, encoder.model.get_tokenizer(encoder.tokenizer)
        settings = {"backend": encoder.backend, "onnx_file": encoder.onnx_file}
    else:
        return None
    return {
        "format": CACHE_FORMAT,
        "kind": type(encoder).__name__,
        "model": model_fingerprint(model),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "max_length": encoder.max_length,
        "batch_size": encoder.batch_size,
        "bf16": encoder.bf16,
        "device": next(model.parameters()).device.type,
        "torch": torch.__version__,
        **settings,
    }


def entry_key(identity: dict, distinct: list[str]) -> str:
    """SHA-256 of an encoder's identity and its distinct sentences, in order."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode())
    for sentence in distinct:
        digest.update(sentence.encode("utf-8") + b"\x00")
    return digest.hexdigest()


class EncodingCache:
    """A folder of encodings (default: [`default_cache_dir`]); [`encode_unique`] reads an entry or encodes and keeps it
    (``refresh``: encodes and replaces it).

    Example::

        cache = EncodingCache()
        encoded = cache.encode_unique(PointEncoder("sentence-transformers/all-MiniLM-L6-v2"), sentences)
    """

    def __init__(self, folder: str | Path | None = None, refresh: bool = False):
        self.folder = Path(folder) if folder is not None else default_cache_dir()
        self.refresh = refresh  # encode again and replace the entries
        self.hits = 0

    def encode_unique(
        self, encoder: SentenceEncoder, sentences: list[str], show_progress_bar: bool = False
    ) -> EncodedSentences:
        """``encoder.encode_unique(sentences)``, from the cache where it holds them."""
        distinct = unique_sentences(sentences)
        identity = encoder_identity(encoder)
        if identity is None:
            return encoder.encode_unique(distinct, show_progress_bar=show_progress_bar)
        path = self.folder / f"{entry_key(identity, distinct)}.safetensors"
        if path.is_file() and not self.refresh:
            try:
                encoded = self.read(path, encoder, distinct)
                self.hits += 1
                return encoded
            except (OSError, SafetensorError, ValueError, KeyError) as error:  # damaged: encode again, replace it
                logger.warning("encoding cache %s unreadable (%s): encoding again", path, error)
        encoded = encoder.encode_unique(distinct, show_progress_bar=show_progress_bar)
        try:
            self.write(path, encoded)
        except OSError as error:  # a read-only or full cache folder costs the next run time, never this one's results
            logger.warning("encoding cache %s not written: %s", path, error)
        return encoded

    @staticmethod
    def read(path: Path, encoder: GaussianEncoder | PointEncoder, distinct: list[str]) -> EncodedSentences:
        with safe_open(path, framework="pt") as entry:
            mu = entry.get_tensor("mu")
            logvar = entry.get_tensor("logvar") if "logvar" in entry.keys() else None
        if mu.shape[0] != len(distinct) or (logvar is not None and logvar.shape != mu.shape):
            raise ValueError(f"{mu.shape[0]} rows for {len(distinct)} sentences")
        return encoder.from_vectors(distinct, mu, logvar)  # scored as the encoder's config says now

    @staticmethod
    def write(path: Path, encoded: EncodedSentences) -> None:
        tensors = {"mu": encoded.mu.contiguous()}
        if encoded.logvar is not None:
            tensors["logvar"] = encoded.logvar.contiguous()
        with atomic_path(path) as temporary:
            save_file(tensors, temporary)
