"""Write ``results/REPRODUCTION.md`` (from ``results/study/study.json``) and ``results/BENCHMARKS.md`` (from the
bench scripts' JSON files). Every number in both files comes from those JSON files; nothing is typed in.

    python results/write_reports.py [--study results/study] [--bench results] [--output results]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evaluation import metrics
from evaluation.report import (
    NLI_COLUMNS,
    Entry,
    direction_section,
    markdown_table,
    nli_section,
    significance_section,
    sts_section,
    write_atomic,
)
from evaluation.suite import ModelRun
from training.arguments import GaussCSETrainingArguments, ModelArguments

REBUILD = "bash results/run_study.sh"
P_THRESHOLD = 0.05


def load_entries(study: dict) -> list[Entry]:
    """One report entry per configuration, its runs (seeds) rebuilt from the JSON results."""
    return [
        Entry(label, [ModelRun(label, study["is_gaussian"][label], results) for results in runs])
        for label, runs in study["runs"].items()
    ]


def mean_of(study: dict, label: str, key: str) -> float:
    """Mean over seeds of the nested result ``key`` (e.g. ``direction/snli/similarity_rule``) of ``label``."""
    values = []
    for results in study["runs"][label]:
        value = results
        for part in key.split("/"):
            value = value[part]
        values.append(float(value))
    return sum(values) / len(values)


def setup_section(study: dict) -> str:
    meta = study["meta"]
    data, hardware, seconds = meta["training_data"], meta["hardware"], meta["seconds"]
    grid = meta["grid"]
    lines = [
        "## Setup",
        f"- Command: `{REBUILD}` (runs `{' '.join(meta['command'])}`, then this writer).",
        f"- Backbone: `{meta['backbone']}`, **frozen**. Recipe: {meta['recipe']}.",
        f"- Training data: {data['rows']} rows of the offline SNLI + MNLI train samples ({data['per_source']}); "
        f"{data['neutral_rows']} neutral rows unused; {data['examples']} examples built, "
        f"**{data['complete_triplets']} complete triplets** (premise, entailment, contradiction) and "
        f"{data['entailment_only']} without a contradiction hypothesis (masked out of V_C); "
        f"**{data['examples_used']} examples used**.",
        f"- Tuned on SNLI dev only (AUPRC of the best step, tuning seed {meta['tuning_seed']}): batch size "
        f"{grid['batch_size']} × head learning rate {grid['learning_rate']}, per configuration. Then seeds "
        f"{meta['seeds']} with the chosen values; tables show mean ± sample std over those seeds.",
        f"- Evaluation: the suite of `python -m evaluation` on the full test sets (max length "
        f"{meta['eval_max_length']} tokens; training max length {meta['train_max_length']})"
        + (f", first {meta['max_examples']} rows of every split only" if meta["max_examples"] else "")
        + ".",
        f"- Hardware: {hardware['cpu']}, {hardware['cores']} cores, {hardware['torch_threads']} torch threads, "
        f"GPU: {hardware['gpu'] or 'none'}; torch {hardware['torch']}. Wall-clock: "
        + ", ".join(f"{stage} {value / 60:.1f} min" for stage, value in seconds.items())
        + ".",
        "- Paper rows: BERT-base, fully fine-tuned on all of SNLI + MNLI train. Here: a small frozen backbone on the "
        "small offline samples. The comparison is of *trends*, not of levels.",
    ]
    return "\n".join(lines)


def tuning_section(study: dict) -> str:
    rows = []
    for label, grid in study["tuning"].items():
        for row in grid:
            chosen = study["chosen"][label] == {"batch_size": row["batch_size"], "learning_rate": row["learning_rate"]}
            rows.append(
                [
                    label,
                    str(row["batch_size"]),
                    f"{row['learning_rate']:g}",
                    f"{row['snli_dev_auprc']:.2f}" + (" **(chosen)**" if chosen else ""),
                    str(row["step"]),
                ]
            )
    return "\n\n".join(
        [
            "## Tuning on SNLI dev (tuning seed only)",
            markdown_table(["configuration", "batch", "head lr", "SNLI-dev AUPRC of the best step", "best step"], rows),
        ]
    )


def _difference_cells(study: dict, with_label: str, without_label: str, metric: str, test_key: str, tests: dict):
    cells, wins = [], 0
    for column in NLI_COLUMNS:
        difference = mean_of(study, with_label, metric.format(column)) - mean_of(
            study, without_label, metric.format(column)
        )
        p_value = tests[test_key.format(column)]["p_value"]
        wins += difference > 0 and p_value < P_THRESHOLD
        cells.append(f"{difference:+.2f} (p={p_value:.2g})")
    return cells, wins


def verdict(wins: int, total: int) -> str:
    if wins == total:
        return "holds"
    return "holds in part" if wins else "does not hold"


def findings_section(study: dict) -> str:
    """The paper's claims as tables of mean differences over seeds, with McNemar p of the first seed."""
    specs = {
        "reversed pairs → direction": (
            "direction/{}/similarity_rule",
            "direction/{}",
            "the reversed set V_R is what makes direction prediction work",
        ),
        "contradiction negatives → NLI accuracy": (
            "nli/{}/accuracy",
            "nli/{}",
            "contradiction negatives V_C are what keep binary-NLI accuracy",
        ),
    }
    sections, summary = [], []
    for finding, contrasts in study["findings"].items():
        metric, test_key, claim = specs[finding]
        rows, total_wins, total = [], 0, 0
        for contrast, tests in contrasts.items():
            with_label, without_label = contrast.split(" vs. ")
            cells, wins = _difference_cells(study, with_label, without_label, metric, test_key, tests)
            rows.append([contrast, *cells, f"{wins}/{len(NLI_COLUMNS)}"])
            total_wins, total = total_wins + wins, total + len(NLI_COLUMNS)
        summary.append(
            f"- *{claim}* (paper): **{verdict(total_wins, total)}** here — {total_wins} of {total} "
            f"(contrast, test set) cells improve with p < {P_THRESHOLD}."
        )
        sections.append(
            "\n\n".join(
                [
                    f"### {finding}",
                    f"Mean difference over seeds of `{metric.format('<test set>')}` (points; with − without the "
                    "ingredient, same reduction), McNemar p of the first seed.",
                    markdown_table(["contrast", *NLI_COLUMNS.values(), "significant gains"], rows),
                ]
            )
        )
    return "\n\n".join(["## The paper's findings, tested here", *summary, *sections, other_findings(study)])


def other_findings(study: dict) -> str:
    """Direction vs. the length baseline, the variance rule, GaussCSE vs. SimCSE on NLI, the two reductions."""
    simcse = "SimCSE sup. (cosine on μ)"
    lines = ["### Other claims"]
    for reduction in ("sum", "mean_dim"):
        label = f"ent+con+rev / {reduction}"
        cells = []
        for column in NLI_COLUMNS:
            ours = mean_of(study, label, f"direction/{column}/similarity_rule")
            length = mean_of(study, label, f"direction/{column}/length_baseline")
            variance = mean_of(study, label, f"direction/{column}/variance_rule")
            nli, baseline = (
                mean_of(study, label, f"nli/{column}/accuracy"),
                mean_of(study, simcse, f"nli/{column}/accuracy"),
            )
            cells.append((NLI_COLUMNS[column], ours - length, variance, nli - baseline))
        lines.append(
            f"- `{label}`: direction (similarity rule) minus the length baseline: "
            + ", ".join(f"{name} {gap:+.2f}" for name, gap, _, _ in cells)
            + " points; variance rule (premise has the larger Σlog σ²): "
            + ", ".join(f"{name} {variance:.2f}%" for name, _, variance, _ in cells)
            + "; binary-NLI accuracy minus supervised SimCSE's: "
            + ", ".join(f"{name} {gap:+.2f}" for name, _, _, gap in cells)
            + " points."
        )
    return "\n".join(lines)


def defaults_section(study: dict) -> str:
    """The defaults the evidence picks (on SNLI dev only), beside the code's current defaults."""
    dev = {
        reduction: metrics.mean_and_std(
            [log["best"]["snli_dev_auprc"] for log in study["training"][f"ent+con+rev / {reduction}"]]
        )
        for reduction in ("sum", "mean_dim")
    }
    picked = max(dev, key=lambda reduction: dev[reduction][0])
    code_reduction = {field.name: field.default for field in dataclasses.fields(ModelArguments)}["similarity_reduction"]
    head_lr = study["chosen"][f"ent+con+rev / {picked}"]["learning_rate"]
    code_head_lr = {field.name: field.default for field in dataclasses.fields(GaussCSETrainingArguments)}[
        "head_learning_rate"
    ]
    return "\n".join(
        [
            "## Defaults picked from this evidence (SNLI dev only)",
            f"- Similarity reduction for training: mean SNLI-dev AUPRC of ent+con+rev over seeds is "
            f"{dev['sum'][0]:.2f} ± {dev['sum'][1]:.2f} with `sum` and {dev['mean_dim'][0]:.2f} ± "
            f"{dev['mean_dim'][1]:.2f} with `mean_dim` → **`{picked}`**. `train_gausscse.py --similarity_reduction` "
            f"defaults to `{code_reduction}` ({'agrees' if code_reduction == picked else 'DISAGREES'}).",
            f"- Head learning rate with a frozen backbone: the dev-best value for ent+con+rev / {picked} is "
            f"**{head_lr:g}**. `--head_learning_rate` defaults to `{code_head_lr}` (= `--learning_rate`, the "
            "paper's single rate); with a fine-tuned backbone the configs use 1e-3 (`configs/`), with a frozen one "
            "(`--freeze_backbone`) use the value above.",
        ]
    )


def reproduction_report(study: dict, plots_folder: str) -> str:
    entries = load_entries(study)
    sections = [
        "# Reproduction study: GaussCSE on the offline data",
        f"Generated by `results/write_reports.py` from `results/study/study.json`; rerun everything with `{REBUILD}`.",
        setup_section(study),
        findings_section(study),
        defaults_section(study),
        "# Tables (paper layout)",
        nli_section(entries).replace("## ", "## Table 1 — ", 1),
        direction_section(entries).replace("## ", "## Table 2 — ", 1),
        sts_section(entries),
        significance_section({**study["significance"], **_flatten_findings(study["findings"])}).replace(
            "McNemar's test on per-example correctness", "McNemar's test on per-example correctness (first seed)"
        ),
        tuning_section(study),
        "## Plots (first seed)",
        "\n".join(f"![{name}]({plots_folder}/{name})" for name in study["plots"]),
    ]
    return "\n\n".join(sections) + "\n"


def _flatten_findings(findings: dict) -> dict:
    return {contrast: tests for contrasts in findings.values() for contrast, tests in contrasts.items()}


def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f} MiB"


def benchmarks_report(bench: Path) -> str:
    """BENCHMARKS.md from ``bench_*_<device>.json``."""
    sections = [
        "# Benchmarks",
        "Generated by `results/write_reports.py` from the JSON files the bench scripts write; every ratio is "
        "measured side by side in one run. Rerun: `bash results/run_benchmarks.sh`.",
    ]
    for path in sorted(bench.glob("bench_similarity_*.json")):
        data = json.loads(path.read_text())
        rows = [
            [
                name,
                f"{row['median_seconds'] * 1e3:,.1f}",
                _mib(row["peak_extra_bytes"]),
                f"{row['speedup_vs_reference']:.1f}×",
                f"{row['memory_ratio_vs_reference']:.1f}×",
            ]
            for name, row in data["rows"].items()
        ]
        sections += [
            f"## Pairwise similarity matrix ({data['device_name']}, {data['cpu_count']} cores, torch {data['torch']})",
            f"N = {data['n']}, M = {data['m']}, d = {data['dim']}; `reference` is the released code's "
            "`torch.distributions` N×M×d broadcast (mean over dimensions). `python bench/bench_similarity.py "
            f"--json {path.as_posix()}` (median of {data['repeats']}).",
            markdown_table(["variant", "time (ms)", "peak extra memory", "speed-up", "less memory"], rows),
        ]
    for path in sorted(bench.glob("bench_train_step_*.json")):
        data = json.loads(path.read_text())
        rows = [
            [
                name,
                f"{data['batch_size'] / value:.1f}",
                _mib(data["peak_extra_bytes"][name]),
                f"{value / data['triplets_per_second']['released']:.2f}×",
            ]
            for name, value in data["triplets_per_second"].items()
        ]
        sections += [
            f"## Training step vs. the released code's step ({data['device_name']}, {data['cpu_count']} cores)",
            f"MiniLM, batch {data['batch_size']} complete triplets, max length {data['max_length']}, "
            f"{'bf16 autocast' if data['bf16'] else 'fp32'}, median of {data['steps']} interleaved steps; peak memory "
            f"from one process per method. `python bench/bench_train_step.py --json {path.as_posix()}`.",
            markdown_table(["method", "s / step", "peak extra memory", "throughput vs. released"], rows),
        ]
    for path in sorted(bench.glob("bench_encode_*.json")):
        data = json.loads(path.read_text())
        rows = [
            [name, f"{value:.1f}", _mib(data["peak_extra_bytes"][name]) if "peak_extra_bytes" in data else "—"]
            for name, value in data["sentences_per_second"].items()
        ]
        sections += [
            f"## encode() vs. sentence-transformers ({data['device_name']}, {data['cpu_count']} cores)",
            f"{data['sentences']} SNLI-test sentences, batch {data['batch_size']}, max length {data['max_length']}, "
            f"{'bf16' if data['bf16'] else 'fp32'}, same all-MiniLM-L6-v2 weights. Ratio **{data['ratio']:.2f}×** "
            f"(target ≥ 1.0×). `python bench/bench_encode.py --json {path.as_posix()}`.",
            markdown_table(["encoder", "sentences / s", "peak extra memory"], rows),
        ]
    return "\n\n".join(sections) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", type=Path, default=Path("results/study"))
    parser.add_argument("--bench", type=Path, default=Path("results"))
    parser.add_argument("--output", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    study_file = args.study / "study.json"
    if study_file.is_file():
        study = json.loads(study_file.read_text())
        plots_folder = Path(os.path.relpath(args.study, args.output)).as_posix()
        write_atomic(args.output / "REPRODUCTION.md", reproduction_report(study, plots_folder))
        print(f"Wrote {args.output / 'REPRODUCTION.md'}", file=sys.stderr)
    else:
        print(f"No {study_file}: REPRODUCTION.md left as is (run `{REBUILD}`)", file=sys.stderr)
    write_atomic(args.output / "BENCHMARKS.md", benchmarks_report(args.bench))
    print(f"Wrote {args.output / 'BENCHMARKS.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
