"""The first query after loading a saved index: with its FAISS files (saved by ``build``) against without them.

A ``GaussianIndex`` of N synthetic Gaussians (``bench.bench_search.synthetic_gaussians``, d = 384, default 30,000)
is saved once per FAISS backend; then, each in a fresh process, side by side: ``GaussianIndex.load`` and the first
``entailing`` query (k = 10) of the saved folder as ``save`` writes it (the FAISS index is read back), and of a copy
whose ``.faiss`` files were removed (the index is built at that first query: what every ``gausscse-search query``
paid before ``save`` wrote them). Also the save itself (which now builds both directions) and the folder's size.

    python -m bench.bench_index_load --json results/bench_index_load_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

from bench.bench_search import synthetic_gaussians
from bench.common import json_payload, run_worker
from gausscse.io import write_json
from gausscse.search import GaussianIndex

BACKENDS = ("faiss", "faiss-hnsw")


def first_query(folder: Path, dim: int, k: int) -> dict:
    """Load ``folder`` and run one query (this process is fresh): seconds for each."""
    start = time.perf_counter()
    index = GaussianIndex.load(folder)
    loaded = time.perf_counter()
    index.entailing(synthetic_gaussians(1, dim, seed=1), k)
    return {"load_seconds": loaded - start, "first_query_seconds": time.perf_counter() - loaded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=30_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--json", type=Path, help="also write the results here (atomically)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(first_query(args.worker, args.dim, args.k)))
        return

    print(f"first query after load, N={args.size:,}, d={args.dim}, k={args.k}, {os.cpu_count()} CPU cores")
    rows = []
    items = synthetic_gaussians(args.size, args.dim, seed=0)
    with tempfile.TemporaryDirectory() as scratch:
        for backend in BACKENDS:
            saved, bare = Path(scratch) / backend, Path(scratch) / f"{backend}-bare"
            index = GaussianIndex(args.dim, "sum", backend)
            index.add(items)
            start = time.perf_counter()
            index.save(saved)
            save_seconds = time.perf_counter() - start
            shutil.copytree(saved, bare)
            for path in bare.glob("*.faiss"):
                path.unlink()
            (bare / "manifest.json").unlink()  # a folder without FAISS files, as saved before
            worker = ["--size", str(args.size), "--dim", str(args.dim), "-k", str(args.k), "--worker"]
            with_files = run_worker(__spec__.name, [*worker, str(saved)])
            without = run_worker(__spec__.name, [*worker, str(bare)])
            megabytes = sum(path.stat().st_size for path in saved.iterdir()) / 1e6
            row = {
                "backend": backend,
                "save_seconds": save_seconds,
                "folder_mb": megabytes,
                "saved": with_files,
                "rebuilt": without,
                "first_query_ratio": without["first_query_seconds"] / with_files["first_query_seconds"],
            }
            rows.append(row)
            print(
                f"{backend:10s} save {save_seconds:6.2f} s ({megabytes:,.0f} MB); first query after load: "
                f"{with_files['first_query_seconds']:.3f} s with the saved FAISS index, "
                f"{without['first_query_seconds']:.3f} s building it ({row['first_query_ratio']:.0f}x); "
                f"load {with_files['load_seconds']:.2f} s vs {without['load_seconds']:.2f} s",
                flush=True,
            )
    if args.json:
        write_json(args.json, json_payload(args, platform.processor() or "cpu", rows=rows))


if __name__ == "__main__":
    main()
