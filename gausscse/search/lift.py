"""Maximum inner product → nearest neighbour (Bachrach et al., 2014): the transform the approximate backends apply to
the ``stored_map`` vectors (whose norms differ wildly: 1/σ² spans e^±10) before an L2 index.

1. the stored column that is the same for every item (B's ``1``, A's ``½``) only adds a per-query constant: dropped;
2. column j is centred on its mean m_j and divided by its spread s_j, the query's multiplied by s_j: ⟨q·s, (x − m)/s⟩
   = ⟨q, x⟩ − ⟨q, m⟩, the same ranking with no column dominating;
3. stored vectors get one more coordinate √(R² − ‖x‖²) (R² the largest ‖x‖²), queries a 0: ‖q − x‖² = ‖q‖² + R² −
   2⟨q, x⟩, so the nearest stored vectors have the largest inner product.

Steps 2–3 run in float64. Items of extreme norm are kept out of the L2 index, where they would set R², and put on
every query's shortlist instead.
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
    """``(first row, float64 rows)`` of the ``query_map`` (``role="query"``) or ``stored_map`` (``"stored"``) of
    ``embeddings``, ``FEATURE_CHUNK`` rows at a time."""
    make_map = {"query": query_map, "stored": stored_map}[role]
    mu, logvar = embeddings.mu.cpu(), embeddings.logvar.cpu()
    for start in range(0, len(mu), FEATURE_CHUNK):
        rows = slice(start, start + FEATURE_CHUNK)
        yield start, make_map(mu[rows], logvar[rows], direction, kl_weight).numpy()


def kept_columns(direction: str, dim: int, kl_weight: float | None = None) -> np.ndarray:
    """Step 1: every stored column but the constant one (B's 1 or A's ½ at 2d, behind the search score's d of μ)."""
    constant = (0 if kl_weight is None else dim) + (2 * dim + 1 if direction == "entailing" else 2 * dim)
    return np.array([column for column in range(search_map_width(dim, kl_weight)) if column != constant])


def column_moments(
    embeddings: GaussianEmbeddings, maps: tuple[str, float | None], keep: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 mean and standard deviation (+ 1e-6) of the ``keep`` columns over the items ``rows`` (a mask), in two
    passes: E[x²] − E[x]² would leave rounding noise the size of the mean where a column is constant."""
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
    """Step 2 for stored items: the float32 ``(x − mean) / scale`` on the ``keep`` columns, and float64 ‖·‖²."""
    keep, mean, scale = transform["keep"], transform["mean"].astype(np.float64), transform["scale"].astype(np.float64)
    vectors = np.empty((len(embeddings.mu), len(keep)), dtype=np.float32)
    norms = np.empty(len(embeddings.mu))
    for start, chunk in feature_chunks(embeddings, "stored", *maps):
        scaled = (chunk[:, keep] - mean) / scale
        vectors[start : start + len(chunk)] = scaled
        norms[start : start + len(chunk)] = (scaled**2).sum(axis=1)
    return vectors, norms


def lifted(scaled: np.ndarray, norms: np.ndarray, transform: dict[str, np.ndarray]) -> np.ndarray:
    """Step 3 for scaled stored vectors and their ‖·‖²: append √(R² − ‖x‖²), clamped at 0 (float32)."""
    lift = np.sqrt(np.maximum(transform["radius2"].astype(np.float64) - norms, 0.0))
    return np.ascontiguousarray(np.hstack([scaled, lift[:, None].astype(np.float32)]), dtype=np.float32)


def graph_outliers(norms: np.ndarray) -> np.ndarray:
    """Mask of the items kept out of the L2 index: ‖x‖² above ``OUTLIER_FACTOR`` × the median, ``MAX_OUTLIERS`` of
    the largest at most."""
    candidates = np.flatnonzero(norms > OUTLIER_FACTOR * np.median(norms))
    chosen = candidates[np.argsort(-norms[candidates], kind="stable")[:MAX_OUTLIERS]]
    return np.isin(np.arange(len(norms)), chosen)


def fit_lift(
    embeddings: GaussianEmbeddings, direction: str, kl_weight: float | None = None
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Steps 1–3 fitted on the stored ``embeddings`` for ``direction`` (the search score's when ``kl_weight`` is
    given): the float64 transform ``{"keep", "mean", "scale", "radius2", "outliers"}`` (``outliers``: ids kept out),
    the ids of the other items and their lifted float32 vectors."""
    maps = (direction, kl_weight)
    keep = kept_columns(direction, embeddings.dim, kl_weight)
    mean, scale = column_moments(embeddings, maps, keep, np.ones(len(embeddings.mu), dtype=bool))
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


def query_vectors(
    queries: GaussianEmbeddings, direction: str, kl_weight: float | None = None, transform: dict | None = None
) -> np.ndarray:
    """The queries' float32 vectors, rows scaled to unit length in float64 (no overflow): their ``query_map``, or with
    a lift ``transform`` its query side of steps 1–3, ``(Q, len(keep) + 1)``: the ``keep`` columns × ``scale``, a 0."""
    chunks = []
    for _, chunk in feature_chunks(queries, "query", direction, kl_weight):
        if transform:
            chunk = chunk[:, transform["keep"]] * transform["scale"].astype(np.float64)
            chunk = np.hstack([chunk, np.zeros((len(chunk), 1))])
        norms = np.linalg.norm(chunk, axis=1, keepdims=True)  # zero rows stay zero
        chunks.append(np.ascontiguousarray(chunk / np.where(norms > 0, norms, 1.0), dtype=np.float32))
    return np.concatenate(chunks)
