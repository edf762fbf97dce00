"""The search backends of ``GaussianIndex`` by their ``backend=`` name: one module per engine, one line each here."""

from .base import SearchBackend
from .exact import ExactScan
from .faiss_backend import FaissFlat, FaissHnsw
from .lancedb_backend import LanceAnn, LanceFlat
from .milvus_backend import MilvusFlat, MilvusHnsw
from .qdrant_backend import QdrantFlat, QdrantHnsw

BACKENDS: dict[str, type[SearchBackend]] = {
    backend.name: backend
    for backend in (
        ExactScan,
        FaissFlat,
        FaissHnsw,
        LanceFlat,
        LanceAnn,
        QdrantFlat,
        QdrantHnsw,
        MilvusFlat,
        MilvusHnsw,
    )
}


def database_groups(attribute: str) -> dict[str, list[str]]:
    """The database backends' names grouped by an attribute of their store (``place``, ``kind``), in registry order."""
    groups: dict[str, list[str]] = {}
    for name, backend in BACKENDS.items():
        if backend.database:
            groups.setdefault(getattr(backend.store_class, attribute), []).append(name)
    return groups


__all__ = ["BACKENDS", "SearchBackend"]
