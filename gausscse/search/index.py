"""``GaussianIndex``: top-k entailment search over stored diagonal Gaussians, scored exactly, on the shortlists of a
search backend (``gausscse.search.backends``: every item, FAISS, LanceDB, Qdrant or Milvus)."""

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
from gausscse.search.backends import BACKENDS

CHUNK_ROWS = 4096  # stored items scored per matrix product (torch backend)
QUERY_CHUNK = 256  # queries re-scored at a time (the shortlist backends) ...
RESCORE_ELEMENTS = 1 << 22  # ... fewer when their candidates × d exceed this
GAUSSIANS_FILE = "gaussians.safetensors"
SETTINGS_FILE = "index_config.json"
KL_TERM_LIMIT = 1e30  # the largest μ² or μ²/σ² an index accepts (its float32 sums cannot overflow)


def check_searchable(embeddings: GaussianEmbeddings, argument: str) -> None:
    """``ValueError`` naming the first row of ``embeddings`` whose KL terms an index cannot score without overflow:
    μ² or μ²/σ² above ``KL_TERM_LIMIT`` (1e30); log σ² is already within ±``LOGVAR_BOUND`` (``GaussianEmbeddings.
    check``). Every Gaussian a model encodes is far inside (|μ| ≤ 1 under tanh); within the limits every backend's
    results are exact (re-scored)."""
    lowest, highest = torch.aminmax(embeddings.mu) if embeddings.mu.numel() else (torch.tensor(0.0),) * 2
    largest_mu = max(-float(lowest), float(highest))
    if largest_mu**2 * math.exp(LOGVAR_BOUND) <= KL_TERM_LIMIT:  # every row safe (|log σ²| ≤ LOGVAR_BOUND): no copy
        return
    mu, logvar = embeddings.mu.float(), embeddings.logvar.float()
    # log max(μ², μ²/σ²) per row, in the log domain: no float64 copy of the batch, no overflow
    log_term = (2.0 * mu.abs().log() - logvar.clamp_max(0.0)).amax(dim=-1)
    bad = log_term > math.log(KL_TERM_LIMIT)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"{argument}[{row}] is too extreme to search: an index takes μ² and μ²/σ² up to {KL_TERM_LIMIT:.0e}, this "
            f"row reaches {math.exp(min(float(log_term[row]), 700.0)):.4g}"
        )


def sort_by_score_then_id(scores: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort each row by descending score; equal scores keep ascending id order (deterministic ties)."""
    by_id = ids.argsort(dim=1, stable=True)
    scores, ids = scores.gather(1, by_id), ids.gather(1, by_id)
    order = scores.argsort(dim=1, descending=True, stable=True)
    return scores.gather(1, order), ids.gather(1, order)


class GaussianIndex:
    """Stored Gaussians and top-k search in both entailment directions.

    ``entailing(q, k)`` ranks the stored items x by sim(q‖x) — the items that entail the query (evidence for a claim);
    ``entailed_by(q, k)`` ranks them by sim(x‖q) — what the query entails. The returned scores are always the exact
    similarities of the model's reduction, highest first, ties in id order.

    With ``kl_weight=λ`` (a model's ``config.search_kl_weight``) the index ranks by the model's search score
    cos(μ_q, μ_x) − λ · KL / d instead (KL(q‖x) for ``entailing``, KL(x‖q) for ``entailed_by``): relevance (the cosine
    of the means) plus direction; λ = 0 is the cosine. The returned scores are then that exact search score. Every
    backend serves it: its two terms are one inner product of ``query_map`` and ``stored_map`` vectors (3d + 2 values).

    Backends:

    * ``"torch"`` — exact for both reductions: every stored item is scored by chunked matrix products (on ``device``:
      CPU or GPU).
    * ``"faiss"`` — a FAISS ``IndexFlatIP`` over the (2d + 2)-dimensional ``kl_feature_map`` vectors: their inner
      product is −KL(q‖x) (or −KL(x‖q)), so its top hits are the top ``sum`` and ``mean_kl`` similarities (both
      decrease with the total KL). FAISS computes in float32,
      where the expanded KL loses digits at small variances, so a shortlist of ``candidates_per_result × k`` hits is
      re-scored exactly (the KL summed in float64, as ``similarity_matrix``) and re-sorted.
    * ``"faiss-hnsw"`` — approximate: an HNSW graph (``ef_search`` candidates explored per query) over the same vectors
      turned into a nearest-neighbour problem (``gausscse.search.backends.faiss_backend``); the shortlist is re-scored
      exactly as above.

    ``mean_dim`` models through FAISS (mean_k 1/(1 + KL_k) is no function of the total KL): the shortlist comes from
    the ``sum`` form and is re-ranked by the exact ``mean_dim`` similarity, so results are approximate even with
    ``"faiss"`` (recall measured in ``bench/bench_search.py``); ``"torch"`` is exact for them.

    * ``"lancedb"`` — an embedded LanceDB database at ``uri`` holds the Gaussians, the sentences (``add(...,
      sentences=...)``) and the ``kl_feature_map`` vectors of both directions; a flat scan with its ``dot`` metric
      gives the shortlist, re-scored exactly as for ``"faiss"`` (``gausscse.search.backends.lancedb_backend``). Every
      ``add`` is written to the database; ``GaussianIndex.load(uri)`` reopens it.
    * ``"lancedb-ann"`` — the same database searched through LanceDB's own IVF index (``nprobes`` partitions per
      query; built at the first search) over the vectors turned into a nearest-neighbour problem as for
      ``"faiss-hnsw"``, re-scored exactly.
    * ``"qdrant"``, ``"milvus"`` — the same rows in a Qdrant or Milvus collection at ``uri`` (a local place or a
      server), a flat scan under the engine's raw inner product; ``"qdrant-hnsw"``, ``"milvus-hnsw"`` — the engine's
      HNSW graph on the lifted vectors (``ef_search``); re-scored exactly (``gausscse.search.backends.qdrant_backend``,
      ``milvus_backend``).

    A FAISS index is built per direction when that direction is first searched and grows with later ``add`` calls
    (an approximate one is rebuilt if a new item falls outside its transform). ``index.engine`` is the backend
    (``gausscse.search.backends``: the interface and one module per engine).

    Args:
        dim: the dimension d of the Gaussians.
        reduction: the model's ``config.similarity_reduction`` (``"sum"``, ``"mean_kl"`` or ``"mean_dim"``).
        backend: a name of ``gausscse.search.backends.BACKENDS``: ``"torch"``, ``"faiss"``, ``"faiss-hnsw"``,
            ``"lancedb"``, ``"lancedb-ann"``, ``"qdrant"``, ``"qdrant-hnsw"``, ``"milvus"``, ``"milvus-hnsw"``.
        device: where the torch backend keeps the Gaussians and scores (default CPU; FAISS backends: CPU only).
        candidates_per_result: shortlist size per requested hit for the FAISS backends (``"faiss"``: float32
            misorders only near-ties; ``"faiss-hnsw"``: recall is set by ``ef_search``, a longer shortlist adds
            nothing — both measured in ``bench/bench_search.py``). Default: 2 for ``sum`` and ``mean_kl`` models, 10
            for ``mean_dim`` (their shortlist comes from the ``sum`` form and needs room).
        ef_search: HNSW candidates explored per query.
        uri: the database of a database backend: a LanceDB folder; a Qdrant folder, ``":memory:"`` or server URL; a
            Milvus Lite ``.db`` file or server URI (``#name`` picks a Qdrant/Milvus collection). Created; one that
            already holds an index is refused: reopen it with [`load`].
        nprobes: IVF partitions scanned per query by ``"lancedb-ann"``.
        kl_weight: rank by the search score of this λ ≥ 0 (``None``, the default: by the similarity).

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
        if dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {tuple(BACKENDS)}, got {backend!r}")
        for name, value in (
            ("candidates_per_result", candidates_per_result),
            ("ef_search", ef_search),
            ("nprobes", nprobes),
        ):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        if kl_weight is not None and (isinstance(kl_weight, bool) or not 0 <= kl_weight < float("inf")):
            raise ValueError(f"kl_weight must be a finite number >= 0 (or None: rank by similarity), got {kl_weight!r}")
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
        # the backend: which stored items each query is scored against, and what it builds and saves for that
        self.engine = BACKENDS[backend](self, {"uri": uri, "nprobes": nprobes, "table": _table})

    def __len__(self) -> int:
        return self.mu.shape[0]

    def __repr__(self) -> str:
        score = "" if self.kl_weight is None else f", kl_weight={self.kl_weight}"
        return (
            f"GaussianIndex(dim={self.dim}, reduction={self.reduction!r}, backend={self.backend!r}{score}, "
            f"size={len(self)})"
        )

    @property
    def embeddings(self) -> GaussianEmbeddings:
        """The stored Gaussians, in id order."""
        return GaussianEmbeddings(self.mu, self.logvar)

    def checked(self, embeddings: GaussianEmbeddings, argument: str) -> GaussianEmbeddings:
        """``embeddings`` as float32 ``GaussianEmbeddings`` (2-D) on the index's device; ``ValueError`` / ``TypeError``
        naming ``argument`` when they are not Gaussians of the index's dimension that it can score."""
        if not (hasattr(embeddings, "mu") and hasattr(embeddings, "logvar")):
            raise TypeError(
                f"{argument} must be GaussianEmbeddings (model.encode(...)), got {type(embeddings).__name__}"
            )
        # also the GaussianEmbeddings of a model loaded with trust_remote_code (its own copy of the class)
        embeddings = GaussianEmbeddings(embeddings.mu, embeddings.logvar)
        if embeddings.mu.ndim == 1:
            embeddings = GaussianEmbeddings(embeddings.mu[None], embeddings.logvar[None])
        if embeddings.dim != self.dim:
            raise ValueError(f"{argument} have dimension {embeddings.dim}, the index {self.dim}")
        embeddings.check(argument)
        check_searchable(embeddings, argument)
        return embeddings.to(device=self.device, dtype=torch.float32)

    def add(self, embeddings: GaussianEmbeddings, sentences: Sequence[str] | None = None) -> None:
        """Append Gaussians; their ids continue from ``len(self)``. ``sentences`` (one per Gaussian) are stored in
        the database by the database backends ([`SentenceIndex`] keeps them for the others)."""
        self.engine.add(self.checked(embeddings, "embeddings"), sentences)

    def store(self, embeddings: GaussianEmbeddings) -> None:
        """Append checked Gaussians to the in-memory copy (the backend keeps its own structures up to date)."""
        self.mu = torch.cat([self.mu, embeddings.mu])
        self.logvar = torch.cat([self.logvar, embeddings.logvar])

    def entailing(self, queries: GaussianEmbeddings, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The k stored items that best entail each query: highest sim(query‖item) first; ``(Q, k)`` scores, ids."""
        return self._search(queries, k, "entailing")

    def entailed_by(self, queries: GaussianEmbeddings, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The k stored items each query best entails: highest sim(item‖query) first; ``(Q, k)`` scores, ids."""
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

    def _exact_top_k(self, queries: GaussianEmbeddings, k: int, direction: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Every stored item scored, chunk by chunk; the running top k merged with each chunk."""
        best_scores = torch.full((len(queries), 0), float("-inf"), device=self.device)
        best_ids = torch.empty((len(queries), 0), dtype=torch.long, device=self.device)
        for start in range(0, len(self), CHUNK_ROWS):
            mu, logvar = self.mu[start : start + CHUNK_ROWS], self.logvar[start : start + CHUNK_ROWS]
            pair = (queries.mu, queries.logvar, mu, logvar)
            if direction == "entailed_by":  # sim(x‖q); the cosine of the search score is symmetric
                pair = (mu, logvar, queries.mu, queries.logvar)
            if self.kl_weight is None:
                scores = similarity_matrix(*pair, self.reduction)
            else:  # in float64, rounded once: the scores the re-scoring backends return (paired_search_score)
                scores = search_score_matrix(*(tensor.double() for tensor in pair), self.kl_weight).float()
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
        """Exact scores (similarities, or the search score) of each query with its candidates ``(Q, C)`` (id −1 =
        none: score −inf), sorted by descending score, ties in id order."""
        scores = torch.full(candidate_ids.shape, float("-inf"))
        # float64 work buffers of (queries, candidates, d): at most RESCORE_ELEMENTS elements each
        step = max(1, min(QUERY_CHUNK, RESCORE_ELEMENTS // max(1, candidate_ids.shape[1] * self.dim)))
        for start in range(0, len(queries), step):
            ids = candidate_ids[start : start + step]
            found = ids >= 0
            item_mu, item_logvar = self.mu[ids.clamp_min(0)].cpu(), self.logvar[ids.clamp_min(0)].cpu()
            query_mu = queries.mu[start : start + step, None, :].cpu()
            query_logvar = queries.logvar[start : start + step, None, :].cpu()
            if self.kl_weight is not None:
                chunk = paired_search_score(query_mu, query_logvar, item_mu, item_logvar, direction, self.kl_weight)
            elif direction == "entailing":
                chunk = paired_similarity(query_mu, query_logvar, item_mu, item_logvar, self.reduction)
            else:
                chunk = paired_similarity(item_mu, item_logvar, query_mu, query_logvar, self.reduction)
            scores[start : start + step] = torch.where(found, chunk, float("-inf"))
        return sort_by_score_then_id(scores, candidate_ids)

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

    def save(self, folder: str | Path) -> None:
        """A folder: ``gaussians.safetensors`` (μ, log σ²), ``index_config.json``, what the backend built (for the
        FAISS backends a FAISS file ``<direction>.faiss`` per direction, built now if no query built it yet, so that a
        loaded index answers its first query at once) and ``manifest.json`` (sizes and SHA-256 of the files, checked
        by [`load`]); no pickle anywhere. Built beside ``folder`` and swapped in whole; an existing folder that is not
        a saved index is refused."""
        with atomic_folder(folder, SETTINGS_FILE) as staging:
            self.write_files(staging)

    def write_files(self, folder: Path) -> None:
        """Write the files of [`save`] (all but the manifest) into the existing ``folder``. An index whose backend
        keeps a database writes only ``index_config.json``: its data stays in the database that file names."""
        if not self.engine.database:
            save_file(
                {"mu": self.mu.cpu().contiguous(), "logvar": self.logvar.cpu().contiguous()},
                str(folder / GAUSSIANS_FILE),
            )
            self.engine.write_files(folder)
        write_json(folder / SETTINGS_FILE, self.settings())

    @classmethod
    def load(cls, folder: str | Path, device: str | torch.device | None = None) -> GaussianIndex:
        """An index saved by [`save`] (what its backend built is read back, not rebuilt), or a local database. All
        files come from one version of the folder, checked against its manifest (``gausscse.io.read_folder``); a
        damaged or missing file raises ``ValueError`` / ``FileNotFoundError`` naming it."""
        folder = Path(folder)
        for backend in BACKENDS.values():  # a database: reopened by its uri
            if backend.holds_index(folder):
                if (folder / SETTINGS_FILE).exists():
                    raise ValueError(
                        f"{folder} holds both a saved index ({SETTINGS_FILE}) and a database: load neither"
                    )
                return backend.open(folder)
        return cls.from_files(folder, read_folder(folder, "GaussianIndex"), device)

    @classmethod
    def from_files(
        cls, folder: Path, files: dict[str, bytes], device: str | torch.device | None = None
    ) -> GaussianIndex:
        """The index whose files (``{name: bytes}``, as read from ``folder``) [`save`] wrote."""
        if SETTINGS_FILE not in files:
            raise FileNotFoundError(f"{folder} is not a saved GaussianIndex: {SETTINGS_FILE} is missing")
        settings = json_value(files[SETTINGS_FILE], folder / SETTINGS_FILE)
        backend = BACKENDS.get(settings.get("backend"))
        if backend is not None and backend.database:  # the data is in the database the settings name
            if "uri" not in settings:
                raise ValueError(f"{folder / SETTINGS_FILE} has no 'uri': the index is damaged")
            try:
                index = backend.open(settings["uri"])
            except FileNotFoundError as error:
                raise FileNotFoundError(
                    f"{folder / SETTINGS_FILE} names the database {settings['uri']}, which is gone ({error})"
                ) from None
            index.engine.check_saved(settings, folder / SETTINGS_FILE)
            if len(index) != settings.get("size"):
                stated = settings.get("size")
                raise ValueError(f"{settings['uri']} holds {len(index)} Gaussians; {SETTINGS_FILE} says {stated}")
            return index
        try:
            index = cls(
                int(settings["dim"]),
                settings["reduction"],
                settings["backend"],
                device=device,
                candidates_per_result=int(settings["candidates_per_result"]),
                ef_search=int(settings["ef_search"]),
                kl_weight=settings.get("kl_weight"),
            )
            size = int(settings["size"])
        except KeyError as error:
            raise ValueError(f"{folder / SETTINGS_FILE} has no {error.args[0]!r}: the index is damaged") from None
        except (TypeError, ValueError) as error:
            raise ValueError(f"{folder / SETTINGS_FILE}: {error}") from None
        if GAUSSIANS_FILE not in files:
            raise FileNotFoundError(f"{folder / GAUSSIANS_FILE} is missing: the index is incomplete")
        try:
            tensors = load(files.pop(GAUSSIANS_FILE))  # popped: each file's bytes freed once parsed
            stored = GaussianEmbeddings(tensors["mu"], tensors["logvar"])
        except Exception as error:  # safetensors' SafetensorError, a missing tensor, a shape mismatch
            raise ValueError(f"{folder / GAUSSIANS_FILE} is damaged ({first_line(error)})") from None
        try:
            index.store(index.checked(stored, "stored"))
        except ValueError as error:
            raise ValueError(f"{folder / GAUSSIANS_FILE}: {error}") from None
        if len(index) != size:
            raise ValueError(f"{folder / GAUSSIANS_FILE} holds {len(index)} Gaussians, {SETTINGS_FILE} says {size}")
        index.engine.read_files(folder, files)
        return index


__all__ = ["BACKENDS", "GaussianIndex"]
