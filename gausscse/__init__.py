"""GaussCSE: Gaussian sentence embeddings for asymmetric similarity and entailment direction.

Importing this package registers ``GaussCSEConfig``/``GaussCSEModel`` with ``AutoConfig``/``AutoModel``.
"""

from .configuration_gausscse import GaussCSEConfig
from .gaussian import (
    GaussianEmbeddings,
    kl_divergence,
    kl_per_dim,
    pairwise_kl_divergence,
    pairwise_similarity,
    similarity,
)
from .modeling_gausscse import EntailmentDirection, GaussCSEModel, GaussCSEOutput

__all__ = [
    "EntailmentDirection",
    "GaussCSEConfig",
    "GaussCSEModel",
    "GaussCSEOutput",
    "GaussianEmbeddings",
    "kl_divergence",
    "kl_per_dim",
    "pairwise_kl_divergence",
    "pairwise_similarity",
    "similarity",
]
