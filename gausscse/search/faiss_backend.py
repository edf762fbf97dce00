"""The FAISS side of ``GaussianIndex``: one FAISS index per search direction over ``kl_feature_map`` vectors.

Exact (``"faiss"``): ``IndexFlatIP`` over the stored maps; a query's map is negated so that the inner product is
−KL and the largest inner products are the highest ``sum`` similarities.

Approximate (``"faiss-hnsw"``): a graph index does poorly on raw inner products whose vectors differ wildly in norm
(1/σ² spans e^±10), so the maximum-inner-product search is turned into a nearest-neighbour search (Bachrach et al.,
2014) before it is handed to an L2 HNSW graph:

1. the stored column that is the same for every item (the ``1`` of B, the ``½`` of A) only adds a per-query
   constant: dropped, the ranking is unchanged;
2. each column j is divided by its spread s_j over the stored items and the query's multiplied by it
   (⟨q·s, x/s⟩ = ⟨q, x⟩), so no column dominates the geometry;
3. stored vectors get one more coordinate √(R² − ‖x‖²) (R² the largest ‖x‖² at build time), queries a 0:
   ‖q − x‖² = ‖q‖² + R² − 2⟨q, x⟩, so the nearest stored vectors are those with the largest inner product.

An item added later with ‖x‖² > R² would break step 3: the approximate index is then rebuilt at the next query.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from gausscse.model.gaussian import SEARCH_DIRECTIONS, GaussianEmbeddings, kl_feature_map

EXACT, HNSW = "faiss", "faiss-hnsw"
HNSW_NEIGHBOURS = 32  # graph degree M
HNSW_EF_CONSTRUCTION = 64
FEATURE_CHUNK = 65536  # rows of float64 feature maps computed at a time


def faiss_module():
    """FAISS, imported where a FAISS backend is used (``pip install faiss-cpu``)."""
    try:
        import faiss
    except ImportError as error:  # pragma: no cover - faiss-cpu is in the requirements
        raise ImportError("the FAISS backends need faiss: pip install faiss-cpu") from error
    return faiss


def feature_vectors(embeddings: GaussianEmbeddings, side: str, negate: bool = False) -> np.ndarray:
    """``kl_feature_map`` vectors as a float32 C-contiguous array ``(N, 2d + 2)``; ``negate`` for queries, so that
    ⟨query, stored⟩ = −KL. The float64 maps are computed ``FEATURE_CHUNK`` rows at a time."""
    mu, logvar = embeddings.mu.cpu(), embeddings.logvar.cpu()
    vectors = np.empty((len(mu), 2 * mu.shape[1] + 2), dtype=np.float32)
    for start in range(0, len(mu), FEATURE_CHUNK):
        chunk = kl_feature_map(mu[start : start + FEATURE_CHUNK], logvar[start : start + FEATURE_CHUNK], side)
        vectors[start : start + FEATURE_CHUNK] = (-chunk if negate else chunk).float().numpy()
    return vectors


def constant_column(direction: str, dim: int) -> int:
    """The stored map's column that is the same for every item: B's trailing 1 or A's ½ at position 2d."""
    return 2 * dim + 1 if SEARCH_DIRECTIONS[direction][1] == "right" else 2 * dim


def lifted(scaled: np.ndarray, norms: np.ndarray, transform: dict[str, np.ndarray]) -> np.ndarray:
    """Step 3 of the module docstring for stored vectors already scaled (step 2), with their squared norms: append
    √(R² − ‖x‖²), clamped at 0."""
    lift = np.sqrt(np.maximum(transform["radius2"] - norms, 0.0))
    return np.ascontiguousarray(np.hstack([scaled, lift[:, None]]), dtype=np.float32)


class FaissDirection:
    """The FAISS index of one direction (``"entailing"`` or ``"entailed_by"``) and, for the approximate backends,
    the inner-product-to-L2 transform fitted on the vectors it was built from."""

    def __init__(self, backend: str, direction: str, dim: int, faiss_index: Any, transform: dict[str, np.ndarray]):
        self.backend, self.direction, self.dim = backend, direction, dim
        self.faiss_index = faiss_index
        self.transform = transform  # {"keep": columns, "scale": s_j, "radius2": R²}; empty for the exact backend

    @classmethod
    def build(cls, backend: str, direction: str, embeddings: GaussianEmbeddings, ef_search: int) -> FaissDirection:
        """Index ``embeddings`` (the stored Gaussians) for ``direction``; ``ef_search``: HNSW candidates explored
        per query."""
        faiss = faiss_module()
        dim = embeddings.dim
        vectors = feature_vectors(embeddings, SEARCH_DIRECTIONS[direction][1])
        if backend == EXACT:
            faiss_index = faiss.IndexFlatIP(vectors.shape[1])
            faiss_index.add(vectors)
            return cls(backend, direction, dim, faiss_index, {})
        keep = np.array([column for column in range(vectors.shape[1]) if column != constant_column(direction, dim)])
        kept = vectors[:, keep]  # a copy: the full maps can go
        del vectors
        scale = kept.std(axis=0).astype(np.float32) + np.float32(1e-6)
        scaled = np.divide(kept, scale, out=kept)
        norms = (scaled**2).sum(axis=1)
        transform = {"keep": keep, "scale": scale, "radius2": np.array([norms.max()], dtype=np.float32)}
        stored = lifted(scaled, norms, transform)
        faiss_index = faiss.IndexHNSWFlat(stored.shape[1], HNSW_NEIGHBOURS)
        faiss_index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        faiss_index.add(stored)
        built = cls(backend, direction, dim, faiss_index, transform)
        built.faiss_index.hnsw.efSearch = ef_search
        return built

    def try_add(self, embeddings: GaussianEmbeddings) -> bool:
        """Append stored items; ``False`` (nothing added) when one falls outside the approximate index's transform
        (‖x‖² > R²): the index must then be rebuilt."""
        vectors = feature_vectors(embeddings, SEARCH_DIRECTIONS[self.direction][1])
        if self.transform:
            scaled = vectors[:, self.transform["keep"]] / self.transform["scale"]
            norms = (scaled**2).sum(axis=1)
            if (norms > self.transform["radius2"][0]).any():
                return False
            vectors = lifted(scaled, norms, self.transform)
        self.faiss_index.add(vectors)
        return True

    def candidates(self, queries: GaussianEmbeddings, count: int) -> torch.Tensor:
        """``(Q, count)`` ids of the stored items FAISS ranks first for each query (−1 where it found fewer)."""
        vectors = feature_vectors(queries, SEARCH_DIRECTIONS[self.direction][0], negate=True)
        if self.transform:
            scaled = vectors[:, self.transform["keep"]] * self.transform["scale"]
            vectors = np.ascontiguousarray(np.hstack([scaled, np.zeros((len(scaled), 1), np.float32)]))
        _, ids = self.faiss_index.search(vectors, count)
        return torch.from_numpy(ids)

    def save(self, folder: Path) -> None:
        """``<direction>.faiss`` (FAISS's own format) and, if any, ``<direction>.transform.safetensors``."""
        faiss_module().write_index(self.faiss_index, str(folder / f"{self.direction}.faiss"))
        if self.transform:
            save_file(self.transform, str(folder / f"{self.direction}.transform.safetensors"))

    @classmethod
    def load(cls, backend: str, direction: str, dim: int, folder: Path, ef_search: int) -> FaissDirection | None:
        """The direction saved in ``folder`` by [`save`], or ``None`` if it was never built."""
        path = folder / f"{direction}.faiss"
        if not path.is_file():
            return None
        transform_path = folder / f"{direction}.transform.safetensors"
        transform = load_file(str(transform_path)) if backend != EXACT else {}
        loaded = cls(backend, direction, dim, faiss_module().read_index(str(path)), transform)
        if backend == HNSW:
            loaded.faiss_index.hnsw.efSearch = ef_search
        return loaded


__all__ = ["EXACT", "HNSW", "FaissDirection", "feature_vectors"]
