"""The benchmark and monotonicity reports: each is what its writer makes of the committed JSON."""

from __future__ import annotations

import json
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_benchmarks_md_is_what_the_writer_makes_of_the_committed_json(monkeypatch):
    """BENCHMARKS.md (speed, memory, search recall) is generated from results/bench_*.json, never edited by hand."""
    from bench.report import benchmarks_report

    monkeypatch.chdir(REPO_ROOT)  # the report names the JSON files by their paths from the repository root
    assert benchmarks_report(Path("results")) == (REPO_ROOT / "results" / "BENCHMARKS.md").read_text()


def test_the_search_section_shows_the_qdrant_and_milvus_rows_their_local_modes_and_the_bytes_on_paper(tmp_path):
    """A bench_search JSON with Qdrant and Milvus rows (and one of real-sentence recall alone): their rows, ratios,
    local modes and stored bytes at 1M and 10M (computed, so d = 384 gives the backends' 2d + 2 maps) render."""
    from bench.bench_search import stored_bytes_per_gaussian
    from bench.report import benchmarks_report

    committed = json.loads((REPO_ROOT / "results" / "bench_search_cpu.json").read_text())
    rows = [
        {"method": method, "size": 2000, "build_seconds": 1.5, "seconds_per_1000_queries": seconds,
         "peak_extra_mib": 300.0, "queries_timed": 20, **({} if method == "torch" else {"recall_at_k": 0.975})}
        for method, seconds in (("torch", 2.0), ("faiss", 1.0), ("qdrant", 10.0), ("milvus", 14.0),
                                ("qdrant-hnsw", 10.5), ("milvus-hnsw (ef 128)", 6.0))
    ]  # fmt: skip
    hnsw = {"method": "milvus-hnsw (ef 128)", "recall_at_k": 0.975, "speedup_vs_torch": 0.3, "speedup_vs_faiss": 0.2}
    summary = {"size": 2000, "qdrant_over_faiss": 10.0, "milvus_over_faiss": 14.0, "approximate": [hnsw]}
    real = [{"reduction": "sum", "direction": "entailed_by", "backend": "milvus-hnsw", "recall_at_k": 0.5}]
    data = {**committed, "sizes": [2000], "server_sizes": [2000], "rows": rows, "summary": [summary], "real": real}
    (tmp_path / "bench_search_small_cpu.json").write_text(json.dumps(data))
    (tmp_path / "bench_search_real_cpu.json").write_text(json.dumps({**data, "sizes": [], "rows": [], "summary": []}))
    report = benchmarks_report(tmp_path)
    assert "| 2,000 | milvus-hnsw (ef 128) | 1.5 | 6.00 | 300 MiB | 0.975 |" in report
    assert "| 2,000 | qdrant | 1.5 | 10.00 | 300 MiB | 0.975 |" in report
    assert "exact `qdrant` backend / exact `faiss` = **10.00×** the time" in report
    assert "`milvus-hnsw (ef 128)` **0.3×** faster than exact `torch`" in report
    assert "embedded in-memory mode (`:memory:`" in report and "Milvus Lite" in report
    assert stored_bytes_per_gaussian("qdrant", 384) == 8 + 4 * (2 * 384 + 2 * 770)
    assert stored_bytes_per_gaussian("milvus-hnsw", 384) == 9240 + 2 * (8 + 4 * 770 + 2 * 32 * 4)
    assert "`qdrant` 9,240 bytes per Gaussian (1M: 9.2 GB, 10M: 92.4 GB)" in report
    assert "`milvus-hnsw` 15,928 bytes per Gaussian (1M: 15.9 GB, 10M: 159.3 GB)" in report
    assert "| sum | entailed_by | milvus-hnsw | 0.500 |" in report  # the real-sentence section
    assert "and of the Qdrant and Milvus backends (default settings; Qdrant in its embedded" in report
    assert "--sizes 2000 --server_sizes 2000 --real_model outputs/quickstart`." in report


def test_monotonicity_md_is_the_report_of_the_committed_json():
    from studies import monotonicity

    results = json.loads((REPO_ROOT / "results" / "monotonicity.json").read_text())
    assert monotonicity.report(results) == (REPO_ROOT / "results" / "MONOTONICITY.md").read_text()
    assert {context: measured["pairs"] for context, measured in results["contexts"].items()} == {
        "upward": 16,
        "downward": 16,
    }
