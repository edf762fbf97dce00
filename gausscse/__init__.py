"""GaussCSE: Gaussian sentence embeddings for asymmetric similarity and entailment direction (layout: CONTRIBUTING.md).
Importing it registers ``GaussCSEConfig``/``GaussCSEModel`` with ``AutoConfig``/``AutoModel``."""

__version__ = "0.2.0.dev0"  # the one place the version is written (pyproject.toml reads it)

from .model import *  # noqa: F403 — the public API is the model's
from .model import __all__ as _model_api

SEARCH_API = ("GaussianIndex", "SentenceIndex")
SENTENCE_TRANSFORMERS_API = ("GaussCSESentenceTransformer",)  # not in __all__: needs the [st] extra
__all__ = [*_model_api, *SEARCH_API, "__version__"]


def __getattr__(name: str):
    """``gausscse.GaussianIndex`` / ``gausscse.SentenceIndex`` (``gausscse.search``) and
    ``gausscse.GaussCSESentenceTransformer`` (needs sentence-transformers), imported on first use."""
    if name in SEARCH_API:
        from . import search

        return getattr(search, name)
    if name in SENTENCE_TRANSFORMERS_API:
        from .model.sentence_transformer_gausscse import GaussCSESentenceTransformer

        return GaussCSESentenceTransformer
    raise AttributeError(f"module 'gausscse' has no attribute {name!r}")
