"""Sentence encoders behind one protocol (:meth:`SentenceEncoder.encode_unique`: each distinct sentence once, pairs
looked up in the :class:`EncodedSentences`): :class:`GaussianEncoder` (a GaussCSE model, scored by sim(a‖b) with its
``similarity_reduction``) and :class:`PointEncoder` (any ``AutoModel``, scored by the cosine, (cos + 1) / 2 for NLI)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModel, AutoTokenizer

from gausscse.loading import ModelLoadError, adapter_base_of, check_model_reference, load_model
from gausscse.model.backbone_gausscse import sentence_transformers_pooling
from gausscse.model.configuration_gausscse import TOKEN_POOLINGS
from gausscse.model.encoding_gausscse import length_sorted_batches, padded_batches, pool_tokens, resolve_max_length
from gausscse.model.gaussian import GaussianEmbeddings, paired_entailment_score, similarity
from gausscse.model.onnx_gausscse import ONNX_FILE

DEFAULT_BATCH_SIZE = 128
MODEL_ENCODE_OPTIONS = ("batch_size", "tokenizer", "max_length", "backend", "onnx_file")  # to GaussCSEModel.encode


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
    """Pooled last hidden states of an ``AutoModel`` encoder, ``{pooling: (N, h) float32}`` in the order of
    ``sentences``: each sentence tokenised once, batches sorted by token count, every pooling from one forward."""
    for pooling in poolings:  # checked before any work, also with no sentences
        if pooling not in TOKEN_POOLINGS:
            raise ValueError(f"pooling must be one of {TOKEN_POOLINGS}, got {pooling!r}")
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


@dataclass
class EncodedSentences:
    """Embeddings of distinct sentences looked up by text (``index``: sentence → row); ``mu`` ``(N, d)``: the means or
    point embeddings; ``logvar``, ``reduction``, ``search_kl_weight`` and ``entailment_cosine_weight`` (the model
    config's): ``None`` where the encoder has none."""

    index: dict[str, int]
    mu: torch.Tensor
    logvar: torch.Tensor | None
    reduction: str | None = None
    search_kl_weight: float | None = None
    entailment_cosine_weight: float | None = None

    @property
    def is_gaussian(self) -> bool:
        return self.logvar is not None

    def rows(self, sentences: Sequence[str]) -> torch.Tensor:
        return rows_of(self.index, sentences)

    def entailment_score(self, premises: Sequence[str], hypotheses: Sequence[str]) -> torch.Tensor:
        """Score in [0, 1] that premise_i entails hypothesis_i: the model's (``GaussCSEModel.entailment_score``), or
        (cos + 1) / 2 for a point encoder."""
        if not self.is_gaussian:
            return self.asymmetric_similarity(hypotheses, premises)
        hyp, pre = self.rows(hypotheses), self.rows(premises)
        gaussians = (self.mu[hyp], self.logvar[hyp], self.mu[pre], self.logvar[pre])
        return paired_entailment_score(*gaussians, self.reduction, self.entailment_cosine_weight)

    def asymmetric_similarity(self, a: Sequence[str], b: Sequence[str]) -> torch.Tensor:
        """Row-wise sim(a_i‖b_i), or (cos(a_i, b_i) + 1) / 2 for a point encoder."""
        rows_a, rows_b = self.rows(a), self.rows(b)
        if not self.is_gaussian:
            return (F.cosine_similarity(self.mu[rows_a], self.mu[rows_b], dim=-1) + 1.0) / 2.0
        return similarity(self.mu[rows_a], self.logvar[rows_a], self.mu[rows_b], self.logvar[rows_b], self.reduction)

    def symmetric_similarities(self, a: Sequence[str], b: Sequence[str]) -> dict[str, torch.Tensor]:
        """STS scores: ``cosine`` cos(μ_a, μ_b) and, Gaussian only, ``symmetric_kl`` ½ [sim(a‖b) + sim(b‖a)]."""
        scores = {"cosine": F.cosine_similarity(self.mu[self.rows(a)], self.mu[self.rows(b)], dim=-1)}
        if self.is_gaussian:
            scores["symmetric_kl"] = 0.5 * (self.asymmetric_similarity(a, b) + self.asymmetric_similarity(b, a))
        return scores

    def gaussians(self, sentences: Sequence[str]) -> GaussianEmbeddings:
        """The Gaussians of ``sentences``, in order; ``ValueError`` for a point encoder."""
        if not self.is_gaussian:
            raise ValueError("a point encoder has no variance: it has no Gaussians")
        rows = self.rows(sentences)
        return GaussianEmbeddings(self.mu[rows], self.logvar[rows])


class SentenceEncoder(Protocol):
    """Anything that turns sentences into :class:`EncodedSentences`, encoding each distinct one once."""

    name: str

    def encode_unique(self, sentences: Iterable[str], show_progress_bar: bool = False) -> EncodedSentences: ...


@dataclass(eq=False)
class GaussianEncoder:
    """A GaussCSE model (or a ``DistributedDataParallel`` around one; its train/eval mode is kept) as a
    :class:`SentenceEncoder`; ``bf16``: under bfloat16 autocast (the KL stays float32). A model whose config says
    ``point_embeddings`` (trained with the supervised SimCSE loss, which never trains σ²) is scored by cos(μ)."""

    model: Any
    tokenizer: Any = None
    batch_size: int = DEFAULT_BATCH_SIZE
    max_length: int | None = None
    bf16: bool = False
    name: str = "gausscse"
    backend: str = "torch"
    onnx_file: str = ONNX_FILE

    def __post_init__(self) -> None:
        self.model = getattr(self.model, "module", self.model)  # unwrap DistributedDataParallel

    def encode_unique(self, sentences: Iterable[str], show_progress_bar: bool = False) -> EncodedSentences:
        distinct = unique_sentences(sentences)
        options = {name: getattr(self, name) for name in MODEL_ENCODE_OPTIONS}
        with torch.autocast(self.model.device.type, dtype=torch.bfloat16) if self.bf16 else nullcontext():
            embeddings = self.model.encode(distinct, show_progress_bar=show_progress_bar, **options)
        return self.from_vectors(distinct, embeddings.mu, embeddings.logvar)

    def from_vectors(self, distinct: list[str], mu: torch.Tensor, logvar: torch.Tensor | None) -> EncodedSentences:
        """The :class:`EncodedSentences` of ``distinct`` from their vectors, scored as the model's config says now."""
        config = self.model.config
        if getattr(config, "point_embeddings", False):
            return EncodedSentences(index_of(distinct), mu, None)
        weights = [getattr(config, name, None) for name in ("search_kl_weight", "entailment_cosine_weight")]
        return EncodedSentences(index_of(distinct), mu, logvar, config.similarity_reduction, *weights)


@dataclass(eq=False)
class PointEncoder:
    """Any ``AutoModel`` (local folder or Hub id) as a point-embedding :class:`SentenceEncoder`; ``pooling`` and
    ``normalize`` override a sentence-transformers folder's own (default: mean pooling, no normalisation)."""

    name_or_path: str
    batch_size: int = DEFAULT_BATCH_SIZE
    max_length: int | None = None
    bf16: bool = False
    device: str = "cpu"
    pooling: str | None = None
    normalize: bool | None = None

    def __post_init__(self) -> None:
        folder_pooling, folder_normalize = sentence_transformers_pooling(self.name_or_path) or ("mean", False)
        self.pooling = self.pooling or folder_pooling
        if self.pooling not in TOKEN_POOLINGS:
            raise ValueError(f"pooling must be one of {TOKEN_POOLINGS}, got {self.pooling!r}")
        self.normalize = folder_normalize if self.normalize is None else self.normalize
        self.model = AutoModel.from_pretrained(self.name_or_path, trust_remote_code=False).to(self.device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(self.name_or_path, trust_remote_code=False)
        self.max_length = resolve_max_length(self.tokenizer, self.model.config, self.max_length)
        self.name = Path(self.name_or_path).name or str(self.name_or_path)

    @torch.inference_mode()
    def encode_unique(self, sentences: Iterable[str], show_progress_bar: bool = False) -> EncodedSentences:
        distinct = unique_sentences(sentences)
        options = {name: getattr(self, name) for name in ("batch_size", "max_length", "bf16")}
        options["show_progress_bar"] = show_progress_bar
        pooled = encode_hidden(self.model, self.tokenizer, distinct, (self.pooling,), **options)[self.pooling]
        return self.from_vectors(distinct, F.normalize(pooled, dim=-1) if self.normalize else pooled, None)

    def from_vectors(self, distinct: list[str], mu: torch.Tensor, logvar: None = None) -> EncodedSentences:
        """The :class:`EncodedSentences` of ``distinct`` from their (pooled, normalised) vectors."""
        return EncodedSentences(index_of(distinct), mu, None)


def load_encoder(
    name_or_path: str,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_length: int | None = None,
    bf16: bool = False,
    device: str = "cpu",
) -> SentenceEncoder:
    """A :class:`GaussianEncoder` for a saved GaussCSE model (scored as its config's ``point_embeddings`` says), else
    a :class:`PointEncoder`; ``name_or_path``: a local folder or Hub id."""
    try:
        check_model_reference(name_or_path)
        adapter = adapter_base_of(name_or_path) is not None  # a LoRA adapter: load_model loads and checks its base
        config = None if adapter else AutoConfig.from_pretrained(name_or_path, trust_remote_code=False)  # no code run
    except ModelLoadError as error:
        raise ValueError(f"--model/--baseline {error}") from None
    except (OSError, ValueError) as error:
        raise ValueError(f"--model/--baseline {name_or_path!r}: no loadable model config there ({error})") from error
    options = {"batch_size": batch_size, "max_length": max_length, "bf16": bf16}
    if config is not None and config.model_type != "gausscse":
        return PointEncoder(name_or_path, device=device, **options)
    model = load_model(name_or_path, device=device)
    name = Path(name_or_path).name or str(name_or_path)
    return GaussianEncoder(model, name=name, **options)
