"""Maximum inner product → nearest neighbour: the transform both approximate search backends (``"faiss-hnsw"``,
``"lancedb-ann"``) apply before handing the ``stored_map`` vectors (the KL maps, or the search score's) to an L2
index.

A graph or IVF index does poorly on raw inner products whose vectors differ wildly in norm (1/σ² spans e^±10), so the
maximum-inner-product search is turned into a nearest-neighbour search (Bachrach et al., 2014):

1. the stored column that is the same for every item (the ``1`` of B, the ``½`` of A) only adds a per-query
   constant: dropped, the ranking is unchanged;
2. each stored column j is centred on its mean m_j over the stored items and divided by its spread s_j, and the
   query's is multiplied by s_j: ⟨q·s, (x − m)/s⟩ = ⟨q, x⟩ − ⟨q, m⟩, the inner product less a per-query constant,
   so the ranking is unchanged and no column dominates the geometry (a column alike in every row — a log σ² pinned
   at the model's clamp — becomes 0 instead of a huge shared offset that would leave the differences between items to
   float32 rounding);
3. stored vectors get one more coordinate √(R² − ‖x‖²) (R² the largest ‖x‖² at build time), queries a 0:
   ‖q − x‖² = ‖q‖² + R² − 2⟨q, x⟩, so the nearest stored vectors are those with the largest inner product.

Steps 2–3 run in float64 (a spread or a squared norm overflows float32 for extreme but valid items). Items whose
squared norm exceeds ``OUTLIER_FACTOR`` × the median — a handful at most, ``MAX_OUTLIERS`` — are kept out of the
L2 index, where they would set R² and crush every other distance into float32 rounding, and are put on every query's
shortlist instead: they are scored exactly, so they are always found.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from gausscse.model.gaussian import GaussianEmbeddings, query_map, search_map_width, stored_map

FEATURE_CHUNK = 65536  # rows of float64 feature maps computed at a time
OUTLIER_FACTOR = 100.0  # squared norm over the median's that keeps an item out of the L2 index
MAX_OUTLIERS = 256  # items scored exactly for every query at most


def feature_chunks(
    embeddings: GaussianEmbeddings, role: str, direction: str, kl_weight: float | None = None
) -> Iterator[tuple[int, np.ndarray]]:
    """``(first row, float64 map rows)`` of ``embeddings``, ``FEATURE_CHUNK`` rows at a time: their ``query_map``
    (``role="query"``) or ``stored_map`` (``role="stored"``) for ``direction`` and ``kl_weight``."""
    make_map = {"query": query_map, "stored": stored_map}[role]
    mu, logvar = embeddings.mu.cpu(), embeddings.logvar.cpu()
    for start in range(0, len(mu), FEATURE_CHUNK):
        rows = slice(start, start + FEATURE_CHUNK)
        yield start, make_map(mu[rows], logvar[rows], direction, kl_weight).numpy()


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Float64 rows scaled to unit length (zero rows stay zero), as float32: an inner-product or L2 ranking against
    fixed stored vectors is the same for a row and any positive multiple of it."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.ascontiguousarray(vectors / np.where(norms > 0, norms, 1.0), dtype=np.float32)


def constant_column(direction: str, dim: int, kl_weight: float | None = None) -> int:
    """The stored map's column that is the same for every item: B's trailing 1 or A's ½ at position 2d (d further
    on behind the search score's unit μ)."""
    offset = 0 if kl_weight is None else dim
    return offset + (2 * dim + 1 if direction == "entailing" else 2 * dim)


def kept_columns(direction: str, dim: int, kl_weight: float | None = None) -> np.ndarray:
    """Step 1 of the module docstring: every stored column but the constant one."""
    constant = constant_column(direction, dim, kl_weight)
    return np.array([column for column in range(search_map_width(dim, kl_weight)) if column != constant])


def column_moments(
    embeddings: GaussianEmbeddings, maps: tuple[str, float | None], keep: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 mean and standard deviation (plus 1e-6: no column is divided by 0) of the ``keep`` columns of the
    feature maps over the items ``rows`` (a mask). Two passes: a column whose values are all alike (a log σ² pinned
    at the model's clamp gives 1/σ² = e^10 in every row) has spread 0, where E[x²] − E[x]² would leave float64
    rounding noise of the size of its mean."""
    count = max(int(rows.sum()), 1)
    total = np.zeros(len(keep))
    for start, chunk in feature_chunks(embeddings, "stored", *maps):
        total += chunk[rows[start : start + len(chunk)]][:, keep].sum(axis=0)
    mean = total / count
    squares = np.zeros(len(keep))
    for start, chunk in feature_chunks(embeddings, "stored", *maps):
        squares += ((chunk[rows[start : start + len(chunk)]][:, keep] - mean) ** 2).sum(axis=0)
    return mean, np.sqrt(squares / count) + 1e-6


def scaled_vectors(
    embeddings: GaussianEmbeddings, maps: tuple[str, float | None], transform: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Step 2 of the module docstring for stored items: the ``keep`` columns less ``mean``, divided by ``scale``
    (float32), and their float64 squared norms."""
    keep, mean, scale = transform["keep"], transform["mean"].astype(np.float64), transform["scale"].astype(np.float64)
    vectors = np.empty((len(embeddings.mu), len(keep)), dtype=np.float32)
    norms = np.empty(len(embeddings.mu))
    for start, chunk in feature_chunks(embeddings, "stored", *maps):
        scaled = (chunk[:, keep] - mean) / scale
        vectors[start : start + len(chunk)] = scaled
        norms[start : start + len(chunk)] = (scaled**2).sum(axis=1)
    return vectors, norms


def lifted(scaled: np.ndarray, norms: np.ndarray, transform: dict[str, np.ndarray]) -> np.ndarray:
    """Step 3 of the module docstring for stored vectors already scaled (step 2), with their squared norms: append
    √(R² − ‖x‖²), clamped at 0."""
    lift = np.sqrt(np.maximum(transform["radius2"].astype(np.float64) - norms, 0.0))
    return np.ascontiguousarray(np.hstack([scaled, lift[:, None].astype(np.float32)]), dtype=np.float32)


def graph_outliers(norms: np.ndarray) -> np.ndarray:
    """Mask of the items kept out of the L2 index: squared norm above ``OUTLIER_FACTOR`` × the median, the
    ``MAX_OUTLIERS`` largest at most."""
    candidates = np.flatnonzero(norms > OUTLIER_FACTOR * np.median(norms))
    chosen = candidates[np.argsort(-norms[candidates], kind="stable")[:MAX_OUTLIERS]]
    mask = np.zeros(len(norms), dtype=bool)
    mask[chosen] = True
    return mask


def fit_lift(
    embeddings: GaussianEmbeddings, direction: str, kl_weight: float | None = None
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Steps 1–3 (module docstring) fitted on the stored items ``embeddings`` for ``direction`` (and the search
    score when ``kl_weight`` is not ``None``): the transform ``{"keep", "mean", "scale", "radius2", "outliers"}``
    (float64; ``outliers``: the ids kept out of the L2 index), the ids of the other items and their lifted float32
    vectors."""
    maps = (direction, kl_weight)
    keep = kept_columns(direction, embeddings.dim, kl_weight)
    everyone = np.ones(len(embeddings.mu), dtype=bool)
    mean, scale = column_moments(embeddings, maps, keep, everyone)
    transform = {"keep": keep, "mean": mean, "scale": scale}
    scaled, norms = scaled_vectors(embeddings, maps, transform)
    outliers = graph_outliers(norms)
    if outliers.any():  # the spreads of the bulk, not of a few extreme items
        transform["mean"], transform["scale"] = column_moments(embeddings, maps, keep, ~outliers)
        scaled, norms = scaled_vectors(embeddings, maps, transform)
        outliers = graph_outliers(norms)
    inliers = np.flatnonzero(~outliers)
    transform["radius2"] = np.array([norms[inliers].max() if len(inliers) else 0.0])
    transform["outliers"] = np.flatnonzero(outliers).astype(np.int64)
    return transform, inliers.astype(np.int64), lifted(scaled[inliers], norms[inliers], transform)


def lifted_queries(
    queries: GaussianEmbeddings, direction: str, transform: dict[str, np.ndarray], kl_weight: float | None = None
) -> np.ndarray:
    """The query side of steps 1–3: the ``query_map`` on the ``keep`` columns times ``scale``, then a 0; each row scaled
    to unit length (the exact L2 ranking is the same for any positive multiple of a query; an IVF index's choice of
    partitions is not, and the LanceDB backend scales them to the stored norm R), float32 ``(Q, len(keep) + 1)``."""
    chunks = []
    for _, chunk in feature_chunks(queries, "query", direction, kl_weight):
        chunk = chunk[:, transform["keep"]] * transform["scale"].astype(np.float64)
        chunks.append(unit_rows(np.hstack([chunk, np.zeros((len(chunk), 1))])))
    return np.concatenate(chunks)
