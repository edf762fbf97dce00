"""GaussianIndex: exact top-k in both entailment directions, equal to a brute-force ranking; save/load; errors."""

from __future__ import annotations

import pytest
import torch

from gausscse import GaussianEmbeddings, similarity
from gausscse.search import GaussianIndex
from gausscse.search import index as index_module


def gaussians(count: int, seed: int, dim: int = 12) -> GaussianEmbeddings:
    generator = torch.Generator().manual_seed(seed)
    return GaussianEmbeddings(
        torch.tanh(torch.randn(count, dim, generator=generator)), 1.5 * torch.randn(count, dim, generator=generator)
    )


def brute_force(queries: GaussianEmbeddings, items: GaussianEmbeddings, reduction: str, queries_first: bool):
    """Every (query, item) score one pair at a time with the row-wise similarity, sorted by hand."""
    rows = []
    for q in range(len(queries)):
        scores = [
            float(similarity(queries.mu[q], queries.logvar[q], items.mu[x], items.logvar[x], reduction))
            if queries_first
            else float(similarity(items.mu[x], items.logvar[x], queries.mu[q], queries.logvar[q], reduction))
            for x in range(len(items))
        ]
        rows.append(sorted(range(len(items)), key=lambda x: -scores[x]))
    return rows


@pytest.mark.parametrize("reduction", ["sum", "mean_dim"])
@pytest.mark.parametrize("k", [1, 5, 23])
def test_top_k_equals_brute_force_in_both_directions(reduction, k, monkeypatch, tmp_path):
    monkeypatch.setattr(index_module, "CHUNK_ROWS", 4)  # several chunks, merged across
    items, queries = gaussians(23, seed=1), gaussians(3, seed=2)
    index = GaussianIndex(12, reduction)
    index.add(items[:10])
    index.add(items[10:])  # several adds: ids continue
    index.save(tmp_path / "index.safetensors")
    for candidate in (index, GaussianIndex.load(tmp_path / "index.safetensors")):
        assert len(candidate) == 23
        for method, queries_first in (("entailing", True), ("entailed_by", False)):
            scores, ids = getattr(candidate, method)(queries, k)
            assert scores.shape == ids.shape == (3, k)
            assert (scores[:, :-1] >= scores[:, 1:]).all()
            expected = brute_force(queries, items, reduction, queries_first)
            assert ids.tolist() == [row[:k] for row in expected]


def test_bad_input_is_named():
    index = GaussianIndex(12, "sum")
    with pytest.raises(ValueError, match="the index is empty"):
        index.entailing(gaussians(1, seed=3), 1)
    index.add(gaussians(4, seed=4))
    with pytest.raises(ValueError, match=r"k must be between 1 and len\(index\) = 4, got 5"):
        index.entailing(gaussians(1, seed=3), 5)
    with pytest.raises(ValueError, match="queries have dimension 8, the index 12"):
        index.entailed_by(gaussians(1, seed=3, dim=8), 1)
    bad = gaussians(2, seed=5)
    bad.mu[1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"embeddings.mu\[1\] holds NaN"):
        index.add(bad)
    with pytest.raises(ValueError, match="similarity_reduction must be one of"):
        GaussianIndex(12, "max")
