"""The FAISS backends: one FAISS index per search direction. ``"faiss"``: an ``IndexFlatIP`` of the ``stored_map``
vectors (the inner product with a ``query_map`` ranks by −KL or the search score). ``"faiss-hnsw"``: an L2 HNSW graph
on the lifted vectors (``gausscse.search.lift``); an item added later with ‖x‖² > R² joins the outliers, and past
``MAX_OUTLIERS`` the graph is rebuilt at the next query."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load, save_file

from gausscse.io import first_line
from gausscse.model.gaussian import SEARCH_DIRECTIONS, GaussianEmbeddings, search_map_width
from gausscse.search.backends.base import HNSW_EF_CONSTRUCTION, HNSW_NEIGHBOURS, SearchBackend, engine_module
from gausscse.search.lift import (
    FEATURE_CHUNK,
    MAX_OUTLIERS,
    feature_chunks,
    fit_lift,
    lifted,
    query_vectors,
    scaled_vectors,
)

EXACT, HNSW = "faiss", "faiss-hnsw"


def faiss_module():
    return engine_module("faiss", "faiss-cpu")


def stored_vectors(
    embeddings: GaussianEmbeddings, direction: str, kl_weight: float | None, transform: dict[str, np.ndarray]
) -> np.ndarray:
    """The float32 vectors FAISS stores for ``embeddings``: their ``stored_map``, or with a lift ``transform`` the
    lifted maps."""
    if transform:
        return lifted(*scaled_vectors(embeddings, (direction, kl_weight), transform), transform)
    vectors = np.empty((len(embeddings.mu), search_map_width(embeddings.dim, kl_weight)), dtype=np.float32)
    for start, chunk in feature_chunks(embeddings, "stored", direction, kl_weight):
        vectors[start : start + len(chunk)] = chunk
    return vectors


class FaissDirection:
    """The FAISS index of one direction and, for ``"faiss-hnsw"``, the lift ``transform`` it was built with (empty
    for ``"faiss"``); ``kl_weight``: the search score's λ (``None``: the KL maps)."""

    def __init__(self, direction: str, faiss_index: Any, transform: dict[str, np.ndarray], kl_weight: float | None):
        self.direction, self.faiss_index, self.transform, self.kl_weight = direction, faiss_index, transform, kl_weight
        if transform:
            transform.setdefault("outliers", np.empty(0, dtype=np.int64))

    @property
    def size(self) -> int:
        """How many stored items this direction covers (graph + outliers)."""
        return int(self.faiss_index.ntotal) + len(self.transform.get("outliers", ()))

    @classmethod
    def build(cls, backend: str, direction: str, index: Any) -> FaissDirection:
        """The index of ``direction`` over the items stored in the GaussianIndex ``index``."""
        faiss, embeddings, kl_weight = faiss_module(), index.embeddings, index.kl_weight
        if backend == EXACT:
            vectors = stored_vectors(embeddings, direction, kl_weight, {})
            faiss_index = faiss.IndexFlatIP(vectors.shape[1])
            faiss_index.add(vectors)
            return cls(direction, faiss_index, {}, kl_weight)
        transform, inliers, vectors = fit_lift(embeddings, direction, kl_weight)
        faiss_index = faiss.IndexIDMap(faiss.IndexHNSWFlat(vectors.shape[1], HNSW_NEIGHBOURS))
        faiss.downcast_index(faiss_index.index).hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        faiss_index.add_with_ids(vectors, inliers)
        built = cls(direction, faiss_index, transform, kl_weight)
        built.set_ef_search(index.ef_search)
        return built

    def set_ef_search(self, ef_search: int) -> None:
        faiss = faiss_module()
        graph = self.faiss_index.index if isinstance(self.faiss_index, faiss.IndexIDMap) else self.faiss_index
        faiss.downcast_index(graph).hnsw.efSearch = ef_search

    def try_add(self, embeddings: GaussianEmbeddings, first_id: int) -> bool:
        """Append stored items with ids from ``first_id``; ``False`` (nothing added) when the graph must be rebuilt:
        more items outside its transform (‖x‖² > R²) than ``MAX_OUTLIERS``, or a graph without ids."""
        if not self.transform:
            self.faiss_index.add(stored_vectors(embeddings, self.direction, self.kl_weight, {}))
            return True
        if not isinstance(self.faiss_index, faiss_module().IndexIDMap):
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
        """``(Q, C)`` ids FAISS ranks first per query (−1: none), then the items kept out of the graph."""
        vectors = query_vectors(queries, self.direction, self.kl_weight, self.transform)
        _, ids = self.faiss_index.search(vectors, min(count, max(int(self.faiss_index.ntotal), 1)))
        outliers = self.transform.get("outliers", ())
        if len(outliers):
            ids = np.hstack([ids, np.broadcast_to(outliers, (len(ids), len(outliers)))])
        return torch.from_numpy(np.ascontiguousarray(ids))

    def check_derived_from(self, embeddings: GaussianEmbeddings, path: Path) -> None:
        """``ValueError`` naming ``path`` unless every stored vector is this direction's map of its item in
        ``embeddings``, to float32 rounding (a file of the other direction or another index has other vectors)."""
        faiss = faiss_module()
        if isinstance(self.faiss_index, faiss.IndexIDMap):
            ids = faiss.vector_to_array(self.faiss_index.id_map).astype(np.int64)
            storage = faiss.downcast_index(faiss.downcast_index(self.faiss_index.index).storage)
        else:
            ids, storage = np.arange(self.faiss_index.ntotal, dtype=np.int64), self.faiss_index
        for start in range(0, len(ids), FEATURE_CHUNK):
            chunk = ids[start : start + FEATURE_CHUNK]
            vectors = storage.reconstruct_n(start, len(chunk))
            sample = embeddings[torch.from_numpy(chunk)]
            expected = stored_vectors(sample, self.direction, self.kl_weight, self.transform)
            scale = np.abs(expected).max(axis=1, keepdims=True) + 1e-30
            if not np.allclose(vectors / scale, expected / scale, rtol=0.0, atol=1e-4):
                wrong = f"{path} does not hold the {self.direction} vectors of this index's Gaussians"
                raise ValueError(f"{wrong}: the file belongs to another index or direction")


class FaissFlat(SearchBackend):
    """``backend="faiss"``: an ``IndexFlatIP`` per direction, built at its first search and extended by later adds."""

    name = EXACT

    def __init__(self, index, options: dict[str, Any]) -> None:
        super().__init__(index, options)
        self.directions: dict[str, FaissDirection] = {}

    def direction(self, direction: str) -> FaissDirection:
        """The FAISS index of ``direction`` (built from the stored items on first use)."""
        if direction not in self.directions:
            self.directions[direction] = FaissDirection.build(self.name, direction, self.index)
        return self.directions[direction]

    def added(self, embeddings: GaussianEmbeddings, first_id: int) -> None:
        for direction, built in list(self.directions.items()):
            if not built.try_add(embeddings, first_id):  # rebuilt at the next query
                del self.directions[direction]

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str) -> torch.Tensor:
        return self.direction(direction).candidates(queries, count)

    def write_files(self, folder: Path) -> None:
        """Per direction ``<direction>.faiss`` (FAISS's own format) and, for HNSW, its lift transform
        ``<direction>.transform.safetensors``; built now where no query built them, so a loaded index answers at once;
        none for an empty index."""
        if len(self.index):
            for direction in SEARCH_DIRECTIONS:
                built = self.direction(direction)
                faiss_module().write_index(built.faiss_index, str(folder / f"{direction}.faiss"))
                if built.transform:
                    save_file(built.transform, str(folder / f"{direction}.transform.safetensors"))

    def read_files(self, folder: Path, files: dict[str, bytes]) -> None:
        """The directions [`write_files`] wrote; ``ValueError`` naming a damaged file or one not derived from the
        index's Gaussians."""
        index = self.index
        for direction in SEARCH_DIRECTIONS:
            name = f"{direction}.faiss"
            if name not in files:
                continue
            try:
                faiss_index = faiss_module().deserialize_index(np.frombuffer(files.pop(name), dtype=np.uint8))
            except RuntimeError as error:
                raise ValueError(f"{folder / name} is not a FAISS index FAISS can read ({first_line(error)})") from None
            width = search_map_width(index.dim, index.kl_weight)
            if faiss_index.d != width:
                found = f"{folder / name} holds {faiss_index.d}-dimensional vectors; this index's are {width}"
                raise ValueError(f"{found}: the file belongs to another index")
            transform = {}
            if self.name == HNSW:
                path = folder / f"{direction}.transform.safetensors"
                if path.name not in files:
                    raise ValueError(f"{path} is missing: the {self.name} index cannot be searched")
                try:
                    transform = dict(load(files.pop(path.name)))
                except Exception as error:  # safetensors raises its own SafetensorError
                    raise ValueError(f"{path} is damaged ({first_line(error)})") from None
                if not {"keep", "scale", "radius2"} <= transform.keys():
                    raise ValueError(f"{path} lacks keep/scale/radius2: the index is damaged")
                transform.setdefault("mean", np.zeros(len(transform["keep"])))  # a transform without one: not centred
            loaded = FaissDirection(direction, faiss_index, transform, index.kl_weight)
            if transform:
                loaded.set_ef_search(index.ef_search)
            if loaded.size != len(index):
                raise ValueError(f"{folder / name} holds {loaded.size} vectors, the index {len(index)}")
            loaded.check_derived_from(index.embeddings, folder / name)
            self.directions[direction] = loaded


class FaissHnsw(FaissFlat):
    """``backend="faiss-hnsw"``: the shortlist of an HNSW graph per direction (``ef_search``) on the lifted maps."""

    name = HNSW
