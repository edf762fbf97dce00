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
  builds. The LanceDB methods run at the ``--lancedb_sizes`` only (default 100k: at 1M the table alone is 9 GB).

The Gaussians are synthetic with the ranges of a trained model (the quickstart's on SNLI: μ within ±0.97, log σ²
mostly in −4.6…1.9 around −1.8, Σ log σ² from about −1,090 to −90): a 32-dimensional latent drives μ and log σ²
(sentence embeddings have a low intrinsic dimension), plus a per-item offset of log σ² (general and specific
sentences) and per-item noise. ``--real_model`` adds recall@10 measured on real sentences: the model
encodes ``--real_items`` distinct SNLI-train sentences and 1,000 SNLI-test hypotheses as queries; there each
reduction is measured: ``sum`` and ``mean_kl`` (monotone in the KL: the exact FAISS search is exact for both) and
``mean_dim``, whose FAISS shortlist comes from the ``sum`` form.

    python -m bench.bench_search --json results/bench_search_cpu.json --real_model outputs/quickstart
    python -m bench.bench_search --sizes --real_model outputs/quickstart --json results/bench_search_real_cpu.json
    python -m bench.bench_search --sizes 100000 --methods torch faiss lancedb lancedb-ann  # the LanceDB rows alone

(``--sizes`` with no size: the recall on real sentences alone, a few minutes.)
"""

from __future__ import annotations

import argparse
import itertools
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
from gausscse.model.gaussian import REDUCTIONS, GaussianEmbeddings, similarity_matrix
from gausscse.search import GaussianIndex

WARM_UP_QUERIES = 10  # searched once, untimed, before the timed search
METHODS = ("torch", "plain_flat_ip", "faiss", "brute_force", "faiss-hnsw", "lancedb", "lancedb-ann")
SCANNED_QUERIES = ("brute_force", "lancedb")  # timed on --brute_force_queries queries
LANCEDB_METHODS = ("lancedb", "lancedb-ann")
WIDTH_NAMES = {"faiss-hnsw": "ef", "lancedb-ann": "nprobes"}  # the search width each approximate method sweeps
LATENT = 32


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


def size_summary(size: int, rows: list[dict]) -> dict:
    """The ratios of one size (those whose methods ran): exact FAISS backend over a plain IndexFlatIP search, LanceDB's
    exact backend over the FAISS one; each approximate row's speed-up over the exact searches, with its recall."""
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
            if row["method"].split(" ")[0] in WIDTH_NAMES
        ],
    }
    for ratio, (numerator, denominator) in {
        "faiss_over_plain_flat_ip": ("faiss", "plain_flat_ip"),
        "lancedb_over_faiss": ("lancedb", "faiss"),
    }.items():
        if numerator in seconds and denominator in seconds:
            summary[ratio] = seconds[numerator] / seconds[denominator]
    return summary


def recall_at_k(truth: np.ndarray, found: np.ndarray) -> float:
    """Mean over queries of |found ∩ truth| / k."""
    return float(np.mean([len(set(a) & set(b)) / truth.shape[1] for a, b in zip(truth, found, strict=True)]))


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
    LanceDB database goes beside them."""
    items = synthetic_gaussians(size, dim, seed=0)
    query_gaussians = synthetic_gaussians(queries, dim, seed=1)
    timed_queries = brute_queries if method in SCANNED_QUERIES else queries
    searches: list[tuple[str, float, np.ndarray | None]] = []  # (label, seconds, ids)
    with ResidentPeak() as peak:
        start = time.perf_counter()
        if method == "plain_flat_ip":
            import faiss

            generator = np.random.default_rng(0)
            vectors = generator.standard_normal((size, 2 * dim + 2), dtype=np.float32)
            plain = faiss.IndexFlatIP(vectors.shape[1])
            plain.add(vectors)
            query_vectors = generator.standard_normal((queries, 2 * dim + 2), dtype=np.float32)
            build_seconds = time.perf_counter() - start
            plain.search(query_vectors[:WARM_UP_QUERIES], k)
            start = time.perf_counter()
            plain.search(query_vectors, k)
            searches.append((method, time.perf_counter() - start, None))
        elif method == "brute_force":
            subset = query_gaussians[:brute_queries]
            scores = similarity_matrix(subset.mu, subset.logvar, items.mu, items.logvar, "sum")  # sim(q‖x), Q×N
            ids = scores.topk(k, dim=1).indices.numpy()
            build_seconds = 0.0
            searches.append((method, time.perf_counter() - start, ids))
        else:
            database = (
                {"uri": str(truth_path.with_name(f"{method}_{size}.lancedb"))} if method in LANCEDB_METHODS else {}
            )
            index = GaussianIndex(dim, "sum", method, **database)
            index.add(items)
            if method.startswith("faiss"):
                index.engine.direction("entailing")  # build now, so the search is timed alone
            if method == "lancedb-ann":  # the first search builds LanceDB's IVF index: counted in the build
                index.entailing(query_gaussians[:WARM_UP_QUERIES], k)
            build_seconds = time.perf_counter() - start
            index.entailing(query_gaussians[:WARM_UP_QUERIES], k)  # first touch of the index's memory, untimed
            for width in widths.get(method, [None]):
                if method == "faiss-hnsw":
                    index.engine.direction("entailing").set_ef_search(width)
                elif method == "lancedb-ann":
                    index.nprobes = width
                start = time.perf_counter()
                _, found = index.entailing(query_gaussians[:timed_queries], k)
                label = method if width is None else f"{method} ({WIDTH_NAMES[method]} {width})"
                searches.append((label, time.perf_counter() - start, found.numpy()))
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
    exact = {
        "faiss_over_plain_flat_ip": "exact faiss / plain IndexFlatIP",
        "lancedb_over_faiss": "exact lancedb / faiss",
    }
    lines = [
        f"N={summary['size']:,}: {what} = {summary[key]:.2f}x the time" for key, what in exact.items() if key in summary
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


def real_recall(model_path: str, item_count: int, k: int) -> list[dict]:
    """Recall@k of each approximate backend (and the exact FAISS one) on real sentences, both directions, every
    reduction (exact: ``torch``)."""
    from gausscse import GaussCSEModel

    items_text = distinct_texts("snli", "train", ("premise", "hypothesis"))[:item_count]
    queries_text = distinct_texts("snli", "test", ("hypothesis",))[:1000]
    model = GaussCSEModel.from_pretrained(model_path).eval()
    items = model.encode(items_text, batch_size=64, max_length=64, show_progress_bar=True)
    queries = model.encode(queries_text, batch_size=64, max_length=64)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:  # the LanceDB databases
        for reduction, direction in itertools.product(REDUCTIONS, ("entailing", "entailed_by")):
            exact = GaussianIndex(items.dim, reduction)
            exact.add(items)
            _, truth = getattr(exact, direction)(queries, k)
            for backend in ("faiss", "faiss-hnsw", "lancedb-ann"):
                database = {"uri": Path(scratch) / f"{reduction}_{direction}"} if backend == "lancedb-ann" else {}
                index = GaussianIndex(items.dim, reduction, backend, **database)
                index.add(items)
                _, found = getattr(index, direction)(queries, k)
                recall = recall_at_k(truth.numpy(), found.numpy())
                rows.append({"reduction": reduction, "direction": direction, "backend": backend, "recall_at_k": recall})
    return rows


def main() -> None:
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
    parser.add_argument("--json", type=Path, help="also write the results here (atomically)")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--truth", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.sizes and not args.real_model:
        parser.error("nothing to measure: give --sizes, --real_model or both")
    if args.sizes and "torch" not in args.methods:
        parser.error("--methods must include torch: its ids are the truth every recall is measured against")

    if args.worker:
        widths = {"faiss-hnsw": args.ef_search, "lancedb-ann": args.nprobes}
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
            for method in (name for name in METHODS if name in args.methods):
                if method in LANCEDB_METHODS and size not in args.lancedb_sizes:
                    continue
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
    real = real_recall(args.real_model, args.real_items, args.k) if args.real_model else []
    for row in real:
        where = f"real SNLI, {row['reduction']:8s} {row['direction']:11s} {row['backend']:10s}"
        print(f"{where} recall@{args.k} {row['recall_at_k']:.3f}")
    if args.json:
        write_json(args.json, json_payload(args, device_name, rows=rows, summary=summary, real=real))


if __name__ == "__main__":
    main()
