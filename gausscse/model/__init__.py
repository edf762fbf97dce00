"""The model: ``GaussCSEConfig``, ``GaussCSEModel`` and the Gaussian math. The files of ``SHIPPED_FILES`` ship with the
weights as Hub custom code: they import only torch, transformers (optional libraries lazily) and each other."""

from transformers import AutoConfig, AutoModel

from .configuration_gausscse import MEAN_ACTIVATIONS, POOLINGS, TOKEN_POOLINGS, GaussCSEConfig
from .encoding_gausscse import pool_tokens, position_offset, resolve_max_length
from .gaussian import (
    KL_REDUCTIONS,
    REDUCTIONS,
    GaussianEmbeddings,
    kl_divergence,
    kl_divergence_matrix,
    kl_feature_map,
    kl_per_dim,
    kl_scale,
    similarity,
    similarity_matrix,
)
from .modeling_gausscse import EntailmentDirection, GaussCSEModel, GaussCSEOutput

# the installed package, not a folder's remote code, registers the model type with the Auto classes
AutoConfig.register(GaussCSEConfig.model_type, GaussCSEConfig, exist_ok=True)
AutoModel.register(GaussCSEConfig, GaussCSEModel, exist_ok=True)

__all__ = [
    "KL_REDUCTIONS",
    "MEAN_ACTIVATIONS",
    "POOLINGS",
    "REDUCTIONS",
    "TOKEN_POOLINGS",
    "EntailmentDirection",
    "GaussCSEConfig",
    "GaussCSEModel",
    "GaussCSEOutput",
    "GaussianEmbeddings",
    "kl_divergence",
    "kl_divergence_matrix",
    "kl_feature_map",
    "kl_per_dim",
    "kl_scale",
    "pool_tokens",
    "position_offset",
    "resolve_max_length",
    "similarity",
    "similarity_matrix",
]
