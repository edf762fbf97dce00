"""The driver's memory of ``gausscse-search build --ray --backend pgvector`` at two corpus sizes: each Ray worker
writes the Gaussians it encodes into the PostgreSQL table (``write_on_ray``), so the driver (the command's own
process, measured by its ``ru_maxrss``; the Ray workers and PostgreSQL are other processes) should hold the corpus's
text but no Gaussian.

    python -m bench.bench_ray_build --model outputs/quickstart --sizes 10000 100000 \\
        --json results/bench_ray_build_cpu.json

Each size runs in a fresh worker process (a local Ray of ``--ray_workers`` CPUs) on distinct synthetic sentences."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench.common import json_payload, peak_resident_bytes, run_worker
from gausscse.io import write_json
from gausscse.training.precision import cpu_name

SUBJECTS = ("A man", "A woman", "Two children", "An old dog", "A chef", "A group of friends", "A girl", "Three workers")
ACTIONS = ("is playing music", "is cooking dinner", "is reading a book", "is running", "is painting a wall")
PLACES = ("in a park", "on a stage", "near the river", "in a small kitchen", "at the beach", "on a busy street")


def sentences(count: int) -> list[str]:
    """``count`` distinct sentences (a number makes each one its own)."""
    return [
        f"{SUBJECTS[k % len(SUBJECTS)]} {ACTIONS[k // len(SUBJECTS) % len(ACTIONS)]} {PLACES[k % len(PLACES)]}, "
        f"number {k}."
        for k in range(count)
    ]


def ray_build(model: str, size: int, ray_workers: int, folder: Path) -> dict:
    """The worker: the corpus file, then the command in this process; its peak memory and seconds."""
    from gausscse.cli.search import main as search_main

    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(sentences(size)) + "\n", encoding="utf-8")
    started = time.perf_counter()
    arguments = ["build", "--model", model, "--corpus", str(corpus), "--index", str(folder / "index")]
    search_main([*arguments, "--backend", "pgvector", "--ray", "--ray_workers", str(ray_workers)])
    seconds = time.perf_counter() - started
    stored = json.loads((folder / "index" / "index_config.json").read_text())["size"]
    return {"size": size, "stored": stored, "driver_peak_rss_bytes": peak_resident_bytes(), "seconds": seconds}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a GaussCSE folder every Ray worker can read, or a Hub id")
    parser.add_argument("--sizes", nargs="+", type=int, default=[10_000, 100_000])
    parser.add_argument("--ray_workers", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker_size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker_size is not None:
        result = ray_build(args.model, args.worker_size, args.ray_workers, args.folder)
        print(json.dumps(result))
        return result
    rows = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="gausscse-ray-build-") as folder:
            worker = ["--model", args.model, "--ray_workers", str(args.ray_workers), "--folder", folder]
            rows.append(run_worker("bench.bench_ray_build", [*worker, "--worker_size", str(size)]))
        print(json.dumps(rows[-1]), flush=True)
    for row in rows:
        row["driver_peak_vs_smallest"] = row["driver_peak_rss_bytes"] / rows[0]["driver_peak_rss_bytes"]
    shown = {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()}
    hidden = ("worker_size", "folder")
    payload = json_payload(argparse.Namespace(**{k: v for k, v in shown.items() if k not in hidden}), cpu_name())
    payload["rows"] = rows
    if args.json is not None:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
