"""The FAISS side of ``GaussianIndex``: one FAISS index per search direction over ``kl_feature_map`` vectors.

Exact (``"faiss"``): ``IndexFlatIP`` over the stored maps; a query's map is negated so that the inner product is
−KL and the largest inner products are the highest ``sum`` similarities. Each query vector is scaled to unit length
in float64 before FAISS sees it (the ranking is unchanged), so a query with extreme variances cannot overflow
FAISS's float32 inner products.

Approximate (``"faiss-hnsw"``): the maximum-inner-product search becomes a nearest-neighbour search
(``gausscse.search.lift``: columns centred and rescaled, one coordinate added, a few extreme items kept out and put on
every shortlist) before it is handed to an L2 HNSW graph. An item added later with ‖x‖² > R² joins the outliers; past
``MAX_OUTLIERS`` the approximate index is rebuilt at the next query.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load, save_file

from gausscse.io import first_line
from gausscse.model.gaussian import SEARCH_DIRECTIONS, GaussianEmbeddings
from gausscse.search.lift import (
    MAX_OUTLIERS,
    feature_chunks,
    fit_lift,
    lifted,
    lifted_queries,
    scaled_vectors,
    unit_rows,
)

EXACT, HNSW = "faiss", "faiss-hnsw"
HNSW_NEIGHBOURS = 32  # graph degree M
HNSW_EF_CONSTRUCTION = 64


def faiss_module():
    """FAISS, imported where a FAISS backend is used (``pip install faiss-cpu``)."""
    try:
        import faiss
    except ImportError as error:  # pragma: no cover - faiss-cpu is in the requirements
        raise ImportError("the FAISS backends need faiss: pip install faiss-cpu") from error
    return faiss


def feature_vectors(embeddings: GaussianEmbeddings, side: str) -> np.ndarray:
    """``kl_feature_map`` vectors as a float32 C-contiguous array ``(N, 2d + 2)``."""
    vectors = np.empty((len(embeddings.mu), 2 * embeddings.dim + 2), dtype=np.float32)
    for start, chunk in feature_chunks(embeddings, side):
        vectors[start : start + len(chunk)] = chunk
    return vectors


class FaissDirection:
    """The FAISS index of one direction (``"entailing"`` or ``"entailed_by"``) and, for the approximate backends,
    the inner-product-to-L2 transform fitted on the vectors it was built from and the ids kept out of the graph."""

    def __init__(self, backend: str, direction: str, dim: int, faiss_index: Any, transform: dict[str, np.ndarray]):
        self.backend, self.direction, self.dim = backend, direction, dim
        self.faiss_index = faiss_index
        # {"keep": columns, "mean": m_j, "scale": s_j, "radius2": R², "outliers": ids}; empty for the exact backend
        self.transform = transform
        if transform:
            transform.setdefault("outliers", np.empty(0, dtype=np.int64))

    @property
    def size(self) -> int:
        """How many stored items this direction covers (graph + outliers)."""
        return int(self.faiss_index.ntotal) + len(self.transform.get("outliers", ()))

    @classmethod
    def build(cls, backend: str, direction: str, embeddings: GaussianEmbeddings, ef_search: int) -> FaissDirection:
        """Index ``embeddings`` (the stored Gaussians) for ``direction``; ``ef_search``: HNSW candidates explored
        per query."""
        faiss = faiss_module()
        dim, side = embeddings.dim, SEARCH_DIRECTIONS[direction][1]
        if backend == EXACT:
            vectors = feature_vectors(embeddings, side)
            faiss_index = faiss.IndexFlatIP(vectors.shape[1])
            faiss_index.add(vectors)
            return cls(backend, direction, dim, faiss_index, {})
        transform, inliers, vectors = fit_lift(embeddings, direction)
        faiss_index = faiss.IndexIDMap(faiss.IndexHNSWFlat(vectors.shape[1], HNSW_NEIGHBOURS))
        faiss.downcast_index(faiss_index.index).hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        faiss_index.add_with_ids(vectors, inliers)
        built = cls(backend, direction, dim, faiss_index, transform)
        built.set_ef_search(ef_search)
        return built

    def set_ef_search(self, ef_search: int) -> None:
        """HNSW candidates explored per query (approximate backend only)."""
        faiss = faiss_module()
        graph = self.faiss_index.index if isinstance(self.faiss_index, faiss.IndexIDMap) else self.faiss_index
        graph = faiss.downcast_index(graph)
        graph.hnsw.efSearch = ef_search

    def try_add(self, embeddings: GaussianEmbeddings, first_id: int) -> bool:
        """Append stored items with ids from ``first_id``; ``False`` (nothing added) when the approximate index must
        be rebuilt: more items fall outside its transform (‖x‖² > R²) than ``MAX_OUTLIERS`` allows."""
        side = SEARCH_DIRECTIONS[self.direction][1]
        if not self.transform:
            self.faiss_index.add(feature_vectors(embeddings, side))
            return True
        if not isinstance(self.faiss_index, faiss_module().IndexIDMap):  # a graph saved by gausscse < 0.2: rebuilt
            return False
        scaled, norms = scaled_vectors(embeddings, side, self.transform)
        outside = norms > self.transform["radius2"][0]
        if len(self.transform["outliers"]) + int(outside.sum()) > MAX_OUTLIERS:
            return False
        ids = np.arange(first_id, first_id + len(norms), dtype=np.int64)
        self.transform["outliers"] = np.concatenate([self.transform["outliers"], ids[outside]])
        if (~outside).any():
            self.faiss_index.add_with_ids(lifted(scaled[~outside], norms[~outside], self.transform), ids[~outside])
        return True

    def candidates(self, queries: GaussianEmbeddings, count: int) -> torch.Tensor:
        """``(Q, C)`` ids of the stored items FAISS ranks first for each query (−1 where it found fewer), followed by
        the items kept out of the graph (scored exactly by the caller)."""
        if self.transform:
            vectors = lifted_queries(queries, self.direction, self.transform)
        else:  # −(query map), unit length: the inner-product ranking is the same
            side = SEARCH_DIRECTIONS[self.direction][0]
            vectors = np.concatenate([unit_rows(-chunk) for _, chunk in feature_chunks(queries, side)])
        _, ids = self.faiss_index.search(vectors, min(count, max(int(self.faiss_index.ntotal), 1)))
        if self.transform and len(self.transform["outliers"]):
            ids = np.hstack(
                [ids, np.broadcast_to(self.transform["outliers"], (len(ids), len(self.transform["outliers"])))]
            )
        return torch.from_numpy(np.ascontiguousarray(ids))

    def save(self, folder: Path) -> None:
        """``<direction>.faiss`` (FAISS's own format) and, if any, ``<direction>.transform.safetensors``."""
        faiss_module().write_index(self.faiss_index, str(folder / f"{self.direction}.faiss"))
        if self.transform:
            save_file(self.transform, str(folder / f"{self.direction}.transform.safetensors"))

    @classmethod
    def from_files(
        cls, backend: str, direction: str, dim: int, folder: Path, files: dict[str, bytes], ef_search: int
    ) -> FaissDirection | None:
        """The direction [`save`] wrote into ``folder`` (read as ``files``), or ``None`` if it was never built.
        A damaged file raises ``ValueError`` naming it."""
        name = f"{direction}.faiss"
        if name not in files:
            return None
        try:
            faiss_index = faiss_module().deserialize_index(np.frombuffer(files.pop(name), dtype=np.uint8))
        except RuntimeError as error:
            raise ValueError(f"{folder / name} is not a FAISS index FAISS can read ({first_line(error)})") from None
        transform: dict[str, np.ndarray] = {}
        if backend != EXACT:
            transform_name = f"{direction}.transform.safetensors"
            if transform_name not in files:
                raise ValueError(f"{folder / transform_name} is missing: the {backend} index cannot be searched")
            try:
                transform = dict(load(files.pop(transform_name)))
            except Exception as error:  # safetensors raises its own SafetensorError
                raise ValueError(f"{folder / transform_name} is damaged ({first_line(error)})") from None
            if not {"keep", "scale", "radius2"} <= transform.keys():
                raise ValueError(f"{folder / transform_name} lacks keep/scale/radius2: the index is damaged")
            transform.setdefault("mean", np.zeros(len(transform["keep"])))  # saved before centring: not centred
        loaded = cls(backend, direction, dim, faiss_index, transform)
        if transform:
            loaded.set_ef_search(ef_search)
        return loaded


__all__ = ["EXACT", "HNSW", "FaissDirection", "feature_vectors"]
