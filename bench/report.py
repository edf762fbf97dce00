"""Write ``results/BENCHMARKS.md`` from the JSON files the bench scripts write (``results/bench_*_<device>.json``).
Every number comes from those files; nothing is typed in.

    python -m bench.report [--bench results] [--output results]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.bench_search import METHODS as SEARCH_METHODS
from bench.bench_search import SERVER_METHODS, paper_lines
from gausscse.evaluation.report import markdown_table
from gausscse.io import write_atomic
from gausscse.model.gaussian import SEARCH_DIRECTIONS


def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f} MiB"


def similarity_section(data: dict, path: str) -> tuple[str, str, list[str], list[list[str]]]:
    """The pairwise similarity matrix against the released code's broadcast."""
    rows = [
        [
            name,
            f"{row['median_seconds'] * 1e3:,.1f}",
            _mib(row["peak_extra_bytes"]),
            f"{row['speedup_vs_reference']:.1f}×",
            f"{row['speedup_vs_reference_chunked']:.1f}×",
            f"{row['memory_ratio_vs_reference']:.1f}×",
        ]
        for name, row in data["rows"].items()
    ]
    title = f"## Pairwise similarity matrix ({data['device_name']}, {data['cpu_count']} cores, torch {data['torch']})"
    text = (
        f"N = {data['n']}, M = {data['m']}, d = {data['dim']}; `reference` is the released code's "
        "`torch.distributions` N×M×d broadcast (mean over dimensions); `reference_chunked` the same broadcast in "
        "bounded row chunks, reduced to 1 / (1 + KL/d) (what `ours_mean_kl` computes). `python -m "
        f"bench.bench_similarity --repeats {data['repeats']} --json {path}` (median of {data['repeats']}; the "
        "references are timed once)."
    )
    headers = ["variant", "time (ms)", "peak extra memory", "speed-up vs reference", "vs reference_chunked",
               "less memory"]  # fmt: skip
    return title, text, headers, rows


def train_step_section(data: dict, path: str) -> tuple[str, str, list[str], list[list[str]]]:
    """The training step against the released code's step."""
    rows = [
        [
            name,
            f"{data['batch_size'] / value:.1f}",
            _mib(data["peak_extra_bytes"][name]),
            f"{value / data['triplets_per_second']['released']:.2f}×",
        ]
        for name, value in data["triplets_per_second"].items()
    ]
    title = f"## Training step vs. the released code's step ({data['device_name']}, {data['cpu_count']} cores)"
    text = (
        f"MiniLM, batch {data['batch_size']} complete triplets, max length {data['max_length']}, "
        f"{'bf16 autocast' if data['bf16'] else 'fp32'}, median of {data['steps']} interleaved steps; peak memory "
        f"from one process per method. `python -m bench.bench_train_step --json {path}`."
    )
    return title, text, ["method", "s / step", "peak extra memory", "throughput vs. released"], rows


def train_recipe_section(data: dict, path: str) -> tuple[str, str, list[str], list[list[str]]]:
    """Whole training runs of recipes, against the first one."""
    names = list(data["recipes"])
    first = data["results"][names[0]]
    rows = [
        [
            f"`{name}`: {data['recipes'][name]}",
            f"{data['results'][name]['train_runtime']:.0f}",
            f"{data['results'][name]['train_runtime'] / first['train_runtime']:.2f}×",
            f"{data['results'][name]['wall_seconds']:.0f}",
            f"{data['results'][name]['wall_seconds'] / first['wall_seconds']:.2f}×",
        ]
        for name in names
    ]
    title = f"## Training runs of whole recipes ({data['device_name']}, {data['cpu_count']} cores)"
    text = (
        "`configs/study_frozen.yaml` (the frozen-μ quickstart as it was) with each recipe's flags, "
        f"{data['steps']} steps, "
        f"{'bf16 autocast' if data['bf16'] else 'fp32'}, no "
        f"evaluation, one recipe after the other. `python -m bench.bench_train_recipe --steps {data['steps']} "
        f"--recipes {' '.join(names)}{' --bf16' if data['bf16'] else ''} --json {path}`."
    )
    return title, text, ["recipe", "training s", "vs. first", "process s", "vs. first"], rows


def quickstart_section(data: dict, path: str) -> tuple[str, str, list[str], list[list[str]]]:
    """The main job's parts, today's recipe against the new one."""
    parts = ("training", "choices", "train_process", "evaluation", "whole_job")
    today = data["results"]["today"]

    def cell(job: str, part: str) -> str:
        return f"{data['results'][job][part]:.0f} ({data['results'][job][part] / today[part]:.2f}×)"

    rows = [[f"`{job}` ({recipe})", *(cell(job, part) for part in parts)] for job, recipe in data["jobs"].items()]
    title = f"## The main job, part by part ({data['device_name']}, {data['cpu_count']} cores)"
    text = (
        "`configs/study_frozen.yaml` (the frozen-μ quickstart as it was) with each job's recipe flags for "
        f"{data['steps']} steps ({'bf16 autocast' if data['bf16'] else 'fp32'}), then "
        f"`gausscse-evaluate` beside the backbone on the first {data['max_examples']} rows of every split; seconds "
        "(ratio to today's). `today`: no frozen-state cache, the backbone encoded by its evaluation; `new`: the cache, "
        "and the backbone's vectors the first evaluation kept. Both choose λ and α from one encoding of the dev "
        f"sentences (new in both). Largest difference between the two runs' figures: {data['largest_difference']:.4f} "
        f"points. `python -m bench.bench_quickstart --steps {data['steps']} --max_examples {data['max_examples']} "
        f"--json {path}`."
    )
    header = ["job", "training s", "choices s", "training process s", "evaluation s", "whole job s"]
    return title, text, header, rows


def encode_section(data: dict, path: str) -> tuple[str, str, list[str], list[list[str]]]:
    """``encode`` against sentence-transformers."""
    rows = [
        [name, f"{value:.1f}", _mib(data["peak_extra_bytes"][name]) if "peak_extra_bytes" in data else "—"]
        for name, value in data["sentences_per_second"].items()
    ]
    flags = "".join(
        f" --{flag} {data[flag]}"
        for flag, default in (("sentences", 4000), ("batch_size", 64), ("variance_layers", None), ("start", "auto"))
        if data.get(flag, default) != default
    )
    design = ""
    if "parameter_ratio" in data:
        chosen = [f"{flag}={data[flag]}" for flag, default in (("variance_layers", None), ("start", "auto"))
                  if data.get(flag, default) != default]  # fmt: skip
        built = f"with {', '.join(chosen)}" if chosen else "by default"
        frozen_mean = data.get("design_frozen_mean", True)
        paths = "one trunk" if data["design_variance_layers"] else "two paths" if frozen_mean else "one encoder"
        design = (
            f"; `gausscse` is the model `from_backbone` builds from it {built} ({paths}, "
            f"{data['parameter_ratio']:.2f}× the backbone's parameters)"
        )
    title = f"## encode() vs. sentence-transformers ({data['device_name']}, {data['cpu_count']} cores)"
    text = (
        f"{data['sentences']} SNLI-test sentences, batch {data['batch_size']}, max length {data['max_length']}, "
        f"{'bf16' if data['bf16'] else 'fp32'}, same all-MiniLM-L6-v2 weights{design}. Ratio **{data['ratio']:.2f}×**"
        + (
            f"; `gausscse` reaches {data['share_of_forward_only']:.0%} of `forward_only`, the same model's forward "
            "over batches tokenised and padded in advance (the ceiling)"
            if "share_of_forward_only" in data
            else ""
        )
        + f". `python -m bench.bench_encode{flags} --json {path}`."
    )
    return title, text, ["encoder", "sentences / s", "peak extra memory"], rows


def bf16_section(data: dict, path: str) -> tuple[str, str, list[str], list[list[str]]]:
    """bf16 against fp32 on the CPU."""
    timings = {task: data[task] for task in ("train_step", "encode")}
    rows = [
        [task, f"{times['fp32_seconds']:.2f}", f"{times['bf16_seconds']:.2f}", f"{times['bf16_speedup']:.2f}×"]
        for task, times in timings.items()
    ]
    title = f"## bf16 against fp32 on this CPU ({data['cpu_count']} cores, native bf16: {data['native_bf16']})"
    text = (
        f"MiniLM training step (batch {data['batch_size']} sentences) and encoding of {data['sentences']} "
        f"SNLI-test sentences, fp32 and bf16 alternating, median of {data['repeats']}. "
        f"`python -m bench.bench_cpu_bf16 --json {path}`."
    )
    return title, text, ["task", "fp32 (s)", "bf16 (s)", "bf16 speed-up"], rows


def data_scale_section(data: dict, path: str) -> tuple[str, str, list[str], list[list[str]]]:
    """The data pipeline at full SNLI + MNLI size."""
    rows = [
        [stage.removesuffix("_seconds").replace("_", " "), f"{data[stage]:.1f}"]
        for stage in (
            "read_seconds",
            "build_seconds",
            "tokenize_seconds",
            "total_seconds",
            "rerun_with_cache_seconds",
        )
    ]
    title = f"## Training data at full SNLI + MNLI size ({data['device_name']}, {data['cpu_count']} cores)"
    text = (
        f"{data['rows']:,} NLI rows → {data['examples']:,} examples ({data['complete_triplets']:,} complete "
        f"triplets), tokenised at max length {data['max_length']}. Peak resident memory above the loaded model: "
        f"**{data['peak_extra_mib']:,.0f} MiB**. "
        f"`python -m bench.bench_data_scale --json {path}`."
    )
    return title, text, ["stage", "seconds"], rows


def methods_in(data: dict) -> set[str]:
    """The methods (and backends) a ``bench_search`` JSON holds rows or real-sentence recall of."""
    return {row["method"].split(" ")[0] for row in data["rows"]} | {row["backend"] for row in data["real"]}


def servers_in(data: dict) -> list[str]:
    """The Qdrant and Milvus methods a ``bench_search`` JSON holds rows or real-sentence recall of."""
    return [method for method in SERVER_METHODS if method in methods_in(data)]


LOCAL_MODES = (
    "Qdrant in its embedded in-memory mode (`:memory:`; its embedded folder mode writes about 85 s per 10,000 "
    "points), which has no HNSW, so `qdrant-hnsw` there is a flat scan of the lifted vectors; Milvus as Milvus Lite (a "
    "`.db` file, threads of the measuring process), whose newest rows (up to 128 MiB) stay in a memtable searched by "
    "brute force, the flushed segments indexed (HNSW for `milvus-hnsw`) by a background thread"
)


def real_recall_section(data: dict, path: str) -> tuple[str, str, list[str], list[list[str]]]:
    """Recall@k of the FAISS backends on a model's Gaussians of real sentences (``bench_search --sizes``, no size)."""
    rows = [[row["reduction"], row["direction"], row["backend"], f"{row['recall_at_k']:.3f}"] for row in data["real"]]
    title = f"## Entailment search recall on real sentences ({data['device_name']}, {data['cpu_count']} cores)"
    servers = f" and of the Qdrant and Milvus backends (default settings; {LOCAL_MODES})" if servers_in(data) else ""
    text = (
        f"`{data['real_model']}` encodes {data['real_items']:,} distinct SNLI-train sentences (the stored items) and "
        f"1,000 SNLI-test hypotheses (the queries); recall@{data['k']} of each FAISS backend (default settings)"
        f"{servers} against the exact `torch` backend, for each reduction on the same Gaussians. "
        f"`python -m bench.bench_search --sizes --real_model {data['real_model']} --json {path}`."
    )
    return title, text, ["reduction", "direction", "backend", f"recall@{data['k']}"], rows


def search_command(data: dict, path: str) -> str:
    """The ``bench_search`` command line that wrote ``data`` (the options that differ from their defaults)."""
    # a JSON written before the Qdrant and Milvus methods existed: its default --methods were the others
    default_methods = SEARCH_METHODS if "server_sizes" in data else SEARCH_METHODS[: -len(SERVER_METHODS)]
    methods = data.get("methods", default_methods)
    return (
        f"`python -m bench.bench_search --json {path}"
        + ("" if len(methods) == len(default_methods) else f" --methods {' '.join(methods)}")
        + (f" --sizes {' '.join(map(str, data['sizes']))}" if data["sizes"] != [100_000, 1_000_000] else "")
        + "".join(
            f" --{option} {' '.join(map(str, data[option]))}"
            for option in ("lancedb_sizes", "server_sizes")
            if data.get(option, [100_000]) != [100_000]
        )
        + (f" --real_model {data['real_model']}`." if data["real"] else "`.")
    )


def database_notes(data: dict) -> tuple[str, list[str]]:
    """What the search section says of the database methods: which methods are timed on fewer queries, and (where
    Qdrant or Milvus ran) their local modes and what each database stores at 1M and 10M on paper."""
    if not servers_in(data):
        return "the brute force and LanceDB's flat scan", []
    paper = paper_lines(data["dim"], tuple(methods_in(data)))
    notes = [
        f"Local modes: {LOCAL_MODES}; a Milvus build time runs until that thread is done.",
        f"1M and 10M on paper (d = {data['dim']}; `bench_search.stored_bytes_per_gaussian`: id, μ, log σ² and both raw "
        "maps per row, and per direction the lifted maps plus the graph's layer 0, 2·M ids of 4 bytes, for an HNSW "
        "backend; not counting the engines' own overheads, nor the μ, log σ² the index keeps in memory): "
        + "; ".join(paper),
    ]
    scanned = "the brute force and the flat scans of `lancedb`, `qdrant`, `qdrant-hnsw` (embedded) and `milvus`"
    return scanned, notes


def search_section(data: dict, path: str) -> tuple[str, str, list[str], list[list[str]]]:
    """Entailment search at scale: GaussianIndex backends against plain FAISS and a brute force."""
    if not data["rows"]:
        return real_recall_section(data, path)
    rows = [
        [
            f"{row['size']:,}",
            row["method"],
            f"{row['build_seconds']:.1f}",
            f"{row['seconds_per_1000_queries']:.2f}",
            f"{row['peak_extra_mib']:,.0f} MiB",
            f"{row['recall_at_k']:.3f}" if "recall_at_k" in row else "truth" if row["method"] == "torch" else "—",
        ]
        for row in data["rows"]
    ]
    exact_ratios = {
        "faiss_over_plain_flat_ip": "exact `faiss` backend / plain `IndexFlatIP`",
        "lancedb_over_faiss": "exact `lancedb` backend / exact `faiss`",
        "qdrant_over_faiss": "exact `qdrant` backend / exact `faiss`",
        "milvus_over_faiss": "exact `milvus` backend / exact `faiss`",
    }
    ratios = [
        f"N = {summary['size']:,}: "
        + "; ".join(
            f"{what} = **{summary[key]:.2f}×** the time" for key, what in exact_ratios.items() if key in summary
        )
        + "".join(
            f"; `{row['method']}` **{row['speedup_vs_torch']:.1f}×** faster than exact `torch` "
            + (f"({row['speedup_vs_faiss']:.1f}× than exact `faiss`) " if "speedup_vs_faiss" in row else "")
            + f"at recall@k {row['recall_at_k']:.3f}"
            for row in summary["approximate"]
        )
        for summary in data["summary"]
    ]
    real = [
        f"{row['reduction']} / {row['direction']} / {row['backend']}: {row['recall_at_k']:.3f}" for row in data["real"]
    ]
    scanned, notes = database_notes(data)
    title = f"## Entailment search at scale ({data['device_name']}, {data['cpu_count']} cores)"
    text = (
        f"Synthetic Gaussians in a trained model's ranges, d = {data['dim']}, {data['queries']:,} queries, "
        f"k = {data['k']}, `entailing` direction, `sum` reduction; search time per 1,000 queries ({scanned}: "
        f"measured on {data['brute_force_queries']} queries); peak extra resident memory of each method's process; "
        "recall@k against the exact `torch` ids.\n\n"
        + "\n".join(f"- {line}" for line in ratios + notes)
        + (
            f"\n- Real sentences ({data['real_model']}: {data['real_items']:,} SNLI-train sentences, 1,000 SNLI-test "
            "hypotheses as queries), recall@k per reduction / direction / backend: " + "; ".join(real)
            if real
            else ""
        )
        + f"\n\n{search_command(data, path)}"
    )
    headers = ["N", "method", "build (s)", "s / 1,000 queries", "peak extra memory", "recall@k"]
    return title, text, headers, rows


def index_load_section(data: dict, path: str) -> tuple[str, str, list[str], list[list[str]]]:
    """The first query after loading a saved index, with and without its FAISS files."""
    rows = [
        [
            row["backend"],
            f"{row['save_seconds']:.2f}",
            f"{row['saved']['load_seconds']:.2f}",
            f"{row['saved']['first_query_seconds']:.3f}",
            f"{row['rebuilt']['first_query_seconds']:.3f}",
            f"{row['first_query_ratio']:.0f}×",
        ]
        for row in data["rows"]
    ]
    title = f"## First query after loading a saved index ({data['device_name']}, {data['cpu_count']} cores)"
    text = (
        f"{data['size']:,} synthetic Gaussians, d = {data['dim']}, k = {data['k']}; each load in a fresh process. "
        "`save` writes the FAISS index of both directions; without those files the index is built at the first "
        f"query. `python -m bench.bench_index_load --json {path}`."
    )
    headers = ["backend", "save (s)", "load (s)", "first query (s)", "first query, FAISS built then (s)", "ratio"]
    return title, text, headers, rows


def client_memory_section(data: dict, path: str) -> tuple[str, str, list[str], list[list[str]]]:
    """The query process's peak memory over a database-backed index at each size, and its exactness (beside Qdrant's
    embedded engine alone, where measured)."""
    rows, alone = [], any("engine_peak_rss_bytes" in row for row in data["rows"])
    for row in data["rows"]:
        times = [query["seconds_per_query"] for query in row["queries"].values()]
        exact = all(query["same_top10_as_torch"] for query in row["queries"].values())
        engine = [_mib(row["engine_peak_rss_bytes"]) if "engine_peak_rss_bytes" in row else "—"] if alone else []
        rows.append(
            [
                row["backend"],
                f"{row['size']:,}",
                _mib(row["peak_rss_bytes"]),
                *engine,
                f"{row['peak_rss_vs_smallest']:.2f}×",
                f"{1000 * sum(times) / len(times):.1f}",
                "yes" if exact else "no",
                f"{sum(row['build_seconds'].values()):.0f}",
            ]
        )
    engines = data["backends"]
    title = (
        f"## A query process over a database index, by its size ({', '.join(engines)}; {data['device_name']}, "
        f"{data['cpu_count']} cores)"
    )
    where = {
        "pgvector": "PostgreSQL (pgserver's) runs in its own process, so the peak is the client's alone. ",
        "milvus": "Milvus runs as Milvus Lite's gRPC server (`milvus-lite server`) in its own process, so the peak is "
        "the client's alone. "
        if data.get("milvus_server")
        else "Milvus Lite runs inside the calling process, so its peak holds the engine's own copy of the rows "
        "(`--milvus_server` runs it in a process of its own). ",
        "qdrant": "Qdrant's embedded folder keeps its points in the calling process by design; *engine alone* is the "
        "peak of a fresh process that runs the same exact top-10 queries through Qdrant's own client, without "
        "`GaussianIndex`: the difference is what the index adds (a copy of every μ and log σ² would add "
        + ", ".join(f"{_mib(8 * data['dim'] * size)} at {size:,}" for size in data["sizes"])
        + "). ",
    }
    flags = (
        f"--backends {' '.join(engines)} --sizes {' '.join(str(size) for size in data['sizes'])} --dim {data['dim']}"
    )
    text = (
        f"Synthetic Gaussians, d = {data['dim']}, {data['queries']} queries; the index opened and queried by a fresh "
        "process in both directions, by the similarity and by the search score (λ = 0.1). "
        + "".join(where[engine] for engine in engines)
        + "Peak: that process's `ru_maxrss` (imports included); exact: its top 10 are the `torch` backend's on every "
        f"query. `python -m bench.bench_client_memory {flags}{' --milvus_server' if data.get('milvus_server') else ''}"
        f" --json {path}`."
    )
    for recall in data.get("real_recall", []):
        text += (
            f" `pgvector-hnsw` at its default ef_search {recall['ef_search']}, on {data['real_items']:,} real "
            f"Gaussians of {data['real_model']} ({recall['direction']}): recall@10 {recall['recall_at_10']:.3f}."
        )
    sweep = data.get("hnsw_sweep", [])
    for backend, size in sorted({(row["backend"], row["size"]) for row in sweep}):
        settings = data["hnsw_sweep_settings"][backend]
        found = [row for row in sweep if (row["backend"], row["size"]) == (backend, size)]
        where = (
            f"PostgreSQL's maintenance_work_mem {settings['maintenance_work_mem']}"
            if "maintenance_work_mem" in settings
            else "Milvus Lite's server"
            if settings["milvus_server"]
            else "Milvus Lite"
        )
        text += (
            f" `{backend}` on {size:,} synthetic Gaussians (d = {settings['dim']}, 100 queries, the similarity; "
            f"{where}; its graphs built in {found[0]['graph_seconds']:.0f} s), recall@10 by `ef_search`:"
        )
        for direction in SEARCH_DIRECTIONS:
            points = [row for row in found if row["direction"] == direction]
            listed = ", ".join(f"{row['ef_search']} → {row['recall_at_10']:.3f}" for row in points)
            enough = [row["ef_search"] for row in points if row["recall_at_10"] >= 0.95]
            widest = max(row["ef_search"] for row in points)
            least = f"≥ 0.95 from ef_search {min(enough)}" if enough else f"below 0.95 up to {widest}"
            text += f" {direction} {listed} ({least});"
        text = text.rstrip(";") + " (`--hnsw_sweep_size`)."
    headers = ["backend", "stored", "query process peak", *(["engine alone"] if alone else []), "vs. smallest"]
    headers += ["ms / query", "exact top 10", "build (s)"]
    return title, text, headers, rows


def ray_build_section(data: dict, path: str) -> tuple[str, str, list[str], list[list[str]]]:
    """The driver's peak memory of a Ray build into pgvector, by corpus size."""
    rows = [
        [
            f"{row['size']:,}",
            f"{row['stored']:,}",
            _mib(row["driver_peak_rss_bytes"]),
            f"{row['driver_peak_vs_smallest']:.2f}×",
            f"{row['seconds']:.0f}",
        ]
        for row in data["rows"]
    ]
    machine = f"{data['device_name']}, {data['cpu_count']} cores"
    title = f"## The driver of a Ray build into pgvector, by corpus size ({machine})"
    text = (
        f"`gausscse-search build --ray --ray_workers {data['ray_workers']} --backend pgvector` with {data['model']} on "
        "distinct synthetic sentences, each size in a fresh process: the Ray workers write what they encode, so the "
        "driver (its `ru_maxrss`; workers and PostgreSQL are other processes) holds the corpus's text and no Gaussian. "
        f"`python -m bench.bench_ray_build --model MODEL --json {path}`."
    )
    return title, text, ["sentences", "rows stored", "driver peak", "vs. smallest", "seconds"], rows


def serving_section(data: dict, path: str) -> tuple[str, str, list[str], list[list[str]]]:
    """PyTorch against ONNX Runtime for a trained folder: speed, top-10 agreement, the int8 quality cost."""
    count = data["sentences"]
    rows = [
        [name, f"{seconds:.2f}", f"{count / seconds:.1f}", f"{data['speedup_vs_torch_fp32'][name]:.2f}×"]
        for name, seconds in data["seconds"].items()
    ]
    rows += [[name, "not run", why, "—"] for name, why in data["skipped"].items()]
    top10 = data["top10"]
    routes = [name for name in top10 if name not in ("claims", "premises")]
    ceiling = data["fp32_ceiling"]
    text = (
        f"`{data['model']}`, {count} distinct SNLI-test sentences, batch {data['batch_size']}, max length "
        f"{data['max_length']}, median of {data['repeats']} interleaved runs; {data['threads']} PyTorch threads. "
        '`SentenceTransformer(folder, trust_remote_code=True, backend="onnx")` against the same call with PyTorch '
        f"(`st_onnx` / `st_torch`): **{data['st_onnx_vs_st_torch']:.2f}×** the speed. "
        f"Exact top-10 premises of all {top10['claims']} distinct SNLI-test hypotheses ({top10['premises']} "
        "premises) identical, in order, to PyTorch fp32's (in brackets: the same ten as a set): "
        + ", ".join(f"{name} {top10[name]['same_order']:.2f} % ({top10[name]['same_set']:.2f} %)" for name in routes)
        + ". The float32 ceiling (one profiled `torch_fp32` encode): matrix products are "
        f"{ceiling['matrix_product_share']:.0%} of its time and run at "
        f"{ceiling['matrix_product_gflops_in_encode']:.0f} GFLOP/s, the best float32 rate measured on this CPU being "
        f"{ceiling['best_matrix_product_gflops']:.0f} GFLOP/s; its {ceiling['matrix_product_gflop']:,.0f} GFLOP at "
        f"that rate take {ceiling['floor_seconds']:.2f} s, so no float32 runtime can be more than "
        f"**{ceiling['max_fp32_speedup']:.2f}×** faster than `torch_fp32` here, even with everything else free."
    )
    quality = data.get("quality")
    if quality:
        losses = "; ".join(
            f"{test_set}: accuracy {loss['accuracy']:+.2f}, direction {loss['direction']:+.2f}"
            for test_set, loss in quality["int8_loss"].items()
        )
        text += (
            " ONNX fp32 minus int8 on the full test splits (SNLI-dev threshold; positive: int8 is worse, negative: "
            f"int8 scored higher): {losses}."
        )
    text += f" Export of both graphs: {data['export_seconds']:.0f} s. `python -m bench.bench_serving --json {path}`."
    title = f"## Serving on CPU: PyTorch vs ONNX Runtime ({data['device_name']}, {data['cpu_count']} cores)"
    return title, text, ["encoder", "seconds", "sentences / s", "vs. torch fp32"], rows


BENCH_SECTIONS = (
    ("bench_similarity_*.json", similarity_section),
    ("bench_train_step_*.json", train_step_section),
    ("bench_train_recipe_*.json", train_recipe_section),
    ("bench_quickstart_*.json", quickstart_section),
    ("bench_encode_*.json", encode_section),
    ("bench_cpu_bf16*.json", bf16_section),
    ("bench_data_scale_*.json", data_scale_section),
    ("bench_search_*.json", search_section),
    ("bench_index_load_*.json", index_load_section),
    ("bench_client_memory_*.json", client_memory_section),
    ("bench_ray_build_*.json", ray_build_section),
    ("bench_serving_*.json", serving_section),
)


def benchmarks_report(bench: Path) -> str:
    """The text of ``BENCHMARKS.md``, from the ``bench_*_<device>.json`` files in the folder ``bench``."""
    sections = [
        "# Benchmarks",
        "Generated by `bench/report.py` from the JSON files the bench scripts write; every ratio is "
        "measured side by side in one run. Rerun: `bash bench/run_benchmarks.sh` (on a GPU machine it writes "
        "`bench_*_cuda.json`, which then appear here too).",
    ]
    if not list(bench.glob("bench_*_cuda*.json")):
        sections.append(
            "No GPU measurement yet: no GPU was lent where these ran (CPU rows only). On a GPU machine: "
            "`source .offline-gpu/env.sh && bash bench/run_gpu.sh` (see the script), then "
            "`python -m bench.report`."
        )
    for pattern, render in BENCH_SECTIONS:
        for path in sorted(bench.glob(pattern)):
            title, text, headers, rows = render(json.loads(path.read_text()), path.as_posix())
            sections += [title, text, markdown_table(headers, rows)]
    return "\n\n".join(sections) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", type=Path, default=Path("results"), help="the folder of the bench_*.json files")
    parser.add_argument("--output", type=Path, default=Path("results"), help="the folder BENCHMARKS.md goes to")
    args = parser.parse_args(argv)
    write_atomic(args.output / "BENCHMARKS.md", benchmarks_report(args.bench))
    print(f"Wrote {args.output / 'BENCHMARKS.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
