"""Entailment search at scale: ``GaussianIndex`` against a plain FAISS inner-product search and a brute force.

For each size N (default 100k and 1M Gaussians, d = 384) and Q queries (default 1,000, k = 10), side by side, each
method in its own worker process (build time; search time per 1,000 queries, after an untimed warm-up search of
10 queries; peak extra resident memory):

* ``plain_flat_ip`` — a FAISS ``IndexFlatIP`` over N random (2d + 2)-dimensional vectors searched with k: the cost
  of any inner-product search of that width, the floor for the exact FAISS backend (target: ours ≤ 1.2×);
* ``faiss`` — ``GaussianIndex(backend="faiss")``, the exact ``sum`` search (feature maps, ``IndexFlatIP``, a shortlist
  of 10·k re-scored exactly);
* ``torch`` — ``GaussianIndex(backend="torch")``, exact by chunked float64 matrix products; its ids are the truth for
  every recall@10 below;
* ``brute_force`` — ``gausscse.model.gaussian.similarity_matrix`` of all queries against all items, then top-k (the
  all-pairs matrix in memory), run on ``--brute_force_queries`` queries and reported per 1,000;
* ``faiss-hnsw`` — the approximate backend, built once and searched at each ``--ef_search`` (default 128 — the
  backend's default — 256, 512, 1024), a shortlist of 2·k, recall@10 against ``torch`` (target ≥ 0.95 at ≥ 10× the
  exact search's speed);
* ``lancedb`` — ``GaussianIndex(backend="lancedb")``: the vectors in an embedded LanceDB database (in the run's
  scratch folder), LanceDB's flat ``dot`` scan for the shortlist, re-scored exactly; a scan per query, so it is timed
  on ``--brute_force_queries`` queries and reported per 1,000;
* ``lancedb-ann`` — the same database through LanceDB's IVF index (√N partitions), searched at each ``--nprobes``
  (default 20 — the backend's default — 50, 100); its build time includes the index, which the first (warm-up) search
  builds. The LanceDB methods run at the ``--lancedb_sizes`` only (default 100k: at 1M the table alone is 9 GB);
* ``qdrant`` / ``qdrant-hnsw`` — ``GaussianIndex(backend="qdrant")`` / ``"qdrant-hnsw"`` in Qdrant's embedded
  in-memory mode (``uri=":memory:"``, in the worker's own process; its embedded folder mode writes about 85 s per
  10,000 points at d = 384, impractical at 100k). The embedded mode has no HNSW: it scans every point whatever the
  parameters, so ``qdrant-hnsw`` there is a flat scan of the lifted vectors (its build: those two collections) and
  both are timed on ``--brute_force_queries`` queries; a Qdrant server would run the graph;
* ``milvus`` / ``milvus-hnsw`` — ``GaussianIndex(backend="milvus")`` / ``"milvus-hnsw"`` in Milvus Lite (a ``.db``
  file in the run's scratch folder, served by threads of the worker's process): a ``FLAT`` ``IP`` scan (timed on
  ``--brute_force_queries`` queries), and Milvus's HNSW index (M = 32) on the lifted vectors, built at the first
  search (counted in the build) and searched at each ``--ef_search``. Milvus Lite keeps the newest rows (up to
  128 MiB) in a memtable searched by brute force; only the segments flushed from it get the HNSW index, so below
  about 40k Gaussians at d = 384 ``milvus-hnsw`` is a flat scan too.
  The Qdrant and Milvus methods run at the ``--server_sizes`` only (default 100k). Every database runs in the
  method's own process, so its memory is in that process's peak. Like the others, their rows time the
  ``entailing`` direction (the HNSW builds make both directions' graphs); the real-sentence recall below measures
  both directions.

On paper at 1M and 10M (``paper_lines``, also in ``results/BENCHMARKS.md``): every database row holds an id (8 bytes),
μ and log σ² (4d bytes each) and both raw maps (float32, ``search_map_width``: 2d + 2, 3d + 2 with the search score);
an HNSW backend adds per direction a collection of the lifted maps (an id and the same width) and its graph's layer 0
(M·2 neighbour ids of 4 bytes per vector), LanceDB's IVF_FLAT index a copy of the lifted maps and their ids. The index
also keeps μ and log σ² (8d bytes) in memory for the exact re-score.

The Gaussians are synthetic with the ranges of a trained model (the quickstart's on SNLI: μ within ±0.97, log σ²
mostly in −4.6…1.9 around −1.8, Σ log σ² from about −1,090 to −90): a 32-dimensional latent drives μ and log σ²
(sentence embeddings have a low intrinsic dimension), plus a per-item offset of log σ² (general and specific
sentences) and per-item noise. ``--real_model`` adds recall@10 measured on real sentences: the model
encodes ``--real_items`` distinct SNLI-train sentences and 1,000 SNLI-test hypotheses as queries; there each
reduction is measured, in both directions, for the FAISS backends, ``lancedb-ann`` and the Qdrant and Milvus ones
(local modes as above), each at its default settings, against ``torch``: ``sum`` and ``mean_kl`` (monotone in the
KL: the exact FAISS search is exact for both) and ``mean_dim``, whose FAISS shortlist comes from the ``sum`` form.

    python -m bench.bench_search --json results/bench_search_cpu.json --real_model outputs/quickstart
    python -m bench.bench_search --sizes --real_model outputs/quickstart --json results/bench_search_real_cpu.json
    python -m bench.bench_search --sizes 100000 --methods torch faiss lancedb lancedb-ann  # the LanceDB rows alone
    python -m bench.bench_search --sizes 100000 --methods torch faiss qdrant qdrant-hnsw milvus milvus-hnsw

(``--sizes`` with no size: the recall on real sentences alone, about 20 minutes on 2 cores.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench.common import ResidentPeak, json_payload, run_worker
from gausscse.data.registry import load_split
from gausscse.io import write_json
from gausscse.model.gaussian import REDUCTIONS, GaussianEmbeddings, search_map_width, similarity_matrix
from gausscse.search import GaussianIndex
from gausscse.search.backends import milvus_backend, qdrant_backend

WARM_UP_QUERIES = 10  # searched once, untimed, before the timed search
LANCEDB_METHODS = ("lancedb", "lancedb-ann")
SERVER_METHODS = ("qdrant", "qdrant-hnsw", "milvus", "milvus-hnsw")  # in their local modes (module docstring)
METHODS = ("torch", "plain_flat_ip", "faiss", "brute_force", "faiss-hnsw", *LANCEDB_METHODS, *SERVER_METHODS)
SCANNED_QUERIES = ("brute_force", "lancedb", "qdrant", "qdrant-hnsw", "milvus")  # timed on --brute_force_queries
APPROXIMATE_METHODS = ("faiss-hnsw", "lancedb-ann", "qdrant-hnsw", "milvus-hnsw")
ANN_AT_FIRST_SEARCH = ("lancedb-ann", "qdrant-hnsw", "milvus-hnsw")  # their first search builds the ANN index
BACKGROUND_BUILDS = ("milvus", "milvus-hnsw")  # Milvus Lite indexes its flushed segments in a background thread
WIDTH_NAMES = {"faiss-hnsw": "ef", "lancedb-ann": "nprobes", "milvus-hnsw": "ef"}  # the width each one sweeps
EXACT_RATIOS = {  # the exact searches each size's summary compares: (numerator, denominator)
    "faiss_over_plain_flat_ip": ("faiss", "plain_flat_ip"),
    "lancedb_over_faiss": ("lancedb", "faiss"),
    "qdrant_over_faiss": ("qdrant", "faiss"),
    "milvus_over_faiss": ("milvus", "faiss"),
}
DATABASE_LAYOUTS = ("lancedb", "lancedb-ann", *SERVER_METHODS)  # the methods ``stored_bytes_per_gaussian`` knows
HNSW_NEIGHBOURS = {"qdrant-hnsw": qdrant_backend.HNSW_NEIGHBOURS, "milvus-hnsw": milvus_backend.HNSW_NEIGHBOURS}
PAPER_SIZES = (1_000_000, 10_000_000)
LATENT = 32
Search = tuple[str, float, "np.ndarray | None"]  # one timed search: (row label, seconds, ids found)


def synthetic_gaussians(count: int, dim: int, seed: int) -> GaussianEmbeddings:
    """Gaussians from a shared 32-dimensional latent map plus per-item noise, in a trained model's ranges."""
    maps = torch.Generator().manual_seed(1234)
    to_mu = torch.randn(LATENT, dim, generator=maps) / LATENT**0.5
    to_logvar = torch.randn(LATENT, dim, generator=maps) / LATENT**0.5
    generator = torch.Generator().manual_seed(seed)
    mu, logvar = torch.empty(count, dim), torch.empty(count, dim)
    for start in range(0, count, 65536):  # bounded temporaries at 1M
        rows = min(65536, count - start)
        latent = torch.randn(rows, LATENT, generator=generator)
        mu[start : start + rows] = torch.tanh(1.2 * latent @ to_mu + 0.3 * torch.randn(rows, dim, generator=generator))
        generality = 0.5 * torch.randn(rows, 1, generator=generator)  # broad and narrow sentences
        noise = 0.4 * torch.randn(rows, dim, generator=generator)
        logvar[start : start + rows] = (-1.8 + generality + 0.8 * latent @ to_logvar + noise).clamp(-10, 10)
    return GaussianEmbeddings(mu, logvar)


def stored_bytes_per_gaussian(method: str, dim: int, kl_weight: float | None = None) -> int:
    """Bytes a database backend (``DATABASE_LAYOUTS``) stores per Gaussian, from the backends' layouts: a row of id
    (8), μ and log σ² (float32, d each) and both raw maps (float32, ``search_map_width``); per direction, an HNSW
    backend adds a row of the lifted map (an id and the same width: the constant column dropped, the lift added) and
    layer 0 of its graph (2·M neighbour ids of 4 bytes), ``lancedb-ann``'s IVF_FLAT index a copy of the lifted map and
    its id. Without the engines' own overheads (payload, segment and WAL files, graph layers above 0)."""
    width = search_map_width(dim, kl_weight)
    stored = 8 + 4 * (2 * dim + 2 * width)
    lifted = 8 + 4 * width
    if method in HNSW_NEIGHBOURS:
        stored += 2 * (lifted + 2 * HNSW_NEIGHBOURS[method] * 4)
    elif method == "lancedb-ann":
        stored += 2 * lifted
    return stored


def paper_lines(dim: int, methods: tuple[str, ...] = DATABASE_LAYOUTS) -> list[str]:
    """One line per database method in ``methods``: the bytes it stores per Gaussian of dimension ``dim``
    (``stored_bytes_per_gaussian``) and what that comes to at ``PAPER_SIZES`` (in decimal GB)."""
    lines = []
    for method in (name for name in DATABASE_LAYOUTS if name in methods):
        stored = stored_bytes_per_gaussian(method, dim)
        at_sizes = ", ".join(f"{size // 1_000_000}M: {stored * size / 1e9:,.1f} GB" for size in PAPER_SIZES)
        lines.append(f"`{method}` {stored:,} bytes per Gaussian ({at_sizes})")
    return lines


def size_summary(size: int, rows: list[dict]) -> dict:
    """The ratios of one size (those whose methods ran): each exact database or FAISS backend over its reference
    (``EXACT_RATIOS``); each approximate row's speed-up over the exact searches, with its recall."""
    seconds = {row["method"]: row["seconds_per_1000_queries"] for row in rows}
    summary = {
        "size": size,
        "approximate": [
            {
                "method": row["method"],
                "recall_at_k": row["recall_at_k"],
                "speedup_vs_torch": seconds["torch"] / row["seconds_per_1000_queries"],
                **(
                    {"speedup_vs_faiss": seconds["faiss"] / row["seconds_per_1000_queries"]}
                    if "faiss" in seconds
                    else {}
                ),
            }
            for row in rows
            if row["method"].split(" ")[0] in APPROXIMATE_METHODS
        ],
    }
    for ratio, (numerator, denominator) in EXACT_RATIOS.items():
        if numerator in seconds and denominator in seconds:
            summary[ratio] = seconds[numerator] / seconds[denominator]
    return summary


def recall_at_k(truth: np.ndarray, found: np.ndarray) -> float:
    """Mean over queries of |found ∩ truth| / k."""
    return float(np.mean([len(set(a) & set(b)) / truth.shape[1] for a, b in zip(truth, found, strict=True)]))


def database_options(backend: str, folder: Path, name: str) -> dict[str, str]:
    """The ``uri`` option of a database backend's index called ``name`` (letters, digits, ``-``, ``_``) in the
    scratch ``folder`` (none for the others): a LanceDB folder, a collection of Qdrant's in-memory store, a Milvus
    Lite file of its own."""
    name = name.replace("-", "_")  # Milvus collection names: letters, digits and _
    engine = backend.split("-")[0]
    uris = {
        "lancedb": str(folder / f"{name}.lancedb"),
        "qdrant": f"{qdrant_backend.MEMORY}#{name}",
        "milvus": str(folder / f"{name}.db"),
    }
    return {"uri": uris[engine]} if engine in uris else {}


def wait_until_idle(window: float = 1.0, busy: float = 0.1, limit: float = 1800.0) -> float:
    """Wait until this process's threads use under ``busy`` CPU seconds in ``window`` seconds of wall time (an
    engine's background index builds are done), ``limit`` seconds at most; the ``time.perf_counter()`` at which that
    idle window began (or the limit ran out)."""
    deadline = time.perf_counter() + limit
    while True:
        began, cpu = time.perf_counter(), time.process_time()
        if began > deadline:
            return began
        time.sleep(window)
        if time.process_time() - cpu < busy:
            return began


def plain_flat_ip_search(size: int, dim: int, queries: int, k: int) -> tuple[float, list[Search]]:
    """Build seconds and the timed search of a FAISS ``IndexFlatIP`` over ``size`` random (2d + 2)-dimensional
    vectors."""
    import faiss

    start = time.perf_counter()
    generator = np.random.default_rng(0)
    vectors = generator.standard_normal((size, 2 * dim + 2), dtype=np.float32)
    plain = faiss.IndexFlatIP(vectors.shape[1])
    plain.add(vectors)
    query_vectors = generator.standard_normal((queries, 2 * dim + 2), dtype=np.float32)
    build_seconds = time.perf_counter() - start
    plain.search(query_vectors[:WARM_UP_QUERIES], k)
    start = time.perf_counter()
    plain.search(query_vectors, k)
    return build_seconds, [("plain_flat_ip", time.perf_counter() - start, None)]


def index_search(
    method: str, items: GaussianEmbeddings, queries: GaussianEmbeddings, k: int, widths: list[int | None], uri: dict
) -> tuple[float, list[Search]]:
    """Build seconds of ``GaussianIndex(backend=method)`` over ``items`` (with ``uri``: a database backend's
    options), and one timed ``entailing`` search of ``queries`` per search width in ``widths`` (``None``: the one
    search of a method without widths)."""
    start = time.perf_counter()
    index = GaussianIndex(items.dim, "sum", method, **uri)
    index.add(items)
    if method.startswith("faiss"):
        index.engine.direction("entailing")  # build now, so the search is timed alone
    if method in ANN_AT_FIRST_SEARCH:  # the first search builds the database's ANN index: counted in the build
        index.entailing(queries[:WARM_UP_QUERIES], k)
    build_seconds = (wait_until_idle() if method in BACKGROUND_BUILDS else time.perf_counter()) - start
    index.entailing(queries[:WARM_UP_QUERIES], k)  # first touch of the index's memory, untimed
    searches = []
    for width in widths:
        if method == "faiss-hnsw":
            index.engine.direction("entailing").set_ef_search(width)
        elif method == "lancedb-ann":
            index.nprobes = width
        elif method == "milvus-hnsw":
            index.ef_search = width
        start = time.perf_counter()
        _, found = index.entailing(queries, k)
        label = method if width is None else f"{method} ({WIDTH_NAMES[method]} {width})"
        searches.append((label, time.perf_counter() - start, found.numpy()))
    return build_seconds, searches


def run_method(
    method: str,
    size: int,
    dim: int,
    queries: int,
    k: int,
    truth_path: Path,
    brute_queries: int,
    widths: dict[str, list[int]],
) -> list[dict]:
    """Build and search with ``method`` in this (fresh) process: one row, or for an approximate method one row per
    search width in ``widths[method]`` (one build, searched at each width). The ``torch`` run saves the true ids; a
    database goes beside them."""
    items = synthetic_gaussians(size, dim, seed=0)
    query_gaussians = synthetic_gaussians(queries, dim, seed=1)
    timed_queries = brute_queries if method in SCANNED_QUERIES else queries
    with ResidentPeak() as peak:
        if method == "plain_flat_ip":
            build_seconds, searches = plain_flat_ip_search(size, dim, queries, k)
        elif method == "brute_force":
            start = time.perf_counter()
            subset = query_gaussians[:brute_queries]
            scores = similarity_matrix(subset.mu, subset.logvar, items.mu, items.logvar, "sum")  # sim(q‖x), Q×N
            build_seconds, searches = (
                0.0,
                [(method, time.perf_counter() - start, scores.topk(k, dim=1).indices.numpy())],
            )
        else:
            uri = database_options(method, truth_path.parent, f"{method}_{size}")
            method_widths = widths.get(method, [None])
            build_seconds, searches = index_search(
                method, items, query_gaussians[:timed_queries], k, method_widths, uri
            )
    rows = []
    for label, seconds, ids in searches:
        row = {"method": label, "size": size, "build_seconds": build_seconds, "queries_timed": timed_queries}
        row["seconds_per_1000_queries"] = seconds * 1000 / timed_queries
        row["peak_extra_mib"] = peak.extra_bytes / 2**20  # of the whole process: build and every search
        if method == "torch":
            np.save(truth_path, ids)
        elif ids is not None:
            row["recall_at_k"] = recall_at_k(np.load(truth_path)[: len(ids)], ids)
        rows.append(row)
    return rows


def summary_lines(summary: dict, k: int) -> list[str]:
    """One size's ratios (``size_summary``) as text lines: the exact ratios, then one line per approximate row."""
    lines = [
        f"N={summary['size']:,}: exact {numerator} / {denominator} = {summary[key]:.2f}x the time"
        for key, (numerator, denominator) in EXACT_RATIOS.items()
        if key in summary
    ]
    for row in summary["approximate"]:
        versus_faiss = f", {row['speedup_vs_faiss']:.1f}x than exact faiss" if "speedup_vs_faiss" in row else ""
        lines.append(
            f"N={summary['size']:,}: {row['method']} {row['speedup_vs_torch']:.1f}x faster than exact torch"
            f"{versus_faiss}, recall@{k} {row['recall_at_k']:.3f}"
        )
    return lines


def distinct_texts(name: str, split: str, fields: tuple[str, ...]) -> list[str]:
    """The distinct non-empty texts of ``fields`` of a built-in split (``load_split``), row by row, in file order."""
    rows = load_split(name, split)
    return list(
        dict.fromkeys(text for row in zip(*(rows[field] for field in fields), strict=True) for text in row if text)
    )


def real_recall(model_path: str, item_count: int, k: int, methods: tuple[str, ...] = METHODS) -> list[dict]:
    """Recall@k of the FAISS backends, ``lancedb-ann`` and the Qdrant and Milvus ones among ``methods`` (each at its
    default settings; the databases in their local modes) on real sentences, both directions, every reduction
    (exact: ``torch``). One index per backend and reduction answers both directions."""
    from gausscse import GaussCSEModel

    items_text = distinct_texts("snli", "train", ("premise", "hypothesis"))[:item_count]
    queries_text = distinct_texts("snli", "test", ("hypothesis",))[:1000]
    model = GaussCSEModel.from_pretrained(model_path).eval()
    items = model.encode(items_text, batch_size=64, max_length=64, show_progress_bar=True)
    queries = model.encode(queries_text, batch_size=64, max_length=64)
    backends = tuple(name for name in ("faiss", "faiss-hnsw", "lancedb-ann", *SERVER_METHODS) if name in methods)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:  # the databases
        for reduction in REDUCTIONS:
            indexes = {}
            for backend in ("torch", *backends):
                options = database_options(backend, Path(scratch), f"{reduction}_{backend}")
                indexes[backend] = GaussianIndex(items.dim, reduction, backend, **options)
                indexes[backend].add(items)
            for direction in ("entailing", "entailed_by"):
                _, truth = getattr(indexes["torch"], direction)(queries, k)
                for backend in backends:
                    _, found = getattr(indexes[backend], direction)(queries, k)
                    recall = recall_at_k(truth.numpy(), found.numpy())
                    rows.append(
                        {"reduction": reduction, "direction": direction, "backend": backend, "recall_at_k": recall}
                    )
    return rows


def runs_at(method: str, size: int, args: argparse.Namespace) -> bool:
    """Whether ``method`` runs at ``size``: the LanceDB ones at ``--lancedb_sizes``, the Qdrant and Milvus ones at
    ``--server_sizes``, the others at every size."""
    if method in LANCEDB_METHODS:
        return size in args.lancedb_sizes
    return size in args.server_sizes if method in SERVER_METHODS else True


def parse_args() -> argparse.Namespace:
    """The command line (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[100_000, 1_000_000], help="none: real recall only")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--brute_force_queries", type=int, default=100)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--real_model", default=None, help="also measure recall on real SNLI sentences")
    parser.add_argument("--real_items", type=int, default=20000)
    parser.add_argument(
        "--ef_search", type=int, nargs="+", default=[128, 256, 512, 1024], help="HNSW widths to measure (one build)"
    )
    parser.add_argument("--nprobes", type=int, nargs="+", default=[20, 50, 100], help="LanceDB IVF partitions scanned")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="default: all")
    parser.add_argument(
        "--lancedb_sizes", type=int, nargs="*", default=[100_000], help="sizes the LanceDB methods run at"
    )
    parser.add_argument(
        "--server_sizes", type=int, nargs="*", default=[100_000], help="sizes the Qdrant and Milvus methods run at"
    )
    parser.add_argument("--json", type=Path, help="also write the results here (atomically)")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--truth", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.sizes and not args.real_model:
        parser.error("nothing to measure: give --sizes, --real_model or both")
    if args.sizes and "torch" not in args.methods:
        parser.error("--methods must include torch: its ids are the truth every recall is measured against")
    return args


def main() -> None:
    """Run each method of each size in a worker process, then the real-sentence recall; print, and save ``--json``."""
    args = parse_args()
    if args.worker:
        widths = {"faiss-hnsw": args.ef_search, "lancedb-ann": args.nprobes, "milvus-hnsw": args.ef_search}
        found = run_method(
            args.worker, args.size, args.dim, args.queries, args.k, args.truth, args.brute_force_queries, widths
        )
        print(json.dumps({"rows": found}))
        return

    device_name = platform.processor() or "cpu"
    print(f"entailment search, d={args.dim}, {args.queries} queries, k={args.k}, {os.cpu_count()} CPU cores")
    rows, summary = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for size in args.sizes:
            truth = Path(scratch) / f"truth_{size}.npy"
            for method in (name for name in METHODS if name in args.methods and runs_at(name, size, args)):
                found = run_worker(
                    __spec__.name,
                    ["--worker", method, "--size", str(size), "--truth", str(truth), "--dim", str(args.dim),
                     "--queries", str(args.queries), "-k", str(args.k), "--ef_search", *map(str, args.ef_search),
                     "--nprobes", *map(str, args.nprobes), "--brute_force_queries", str(args.brute_force_queries)],
                )["rows"]  # fmt: skip
                for row in found:
                    rows.append(row)
                    recall = f", recall@{args.k} {row['recall_at_k']:.3f}" if "recall_at_k" in row else ""
                    print(
                        f"N={size:>9,} {row['method']:20s} build {row['build_seconds']:7.1f} s, "
                        f"{row['seconds_per_1000_queries']:8.2f} s per 1,000 queries, "
                        f"peak +{row['peak_extra_mib']:,.0f} MiB{recall}",
                        flush=True,
                    )
            summary.append(size_summary(size, [row for row in rows if row["size"] == size]))
            for line in summary_lines(summary[-1], args.k):
                print(line, flush=True)
    for line in paper_lines(args.dim, tuple(args.methods)):
        print(f"on paper: {line}")
    real = real_recall(args.real_model, args.real_items, args.k, tuple(args.methods)) if args.real_model else []
    for row in real:
        where = f"real SNLI, {row['reduction']:8s} {row['direction']:11s} {row['backend']:11s}"
        print(f"{where} recall@{args.k} {row['recall_at_k']:.3f}")
    if args.json:
        write_json(args.json, json_payload(args, device_name, rows=rows, summary=summary, real=real))


if __name__ == "__main__":
    main()
