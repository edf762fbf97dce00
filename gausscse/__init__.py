"""GaussCSE: Gaussian sentence embeddings for asymmetric similarity and entailment direction (layout: CONTRIBUTING.md).
Importing it registers ``GaussCSEConfig``/``GaussCSEModel`` with ``AutoConfig``/``AutoModel``."""

__version__ = "0.2.0.dev0"  # the one place the version is written (pyproject.toml reads it)

from .model import *  # noqa: F403 — the public API is the model's
from .model import __all__ as _model_api

SEARCH_API = ("GaussianIndex", "SentenceIndex")
__all__ = [*_model_api, *SEARCH_API, "__version__"]


def __getattr__(name: str):
    """``gausscse.GaussianIndex`` / ``gausscse.SentenceIndex``, imported on first use (``gausscse.search``)."""
    if name in SEARCH_API:
        from . import search

        return getattr(search, name)
    raise AttributeError(f"module 'gausscse' has no attribute {name!r}")
