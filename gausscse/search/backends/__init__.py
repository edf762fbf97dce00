"""The search backends of ``GaussianIndex``, by the name ``backend=`` takes: one module per engine, one line each
here (``base.SearchBackend`` is the interface)."""

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

__all__ = ["BACKENDS", "SearchBackend"]
