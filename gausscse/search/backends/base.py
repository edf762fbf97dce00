"""The interface of a ``GaussianIndex`` search backend: which stored items each query is scored against, and what it
builds and saves for that. A new backend is one module with a subclass of [`SearchBackend`] and one import line in
``gausscse.search.backends`` (its classes in ``ENGINES``)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from gausscse.model.gaussian import GaussianEmbeddings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gausscse.search.index import GaussianIndex

HNSW_NEIGHBOURS = 32  # graph degree M of every engine's HNSW index (FAISS, Qdrant, Milvus)
HNSW_EF_CONSTRUCTION = 64


def engine_module(module: str, package: str) -> Any:
    """``module`` of a search engine, imported on use; ``ImportError`` naming the ``package`` to install."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"this backend needs {module}: pip install {package}") from error


class SearchBackend:
    """Where the shortlists of one [`GaussianIndex`] come from (``index.engine``); every hook's default suits a
    backend that builds nothing. ``name``: the ``backend=`` string; ``database``: the Gaussians and sentences live in a
    database at the ``uri`` option (a ``DatabaseBackend``); ``cpu_only``: no other device."""

    name: ClassVar[str]
    database: ClassVar[bool] = False
    cpu_only: ClassVar[bool] = True

    def __init__(self, index: GaussianIndex, options: dict[str, Any]) -> None:
        """``options``: the index's ``uri``, ``nprobes`` and ``table`` (checked by the index)."""
        self.index = index

    def settings(self) -> dict[str, Any]:
        """What this backend adds to the index's ``index_config.json``."""
        return {}

    def add(self, embeddings: GaussianEmbeddings, sentences: Sequence[str] | None) -> None:
        """Store checked ``embeddings`` (ids from ``len(index)`` on); only a database backend keeps ``sentences``."""
        if sentences is not None:
            stores = "the database backends (LanceDB, Qdrant, Milvus, pgvector)"
            raise ValueError(f"sentences are stored by {stores}, not {self.name!r}")
        first_id = len(self.index)
        self.index.store(embeddings)
        self.added(embeddings, first_id)

    def size(self) -> int:
        """How many Gaussians the index holds (an in-process backend: its in-memory copy)."""
        return self.index.mu.shape[0]

    def stored(self) -> GaussianEmbeddings:
        """All stored Gaussians in id order."""
        return GaussianEmbeddings(self.index.mu, self.index.logvar)

    def gaussians(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(μ, log σ²)`` of the stored items ``ids`` (any shape of valid ids), each of shape ``(*ids.shape, d)``."""
        return self.index.mu[ids], self.index.logvar[ids]

    def added(self, embeddings: GaussianEmbeddings, first_id: int) -> None:
        """``embeddings`` were stored with ids from ``first_id`` on: extend what was built."""

    def sync(self) -> None:
        """Read what other handles of a shared database wrote; called before each search."""

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str) -> torch.Tensor | None:
        """``(Q, C)`` ids to score per query (−1: none), about ``count``; ``None``: score every stored item."""
        return None

    def write_files(self, folder: Path) -> None:
        """Write what this backend built into the index's saved ``folder``."""

    def read_files(self, folder: Path, files: dict[str, bytes]) -> None:
        """Take back what [`write_files`] wrote (``{name: bytes}``), checked against the loaded Gaussians."""
