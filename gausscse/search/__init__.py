"""Entailment search over many Gaussians: ``GaussianIndex`` (stored Gaussians; ``entailing`` / ``entailed_by``, exact
or through FAISS or a vector database, always re-scored exactly), ``SentenceIndex`` (with the sentences and the
model; the command line is ``gausscse-search``) and ``encode_on_ray`` (a corpus encoded on a Ray cluster)."""

from .backends import BACKENDS
from .corpus import Hit, ModelMismatchError, SentenceIndex, model_fingerprint
from .index import GaussianIndex
from .ray_encode import GaussianEncoder, encode_on_ray

__all__ = [
    "BACKENDS",
    "GaussianEncoder",
    "GaussianIndex",
    "Hit",
    "ModelMismatchError",
    "SentenceIndex",
    "encode_on_ray",
    "model_fingerprint",
]
