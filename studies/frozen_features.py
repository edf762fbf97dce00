"""A frozen backbone's pooled vectors of a set of sentences, computed once, and the encoders that score from them.

With the backbone frozen, the pooled vector v of a sentence is the same at every step of every run, so the study
(``studies/study.py``) computes it once per distinct sentence (:class:`BackboneFeatures`), trains the μ/σ² heads on
the cache (``studies/heads_only.py``) and scores them with the evaluation suite through two encoders of the
package's [`gausscse.evaluation.encoders.SentenceEncoder`] protocol: :class:`FrozenBackboneEncoder` (only the heads
run) and :class:`FeaturePointEncoder` (the untouched backbone as a point encoder).

The vectors come from the package's encoding loop, [`gausscse.evaluation.encoders.encode_hidden`] (the one
``PointEncoder`` runs), so a cached vector is the vector ``gausscse-evaluate --baseline`` would compute.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gausscse.evaluation.encoders import (
    DEFAULT_BATCH_SIZE,
    EncodedSentences,
    encode_hidden,
    index_of,
    rows_of,
    unique_sentences,
)
from gausscse.model.modeling_gausscse import GaussCSEModel


@dataclass
class BackboneFeatures:
    """A frozen backbone's pooled last hidden states of a set of distinct sentences, computed once.

    A GaussCSE model whose backbone is frozen maps each sentence to the same pooled vector v at every step and
    in every run, so its heads can be trained (``studies.heads_only``) and evaluated (:class:`FrozenBackboneEncoder`)
    from these vectors without running the backbone again.

    Attributes:
        index: sentence → row.
        pooled: ``{pooling: (N, h) float32}`` (``cls`` for the GaussCSE heads, ``mean`` for a sentence-transformers
            baseline such as all-MiniLM-L6-v2).
        max_length: the truncation length (tokens) the vectors were computed with.
    """

    index: dict[str, int]
    pooled: dict[str, torch.Tensor]
    max_length: int | None

    @classmethod
    def compute(
        cls,
        backbone: torch.nn.Module,
        tokenizer,
        sentences: Iterable[str],
        poolings: Sequence[str] = ("cls", "mean"),
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_length: int | None = None,
        show_progress_bar: bool = False,
    ) -> BackboneFeatures:
        """Run ``backbone`` (in eval mode: no dropout) once over the distinct ``sentences``."""
        distinct = unique_sentences(sentences)
        was_training = backbone.training
        backbone.eval()
        try:
            pooled = encode_hidden(
                backbone,
                tokenizer,
                distinct,
                poolings=poolings,
                batch_size=batch_size,
                max_length=max_length,
                show_progress_bar=show_progress_bar,
            )
        finally:
            backbone.train(was_training)
        return cls(index=index_of(distinct), pooled=pooled, max_length=max_length)

    def rows(self, sentences: Sequence[str]) -> torch.Tensor:
        """Row indices of ``sentences``; ``KeyError`` names the first one that is not cached."""
        return rows_of(self.index, sentences)

    def vectors(self, sentences: Sequence[str], pooling: str) -> torch.Tensor:
        """``(len(sentences), h)`` pooled vectors; ``KeyError`` for a pooling that was not computed."""
        if pooling not in self.pooled:
            raise KeyError(f"pooling {pooling!r} was not computed; cached: {sorted(self.pooled)}")
        return self.pooled[pooling][self.rows(sentences)]


class FrozenBackboneEncoder:
    """A GaussCSE model whose backbone is the one behind ``features``: only its μ/σ² heads run.

    Args:
        model: the GaussCSE model (its ``encoder`` must be the frozen backbone the features came from).
        features: the cached pooled vectors.
        name: label in reports.
        as_point: score with cos(μ_a, μ_b) only, as a point encoder (the supervised SimCSE baseline, whose
            variance head is not trained).
    """

    def __init__(
        self, model: GaussCSEModel, features: BackboneFeatures, name: str = "gausscse", as_point: bool = False
    ):
        self.model = model
        self.features = features
        self.name = name
        self.as_point = as_point

    @torch.no_grad()
    def encode_unique(self, sentences: Iterable[str], show_progress_bar: bool = False) -> EncodedSentences:
        """μ and log σ² of each distinct sentence from its cached pooled vector."""
        distinct = unique_sentences(sentences)
        pooled = self.features.vectors(distinct, self.model.config.pooling).to(self.model.device)
        mu, logvar = self.model.gaussian_heads(pooled)
        return EncodedSentences(
            index=index_of(distinct),
            mu=mu.float().cpu(),
            logvar=None if self.as_point else logvar.float().cpu(),
            reduction=None if self.as_point else self.model.config.similarity_reduction,
        )


class FeaturePointEncoder:
    """The untouched backbone as a point encoder from ``features``: pooled vector, optionally L2-normalised (for
    all-MiniLM-L6-v2: mean pooling and ``Normalize``, as its sentence-transformers folder says)."""

    def __init__(
        self, features: BackboneFeatures, pooling: str = "mean", normalize: bool = True, name: str = "backbone"
    ):
        self.features = features
        self.pooling = pooling
        self.normalize = normalize
        self.name = name

    def encode_unique(self, sentences: Iterable[str], show_progress_bar: bool = False) -> EncodedSentences:
        """The cached pooled vector of each distinct sentence."""
        distinct = unique_sentences(sentences)
        pooled = self.features.vectors(distinct, self.pooling)
        return EncodedSentences(
            index=index_of(distinct), mu=F.normalize(pooled, dim=-1) if self.normalize else pooled, logvar=None
        )


__all__ = ["BackboneFeatures", "FeaturePointEncoder", "FrozenBackboneEncoder"]
