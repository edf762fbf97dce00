"""The search backends of ``GaussianIndex`` by their ``backend=`` name: one module per engine, its classes here."""

from .base import SearchBackend
from .exact import ExactScan
from .faiss_backend import FaissFlat, FaissHnsw
from .lancedb_backend import LanceAnn, LanceFlat
from .milvus_backend import MilvusFlat, MilvusHnsw
from .pgvector_backend import PgvectorFlat, PgvectorHnsw
from .qdrant_backend import QdrantFlat, QdrantHnsw

ENGINES = (
    *(ExactScan, FaissFlat, FaissHnsw, LanceFlat, LanceAnn, QdrantFlat, QdrantHnsw, MilvusFlat, MilvusHnsw),
    *(PgvectorFlat, PgvectorHnsw),
)
BACKENDS: dict[str, type[SearchBackend]] = {backend.name: backend for backend in ENGINES}


def uri_usage() -> str:
    """What the ``uri`` option is for each database backend: "uri (the LanceDB database folder) is for backend
    'lancedb' or 'lancedb-ann'; ..."."""
    places: dict[str, list[str]] = {}
    for name, backend in BACKENDS.items():
        if backend.database:
            places.setdefault(backend.store_class.place, []).append(repr(name))
    return "; ".join(f"uri ({place}) is for backend {' or '.join(names)}" for place, names in places.items())


__all__ = ["BACKENDS", "SearchBackend"]
