"""The FAISS side of ``GaussianIndex``: one FAISS index per search direction over ``kl_feature_map`` vectors.

Exact (``"faiss"``): ``IndexFlatIP`` over the stored maps; a query's map is negated so that the inner product is
−KL and the largest inner products are the highest ``sum`` similarities. Each query vector is scaled to unit length
in float64 before FAISS sees it (the ranking is unchanged), so a query with extreme variances cannot overflow
FAISS's float32 inner products.

Approximate (``"faiss-hnsw"``): a graph index does poorly on raw inner products whose vectors differ wildly in norm
(1/σ² spans e^±10), so the maximum-inner-product search is turned into a nearest-neighbour search (Bachrach et al.,
2014) before it is handed to an L2 HNSW graph:

1. the stored column that is the same for every item (the ``1`` of B, the ``½`` of A) only adds a per-query
   constant: dropped, the ranking is unchanged;
2. each column j is divided by its spread s_j over the stored items and the query's multiplied by it
   (⟨q·s, x/s⟩ = ⟨q, x⟩), so no column dominates the geometry;
3. stored vectors get one more coordinate √(R² − ‖x‖²) (R² the largest ‖x‖² at build time), queries a 0:
   ‖q − x‖² = ‖q‖² + R² − 2⟨q, x⟩, so the nearest stored vectors are those with the largest inner product.

Steps 2–3 run in float64 (a spread or a squared norm overflows float32 for extreme but valid items). Items whose
squared norm exceeds ``OUTLIER_FACTOR`` × the median — a handful at most, ``MAX_OUTLIERS`` — are kept out of the
graph, where they would set R² and crush every other distance into float32 rounding, and are put on every query's
shortlist instead: they are scored exactly, so they are always found. An item added later with ‖x‖² > R² joins them;
past ``MAX_OUTLIERS`` the approximate index is rebuilt at the next query.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load, save_file

from gausscse.io import first_line
from gausscse.model.gaussian import SEARCH_DIRECTIONS, GaussianEmbeddings, kl_feature_map

EXACT, HNSW = "faiss", "faiss-hnsw"
HNSW_NEIGHBOURS = 32  # graph degree M
HNSW_EF_CONSTRUCTION = 64
FEATURE_CHUNK = 65536  # rows of float64 feature maps computed at a time
OUTLIER_FACTOR = 100.0  # squared norm over the median's that keeps an item out of the graph
MAX_OUTLIERS = 256  # items scored exactly for every query at most


def faiss_module():
    """FAISS, imported where a FAISS backend is used (``pip install faiss-cpu``)."""
    try:
        import faiss
    except ImportError as error:  # pragma: no cover - faiss-cpu is in the requirements
        raise ImportError("the FAISS backends need faiss: pip install faiss-cpu") from error
    return faiss


def feature_chunks(embeddings: GaussianEmbeddings, side: str) -> Iterator[tuple[int, np.ndarray]]:
    """``(first row, float64 kl_feature_map rows)`` of ``embeddings``, ``FEATURE_CHUNK`` rows at a time."""
    mu, logvar = embeddings.mu.cpu(), embeddings.logvar.cpu()
    for start in range(0, len(mu), FEATURE_CHUNK):
        yield (
            start,
            kl_feature_map(mu[start : start + FEATURE_CHUNK], logvar[start : start + FEATURE_CHUNK], side).numpy(),
        )


def feature_vectors(embeddings: GaussianEmbeddings, side: str) -> np.ndarray:
    """``kl_feature_map`` vectors as a float32 C-contiguous array ``(N, 2d + 2)``."""
    vectors = np.empty((len(embeddings.mu), 2 * embeddings.dim + 2), dtype=np.float32)
    for start, chunk in feature_chunks(embeddings, side):
        vectors[start : start + len(chunk)] = chunk
    return vectors


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Float64 rows scaled to unit length (zero rows stay zero), as float32: an inner-product or L2 ranking against
    fixed stored vectors is the same for a row and any positive multiple of it."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.ascontiguousarray(vectors / np.where(norms > 0, norms, 1.0), dtype=np.float32)


def constant_column(direction: str, dim: int) -> int:
    """The stored map's column that is the same for every item: B's trailing 1 or A's ½ at position 2d."""
    return 2 * dim + 1 if SEARCH_DIRECTIONS[direction][1] == "right" else 2 * dim


def column_spread(embeddings: GaussianEmbeddings, side: str, keep: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Float64 standard deviation of the ``keep`` columns of the feature maps over the items ``rows`` (a mask),
    plus 1e-6 (no column is divided by 0): one pass of float64 sums."""
    total = np.zeros(len(keep))
    squares = np.zeros(len(keep))
    for start, chunk in feature_chunks(embeddings, side):
        kept = chunk[rows[start : start + len(chunk)]][:, keep]
        total += kept.sum(axis=0)
        squares += (kept**2).sum(axis=0)
    count = max(int(rows.sum()), 1)
    mean = total / count
    return np.sqrt(np.maximum(squares / count - mean**2, 0.0)) + 1e-6


def scaled_vectors(
    embeddings: GaussianEmbeddings, side: str, transform: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Step 2 of the module docstring for stored items: the ``keep`` columns divided by ``scale`` (float32) and their
    float64 squared norms."""
    keep, scale = transform["keep"], transform["scale"].astype(np.float64)
    vectors = np.empty((len(embeddings.mu), len(keep)), dtype=np.float32)
    norms = np.empty(len(embeddings.mu))
    for start, chunk in feature_chunks(embeddings, side):
        scaled = chunk[:, keep] / scale
        vectors[start : start + len(chunk)] = scaled
        norms[start : start + len(chunk)] = (scaled**2).sum(axis=1)
    return vectors, norms


def lifted(scaled: np.ndarray, norms: np.ndarray, transform: dict[str, np.ndarray]) -> np.ndarray:
    """Step 3 of the module docstring for stored vectors already scaled (step 2), with their squared norms: append
    √(R² − ‖x‖²), clamped at 0."""
    lift = np.sqrt(np.maximum(transform["radius2"].astype(np.float64) - norms, 0.0))
    return np.ascontiguousarray(np.hstack([scaled, lift[:, None].astype(np.float32)]), dtype=np.float32)


def graph_outliers(norms: np.ndarray) -> np.ndarray:
    """Mask of the items kept out of the graph: squared norm above ``OUTLIER_FACTOR`` × the median, the
    ``MAX_OUTLIERS`` largest at most."""
    candidates = np.flatnonzero(norms > OUTLIER_FACTOR * np.median(norms))
    chosen = candidates[np.argsort(-norms[candidates], kind="stable")[:MAX_OUTLIERS]]
    mask = np.zeros(len(norms), dtype=bool)
    mask[chosen] = True
    return mask


class FaissDirection:
    """The FAISS index of one direction (``"entailing"`` or ``"entailed_by"``) and, for the approximate backends,
    the inner-product-to-L2 transform fitted on the vectors it was built from and the ids kept out of the graph."""

    def __init__(self, backend: str, direction: str, dim: int, faiss_index: Any, transform: dict[str, np.ndarray]):
        self.backend, self.direction, self.dim = backend, direction, dim
        self.faiss_index = faiss_index
        # {"keep": columns, "scale": s_j, "radius2": R², "outliers": ids}; empty for the exact backend
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
        keep = np.array([column for column in range(2 * dim + 2) if column != constant_column(direction, dim)])
        everyone = np.ones(len(embeddings.mu), dtype=bool)
        transform = {"keep": keep, "scale": column_spread(embeddings, side, keep, everyone)}
        scaled, norms = scaled_vectors(embeddings, side, transform)
        outliers = graph_outliers(norms)
        if outliers.any():  # the spreads of the bulk, not of a few extreme items
            transform["scale"] = column_spread(embeddings, side, keep, ~outliers)
            scaled, norms = scaled_vectors(embeddings, side, transform)
            outliers = graph_outliers(norms)
        inliers = np.flatnonzero(~outliers)
        transform["radius2"] = np.array([norms[inliers].max() if len(inliers) else 0.0])
        transform["outliers"] = np.flatnonzero(outliers).astype(np.int64)
        faiss_index = faiss.IndexIDMap(faiss.IndexHNSWFlat(len(keep) + 1, HNSW_NEIGHBOURS))
        faiss.downcast_index(faiss_index.index).hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        faiss_index.add_with_ids(lifted(scaled[inliers], norms[inliers], transform), inliers.astype(np.int64))
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
        chunks = []
        for _, chunk in feature_chunks(queries, SEARCH_DIRECTIONS[self.direction][0]):
            chunk = -chunk
            if self.transform:
                chunk = chunk[:, self.transform["keep"]] * self.transform["scale"].astype(np.float64)
                chunk = np.hstack([chunk, np.zeros((len(chunk), 1))])
            chunks.append(unit_rows(chunk))
        vectors = np.concatenate(chunks)
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
        loaded = cls(backend, direction, dim, faiss_index, transform)
        if transform:
            loaded.set_ef_search(ef_search)
        return loaded


__all__ = ["EXACT", "HNSW", "FaissDirection", "feature_vectors"]
