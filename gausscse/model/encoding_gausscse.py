"""GaussCSE's encode loop, its one truncation policy and its poolings (ships with the weights as Hub custom code)."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from functools import partial
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer
from transformers.utils import logging

from .configuration_gausscse import TOKEN_POOLINGS
from .devices_gausscse import EncodePool, forward_batches
from .gaussian import GaussianEmbeddings
from .onnx_gausscse import ONNX_FILE
from .utils_gausscse import model_fingerprint

# config.model_type → where a sentence's position ids start: "zero" or "after_padding" (pad_token_id + 1). Read by
# position_offset (the truncation limit; unlisted encoders start at 0) and by packing, which packs only these encoders.
ENCODER_POSITIONS = {"bert": "zero", **dict.fromkeys(("roberta", "xlm-roberta", "camembert"), "after_padding")}
# the truncation default of every entry point that encodes (not training): all the encoder takes (resolve_max_length)
DEFAULT_MAX_LENGTH: int | None = None
ENCODE_BACKENDS = ("torch", "onnx")

logger = logging.get_logger(__name__)


def pool_tokens(last_hidden_state: torch.Tensor, attention_mask: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """``(B, L, h)`` → ``(B, h)``: the first token (``cls``), the masked mean or max; no mask: all tokens."""
    if pooling not in TOKEN_POOLINGS:
        raise ValueError(f"pooling must be one of {TOKEN_POOLINGS}, got {pooling!r}")
    if pooling == "cls":
        return last_hidden_state[:, 0]
    if attention_mask is None:
        attention_mask = last_hidden_state.new_ones(last_hidden_state.shape[:2])
    mask = attention_mask.unsqueeze(-1).to(last_hidden_state.dtype)
    if pooling == "max":
        return last_hidden_state.masked_fill(mask == 0, torch.finfo(last_hidden_state.dtype).min).max(dim=1).values
    return (last_hidden_state * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)


def pool_packed_tokens(last_hidden_state: torch.Tensor, sentence_index: torch.Tensor, pooling: str) -> torch.Tensor:
    """Packed rows → ``(S, hidden)``: the first token of each sentence (``cls``) or the mean of its tokens (``mean``);
    ``sentence_index`` ``(R, L)``: each token's sentence (contiguous runs), −1 for padding; S = max index + 1."""
    index = sentence_index.flatten()
    tokens = last_hidden_state.flatten(0, 1)
    present = index >= 0
    num_sentences = int(index.max()) + 1 if bool(present.any()) else 0
    if pooling == "cls":
        starts = present & torch.cat([present.new_ones(1), index[1:] != index[:-1]])
        pooled = tokens.new_zeros(num_sentences, tokens.shape[-1])
        return pooled.index_copy(0, index[starts], tokens[starts])
    sums = tokens.new_zeros(num_sentences, tokens.shape[-1]).index_add(0, index[present], tokens[present])
    counts = torch.bincount(index[present], minlength=num_sentences).clamp_min(1)
    return sums / counts[:, None].to(sums.dtype)


def pad_token_ids(token_ids: Sequence[Sequence[int]], pad_token_id: int, token_type_ids: bool) -> dict:
    """Right-pad token-id lists into tensors, as the tokenizer's own padding would."""
    lengths = np.fromiter(map(len, token_ids), dtype=np.int64, count=len(token_ids))
    attention_mask = np.arange(lengths.max(initial=0)) < lengths[:, None]
    input_ids = np.full(attention_mask.shape, pad_token_id, dtype=np.int64)
    input_ids[attention_mask] = np.fromiter(itertools.chain.from_iterable(token_ids), np.int64, int(lengths.sum()))
    attention_mask = torch.from_numpy(attention_mask.astype(np.int64))
    features = {"input_ids": torch.from_numpy(input_ids), "attention_mask": attention_mask}
    if token_type_ids:
        features["token_type_ids"] = torch.zeros_like(features["input_ids"])
    return features


def length_sorted_batches(token_ids: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    """The rows of ``token_ids`` in batches of ``batch_size``, longest first, so that each batch pads little."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    order = sorted(range(len(token_ids)), key=lambda row: -len(token_ids[row]))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def padded_batches(
    token_ids: Sequence[Sequence[int]], batches: Sequence[Sequence[int]], tokenizer, pin_memory: bool = False
) -> Iterator[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    """``(rows, features)`` per batch, padded a few batches ahead in a background thread ([`prefetch`])."""
    with_token_types = "token_type_ids" in tokenizer.model_input_names
    pad_token_id = tokenizer.pad_token_id or 0

    def batch(rows: Sequence[int]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        features = pad_token_ids([token_ids[row] for row in rows], pad_token_id, with_token_types)
        rows = torch.tensor(rows, dtype=torch.long)
        if pin_memory:
            rows, features = rows.pin_memory(), {name: tensor.pin_memory() for name, tensor in features.items()}
        return rows, features

    return prefetch(map(batch, batches))


def prefetch(items: Iterator, depth: int = 4) -> Iterator:
    """``items`` produced in a background thread, at most ``depth`` ahead; a producer's error is raised here."""
    end = object()
    with ThreadPoolExecutor(1, thread_name_prefix="gausscse-encode-prefetch") as producer:
        ahead = deque(producer.submit(next, items, end) for _ in range(depth))
        while (item := ahead.popleft().result()) is not end:
            ahead.append(producer.submit(next, items, end))
            yield item


def position_offset(encoder_config) -> int:
    """The first position id of a sentence: ``pad_token_id + 1`` for ``"after_padding"`` encoders, else 0."""
    after_padding = ENCODER_POSITIONS.get(encoder_config.model_type) == "after_padding"
    return encoder_config.pad_token_id + 1 if after_padding else 0


def resolve_max_length(tokenizer, encoder_config=None, requested: int | None = None) -> int:
    """``requested`` tokens (default: all), capped at the encoder's limit (tokenizer and position embeddings)."""
    limits = []
    if tokenizer is not None and tokenizer.model_max_length < 1_000_000:  # "no limit" is a huge sentinel
        limits.append(int(tokenizer.model_max_length))
    if getattr(encoder_config, "max_position_embeddings", None):
        limits.append(encoder_config.max_position_embeddings - position_offset(encoder_config))
    limit = min(limits) if limits else 512  # an encoder that states no limit
    if requested is None:
        return limit
    if not isinstance(requested, int) or requested < 1:
        raise ValueError(f"max_length must be a positive integer, got {requested!r}")
    return min(requested, limit)


def check_sentences(argument: str, sentences) -> list[str]:
    """``sentences`` as a list of strings; ``TypeError`` naming ``argument`` for anything else."""
    if isinstance(sentences, str) or not isinstance(sentences, Sequence):
        raise TypeError(f"{argument} must be a list of strings, got {type(sentences).__name__}")
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"{argument}[{index}] must be a string, got {type(sentence).__name__}: {sentence!r}")
    return list(sentences)


class EncodeMixin:
    """What a [`GaussCSEModel`] encodes with: the tokenizer it keeps (``_tokenizer``), the pipelined ``encode`` and
    the worker pools of several devices."""

    _tokenizer = None  # the tokenizer saved with the model, or given to encode()

    def get_tokenizer(self, tokenizer=None):
        """``tokenizer`` if given, else the one saved with the model (kept by it)."""
        if tokenizer is not None:
            self._tokenizer = tokenizer
        if self._tokenizer is None:
            if not self.name_or_path:
                raise ValueError("This model has no folder to load a tokenizer from: pass tokenizer=... to encode()")
            try:
                # config=: else AutoTokenizer reloads the config and, the model type unregistered, asks for remote code
                self._tokenizer = AutoTokenizer.from_pretrained(
                    self.name_or_path, config=self.config, trust_remote_code=False
                )
            except (OSError, ValueError) as error:
                raise ValueError(
                    f"No tokenizer found at {self.name_or_path!r}: pass tokenizer=... to encode()"
                ) from error
        return self._tokenizer

    def save_tokenizer(self, folder: Path) -> None:
        """Save the model's tokenizer into ``folder``; a warning where it has none."""
        try:
            tokenizer = self.get_tokenizer()
        except ValueError as error:
            logger.warning(f"Saved {folder} without a tokenizer ({error}): call self.get_tokenizer(tokenizer) first")
            return
        tokenizer.save_pretrained(folder)

    @torch.inference_mode()
    def encode(
        self,
        sentences: str | Sequence[str],
        batch_size: int = 32,
        tokenizer=None,
        device: str | torch.device | Sequence[str | torch.device] | None = None,
        show_progress_bar: bool = False,
        max_length: int | None = DEFAULT_MAX_LENGTH,
        output_device: str | torch.device | None = "cpu",
        backend: str = "torch",
        onnx_file: str = ONNX_FILE,
        dtype: torch.dtype | None = None,
        pool=None,
    ) -> GaussianEmbeddings:
        """Sentences → Gaussians N(μ, diag σ²), float32, in input order.

        Args:
            sentences: a string (1-D ``mu``/``logvar``) or a list of strings.
            batch_size, show_progress_bar: sentences per forward pass; a tqdm bar over the batches.
            tokenizer: default: the tokenizer saved with the model.
            device: where to run (the model is moved there); a list of devices shares the batches among worker
                processes.
            max_length: truncation in tokens; default and cap: the encoder's limit ([`resolve_max_length`]).
            output_device: where the results live: ``"cpu"`` (default) or ``None`` for the model's device.
            backend: ``"torch"`` or ``"onnx"`` (ONNX Runtime on ``onnx_file``: onnx/model.onnx, onnx/model_qint8.onnx).
            dtype: ``torch.bfloat16`` / ``torch.float16``: the forward pass under autocast; the Gaussians stay
                float32.
            pool: an [`EncodePool`] (``model.start_multi_process_pool``) whose workers run the forward passes.
        """
        single = isinstance(sentences, str)
        sentences = check_sentences("sentences", [sentences] if single else sentences)
        if backend not in ENCODE_BACKENDS:
            raise ValueError(f"backend must be one of {ENCODE_BACKENDS}, got {backend!r}")
        if dtype not in (None, torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"dtype must be torch.bfloat16, torch.float16 or torch.float32, got {dtype!r}")
        several_devices = isinstance(device, Sequence) and not isinstance(device, str)
        onnx_encoder = self.onnx_encoder(onnx_file) if backend == "onnx" else None
        if device is not None and not several_devices:
            self.to(device)
        tokenizer = self.get_tokenizer(tokenizer)
        max_length = resolve_max_length(tokenizer, self.config.encoder_config, max_length)
        token_ids = tokenizer(sentences, truncation=True, max_length=max_length)["input_ids"] if sentences else []
        batches = length_sorted_batches(token_ids, batch_size)
        if pool is not None and pool.fingerprint != model_fingerprint(self):
            raise ValueError(
                "pool was started for another model (or this one's weights changed since): start one for this model "
                "with model.start_multi_process_pool()"
            )
        with EncodePool(self, device) if several_devices else nullcontext(pool) as pool:
            was_training = self.training
            self.eval()
            try:
                if pool is not None:
                    runs_on, forward = torch.device("cpu"), pool.forward
                elif onnx_encoder is not None:
                    runs_on, forward = torch.device("cpu"), onnx_encoder.forward_batches
                else:  # the Gaussians are gathered on the model's device
                    runs_on, forward = self.device, partial(forward_batches, self)
                inputs = padded_batches(token_ids, batches, tokenizer, pin_memory=runs_on.type == "cuda")
                outputs = tqdm(
                    forward(inputs, dtype), total=len(batches), desc="Encoding", disable=not show_progress_bar
                )
                mu = torch.empty(len(sentences), self.config.embedding_size, device=runs_on)
                logvar = torch.empty_like(mu)
                for rows, batch_mu, batch_logvar in outputs:  # each batch's Gaussians at its rows
                    rows = rows.to(runs_on, non_blocking=True)
                    mu.index_copy_(0, rows, batch_mu.float())
                    logvar.index_copy_(0, rows, batch_logvar.float())
            finally:
                self.train(was_training)  # restored even when encoding fails
        output_device = self.device if output_device is None else torch.device(output_device)
        embeddings = GaussianEmbeddings(mu, logvar).to(output_device)
        return (embeddings[0] if single else embeddings).check("encode(sentences)")

    def start_multi_process_pool(self, target_devices: Sequence[str | torch.device] | None = None) -> EncodePool:
        """An [`EncodePool`] on ``target_devices`` for ``encode(..., pool=pool)``."""
        return EncodePool(self, target_devices)

    @staticmethod
    def stop_multi_process_pool(pool: EncodePool) -> None:
        """Stop the workers of ``pool`` (sentence-transformers' name for ``pool.close()``)."""
        pool.close()
