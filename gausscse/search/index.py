"""``GaussianIndex``: exact top-k entailment search over stored diagonal Gaussians (torch, chunked)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from gausscse.io import atomic_path
from gausscse.model.gaussian import GaussianEmbeddings, check_reduction, similarity_matrix

CHUNK_ROWS = 4096  # stored items scored per matrix product


class GaussianIndex:
    """Stored Gaussians and exact top-k search in both entailment directions.

    Args:
        dim: the dimension d of the Gaussians.
        reduction: the model's ``config.similarity_reduction`` (``"sum"`` or ``"mean_dim"``).
    """

    def __init__(self, dim: int, reduction: str):
        if dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim}")
        self.dim = dim
        self.reduction = check_reduction(reduction)
        self.mu = torch.empty(0, dim)
        self.logvar = torch.empty(0, dim)

    def __len__(self) -> int:
        return self.mu.shape[0]

    def _checked(self, embeddings: GaussianEmbeddings, argument: str) -> GaussianEmbeddings:
        if embeddings.mu.ndim == 1:
            embeddings = GaussianEmbeddings(embeddings.mu[None], embeddings.logvar[None])
        if embeddings.dim != self.dim:
            raise ValueError(f"{argument} have dimension {embeddings.dim}, the index {self.dim}")
        embeddings.check(argument)
        return GaussianEmbeddings(embeddings.mu.float().cpu(), embeddings.logvar.float().cpu())

    def add(self, embeddings: GaussianEmbeddings) -> None:
        """Append Gaussians; their ids continue from ``len(self)``."""
        embeddings = self._checked(embeddings, "embeddings")
        self.mu = torch.cat([self.mu, embeddings.mu])
        self.logvar = torch.cat([self.logvar, embeddings.logvar])

    def _top_k(self, queries: GaussianEmbeddings, k: int, queries_first: bool) -> tuple[torch.Tensor, torch.Tensor]:
        queries = self._checked(queries, "queries")
        if len(self) == 0:
            raise ValueError("the index is empty: add() Gaussians first")
        if not 1 <= k <= len(self):
            raise ValueError(f"k must be between 1 and len(index) = {len(self)}, got {k}")
        best_scores = torch.full((len(queries), 0), float("-inf"))
        best_ids = torch.empty((len(queries), 0), dtype=torch.long)
        for start in range(0, len(self), CHUNK_ROWS):
            mu, logvar = self.mu[start : start + CHUNK_ROWS], self.logvar[start : start + CHUNK_ROWS]
            if queries_first:  # sim(q‖x)
                scores = similarity_matrix(queries.mu, queries.logvar, mu, logvar, self.reduction)
            else:  # sim(x‖q)
                scores = similarity_matrix(mu, logvar, queries.mu, queries.logvar, self.reduction).T
            ids = torch.arange(start, start + scores.shape[1]).expand_as(scores)
            merged_scores, merged_ids = torch.cat([best_scores, scores], 1), torch.cat([best_ids, ids], 1)
            keep = merged_scores.topk(min(k, merged_scores.shape[1]), dim=1).indices
            best_scores, best_ids = merged_scores.gather(1, keep), merged_ids.gather(1, keep)
        return best_scores, best_ids

    def entailing(self, queries: GaussianEmbeddings, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The k stored items that best entail each query: highest sim(query‖item) first; ``(Q, k)`` scores, ids."""
        return self._top_k(queries, k, queries_first=True)

    def entailed_by(self, queries: GaussianEmbeddings, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The k stored items each query best entails: highest sim(item‖query) first; ``(Q, k)`` scores, ids."""
        return self._top_k(queries, k, queries_first=False)

    def save(self, path: str | Path) -> None:
        """One safetensors file (no pickle), written atomically."""
        with atomic_path(path) as temporary:
            save_file(
                {"mu": self.mu.contiguous(), "logvar": self.logvar.contiguous()},
                str(temporary),
                metadata={"dim": str(self.dim), "reduction": self.reduction},
            )

    @classmethod
    def load(cls, path: str | Path) -> GaussianIndex:
        """An index saved by [`save`]."""
        with safe_open(str(path), framework="pt") as handle:  # one read: metadata and tensors
            metadata = handle.metadata()
            embeddings = GaussianEmbeddings(handle.get_tensor("mu"), handle.get_tensor("logvar"))
        index = cls(int(metadata["dim"]), metadata["reduction"])
        index.add(embeddings)
        return index


__all__ = ["GaussianIndex"]
