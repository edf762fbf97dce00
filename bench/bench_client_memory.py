"""The memory of a process that queries a database-backed ``GaussianIndex``, at two sizes of the database (PostgreSQL
runs in its own process through pgserver; Milvus Lite inside the calling process, its rows in that process's memory
by the engine's design, not the index's, or with ``--milvus_server`` as its gRPC server in a process of its own): the
query process opens the index and answers queries in both directions, with and without the search score. Reported
per backend and size: the query process's peak resident set (``ru_maxrss``: imports included), the time per query,
and whether its top 10 are the exact ``torch`` backend's (computed by the builder, which holds the Gaussians).

    python -m bench.bench_client_memory --sizes 100000 1000000 --dim 64 --json results/bench_client_memory_cpu.json

``--backends qdrant`` measures Qdrant's embedded folder (its points in the calling process by design, so smaller
``--sizes``: 40,000 points at d = 256 took 5.5 GiB) beside a process that runs the same queries through Qdrant's own
client alone: the index's peak over the engine's is what the index adds.

    python -m bench.bench_client_memory --backends qdrant --sizes 10000 40000 --dim 256 \
        --json results/bench_client_memory_qdrant_cpu.json

Each (backend, size) is built once by a builder process into a folder under ``--workdir`` (two tables: similarity
and search score λ = 0.1), then queried by a fresh process. ``--hnsw_sweep_size N [N ...]`` adds, to the ``--json``
of an earlier run (replacing that backend's earlier sweep), the recall@10 of ``--hnsw_backend`` (``pgvector-hnsw``,
or ``milvus-hnsw``: with ``--milvus_server`` through Milvus Lite's server) at each ``--ef_search`` on N synthetic
Gaussians against exact ``torch``; PostgreSQL's ``maintenance_work_mem`` is set to ``--maintenance_work_mem`` for the
graph builds (pgvector's advice: a graph that outgrows it builds many times slower):

    python -m bench.bench_client_memory --hnsw_sweep_size 100000 1000000 --json results/bench_client_memory_cpu.json
    python -m bench.bench_client_memory --hnsw_sweep_size 1000000 --hnsw_backend milvus-hnsw --milvus_server \
        --ef_search 128 256 512 1024 2048 4096 --json results/bench_client_memory_cpu.json"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import torch

from bench.common import json_payload, milvus_lite_server, peak_resident_bytes, run_worker
from gausscse.io import write_json
from gausscse.model.gaussian import GaussianEmbeddings, query_map
from gausscse.search import GaussianIndex
from gausscse.search.backends.pgvector_backend import local_server
from gausscse.training.precision import cpu_name

BACKENDS = ("pgvector", "milvus", "qdrant")  # qdrant: its embedded folder, measured beside the engine alone
SWEPT = ("pgvector-hnsw", "milvus-hnsw")  # the HNSW backends --hnsw_sweep_size measures
# the local database of each engine, in its folder
PLACES = {"pgvector": "pgdata", "milvus": "gaussians.db", "qdrant": "gaussians.qdrant"}
KL_WEIGHTS = {"similarity": None, "search": 0.1}
DIRECTIONS = ("entailing", "entailed_by")
BATCH = 50_000


def synthetic(count: int, dim: int, seed: int) -> GaussianEmbeddings:
    """Means in tanh range and log σ² around −1 (the model's range), float32."""
    generator = torch.Generator().manual_seed(seed)
    mu = torch.tanh(torch.randn(count, dim, generator=generator))
    return GaussianEmbeddings(mu, (torch.randn(count, dim, generator=generator) - 1.0).clamp(-10, 10))


def table_uri(backend: str, folder: Path, score: str, server: str | None) -> str:
    """The table of ``score`` in the database of ``folder``'s run: a local one in ``folder``, or on the Milvus
    ``server`` (one collection name per run)."""
    if backend == "milvus" and server:
        return f"{server}#{score}_{folder.name.replace('-', '_')}"
    return f"{folder / PLACES[backend]}#{score}"


def build(backend: str, size: int, dim: int, queries: int, folder: Path, server: str | None = None) -> dict:
    """The builder: both tables of ``size`` Gaussians, and the exact torch top 10 of each query set."""
    items, asked = synthetic(size, dim, seed=1), synthetic(queries, dim, seed=2)
    expected, seconds = {}, {}
    for score, kl_weight in KL_WEIGHTS.items():
        started = time.perf_counter()
        index = GaussianIndex(
            dim, "mean_kl", backend, uri=table_uri(backend, folder, score, server), kl_weight=kl_weight
        )
        for start in range(0, size, BATCH):
            index.add(items[start : start + BATCH])
        seconds[score] = time.perf_counter() - started
        exact = GaussianIndex(dim, "mean_kl", kl_weight=kl_weight)
        exact.add(items)
        expected[score] = {direction: getattr(exact, direction)(asked, 10)[1].tolist() for direction in DIRECTIONS}
    return {"expected": expected, "build_seconds": seconds}


def query(
    backend: str, size: int, dim: int, queries: int, folder: Path, expected: dict, server: str | None = None
) -> dict:
    """The query process: opens each table, answers the queries in both directions."""
    asked = synthetic(queries, dim, seed=2)
    results = {}
    for score in KL_WEIGHTS:
        index = GaussianIndex.open(backend, table_uri(backend, folder, score, server))
        assert len(index) == size and index.mu.shape[0] == 0
        for direction in DIRECTIONS:
            started = time.perf_counter()
            ids = getattr(index, direction)(asked, 10)[1].tolist()
            results[f"{score}/{direction}"] = {
                "seconds_per_query": (time.perf_counter() - started) / queries,
                "same_top10_as_torch": ids == expected[score][direction],
            }
    return {"peak_rss_bytes": peak_resident_bytes(), "queries": results}


def engine_alone(size: int, dim: int, queries: int, folder: Path) -> dict:
    """The baseline of an embedded engine that keeps its points in the calling process (Qdrant's folder): a process
    that opens the folder with the engine's own client (every collection loaded) and runs the same exact top-10
    queries through it, no ``GaussianIndex``; the index's process should hold no more (no second copy)."""
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(folder / PLACES["qdrant"]))
    asked = synthetic(queries, dim, seed=2)
    for score, kl_weight in KL_WEIGHTS.items():
        assert client.count(score).count == size
        for direction in DIRECTIONS:
            vectors = query_map(asked.mu, asked.logvar, direction, kl_weight).float().numpy()
            requests = [models.QueryRequest(query=row, limit=10, using=direction) for row in vectors]
            client.query_batch_points(score, requests)
    return {"engine_peak_rss_bytes": peak_resident_bytes()}


def real_hnsw_recall(model_path: str, item_count: int, folder: Path) -> list[dict]:
    """Recall@10 of ``pgvector-hnsw`` at its defaults against exact ``torch`` on real Gaussians: ``item_count`` distinct
    SNLI-train sentences stored, 1,000 SNLI-test hypotheses as queries, both directions, the model's own ranking."""
    from bench.bench_search import distinct_texts, recall_at_k
    from gausscse.loading import load_model
    from gausscse.search.corpus import SentenceIndex

    model = load_model(model_path)
    items_text = distinct_texts("snli", "train", ("premise", "hypothesis"))[:item_count]
    queries = model.encode(distinct_texts("snli", "test", ("hypothesis",))[:1000], batch_size=64, max_length=64)
    items = model.encode(items_text, batch_size=64, max_length=64)
    exact = SentenceIndex.empty_index(model)
    hnsw = SentenceIndex.empty_index(model, backend="pgvector-hnsw", uri=str(folder / "real"))
    exact.add(items)
    hnsw.add(items)
    rows = []
    for direction in DIRECTIONS:
        truth, found = (getattr(index, direction)(queries, 10)[1].numpy() for index in (exact, hnsw))
        rows.append({"direction": direction, "recall_at_10": recall_at_k(truth, found), "ef_search": hnsw.ef_search})
    return rows


def sweep_uri(backend: str, size: int, folder: Path, work_mem: str, server: str | None) -> str:
    """The sweep's table: in a local PostgreSQL database of its own (its server's ``maintenance_work_mem`` set to
    ``work_mem``), or a Milvus collection (on ``server``, else in a Milvus Lite file)."""
    if backend == "pgvector-hnsw":
        place = folder / f"{PLACES['pgvector']}-{size}"
        local_server(str(place)).psql(
            f"ALTER SYSTEM SET maintenance_work_mem = '{work_mem}';\nSELECT pg_reload_conf();\n"
        )
        return f"{place}#sweep"
    return f"{server or folder / PLACES['milvus']}#sweep_{size}"


def wait_for_milvus_graphs(index: GaussianIndex, poll_seconds: float = 2.0) -> None:
    """Until Milvus reports every row of both ANN collections indexed (it builds the graphs in the background)."""
    store = index.engine.table
    for ann in store.ann_tables().values():
        while True:
            state = store.client.describe_index(ann.table, "vector")
            if state["pending_index_rows"] == 0 and state["indexed_rows"] == state["total_rows"]:
                break
            time.sleep(poll_seconds)


def synthetic_hnsw_recall(
    backend: str, size: int, dim: int, query_count: int, widths: list[int], uri: str
) -> list[dict]:
    """Recall@10 of ``backend`` (``pgvector-hnsw`` or ``milvus-hnsw``; the similarity, ``mean_kl``) at each
    ``ef_search`` in ``widths`` against exact ``torch`` on ``size`` synthetic Gaussians in the table at ``uri``, both
    directions; the graphs are built by the first query (timed; Milvus's until its background builds are done)."""
    from bench.bench_search import recall_at_k

    items, asked = synthetic(size, dim, seed=1), synthetic(query_count, dim, seed=2)
    exact = GaussianIndex(dim, "mean_kl")
    exact.add(items)
    truth = {direction: getattr(exact, direction)(asked, 10)[1].numpy() for direction in DIRECTIONS}
    del exact
    started = time.perf_counter()
    index = GaussianIndex(dim, "mean_kl", backend, uri=uri)
    for start in range(0, size, BATCH):
        index.add(items[start : start + BATCH])
    add_seconds, started = time.perf_counter() - started, time.perf_counter()
    index.entailing(asked[:1], 10)  # builds the HNSW graphs of both directions
    if backend == "milvus-hnsw":
        wait_for_milvus_graphs(index)
    build_seconds, rows = time.perf_counter() - started, []
    for width in widths:
        index.ef_search = width
        for direction in DIRECTIONS:
            started = time.perf_counter()
            found = getattr(index, direction)(asked, 10)[1].numpy()
            seconds = (time.perf_counter() - started) / query_count
            recall = recall_at_k(truth[direction], found)
            rows.append(
                {"ef_search": width, "direction": direction, "recall_at_10": recall, "seconds_per_query": seconds}
            )
            print(json.dumps(rows[-1]), flush=True)
    built = {"backend": backend, "size": size, "add_seconds": add_seconds, "graph_seconds": build_seconds}
    return [{**built, **row} for row in rows]


def measure_rows(args: argparse.Namespace, workdir: Path, server: str | None) -> list[dict]:
    """Each (backend, size) built by a builder process, then queried by a fresh one; a row each."""
    rows = []
    for backend in args.backends:
        for size in args.sizes:
            folder = workdir / f"{backend}-{size}"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            common = ["--backend", backend, "--size", str(size), "--dim", str(args.dim)]
            common += ["--queries", str(args.queries), "--folder", str(folder)]
            common += ["--expected", str(folder / "top10.json")] + (["--milvus_uri", server] if server else [])
            built = run_worker("bench.bench_client_memory", ["--worker", "build", *common])
            answered = run_worker("bench.bench_client_memory", ["--worker", "query", *common])
            if backend == "qdrant":  # the same queries through Qdrant's own client, in a fresh process
                answered |= run_worker("bench.bench_client_memory", ["--worker", "engine", *common])
            rows.append({"backend": backend, "size": size, **built, **answered})
            print(json.dumps(rows[-1]), flush=True)
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=["pgvector", "milvus"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[100_000, 1_000_000])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--queries", type=int, default=16)
    parser.add_argument("--workdir", type=Path, help="where the databases go (default: a temporary folder)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--real_model", help="also pgvector-hnsw's recall@10 on this model's real Gaussians")
    parser.add_argument("--real_items", type=int, default=20_000, help="SNLI-train sentences stored (--real_model)")
    parser.add_argument("--real_only", action="store_true", help="measure only --real_model's recall, into --json")
    parser.add_argument(
        "--hnsw_sweep_size", type=int, nargs="+", help="measure only an HNSW backend's recall by ef_search, into --json"
    )
    parser.add_argument("--hnsw_backend", choices=SWEPT, default=SWEPT[0], help="(--hnsw_sweep_size)")
    parser.add_argument(
        "--maintenance_work_mem", default="4GB", help="the server's memory for graph builds (--hnsw_sweep_size)"
    )
    parser.add_argument(
        "--ef_search", type=int, nargs="+", default=[40, 128, 256, 512, 1000], help="(--hnsw_sweep_size)"
    )
    parser.add_argument("--worker", choices=("build", "query", "engine"))
    parser.add_argument("--backend", choices=BACKENDS)
    parser.add_argument("--size", type=int)
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--expected", type=Path)
    parser.add_argument(
        "--milvus_server", action="store_true", help="milvus through Milvus Lite's gRPC server, in its own process"
    )
    parser.add_argument("--milvus_uri", help=argparse.SUPPRESS)  # the workers': the server's URL
    args = parser.parse_args(argv)
    if args.worker == "build":
        result = build(args.backend, args.size, args.dim, args.queries, args.folder, args.milvus_uri)
        write_json(args.expected, result["expected"])
        print(json.dumps({"build_seconds": result["build_seconds"]}))
        return result
    if args.worker == "engine":
        result = engine_alone(args.size, args.dim, args.queries, args.folder)
        print(json.dumps(result))
        return result
    if args.worker == "query":
        expected = json.loads(args.expected.read_text())
        result = query(args.backend, args.size, args.dim, args.queries, args.folder, expected, args.milvus_uri)
        print(json.dumps(result))
        return result
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gausscse-client-memory-"))
    if args.real_only:  # the recall alone, added to the --json file of an earlier run (its rows kept)
        if args.real_model is None or args.json is None or not args.json.is_file():
            parser.error("--real_only needs --real_model and the --json file of an earlier run")
        payload = json.loads(args.json.read_text())
        real = real_hnsw_recall(args.real_model, args.real_items, workdir)
        payload.update(real_recall=real, real_model=args.real_model, real_items=args.real_items)
        write_json(args.json, payload)
        return payload
    if args.hnsw_sweep_size:  # the sweep alone, added to the --json file of an earlier run (its rows kept)
        workdir.mkdir(parents=True, exist_ok=True)
        if args.json is None or not args.json.is_file():
            parser.error("--hnsw_sweep_size needs the --json file of an earlier run")
        payload = json.loads(args.json.read_text())
        sweep = [row for row in payload.get("hnsw_sweep", []) if row.get("backend") in set(SWEPT) - {args.hnsw_backend}]
        with ExitStack() as stack:
            server = stack.enter_context(milvus_lite_server(workdir / "milvus-server")) if args.milvus_server else None
            for size in args.hnsw_sweep_size:
                uri = sweep_uri(args.hnsw_backend, size, workdir, args.maintenance_work_mem, server)
                sweep += synthetic_hnsw_recall(args.hnsw_backend, size, args.dim, 100, args.ef_search, uri)
        settings = payload.get("hnsw_sweep_settings", {})
        settings[args.hnsw_backend] = {"dim": args.dim, "milvus_server": args.milvus_server}
        if args.hnsw_backend == "pgvector-hnsw":
            settings[args.hnsw_backend]["maintenance_work_mem"] = args.maintenance_work_mem
        payload.update(hnsw_sweep=sweep, hnsw_sweep_settings=settings)
        payload.pop("hnsw_sweep_dim", None)
        write_json(args.json, payload)
        return payload
    with ExitStack() as stack:
        server = stack.enter_context(milvus_lite_server(workdir / "milvus-server")) if args.milvus_server else None
        rows = measure_rows(args, workdir, server)
    for row in rows:  # the peak against the same backend's smallest size
        smallest = min((other for other in rows if other["backend"] == row["backend"]), key=lambda other: other["size"])
        row["peak_rss_vs_smallest"] = row["peak_rss_bytes"] / smallest["peak_rss_bytes"]
    shown = {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()}
    worker_only = ("backend", "size", "folder", "expected", "milvus_uri")
    payload = json_payload(argparse.Namespace(**{k: v for k, v in shown.items() if k not in worker_only}), cpu_name())
    payload["rows"] = rows
    if args.real_model is not None:
        payload["real_recall"] = real_hnsw_recall(args.real_model, args.real_items, workdir)
        payload.update(real_model=args.real_model, real_items=args.real_items)
    if args.json is not None:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
