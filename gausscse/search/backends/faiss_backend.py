"""The FAISS backends of ``GaussianIndex``: one FAISS index per search direction over the ``stored_map`` vectors.

Exact (``"faiss"``): ``IndexFlatIP`` over the stored maps; a query sends its ``query_map``, so that the inner product is
−KL (the largest inner products are the highest ``sum`` similarities) or the search score. Each query vector is scaled
to unit length in float64 before FAISS sees it (the ranking is unchanged), so a query with extreme variances cannot
overflow FAISS's float32 inner products.

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
from gausscse.model.gaussian import SEARCH_DIRECTIONS, GaussianEmbeddings, search_map_width
from gausscse.search.backends.base import SearchBackend
from gausscse.search.lift import (
    FEATURE_CHUNK,
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


def feature_vectors(embeddings: GaussianEmbeddings, direction: str, kl_weight: float | None) -> np.ndarray:
    """``stored_map`` vectors as a float32 C-contiguous array ``(N, search_map_width(d, kl_weight))``."""
    vectors = np.empty((len(embeddings.mu), search_map_width(embeddings.dim, kl_weight)), dtype=np.float32)
    for start, chunk in feature_chunks(embeddings, "stored", direction, kl_weight):
        vectors[start : start + len(chunk)] = chunk
    return vectors


class FaissDirection:
    """The FAISS index of one direction (``"entailing"`` or ``"entailed_by"``) and, for the approximate backends,
    the inner-product-to-L2 transform fitted on the vectors it was built from and the ids kept out of the graph;
    ``kl_weight``: the search score's λ (``None``: the KL maps)."""

    def __init__(
        self,
        backend: str,
        direction: str,
        dim: int,
        faiss_index: Any,
        transform: dict[str, np.ndarray],
        kl_weight: float | None = None,
    ):
        self.backend, self.direction, self.dim, self.kl_weight = backend, direction, dim, kl_weight
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
    def build(
        cls,
        backend: str,
        direction: str,
        embeddings: GaussianEmbeddings,
        ef_search: int,
        kl_weight: float | None = None,
    ) -> FaissDirection:
        """Index ``embeddings`` (the stored Gaussians) for ``direction``; ``ef_search``: HNSW candidates explored
        per query."""
        faiss = faiss_module()
        dim = embeddings.dim
        if backend == EXACT:
            vectors = feature_vectors(embeddings, direction, kl_weight)
            faiss_index = faiss.IndexFlatIP(vectors.shape[1])
            faiss_index.add(vectors)
            return cls(backend, direction, dim, faiss_index, {}, kl_weight)
        transform, inliers, vectors = fit_lift(embeddings, direction, kl_weight)
        faiss_index = faiss.IndexIDMap(faiss.IndexHNSWFlat(vectors.shape[1], HNSW_NEIGHBOURS))
        faiss.downcast_index(faiss_index.index).hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        faiss_index.add_with_ids(vectors, inliers)
        built = cls(backend, direction, dim, faiss_index, transform, kl_weight)
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
        if not self.transform:
            self.faiss_index.add(feature_vectors(embeddings, self.direction, self.kl_weight))
            return True
        if not isinstance(self.faiss_index, faiss_module().IndexIDMap):  # a graph saved by gausscse < 0.2: rebuilt
            return False
        scaled, norms = scaled_vectors(embeddings, (self.direction, self.kl_weight), self.transform)
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
            vectors = lifted_queries(queries, self.direction, self.transform, self.kl_weight)
        else:  # the query map, unit length: the inner-product ranking is the same
            chunks = feature_chunks(queries, "query", self.direction, self.kl_weight)
            vectors = np.concatenate([unit_rows(chunk) for _, chunk in chunks])
        _, ids = self.faiss_index.search(vectors, min(count, max(int(self.faiss_index.ntotal), 1)))
        if self.transform and len(self.transform["outliers"]):
            ids = np.hstack(
                [ids, np.broadcast_to(self.transform["outliers"], (len(ids), len(self.transform["outliers"])))]
            )
        return torch.from_numpy(np.ascontiguousarray(ids))

    def stored_vectors(self) -> tuple[np.ndarray, Any]:
        """``(ids, storage)``: the ids of the vectors in the FAISS index, in storage order, and the flat index that
        holds them (its ``reconstruct_n`` reads them back)."""
        faiss = faiss_module()
        if isinstance(self.faiss_index, faiss.IndexIDMap):
            graph = faiss.downcast_index(self.faiss_index.index)
            return faiss.vector_to_array(self.faiss_index.id_map).astype(np.int64), faiss.downcast_index(graph.storage)
        return np.arange(self.faiss_index.ntotal, dtype=np.int64), self.faiss_index

    def check_derived_from(self, embeddings: GaussianEmbeddings, path: Path) -> None:
        """``ValueError`` naming ``path`` unless every stored vector is this direction's map of its item in
        ``embeddings`` (the index's Gaussians): a FAISS file of the other direction, of another index or of other
        items has the right size and dimension but other vectors. Compared chunk by chunk, to float32 rounding."""
        ids, storage = self.stored_vectors()
        for start in range(0, len(ids), FEATURE_CHUNK):
            chunk = ids[start : start + FEATURE_CHUNK]
            vectors = storage.reconstruct_n(start, len(chunk))
            sample = embeddings[torch.from_numpy(chunk)]
            if self.transform:
                scaled, norms = scaled_vectors(sample, (self.direction, self.kl_weight), self.transform)
                expected = lifted(scaled, norms, self.transform)
            else:
                expected = feature_vectors(sample, self.direction, self.kl_weight)
            scale = np.abs(expected).max(axis=1, keepdims=True) + 1e-30
            if not np.allclose(vectors / scale, expected / scale, rtol=0.0, atol=1e-4):
                raise ValueError(
                    f"{path} does not hold the {self.direction} vectors of this index's Gaussians: the file belongs to "
                    "another index or direction"
                )

    def save(self, folder: Path) -> None:
        """``<direction>.faiss`` (FAISS's own format) and, if any, ``<direction>.transform.safetensors``."""
        faiss_module().write_index(self.faiss_index, str(folder / f"{self.direction}.faiss"))
        if self.transform:
            save_file(self.transform, str(folder / f"{self.direction}.transform.safetensors"))

    @classmethod
    def from_files(
        cls,
        backend: str,
        direction: str,
        dim: int,
        folder: Path,
        files: dict[str, bytes],
        ef_search: int,
        kl_weight: float | None = None,
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
        width = search_map_width(dim, kl_weight)
        if faiss_index.d != width:
            raise ValueError(
                f"{folder / name} holds {faiss_index.d}-dimensional vectors; this index's are {width} (d = {dim}"
                f"{'' if kl_weight is None else ', search score'}): the file belongs to another index"
            )
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
        loaded = cls(backend, direction, dim, faiss_index, transform, kl_weight)
        if transform:
            loaded.set_ef_search(ef_search)
        return loaded


class FaissFlat(SearchBackend):
    """``backend="faiss"``: the shortlist of an ``IndexFlatIP`` per direction (exact ranking of the KL maps or the
    search score, re-scored by the index), built at the first search of a direction and extended by later adds."""

    name = EXACT

    def __init__(self, index, options: dict[str, Any]) -> None:
        super().__init__(index, options)
        self.directions: dict[str, FaissDirection] = {}

    def direction(self, direction: str) -> FaissDirection:
        """The FAISS index of ``direction`` (built from the stored items on first use)."""
        if direction not in self.directions:
            index = self.index
            self.directions[direction] = FaissDirection.build(
                self.name, direction, index.embeddings, index.ef_search, index.kl_weight
            )
        return self.directions[direction]

    def added(self, embeddings: GaussianEmbeddings, first_id: int) -> None:
        for direction, built in list(self.directions.items()):
            if not built.try_add(embeddings, first_id):  # outside the approximate index: rebuilt at the next query
                del self.directions[direction]

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str) -> torch.Tensor:
        return self.direction(direction).candidates(queries, count)

    def write_files(self, folder: Path) -> None:
        """``<direction>.faiss`` (and a lift's ``.transform.safetensors``) of both directions, built now where no
        query built them yet, so a loaded index answers its first query at once."""
        if len(self.index):
            for direction in SEARCH_DIRECTIONS:
                self.direction(direction).save(folder)

    def read_files(self, folder: Path, files: dict[str, bytes]) -> None:
        index = self.index
        for direction in SEARCH_DIRECTIONS:
            built = FaissDirection.from_files(
                self.name, direction, index.dim, folder, files, index.ef_search, index.kl_weight
            )
            if built is not None:
                if built.size != len(index):
                    raise ValueError(f"{folder}/{direction}.faiss holds {built.size} vectors, the index {len(index)}")
                built.check_derived_from(index.embeddings, folder / f"{direction}.faiss")
                self.directions[direction] = built


class FaissHnsw(FaissFlat):
    """``backend="faiss-hnsw"``: the shortlist of an HNSW graph per direction (``ef_search`` candidates explored per
    query) over the lifted maps (``gausscse.search.lift``), re-scored by the index; an approximate index is rebuilt
    when too many added items fall outside its transform."""

    name = HNSW


__all__ = ["EXACT", "HNSW", "FaissDirection", "FaissFlat", "FaissHnsw", "feature_vectors"]
