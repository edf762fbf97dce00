"""``GaussianIndex``: top-k entailment search over stored diagonal Gaussians, scored exactly on the shortlists of a
search backend (``gausscse.search.backends``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, save_file

from gausscse.io import atomic_folder, first_line, json_value, read_folder, write_json
from gausscse.model.gaussian import (
    KL_REDUCTIONS,
    LOGVAR_BOUND,
    GaussianEmbeddings,
    check_reduction,
    paired_search_score,
    paired_similarity,
    search_score_matrix,
    similarity_matrix,
)
from gausscse.search.backends import BACKENDS, uri_usage

CHUNK_ROWS = 4096  # stored items scored per matrix product (torch backend)
QUERY_CHUNK = 256  # queries re-scored at a time (the shortlist backends) ...
RESCORE_ELEMENTS = 1 << 22  # ... fewer when their candidates × d exceed this
GAUSSIANS_FILE = "gaussians.safetensors"
SETTINGS_FILE = "index_config.json"
KL_TERM_LIMIT = 1e30  # the largest μ² or μ²/σ² an index accepts (its float32 sums cannot overflow)


def check_searchable(embeddings: GaussianEmbeddings, argument: str) -> None:
    """``ValueError`` naming the first row of ``embeddings`` with μ² or μ²/σ² above ``KL_TERM_LIMIT``, whose KL
    terms would overflow (a model's Gaussians are far inside: |μ| ≤ 1)."""
    extremes = torch.aminmax(embeddings.mu) if embeddings.mu.numel() else ()
    if max((abs(float(value)) for value in extremes), default=0.0) ** 2 * math.exp(LOGVAR_BOUND) <= KL_TERM_LIMIT:
        return  # every row safe (|log σ²| ≤ LOGVAR_BOUND), seen without a copy
    mu, logvar = embeddings.mu.float(), embeddings.logvar.float()
    log_term = (2.0 * mu.abs().log() - logvar.clamp_max(0.0)).amax(dim=-1)  # log max(μ², μ²/σ²): no overflow
    bad = (log_term > math.log(KL_TERM_LIMIT)).nonzero()
    if len(bad):
        row = int(bad[0, 0])
        raise ValueError(
            f"{argument}[{row}] is too extreme to search: an index takes μ² and μ²/σ² up to {KL_TERM_LIMIT:.0e}, this "
            f"row reaches {math.exp(min(float(log_term[row]), 700.0)):.4g}"
        )


class GaussianIndex:
    """Stored Gaussians and top-k search in both entailment directions.

    ``entailing(q, k)`` ranks the stored items x by sim(q‖x) (evidence that entails the claim q), ``entailed_by(q, k)``
    by sim(x‖q) (what q entails); with ``kl_weight`` = λ (a model's ``config.search_kl_weight``) by the search score
    cos(μ_q, μ_x) − λ · KL / d instead. Scores are exact, highest first, ties in id order: a backend (``BACKENDS``)
    gives ``candidates_per_result × k`` candidates, re-scored in float64 (``mean_dim`` shortlists come from the
    ``sum`` form: approximate with every backend but ``"torch"``, which scores every item). ``"faiss"``, ``"lancedb"``,
    ``"qdrant"``, ``"milvus"``, ``"pgvector"`` shortlist exactly; ``"faiss-hnsw"``, ``"lancedb-ann"``,
    ``"qdrant-hnsw"``, ``"milvus-hnsw"``, ``"pgvector-hnsw"`` approximately, on the maps lifted to a nearest-neighbour
    problem. A database backend keeps nothing per item in this process (its rows are read back by id to re-score).

    Args:
        dim, reduction: the Gaussians' d and the model's ``config.similarity_reduction``.
        backend: a name of ``BACKENDS``; device: the torch backend's (the others run on the CPU).
        candidates_per_result: shortlist size per hit (default 2; 10 for ``mean_dim`` similarities).
        ef_search: HNSW candidates explored per query; nprobes: IVF partitions scanned by ``"lancedb-ann"``.
        uri: a database backend's new database: a LanceDB folder; a Qdrant folder, ``":memory:"`` or server URL; a
            Milvus Lite ``.db`` file or server URI; a PostgreSQL folder or ``postgresql://`` URL (``#name``: the
            collection or table); reopen it with [`load`] or [`open`].
        kl_weight: rank by the search score of this λ ≥ 0 (``None``: by the similarity).

    Example::

        index = GaussianIndex(model.config.embedding_size, model.config.similarity_reduction)
        index.add(model.encode(corpus))
        scores, ids = index.entailing(model.encode(["A man is playing music."]), k=5)
    """

    def __init__(
        self,
        dim: int,
        reduction: str,
        backend: str = "torch",
        *,
        device: str | torch.device | None = None,
        candidates_per_result: int | None = None,
        ef_search: int = 128,
        uri: str | Path | None = None,
        nprobes: int = 20,
        kl_weight: float | None = None,
        _table: Any = None,
    ):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {tuple(BACKENDS)}, got {backend!r}")
        if dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim}")
        positive = (("candidates_per_result", candidates_per_result), ("ef_search", ef_search), ("nprobes", nprobes))
        for name, value in positive:
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        if kl_weight is not None and (isinstance(kl_weight, bool) or not 0 <= kl_weight < float("inf")):
            raise ValueError(f"kl_weight must be a finite number >= 0 (or None: rank by similarity), got {kl_weight!r}")
        if (uri is not None) != BACKENDS[backend].database:
            raise ValueError(f"{uri_usage()}, and needed by them; backend={backend!r}, uri={uri!r}")
        if BACKENDS[backend].cpu_only and device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"backend {backend!r} runs on the CPU; device={device!r} needs 'torch'")
        self.dim = dim
        self.reduction = check_reduction(reduction)
        self.backend = backend
        self.device = torch.device(device or "cpu")
        self.kl_weight = None if kl_weight is None else float(kl_weight)
        exact_order = reduction in KL_REDUCTIONS or kl_weight is not None  # the vectors' order is the score's
        self.candidates_per_result = candidates_per_result or (2 if exact_order else 10)
        self.ef_search = ef_search
        self.mu = torch.empty(0, dim, device=self.device)
        self.logvar = torch.empty(0, dim, device=self.device)
        self.engine = BACKENDS[backend](self, {"uri": uri, "nprobes": nprobes, "table": _table})

    def __len__(self) -> int:
        return self.engine.size()

    def __repr__(self) -> str:
        score = "" if self.kl_weight is None else f", kl_weight={self.kl_weight}"
        fields = f"dim={self.dim}, reduction={self.reduction!r}, backend={self.backend!r}{score}, size={len(self)}"
        return f"GaussianIndex({fields})"

    @property
    def embeddings(self) -> GaussianEmbeddings:
        """The stored Gaussians, in id order (a database backend reads them from its database: nothing per item is
        kept in this process)."""
        return self.engine.stored()

    def checked(self, embeddings: GaussianEmbeddings, argument: str) -> GaussianEmbeddings:
        """``embeddings`` as 2-D float32 ``GaussianEmbeddings`` on the index's device; ``TypeError`` / ``ValueError``
        naming ``argument`` unless they are Gaussians of the index's dimension that it can score."""
        if not (hasattr(embeddings, "mu") and hasattr(embeddings, "logvar")):
            raise TypeError(f"{argument} must be GaussianEmbeddings (model.encode), got {type(embeddings).__name__}")
        mu, logvar = embeddings.mu, embeddings.logvar  # also from a model's own copy of the class (trust_remote_code)
        embeddings = GaussianEmbeddings(mu[None], logvar[None]) if mu.ndim == 1 else GaussianEmbeddings(mu, logvar)
        if embeddings.dim != self.dim:
            raise ValueError(f"{argument} have dimension {embeddings.dim}, the index {self.dim}")
        embeddings.check(argument)
        check_searchable(embeddings, argument)
        return embeddings.to(device=self.device, dtype=torch.float32)

    def add(self, embeddings: GaussianEmbeddings, sentences: Sequence[str] | None = None) -> None:
        """Append Gaussians, ids from ``len(self)`` on; ``sentences`` (one each) only for a database backend."""
        self.engine.add(self.checked(embeddings, "embeddings"), sentences)

    def store(self, embeddings: GaussianEmbeddings) -> None:
        """Append checked Gaussians to the in-memory copy of an in-process backend (torch, FAISS; the backend keeps its
        own structures up to date)."""
        self.mu = torch.cat([self.mu, embeddings.mu])
        self.logvar = torch.cat([self.logvar, embeddings.logvar])

    def entailing(self, queries: GaussianEmbeddings, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The k stored items x best entailing each query q, by sim(q‖x) (or the search score): (Q, k) scores, ids."""
        return self._search(queries, k, "entailing")

    def entailed_by(self, queries: GaussianEmbeddings, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The k stored items x each query q best entails, by sim(x‖q) (or the search score): (Q, k) scores, ids."""
        return self._search(queries, k, "entailed_by")

    def _search(self, queries: GaussianEmbeddings, k: int, direction: str) -> tuple[torch.Tensor, torch.Tensor]:
        queries = self.checked(queries, "queries")
        self.engine.sync()
        if len(self) == 0:
            raise ValueError("the index is empty: add() Gaussians first")
        if not 1 <= k <= len(self):
            raise ValueError(f"k must be between 1 and len(index) = {len(self)}, got {k}")
        candidate_ids = self.engine.candidates(queries, min(len(self), self.candidates_per_result * k), direction)
        if candidate_ids is None:
            return self._exact_top_k(queries, k, direction)
        # rows another handle added after this search read the database are left to the next search
        candidate_ids = torch.where(candidate_ids < len(self), candidate_ids, -1)
        scores, ids = self.rescore(queries, candidate_ids, direction)
        return scores[:, :k], ids[:, :k]

    def score(self, queries: tuple[torch.Tensor, ...], items: tuple[torch.Tensor, ...], direction: str, paired: bool):
        """Scores of ``queries`` (μ, log σ²) with ``items`` in ``direction`` (sim(q‖x) or sim(x‖q); the search score's
        cosine is symmetric): all pairs ``(Q, N)``, or ``paired`` row by row."""
        pair = (*queries, *items) if direction == "entailing" else (*items, *queries)
        if self.kl_weight is None:
            return (paired_similarity if paired else similarity_matrix)(*pair, self.reduction)
        if paired:
            return paired_search_score(*pair, "entailing", self.kl_weight)  # the pair is already in direction's order
        return search_score_matrix(*(tensor.double() for tensor in pair), self.kl_weight).float()  # as paired

    def _exact_top_k(self, queries: GaussianEmbeddings, k: int, direction: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Every stored item scored, chunk by chunk; the running top k merged with each chunk."""
        best_scores = torch.full((len(queries), 0), float("-inf"), device=self.device)
        best_ids = torch.empty((len(queries), 0), dtype=torch.long, device=self.device)
        stored = self.embeddings.to(device=self.device)
        for start in range(0, len(stored), CHUNK_ROWS):
            items = (stored.mu[start : start + CHUNK_ROWS], stored.logvar[start : start + CHUNK_ROWS])
            scores = self.score((queries.mu, queries.logvar), items, direction, paired=False)
            scores = scores if direction == "entailing" else scores.T
            ids = torch.arange(start, start + scores.shape[1], device=self.device).expand_as(scores)
            # the running best holds lower ids than this chunk, so a stable sort keeps ties in id order
            merged_scores, merged_ids = torch.cat([best_scores, scores], 1), torch.cat([best_ids, ids], 1)
            order = merged_scores.argsort(dim=1, descending=True, stable=True)[:, :k]
            best_scores, best_ids = merged_scores.gather(1, order), merged_ids.gather(1, order)
        return best_scores.cpu(), best_ids.cpu()

    def rescore(
        self, queries: GaussianEmbeddings, candidate_ids: torch.Tensor, direction: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact scores of each query with its candidates ``(Q, C)`` (id −1: score −inf), sorted by descending
        score, ties in id order."""
        scores = torch.full(candidate_ids.shape, float("-inf"))
        # float64 work buffers of (queries, candidates, d): at most RESCORE_ELEMENTS elements each
        step = max(1, min(QUERY_CHUNK, RESCORE_ELEMENTS // max(1, candidate_ids.shape[1] * self.dim)))
        for start in range(0, len(queries), step):
            ids = candidate_ids[start : start + step]
            rows_of = ids.clamp_min(0)  # -1: no candidate (its score stays -inf)
            items = tuple(tensor.cpu() for tensor in self.engine.gaussians(rows_of.to(self.device)))
            rows = queries[start : start + step]
            chunk = self.score((rows.mu[:, None].cpu(), rows.logvar[:, None].cpu()), items, direction, paired=True)
            scores[start : start + step] = torch.where(ids >= 0, chunk, float("-inf"))
        by_id = candidate_ids.argsort(dim=1, stable=True)  # then a stable sort by score keeps ties in id order
        scores, ids = scores.gather(1, by_id), candidate_ids.gather(1, by_id)
        order = scores.argsort(dim=1, descending=True, stable=True)
        return scores.gather(1, order), ids.gather(1, order)

    def base_settings(self) -> dict[str, Any]:
        """The settings every backend shares (what its ranking is)."""
        return {
            "dim": self.dim,
            "reduction": self.reduction,
            "backend": self.backend,
            "candidates_per_result": self.candidates_per_result,
            "ef_search": self.ef_search,
            **({"kl_weight": self.kl_weight} if self.kl_weight is not None else {}),
        }

    def settings(self) -> dict[str, Any]:
        """What [`load`] needs to rebuild this index (``index_config.json``)."""
        return {**self.base_settings(), "size": len(self), **self.engine.settings()}

    @classmethod
    def from_settings(
        cls, settings: dict[str, Any], where: str, integers: Sequence[str] = (), **options: Any
    ) -> GaussianIndex:
        """An empty index as ``settings`` (and the further ``integers`` settings) describe it; ``ValueError`` naming
        ``where`` for a missing or invalid setting."""
        try:
            dim, reduction, backend = int(settings["dim"]), settings["reduction"], settings["backend"]
            numbers = {name: int(settings[name]) for name in ("candidates_per_result", "ef_search", *integers)}
            return cls(dim, reduction, backend, kl_weight=settings.get("kl_weight"), **numbers, **options)
        except KeyError as error:
            raise ValueError(f"{where} has no {error.args[0]!r}: the index is damaged") from None
        except (TypeError, ValueError) as error:
            raise ValueError(f"{where}: {error}") from None

    def save(self, folder: str | Path) -> None:
        """``gaussians.safetensors`` (μ, log σ²), ``index_config.json``, the backend's files and ``manifest.json`` (no
        pickle), built beside ``folder`` and moved in (``gausscse.io.atomic_folder``); a folder that is not a saved
        index is refused."""
        with atomic_folder(folder, SETTINGS_FILE) as staging:
            self.write_files(staging)

    def write_files(self, folder: Path) -> None:
        """The files of [`save`] but the manifest, into ``folder``; a database backend writes only the settings."""
        if not self.engine.database:
            tensors = {"mu": self.mu.cpu().contiguous(), "logvar": self.logvar.cpu().contiguous()}
            save_file(tensors, str(folder / GAUSSIANS_FILE))
            self.engine.write_files(folder)
        write_json(folder / SETTINGS_FILE, self.settings())

    @classmethod
    def open(cls, backend: str, uri: str | Path) -> GaussianIndex:
        """The index in the ``backend`` database at ``uri`` (a local place or a server URL), searched as ``backend``
        says (``"qdrant"``: the exact flat scan, ``"qdrant-hnsw"``: the HNSW index) whichever built it; ``add`` writes
        there."""
        if backend not in BACKENDS or not BACKENDS[backend].database:
            names = [name for name, engine in BACKENDS.items() if engine.database]
            raise ValueError(f"backend must be a database backend, one of {names}, got {backend!r}")
        return BACKENDS[backend].open(uri, cls)

    @classmethod
    def load(cls, folder: str | Path, device: str | torch.device | None = None) -> GaussianIndex:
        """An index saved by [`save`] (all files from one version of the folder, checked against its manifest), or a
        local database; a damaged or missing file raises ``ValueError`` / ``FileNotFoundError`` naming it."""
        folder = Path(folder)
        for backend in BACKENDS.values():  # a database: reopened by its uri
            if backend.database and backend.store_class.holds(folder):
                if (folder / SETTINGS_FILE).exists():
                    raise ValueError(f"{folder} holds both a saved index ({SETTINGS_FILE}) and a database")
                return backend.open(folder, cls, as_built=True)
        return cls.from_files(folder, read_folder(folder, "GaussianIndex"), device)

    @classmethod
    def from_files(
        cls, folder: Path, files: dict[str, bytes], device: str | torch.device | None = None
    ) -> GaussianIndex:
        """The index whose files (``{name: bytes}``, read from ``folder``) [`save`] wrote."""
        if SETTINGS_FILE not in files:
            raise FileNotFoundError(f"{folder} is not a saved GaussianIndex: {SETTINGS_FILE} is missing")
        settings_file = folder / SETTINGS_FILE
        settings = json_value(files[SETTINGS_FILE], settings_file)
        backend = BACKENDS.get(settings.get("backend"))
        if backend is not None and backend.database:  # the data is in the database the settings name
            return backend.reopen(settings, settings_file, cls)
        index = cls.from_settings(settings, str(settings_file), device=device)
        if GAUSSIANS_FILE not in files:
            raise FileNotFoundError(f"{folder / GAUSSIANS_FILE} is missing: the index is incomplete")
        try:
            tensors = load(files.pop(GAUSSIANS_FILE))  # popped: each file's bytes freed once parsed
            stored = GaussianEmbeddings(tensors["mu"], tensors["logvar"])
        except Exception as error:  # safetensors' SafetensorError, a missing tensor, a shape mismatch
            raise ValueError(f"{folder / GAUSSIANS_FILE} is damaged ({first_line(error)})") from None
        index.store(index.checked(stored, f"{folder / GAUSSIANS_FILE}: stored"))  # of another d, or too extreme: named
        size = settings.get("size")
        if type(size) is not int or len(index) != size:  # a bool or a string is no size
            raise ValueError(f"{folder / GAUSSIANS_FILE} holds {len(index)} Gaussians, {settings_file} says {size!r}")
        index.engine.read_files(folder, files)
        return index
