"""GaussCSE: Gaussian sentence embeddings for asymmetric similarity and entailment direction.

The package, by layer (each imports only the ones above it):

* ``gausscse.model`` — ``GaussCSEConfig``, ``GaussCSEModel``, the Gaussian math (ships with the weights);
* ``gausscse.loading`` — ``load_model``: the one loader of saved folders, checkpoints, LoRA adapters and Hub ids;
* ``gausscse.data`` — the dataset registry, training data from files / the Hub / built-ins, tokenisation cache, the
  frozen-backbone feature cache;
* ``gausscse.training`` — arguments, batch layout and packing, losses, the Trainer, LoRA, output;
* ``gausscse.evaluation`` — the paper's NLI and direction protocol, STS, baselines, significance, reports;
* ``gausscse.search`` — ``GaussianIndex`` / ``SentenceIndex``: top-k entailment search in both directions, exact or
  through FAISS (approximate with HNSW);
* ``gausscse.cli`` — the ``gausscse-train`` / ``gausscse-evaluate`` / ``gausscse-search`` commands, which compose the
  layers;
* ``gausscse.demo`` — the Gradio demo app (``app.py`` at the repository root launches it).

Importing this package registers ``GaussCSEConfig``/``GaussCSEModel`` with ``AutoConfig``/``AutoModel``.
"""

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
