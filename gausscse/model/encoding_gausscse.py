"""GaussCSE's encode loop, its one truncation policy and its poolings (ships with the weights as Hub custom code).

``GaussCSEModel.encode`` runs [`encode_sentences`]: every sentence is tokenised once, the token ids sorted by length
so each batch pads little, padded per batch ([`pad_token_ids`]) and the Gaussians put back in input order. The
truncation default of every entry point that encodes is [`resolve_max_length`]'s: all the encoder takes. Token states
become one vector per sentence by [`pool_tokens`] (padded rows; the point-encoder baselines too) or
[`pool_packed_tokens`] (packed rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer
from transformers.utils import logging

from .configuration_gausscse import TOKEN_POOLINGS
from .gaussian import GaussianEmbeddings
from .onnx_gausscse import ONNX_FILE

# The encoders whose position ids GaussCSE knows, by config.model_type → where a sentence's position ids start: "zero"
# (BERT) or "after_padding", at pad_token_id + 1 (RoBERTa and the encoders built on its embeddings: XLM-R, CamemBERT).
# The one table of both readers: position_offset (so the truncation limit, max_position_embeddings − offset) and
# packing (gausscse.training.batch), which writes each packed sentence's position ids itself and so packs only the
# encoders listed here, not relative (DeBERTa), rotary (ModernBERT) or unknown position schemes. Each entry is tested
# packed = padded (tests/test_packing.py); an encoder not listed starts at 0 for the limit.
ENCODER_POSITIONS = {
    "bert": "zero",
    "roberta": "after_padding",
    "xlm-roberta": "after_padding",
    "camembert": "after_padding",
}
FALLBACK_MAX_LENGTH = 512  # for an encoder that states no limit
# The truncation default of every entry point that encodes sentences: encode(), the sentence-transformers module,
# gausscse-evaluate (and its point-encoder baselines), the SNLI-dev evaluator of training (--eval_max_seq_length),
# gausscse-search. None = all the encoder takes, capped at its limit (resolve_max_length). Training itself truncates
# at --max_seq_length (gausscse.data.tokenize.TRAIN_MAX_LENGTH, the paper's 32) instead.
DEFAULT_MAX_LENGTH: int | None = None
# What runs the forward pass of encode(): PyTorch, or ONNX Runtime on the folder's exported graph (onnx_gausscse.py)
ENCODE_BACKENDS = ("torch", "onnx")

logger = logging.get_logger(__name__)


def pool_tokens(last_hidden_state: torch.Tensor, attention_mask: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """``(B, L, h)`` token states → ``(B, h)``: the first token ``h[:, 0]`` (``cls``: [CLS] / ``<s>``), the masked
    mean Σ_t m_t h_t / Σ_t m_t (``mean``) or the masked max over tokens (``max``); no mask means every token."""
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
    """Pool packed rows: v_s = the first token of sentence s (``cls``) or the mean of its tokens (``mean``).

    ``sentence_index`` ``(R, L)``: the sentence of each token, −1 for padding; sentences are contiguous runs.
    Returns ``(S, hidden)`` with S = max index + 1.
    """
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
    """Right-pad token-id lists into ``input_ids``/``attention_mask`` (and all-zero ``token_type_ids``) tensors of
    the longest length, as the tokenizer's own padding would."""
    length = max(len(ids) for ids in token_ids)
    input_ids = torch.full((len(token_ids), length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
    features = {"input_ids": input_ids, "attention_mask": attention_mask}
    if token_type_ids:
        features["token_type_ids"] = torch.zeros_like(input_ids)
    return features


def position_offset(encoder_config) -> int:
    """The first position id of a sentence (``ENCODER_POSITIONS``): ``pad_token_id + 1`` for RoBERTa-style encoders,
    else 0."""
    after_padding = ENCODER_POSITIONS.get(encoder_config.model_type) == "after_padding"
    return encoder_config.pad_token_id + 1 if after_padding else 0


def resolve_max_length(tokenizer, encoder_config=None, requested: int | None = None) -> int:
    """The one truncation policy: ``requested`` tokens (default: all the encoder takes), capped at the encoder's
    limit = min(tokenizer.model_max_length, max_position_embeddings − position offset)."""
    limits = []
    if tokenizer is not None and tokenizer.model_max_length < 1_000_000:  # "no limit" is a huge sentinel
        limits.append(int(tokenizer.model_max_length))
    if getattr(encoder_config, "max_position_embeddings", None):
        limits.append(encoder_config.max_position_embeddings - position_offset(encoder_config))
    limit = min(limits) if limits else FALLBACK_MAX_LENGTH
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


def model_tokenizer(model, tokenizer=None):
    """The tokenizer to use (``GaussCSEModel.get_tokenizer``): ``tokenizer`` if given, else the one saved in the
    model's own folder / Hub repo. The model keeps it."""
    if tokenizer is not None:
        model._tokenizer = tokenizer
    if model._tokenizer is None:
        if not model.name_or_path:
            raise ValueError("This model has no folder to load a tokenizer from: pass tokenizer=... to encode()")
        try:
            # config=: without it AutoTokenizer reloads this config and, the model type being registered by no
            # one in a process that only ran this folder's code, would ask for trust_remote_code again
            model._tokenizer = AutoTokenizer.from_pretrained(
                model.name_or_path, config=model.config, trust_remote_code=False
            )
        except (OSError, ValueError) as error:
            raise ValueError(f"No tokenizer found at {model.name_or_path!r}: pass tokenizer=... to encode()") from error
    return model._tokenizer


def save_model_tokenizer(model, folder: Path) -> None:
    """Save the model's tokenizer ([`model_tokenizer`]) into ``folder``; a warning where it has none."""
    try:
        tokenizer = model.get_tokenizer()
    except ValueError as error:
        logger.warning(
            f"Saved {folder} without a tokenizer ({error}); readers cannot encode with it until one is saved "
            "beside the weights: call model.get_tokenizer(tokenizer) before save_pretrained"
        )
        return
    tokenizer.save_pretrained(folder)


@torch.inference_mode()
def encode_sentences(
    model,
    sentences: str | Sequence[str],
    batch_size: int = 32,
    tokenizer=None,
    device: str | torch.device | None = None,
    show_progress_bar: bool = False,
    max_length: int | None = DEFAULT_MAX_LENGTH,
    output_device: str | torch.device | None = "cpu",
    backend: str = "torch",
    onnx_file: str = ONNX_FILE,
) -> GaussianEmbeddings:
    """Encode sentences into Gaussians N(μ, diag σ²), returned as float32 tensors in input order
    (``GaussCSEModel.encode``; ``model`` is the model).

    Every sentence is tokenised once, in one call (a fast tokenizer spreads it over threads); the token ids are
    then sorted by length so each batch pads little, padded per batch, and the results put back in input order.

    Args:
        sentences: a string or a list of strings. A single string gives 1-D ``mu``/``logvar``.
        batch_size: sentences per forward pass.
        tokenizer: defaults to the tokenizer saved with the model.
        device: where to run (the model is moved there); defaults to the model's device.
        show_progress_bar: show a tqdm bar over batches.
        max_length: truncation length in tokens; defaults to (and is capped at) the encoder's limit
            ([`resolve_max_length`]).
        output_device: where the returned tensors live: ``"cpu"`` (default) or ``None`` for the model's device
            (no copy back, e.g. to feed a GPU search index).
        backend: ``"torch"`` (default) or ``"onnx"``: the forward pass runs in ONNX Runtime on the CPU, on the
            graph ``onnx_file`` of the model's folder ([`onnx_encoder`]); batching, order and the returned
            float32 tensors are the same.
        onnx_file: the graph for ``backend="onnx"``: ``"onnx/model.onnx"`` (float32, default) or
            ``"onnx/model_qint8.onnx"`` (int8 weights).
    """
    single = isinstance(sentences, str)
    sentences = check_sentences("sentences", [sentences] if single else sentences)
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    if backend not in ENCODE_BACKENDS:
        raise ValueError(f"backend must be one of {ENCODE_BACKENDS}, got {backend!r}")
    onnx_encoder = model.onnx_encoder(onnx_file) if backend == "onnx" else None
    if device is not None:
        model.to(device)
    tokenizer = model.get_tokenizer(tokenizer)
    max_length = resolve_max_length(tokenizer, model.config.encoder_config, max_length)
    output_device = model.device if output_device is None else torch.device(output_device)
    was_training = model.training
    model.eval()
    try:
        token_ids = tokenizer(sentences, truncation=True, max_length=max_length)["input_ids"] if sentences else []
        order = sorted(range(len(sentences)), key=lambda index: -len(token_ids[index]))
        with_token_types = "token_type_ids" in tokenizer.model_input_names
        mu = torch.empty(len(sentences), model.config.embedding_size, device=output_device)
        logvar = torch.empty_like(mu)
        for start in tqdm(
            range(0, len(order), batch_size), desc="Encoding", disable=not show_progress_bar, leave=False
        ):
            batch_indices = order[start : start + batch_size]
            features = pad_token_ids(
                [token_ids[index] for index in batch_indices], tokenizer.pad_token_id or 0, with_token_types
            )
            if onnx_encoder is None:
                output = model(**{name: tensor.to(model.device) for name, tensor in features.items()})
                batch_mu, batch_logvar = output.mu, output.logvar
            else:
                output = onnx_encoder(features)
                batch_mu, batch_logvar = output["mu"], output["logvar"]
            rows = torch.tensor(batch_indices, device=output_device)
            mu[rows] = batch_mu.float().to(output_device)
            logvar[rows] = batch_logvar.float().to(output_device)
    finally:
        model.train(was_training)  # restored even when encoding fails
    embeddings = GaussianEmbeddings(mu[0], logvar[0]) if single else GaussianEmbeddings(mu, logvar)
    return embeddings.check("encode(sentences)")


__all__ = [
    "DEFAULT_MAX_LENGTH",
    "ENCODER_POSITIONS",
    "check_sentences",
    "encode_sentences",
    "model_tokenizer",
    "pad_token_ids",
    "pool_packed_tokens",
    "pool_tokens",
    "position_offset",
    "resolve_max_length",
    "save_model_tokenizer",
]
