"""The search backends of ``GaussianIndex``, by the name ``backend=`` takes: one module per engine, one line each
here (``base.SearchBackend`` is the interface)."""

from .base import SearchBackend
from .exact import ExactScan
from .faiss_backend import FaissFlat, FaissHnsw
from .lancedb_backend import LanceAnn, LanceFlat

BACKENDS: dict[str, type[SearchBackend]] = {
    backend.name: backend for backend in (ExactScan, FaissFlat, FaissHnsw, LanceFlat, LanceAnn)
}

__all__ = ["BACKENDS", "SearchBackend"]
