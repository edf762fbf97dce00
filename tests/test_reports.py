"""The full-fine-tuning report: figures come from the study's JSON, and the defaults follow its SNLI-dev rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from gausscse import GaussCSEConfig
from studies.finetune_report import AUPRC, DIRECTION, choose_reduction, defaults_section

REPO_ROOT = Path(__file__).resolve().parent.parent
STUDY = REPO_ROOT / "results" / "finetune_study"
REDUCTION_STUDY = REPO_ROOT / "results" / "reduction_study"


def dev(direction_mean_dim: float, direction_sum: float) -> dict[str, dict[str, float]]:
    return {
        "ent+con+rev_mean_dim": {AUPRC: 50.0, DIRECTION: direction_mean_dim},
        "ent+con+rev_sum": {AUPRC: 60.0, DIRECTION: direction_sum},
        "ent+con_mean_dim": {AUPRC: 55.0, DIRECTION: 99.0},  # no reverse term: not a direction learner, ignored
        "ent+con_sum": {AUPRC: 55.0, DIRECTION: 10.0},
    }


def test_the_variant_study_prefers_the_reduction_with_the_better_dev_direction():
    assert "Preferred here: **mean_dim**" in "\n".join(defaults_section(dev(95.0, 90.0)))
    assert "Preferred here: **sum**" in "\n".join(defaults_section(dev(90.0, 95.0)))


def reductions(**scores: tuple[float, float]) -> dict[str, dict[str, float]]:
    return {name: {"direction": direction, "auprc": auprc} for name, (direction, auprc) in scores.items()}


def test_the_reduction_rule_direction_first_auprc_among_ties_mean_kl_on_a_tie():
    # the best direction and AUPRC
    assert choose_reduction(reductions(sum=(92.0, 62.0), mean_kl=(96.0, 63.0), mean_dim=(95.0, 59.0))) == (
        "mean_kl",
        "mean_kl",
    )
    # tied on direction (within 0.5): the higher AUPRC wins
    assert choose_reduction(reductions(sum=(92.0, 62.0), mean_kl=(95.7, 63.0), mean_dim=(96.0, 59.0))) == (
        "mean_kl",
        "mean_kl",
    )
    # clearly better direction wins whatever the AUPRC
    assert choose_reduction(reductions(sum=(92.0, 62.0), mean_kl=(95.0, 63.0), mean_dim=(96.0, 59.0))) == (
        "mean_dim",
        "mean_dim",
    )
    # sum wins the tie on AUPRC; mean_kl within 0.5 of it on both: a tie, mean_kl
    assert choose_reduction(reductions(sum=(95.9, 60.4), mean_kl=(95.8, 60.0), mean_dim=(96.0, 59.0))) == (
        "sum",
        "mean_kl",
    )
    # ... but not when its AUPRC is further off
    assert choose_reduction(reductions(sum=(95.9, 60.4), mean_kl=(95.8, 59.8), mean_dim=(96.0, 59.0))) == ("sum", "sum")


def test_report_figures_come_from_the_study_and_the_code_default_follows_its_rule(tmp_path):
    output = tmp_path / "REPRODUCTION.md"
    subprocess.run(
        [sys.executable, "-m", "studies.finetune_report", "--output", str(output)],
        cwd=REPO_ROOT, check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    report = output.read_text()
    assert report == (REPO_ROOT / "results" / "REPRODUCTION.md").read_text()  # the committed report is this one
    models = json.loads((STUDY / "results.json").read_text())["models"]
    direction = models["ent+con+rev_mean_dim_seed0"]["direction"]["snli"]["similarity_rule"]
    assert f"| ent+con+rev_mean_dim | {direction:.2f} /" in report
    chosen = report.split("Similarity reduction: **")[1].split("**")[0]  # the reduction study's decision
    assert GaussCSEConfig().similarity_reduction == chosen  # the one default, which train_gausscse.py uses
    for seed in json.loads((REDUCTION_STUDY / "study.json").read_text())["seeds"]:
        results = json.loads((REDUCTION_STUDY / f"seed{seed}/results.json").read_text())
        direction = results["models"][f"mean_kl_seed{seed}"]["direction"]["snli"]["similarity_rule"]
        assert f"| `mean_kl` seed {seed} | {direction:.2f} /" in report


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


def keep_runs(sts_dev: float, retrieval_dev: float, direction_dev: float, auprc_dev: float = 60.0) -> dict:
    """One run's results with the four dev measures the keep rule reads."""
    return {
        "sts_dev": {"stsb_dev": {"cosine": sts_dev}},
        "retrieval": {"snli_dev": {"similarity": {"ndcg@10": retrieval_dev}}},
        "snli_dev": {"direction_accuracy": direction_dev, "auprc": auprc_dev},
    }


def test_the_keep_rule_drops_direction_losers_then_ranks_by_keep_then_direction():
    from studies.keep_report import choose

    candidates = {
        "paper": {"paper_seed42": keep_runs(78.0, 54.0, 96.0)},
        "forgets_direction": {"f_seed42": keep_runs(90.0, 80.0, 95.4)},  # below 96.0 − 0.5: out, however well it keeps
        "keeps_more": {"k_seed42": keep_runs(86.0, 67.0, 96.6)},
        "tied_better_direction": {"t_seed42": keep_runs(86.0, 66.6, 97.5)},  # keep within 0.5: direction decides
    }
    winner, ranking = choose(candidates)
    assert winner == "tied_better_direction"
    assert ranking == ["tied_better_direction", "keeps_more", "paper"]


def test_keep_md_is_what_the_report_writer_makes_of_the_committed_json():
    """results/KEEP.md is keep_report's output on results/keep_study, and the studies' base recipe (the quickstart
    recipe until the one-pass study) is its selection."""
    from studies import keep_report

    report = keep_report.report()
    assert report == (REPO_ROOT / "results" / "KEEP.md").read_text()
    selected = report.split("**Selected: `")[1].split("`")[0]
    assert selected == "two_paths_retrieval"
    base = yaml.safe_load((REPO_ROOT / "configs" / "study_base.yaml").read_text())
    # the selected candidate's flags (studies/run_keep_study.sh: --start backbone = auto for MiniLM, two paths, 300
    # steps)
    assert base["max_steps"] == 300 and base["retrieval_weight"] == 1.0 and base["variance_layers"] == 0
    assert base.get("start", "auto") in ("auto", "backbone") and "frozen_mean" not in base
    backbone = json.loads((REPO_ROOT / "results/keep_study/eval/backbone/results.json").read_text())["models"]
    sts = next(iter(backbone.values()))["sts"]["avg"]["cosine"]
    assert f"| backbone (cosine) | {sts:.2f} |" in report


def test_onepass_md_is_the_report_of_the_committed_json_and_the_quickstart_is_its_selection():
    """results/ONEPASS.md is onepass_report's output on results/onepass_study; configs/quickstart.yaml trains the
    selected candidate: its runner flags (studies/run_onepass_study.sh) on top of the studies' base recipe, with
    --start auto giving the same trunk."""
    from gausscse.model.backbone_gausscse import BACKBONE_VARIANCE_LAYERS
    from studies import onepass_report

    report = onepass_report.report()
    assert report == (REPO_ROOT / "results" / "ONEPASS.md").read_text()
    selected = report.split("**Selected: `")[1].split("`")[0]
    assert selected == "trunk1_search"
    runner = (REPO_ROOT / "studies" / "run_onepass_study.sh").read_text()
    flags = runner.split(f'    {selected}) echo "')[1].split('"')[0].split()
    given = dict(zip(flags[::2], flags[1::2], strict=True))
    quickstart = yaml.safe_load((REPO_ROOT / "configs" / "quickstart.yaml").read_text())
    base = yaml.safe_load((REPO_ROOT / "configs" / "study_base.yaml").read_text())
    assert int(given["--variance_layers"]) == BACKBONE_VARIANCE_LAYERS and "variance_layers" not in quickstart
    assert float(given["--retrieval_kl_weight"]) == quickstart["retrieval_kl_weight"]
    assert int(given["--max_steps"]) == quickstart["max_steps"] == quickstart["eval_steps"]
    assert quickstart.get("start", "auto") == "auto" and given["--start"] == "backbone"
    same = ("loss", "retrieval_weight", "similarity_reduction", "max_seq_length", "learning_rate")
    assert all(quickstart[name] == base[name] for name in (*same, "per_device_train_batch_size", "seed"))
    assert base["pack_sequences"] and "pack_sequences" not in quickstart  # the default packs on the CPU, as base did


def release_run(direction_dev: float, auprc_dev: float, retrieval_dev: float) -> dict:
    return {
        "snli_dev": {"direction_accuracy": direction_dev, "auprc": auprc_dev},
        "retrieval": {"snli_dev": {"similarity": {"ndcg@10": retrieval_dev}}},
    }


def test_the_release_rule_drops_retrieval_losers_then_ranks_by_direction_plus_auprc_then_retrieval():
    from studies.release_report import choose

    backbone = {"retrieval": {"snli_dev": {"cosine": {"ndcg@10": 68.5}}}}  # eligible from 67.0 on
    candidates = {
        "forgets": {"f_seed42": release_run(99.0, 70.0, 66.9)},  # the best score, but 1.6 below the backbone: out
        "lower": {"l_seed42": release_run(96.0, 63.0, 68.0)},  # 159.0
        "best": {"b_seed42": release_run(97.0, 64.0, 67.0)},  # 161.0
        "tied": {"t_seed42": release_run(96.6, 64.0, 67.5)},  # 160.6: within 0.5, the better retrieval goes first
    }
    assert choose(candidates, backbone) == ["tied", "best", "lower"]
    assert choose({"forgets": candidates["forgets"]}, backbone) == []


def test_release_md_is_what_the_report_writer_makes_of_the_committed_json():
    """results/RELEASE.md is release_report's output on results/release_study."""
    from studies import release_report

    assert release_report.report() == (REPO_ROOT / "results" / "RELEASE.md").read_text()


# what each release-study candidate changes in the quickstart recipe (studies/run_release_study.sh, candidate_flags)
RELEASE_CANDIDATES = {
    "base": {},
    "lr_3e-5": {"learning_rate": 3e-5},
    "lr_3e-4": {"learning_rate": 3e-4},
    "len_32": {"max_seq_length": 32},
    "batch_128": {"per_device_train_batch_size": 128},
}


def test_release_yaml_is_the_selected_candidate_for_the_hour():
    """configs/release.yaml = the studies' base recipe with the change of the candidate results/RELEASE.md selects, for
    3,000 s of that configuration's probed seconds per step (rounded down to a multiple of 100), on the model
    results/ONEPASS.md selects (one trunk through --start auto, its retrieval term's λ)."""
    from gausscse.model.backbone_gausscse import BACKBONE_VARIANCE_LAYERS
    from studies import release_report

    runner = (REPO_ROOT / "studies" / "run_release_study.sh").read_text()
    assert all(f"    {name})" in runner for name in RELEASE_CANDIDATES)  # the table above names the runner's candidates
    selected = (REPO_ROOT / "results" / "RELEASE.md").read_text().split("**Selected: `")[1].split("`")[0]
    release = yaml.safe_load((REPO_ROOT / "configs" / "release.yaml").read_text())
    base = yaml.safe_load((REPO_ROOT / "configs" / "study_base.yaml").read_text())
    quickstart = yaml.safe_load((REPO_ROOT / "configs" / "quickstart.yaml").read_text())
    onepass = {"retrieval_kl_weight": quickstart["retrieval_kl_weight"]}  # the quickstart is the one-pass selection
    expected = {**base, **RELEASE_CANDIDATES[selected], **onepass}
    assert "variance_layers" not in release and release.get("start", "auto") == "auto" and BACKBONE_VARIANCE_LAYERS == 1
    settings = ("loss", "retrieval_weight", "retrieval_kl_weight", "similarity_reduction", "max_seq_length")
    assert base["pack_sequences"] and "pack_sequences" not in release  # the default packs on the CPU, as base did
    settings += ("per_device_train_batch_size", "learning_rate", "head_learning_rate", "warmup_steps", "seed")
    for name in settings:
        assert release[name] == expected[name], name
    per_step = release_report.seconds_per_step(selected)
    assert release["max_steps"] == int(3000 / per_step) // 100 * 100
    assert release["eval_steps"] == release["save_steps"] == release["max_steps"] // 5
    assert "max_train_examples" not in release  # the data is the NLI study's selection, as the quickstart trains
    nli_data = ("train_datasets", "train_dataset_repeats")
    assert {name: release[name] for name in nli_data} == {name: quickstart[name] for name in nli_data}


def runner_flags(runner: Path, candidate: str) -> dict[str, list[str]]:
    """A study runner's ``candidate_flags`` of ``candidate``: ``{"--flag": [values...]}``."""
    tokens = runner.read_text().split(f'    {candidate}) echo "')[1].split('"')[0].split()
    flags: dict[str, list[str]] = {}
    for token in tokens:
        if token.startswith("--"):
            flags[token] = []
        else:
            flags[next(reversed(flags))].append(token)
    return flags


def test_nli_md_is_the_report_of_the_committed_json_and_the_quickstart_is_its_selection():
    """results/NLI.md is nli_report's output on results/nli_study; configs/quickstart.yaml trains the selected
    candidate: its runner flags on top of the recipe the study started from (the quickstart's own)."""
    from gausscse.model.backbone_gausscse import BACKBONE_VARIANCE_LAYERS
    from studies import nli_report

    report = nli_report.report()
    assert report == (REPO_ROOT / "results" / "NLI.md").read_text()
    selected = report.split("**Selected: `")[1].split("`")[0]
    flags = runner_flags(REPO_ROOT / "studies" / "run_nli_study.sh", selected)
    quickstart = yaml.safe_load((REPO_ROOT / "configs" / "quickstart.yaml").read_text())
    assert quickstart["train_datasets"] == flags["--train_datasets"]
    assert quickstart.get("train_dataset_repeats", []) == flags.get("--train_dataset_repeats", [])
    layers = int(flags.get("--variance_layers", [BACKBONE_VARIANCE_LAYERS])[0])
    assert quickstart.get("variance_layers", BACKBONE_VARIANCE_LAYERS) == layers
    steps = int(flags.get("--max_steps", [1600])[0])
    assert quickstart["max_steps"] == quickstart["eval_steps"] == steps


def test_monotonicity_md_is_the_report_of_the_committed_json():
    from studies import monotonicity

    results = json.loads((REPO_ROOT / "results" / "monotonicity.json").read_text())
    assert monotonicity.report(results) == (REPO_ROOT / "results" / "MONOTONICITY.md").read_text()
    assert {context: measured["pairs"] for context, measured in results["contexts"].items()} == {
        "upward": 16,
        "downward": 16,
    }
