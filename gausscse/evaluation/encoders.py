"""Sentence encoders behind one small protocol, and the per-run cache of unique-sentence embeddings.

* :class:`GaussianEncoder` wraps a :class:`gausscse.GaussCSEModel`: each sentence is N(μ, diag σ²); the
  asymmetric score is sim(a‖b) = 1/(1 + KL(N_a‖N_b)) with the model's ``similarity_reduction``.
* :class:`PointEncoder` wraps any ``AutoModel`` (e.g. the packaged all-MiniLM-L6-v2, a SimCSE checkpoint): the
  pooling and normalisation of a sentence-transformers folder are honoured (``1_Pooling/config.json``,
  a ``Normalize`` module in ``modules.json``), otherwise mean pooling. Its only score is the cosine, mapped to
  the NLI threshold grid [0, 1] as (cos + 1) / 2; it has no variance, so direction rules do not apply.

Every task asks an encoder once for the set of all its sentences (:meth:`SentenceEncoder.encode_unique`)
and then looks pairs up in the returned :class:`EncodedSentences`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModel, AutoTokenizer

from gausscse.evaluation.encoding import DEFAULT_BATCH_SIZE, encode_hidden, index_of, rows_of, unique_sentences
from gausscse.loading import ModelLoadError, check_model_reference, load_model
from gausscse.model.backbone_gausscse import sentence_transformers_pooling
from gausscse.model.configuration_gausscse import TOKEN_POOLINGS
from gausscse.model.encoding_gausscse import resolve_max_length
from gausscse.model.gaussian import similarity
from gausscse.model.modeling_gausscse import GaussCSEModel
from gausscse.model.onnx_gausscse import ONNX_FILE


@dataclass
class EncodedSentences:
    """Embeddings of a set of unique sentences, looked up by text.

    Attributes:
        index: sentence → row.
        mu: ``(N, d)`` float32: the Gaussian means, or the point embeddings.
        logvar: ``(N, d)`` float32 log σ², or ``None`` for a point encoder.
        reduction: the Gaussian similarity reduction (``"sum"``/``"mean_kl"``/``"mean_dim"``), ``None`` for a point
            encoder.
        search_kl_weight: the model's λ of its search score (``GaussCSEConfig.search_kl_weight``), ``None`` if it
            states none.
    """

    index: dict[str, int]
    mu: torch.Tensor
    logvar: torch.Tensor | None
    reduction: str | None = None
    search_kl_weight: float | None = None

    @property
    def is_gaussian(self) -> bool:
        """Whether the embeddings carry a variance (asymmetric similarity, direction rules)."""
        return self.logvar is not None

    def rows(self, sentences: Sequence[str]) -> torch.Tensor:
        """Row indices of ``sentences``; ``KeyError`` names the first sentence that was not encoded."""
        return rows_of(self.index, sentences)

    def entailment_score(self, premises: Sequence[str], hypotheses: Sequence[str]) -> torch.Tensor:
        """Score in [0, 1] that premise_i entails hypothesis_i.

        Gaussian: sim(hyp‖pre) = 1/(1 + KL(N_hyp‖N_pre)). Point: (cos(hyp, pre) + 1) / 2.
        """
        return self.asymmetric_similarity(hypotheses, premises)

    def asymmetric_similarity(self, a: Sequence[str], b: Sequence[str]) -> torch.Tensor:
        """Row-wise sim(a_i‖b_i) (Gaussian) or (cos(a_i, b_i) + 1)/2 (point, symmetric)."""
        rows_a, rows_b = self.rows(a), self.rows(b)
        if not self.is_gaussian:
            return (F.cosine_similarity(self.mu[rows_a], self.mu[rows_b], dim=-1) + 1.0) / 2.0
        return similarity(
            self.mu[rows_a], self.logvar[rows_a], self.mu[rows_b], self.logvar[rows_b], reduction=self.reduction
        )

    def symmetric_similarities(self, a: Sequence[str], b: Sequence[str]) -> dict[str, torch.Tensor]:
        """Symmetric scores for STS, by name.

        ``cosine``: cos(μ_a, μ_b) (for a point encoder: of the embeddings).
        ``symmetric_kl`` (Gaussian only): ½ [sim(a‖b) + sim(b‖a)] with the model's reduction.
        """
        rows_a, rows_b = self.rows(a), self.rows(b)
        scores = {"cosine": F.cosine_similarity(self.mu[rows_a], self.mu[rows_b], dim=-1)}
        if self.is_gaussian:
            scores["symmetric_kl"] = 0.5 * (self.asymmetric_similarity(a, b) + self.asymmetric_similarity(b, a))
        return scores

    def generality(self, sentences: Sequence[str]) -> torch.Tensor:
        """Σ_k log σ_k² of each sentence (Gaussian only): larger for more general sentences."""
        if not self.is_gaussian:
            raise ValueError("a point encoder has no variance: generality is undefined")
        return self.logvar[self.rows(sentences)].sum(dim=-1)


class SentenceEncoder(Protocol):
    """Anything that turns a list of sentences into :class:`EncodedSentences`."""

    name: str

    def encode_unique(self, sentences: Iterable[str], show_progress_bar: bool = False) -> EncodedSentences:
        """Encode each distinct sentence of ``sentences`` once."""
        ...


class GaussianEncoder:
    """A :class:`GaussCSEModel` (training or loaded) as a :class:`SentenceEncoder`.

    Args:
        model: the model; it is left in the train/eval mode it had.
        tokenizer: defaults to the tokenizer saved with the model.
        batch_size, max_length: passed to ``model.encode``.
        bf16: run the encoder under CPU/GPU bfloat16 autocast (the KL is always computed in float32).
        name: label in reports.
        point: score by the cosine of μ, without the variance (a model trained with the supervised SimCSE loss,
            which never trains the σ² head).
        backend, onnx_file: passed to ``model.encode``: ``"onnx"`` runs the forward pass in ONNX Runtime on the
            model folder's graph ``onnx_file`` (``"onnx/model.onnx"``, or ``"onnx/model_qint8.onnx"`` for int8).
    """

    def __init__(
        self,
        model: GaussCSEModel,
        tokenizer=None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_length: int | None = None,
        bf16: bool = False,
        name: str = "gausscse",
        point: bool = False,
        backend: str = "torch",
        onnx_file: str = ONNX_FILE,
    ):
        self.model = getattr(model, "module", model)  # unwrap DistributedDataParallel
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.bf16 = bf16
        self.name = name
        self.point = point
        self.backend = backend
        self.onnx_file = onnx_file

    def encode_unique(self, sentences: Iterable[str], show_progress_bar: bool = False) -> EncodedSentences:
        """Encode each distinct sentence once with ``model.encode`` (token-sorted batches, no grad, mode restored)."""
        distinct = unique_sentences(sentences)
        autocast = torch.autocast(self.model.device.type, dtype=torch.bfloat16) if self.bf16 else nullcontext()
        with autocast:
            embeddings = self.model.encode(
                distinct,
                batch_size=self.batch_size,
                tokenizer=self.tokenizer,
                show_progress_bar=show_progress_bar,
                max_length=self.max_length,
                backend=self.backend,
                onnx_file=self.onnx_file,
            )
        return EncodedSentences(
            index=index_of(distinct),
            mu=embeddings.mu,
            logvar=None if self.point else embeddings.logvar,
            reduction=None if self.point else self.model.config.similarity_reduction,
            search_kl_weight=None if self.point else getattr(self.model.config, "search_kl_weight", None),
        )


class PointEncoder:
    """Any ``AutoModel`` encoder with ``cls``/``mean``/``max`` pooling as a point-embedding :class:`SentenceEncoder`.

    Args:
        name_or_path: a local folder or Hub id; a sentence-transformers folder's pooling and ``Normalize``
            are used, else mean pooling without normalisation (``pooling``/``normalize`` override both).
        batch_size, max_length: encoding batch size and truncation length in tokens.
        bf16: run under bfloat16 autocast.
        device: where to run (default CPU).
    """

    def __init__(
        self,
        name_or_path: str,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_length: int | None = None,
        bf16: bool = False,
        device: str = "cpu",
        pooling: str | None = None,
        normalize: bool | None = None,
    ):
        # a sentence-transformers model's own pooling and Normalize, else mean pooling without normalisation
        folder_pooling, folder_normalize = sentence_transformers_pooling(name_or_path) or ("mean", False)
        self.pooling = pooling or folder_pooling
        if self.pooling not in TOKEN_POOLINGS:
            raise ValueError(f"pooling must be one of {TOKEN_POOLINGS}, got {self.pooling!r}")
        self.normalize = folder_normalize if normalize is None else normalize
        self.model = AutoModel.from_pretrained(name_or_path, trust_remote_code=False).to(device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=False)
        self.batch_size = batch_size
        self.max_length = resolve_max_length(self.tokenizer, self.model.config, max_length)
        self.bf16 = bf16
        self.name = Path(name_or_path).name or str(name_or_path)

    @torch.inference_mode()
    def encode_unique(self, sentences: Iterable[str], show_progress_bar: bool = False) -> EncodedSentences:
        """Encode each distinct sentence once, in token-sorted batches."""
        distinct = unique_sentences(sentences)
        pooled = encode_hidden(
            self.model,
            self.tokenizer,
            distinct,
            poolings=(self.pooling,),
            batch_size=self.batch_size,
            max_length=self.max_length,
            bf16=self.bf16,
            show_progress_bar=show_progress_bar,
        )[self.pooling]
        return EncodedSentences(
            index=index_of(distinct), mu=F.normalize(pooled, dim=-1) if self.normalize else pooled, logvar=None
        )


def load_encoder(
    name_or_path: str,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_length: int | None = None,
    bf16: bool = False,
    device: str = "cpu",
) -> SentenceEncoder:
    """A :class:`GaussianEncoder` for a saved GaussCSE model (``model_type == "gausscse"``; scored by the cosine of μ
    when its config says it is a point encoder, ``point_embeddings``), else a :class:`PointEncoder`.
    ``name_or_path``: a local folder or Hub id."""
    name = Path(name_or_path).name or str(name_or_path)
    try:
        check_model_reference(name_or_path)
    except ModelLoadError as error:
        raise ValueError(f"--model/--baseline {error}") from None
    try:
        config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=False)  # never a folder's own code
    except (OSError, ValueError) as error:
        raise ValueError(f"--model/--baseline {name_or_path!r}: no loadable model config there ({error})") from error
    if config.model_type == "gausscse":
        model = load_model(name_or_path, device=device)
        point = model.config.point_embeddings
        return GaussianEncoder(model, batch_size=batch_size, max_length=max_length, bf16=bf16, name=name, point=point)
    return PointEncoder(name_or_path, batch_size=batch_size, max_length=max_length, bf16=bf16, device=device)
