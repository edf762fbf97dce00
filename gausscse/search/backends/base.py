"""The interface every search backend of ``GaussianIndex`` implements.

A [`GaussianIndex`] keeps the stored Gaussians in memory (id order), checks every input and scores exactly; its
backend decides which stored items each query is scored against (a shortlist, or all of them), and keeps and saves
whatever structure it builds for that (FAISS files, a database). A new backend is one module with a subclass of
[`SearchBackend`] and one line in ``gausscse.search.backends.BACKENDS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from gausscse.model.gaussian import GaussianEmbeddings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gausscse.search.index import GaussianIndex


def database_backends_phrase() -> str:
    """What the ``uri`` option is, per database engine: "uri (the LanceDB database folder) is for backend 'lancedb' or
    'lancedb-ann'; uri (...) for backend 'qdrant' or ..." (from the registry)."""
    from gausscse.search.backends import BACKENDS

    groups: dict[str, list[str]] = {}
    for name, backend in BACKENDS.items():
        if backend.database:
            groups.setdefault(backend.store_class.place, []).append(repr(name))
    phrases = [f"uri ({place}) is for backend {' or '.join(names)}" for place, names in groups.items()]
    return "; ".join([phrases[0], *(phrase.replace(" is for ", " for ") for phrase in phrases[1:])])


class SearchBackend:
    """Where the shortlists of one [`GaussianIndex`] come from (``index.engine``).

    Class attributes: ``name`` (the ``backend=`` string), ``database`` (the Gaussians and sentences live in a
    database at the ``uri`` option, which [`open`] reopens; the index's own folder then holds only its settings),
    ``cpu_only`` (no ``device`` other than the CPU). Every hook below has a default that suits a backend that
    builds nothing."""

    name: ClassVar[str]
    database: ClassVar[bool] = False
    cpu_only: ClassVar[bool] = True

    def __init__(self, index: GaussianIndex, options: dict[str, Any]) -> None:
        """``options``: the index's ``ef_search``, ``uri`` and ``nprobes`` (each backend reads its own)."""
        self.index = index
        if (options.get("uri") is not None) != self.database:
            raise ValueError(
                f"{database_backends_phrase()}, and needed by them; backend={self.name!r}, uri={options.get('uri')!r}"
            )

    def settings(self) -> dict[str, Any]:
        """What this backend adds to the index's saved settings (``index_config.json``)."""
        return {}

    def add(self, embeddings: GaussianEmbeddings, sentences: Sequence[str] | None) -> None:
        """Store checked ``embeddings`` (ids from ``len(index)`` on) in the index and in whatever this backend built.
        Only a database backend keeps ``sentences``."""
        if sentences is not None:
            raise ValueError(
                f"sentences are stored by the LanceDB backends; backend {self.name!r} keeps Gaussians only "
                "(so do the Qdrant and Milvus backends; SentenceIndex keeps the sentences beside it)"
            )
        first_id = len(self.index)
        self.index.store(embeddings)
        self.added(embeddings, first_id)

    def added(self, embeddings: GaussianEmbeddings, first_id: int) -> None:
        """``embeddings`` were appended to the index with ids from ``first_id`` on: extend what was built."""

    def sync(self) -> None:
        """Bring the index up to date with what other handles wrote (a shared database); called before a search."""

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str) -> torch.Tensor | None:
        """``(Q, C)`` ids of the stored items to score for each query (−1: none), about ``count`` of them, or
        ``None`` to score every stored item."""
        return None

    def check_saved(self, settings: dict[str, Any], settings_file: Path) -> None:
        """``ValueError`` unless a saved index's ``settings`` (read from ``settings_file``) describe what this
        backend opened (``database`` backends: the same table)."""

    def write_files(self, folder: Path) -> None:
        """Write what this backend built into the index's saved ``folder`` (beside the Gaussians)."""

    def read_files(self, folder: Path, files: dict[str, bytes]) -> None:
        """Take back what [`write_files`] wrote (``files``: ``{name: bytes}`` read from ``folder``), checked against
        the index's Gaussians, which are already loaded."""

    @classmethod
    def holds_index(cls, uri: str | Path) -> bool:
        """Whether the database at ``uri`` already holds an index (``database`` backends)."""
        return False

    @classmethod
    def check_new_place(cls, uri: str | Path) -> None:
        """``FileExistsError`` unless a new database can be made at ``uri`` (``database`` backends)."""

    @classmethod
    def open(cls, uri: str | Path) -> GaussianIndex:
        """The index stored in the database at ``uri`` (``database`` backends)."""
        raise NotImplementedError(f"backend {cls.name!r} keeps no database to open")


__all__ = ["SearchBackend"]
