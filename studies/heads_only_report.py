"""Write ``results/HEADS_ONLY.md``: the frozen-backbone (heads-only) study, from ``results/study/study.json`` and the
full fine-tuning check beside it (``results/study/finetune/*/``). Every number comes from those JSON files or from
the code's defaults; nothing is typed in.

    python -m studies.heads_only_report [--study results/study] [--output results]

(``results/BENCHMARKS.md`` is the benchmarks' report: ``python -m bench.report``.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from gausscse import GaussCSEConfig
from gausscse.evaluation import metrics
from gausscse.evaluation.report import (
    NLI_COLUMNS,
    Entry,
    direction_section,
    markdown_table,
    nli_section,
    significance_section,
    sts_section,
)
from gausscse.evaluation.suite import ModelRun
from gausscse.io import write_atomic
from studies.heads_only import training_default

REBUILD = "bash studies/run_study.sh"
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
        f"- Evaluation: the suite of `gausscse-evaluate` on the full test sets (max length "
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
                    f"{row['snli_dev_direction_accuracy']:.2f}" if "snli_dev_direction_accuracy" in row else "—",
                ]
            )
    grid = study["meta"]["grid"]
    edges = [
        f"{label} ({', '.join(name for name, value in chosen.items() if value in (min(grid[name]), max(grid[name])))})"
        for label, chosen in study["chosen"].items()
        if any(value in (min(grid[name]), max(grid[name])) for name, value in chosen.items())
    ]
    note = (
        "Chosen at an edge of the grid (a wider grid might do better there): " + "; ".join(edges) + "."
        if edges
        else "No chosen value lies at an edge of the grid."
    )
    return "\n\n".join(
        [
            "## Tuning on SNLI dev (tuning seed only)",
            note,
            markdown_table(
                ["configuration", "batch", "head lr", "SNLI-dev AUPRC of the best step", "best step", "dev direction"],
                rows,
            ),
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
        rows, wins_by_reduction = [], {}
        for contrast, tests in contrasts.items():
            with_label, without_label = contrast.split(" vs. ")
            cells, wins = _difference_cells(study, with_label, without_label, metric, test_key, tests)
            rows.append([contrast, *cells, f"{wins}/{len(NLI_COLUMNS)}"])
            reduction = with_label.split(" / ")[1]
            won, total = wins_by_reduction.get(reduction, (0, 0))
            wins_by_reduction[reduction] = (won + wins, total + len(NLI_COLUMNS))
        summary.append(
            f"- *{claim}* (paper): "
            + "; ".join(
                f"**{verdict(won, total)}** with `{reduction}` ({won} of {total} (contrast, test set) cells improve "
                f"with p < {P_THRESHOLD})"
                for reduction, (won, total) in wins_by_reduction.items()
            )
            + "."
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
    return "\n\n".join(
        ["## The paper's findings, tested here", "\n".join(summary), why(study), *sections, other_findings(study)]
    )


def why(study: dict) -> str:
    """Generated explanations: configurations whose AUPRC-selected heads stopped at the first evaluation, and the
    share of examples that have a contradiction hypothesis."""
    first_eval = min(row["step"] for grid in study["tuning"].values() for row in grid)
    stopped = [
        f"`{label}` (step {row['step']} at lr {row['learning_rate']:g}, dev direction "
        f"{row['snli_dev_direction_accuracy']:.1f}%)"
        for label, grid in study["tuning"].items()
        for row in grid
        if {"batch_size": row["batch_size"], "learning_rate": row["learning_rate"]} == study["chosen"][label]
        and row["step"] == first_eval
        and "snli_dev_direction_accuracy" in row
    ]
    data = study["meta"]["training_data"]
    lines = ["Why, in plain words:"]
    if stopped:
        lines.append(
            "- The AUPRC-best heads of "
            + ", ".join(stopped)
            + " are those of the first evaluation: barely trained heads on the backbone's vectors already rank pairs "
            "well, and AUPRC cannot see direction, so these configurations are scored nearly untrained (see "
            "*Selecting by SNLI-dev AUPRC* below). Comparisons that involve them say more about the selection "
            "criterion than about the loss."
        )
    lines.append(
        f"- Only {data['complete_triplets']} of {data['examples']} examples "
        f"({100 * data['complete_triplets'] / data['examples']:.1f}%) have a contradiction hypothesis in the offline "
        "samples, so V_C holds few terms per batch; in the full SNLI + MNLI the paper trained on, most examples have "
        "one."
    )
    return "\n".join(lines)


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


def finetune_runs(folder: Path) -> dict[str, dict]:
    """``{reduction: {"train": train_results, "eval": evaluation results}}`` of the full fine-tuning check."""
    return {
        path.name: {
            "train": json.loads((path / "train_results.json").read_text()),
            "eval": json.loads((path / "eval_results.json").read_text()),
        }
        for path in sorted(folder.glob("*"))
        if (path / "eval_results.json").is_file()
    }


def defaults_section(study: dict, finetune: dict[str, dict]) -> str:
    """The defaults the evidence picks (SNLI dev only), beside the code's current defaults. The training reduction
    is picked by the SNLI-dev AUPRC (the paper's criterion) of the full fine-tuning check, which is how
    ``train_gausscse.py`` is used, when it exists; else by the heads-only study's."""
    heads_only = {
        reduction: metrics.mean_and_std(
            [log["best"]["snli_dev_auprc"] for log in study["training"][f"ent+con+rev / {reduction}"]]
        )
        for reduction in ("sum", "mean_dim")
    }
    evidence = [
        "- Heads-only study, ent+con+rev, mean SNLI-dev AUPRC over seeds: "
        + ", ".join(f"`{reduction}` {mean:.2f} ± {std:.2f}" for reduction, (mean, std) in heads_only.items())
        + "."
    ]
    if finetune:
        picked = max(finetune, key=lambda reduction: finetune[reduction]["train"]["eval_snli_dev_auprc"])
        evidence.append(
            "- Full fine-tuning check (1 seed), final SNLI-dev AUPRC / direction accuracy: "
            + ", ".join(
                f"`{reduction}` {run['train']['eval_snli_dev_auprc']:.2f} / "
                f"{run['train']['eval_snli_dev_direction_accuracy']:.2f}"
                for reduction, run in finetune.items()
            )
            + "."
        )
        basis = "the full fine-tuning check's dev AUPRC"
        by_direction = max(
            finetune, key=lambda reduction: finetune[reduction]["train"]["eval_snli_dev_direction_accuracy"]
        )
        evidence.append(
            f"- The best dev direction accuracy in the check: `{by_direction}`. The quickstart's reduction "
            "(`configs/quickstart.yaml`) is now the library default, chosen by the later reduction study "
            "(`results/REPRODUCTION.md`)."
        )
    else:
        picked = max(heads_only, key=lambda reduction: heads_only[reduction][0])
        basis = "the heads-only study's dev AUPRC"
    code_reduction = GaussCSEConfig().similarity_reduction
    heads_lr = study["chosen"][f"ent+con+rev / {picked}"]["learning_rate"]
    code_head_lr = training_default("head_learning_rate")
    return "\n".join(
        [
            "## Defaults picked from this evidence (SNLI dev only)",
            *evidence,
            f"- Training reduction by this evidence: `{picked}` (by {basis}). `train_gausscse.py "
            f"--similarity_reduction` defaults to `{code_reduction}`, picked by the later full fine-tuning studies by "
            "their SNLI-dev rules (`results/REPRODUCTION.md`), which supersede this section.",
            f"- **Head learning rate with a fine-tuned backbone: `--head_learning_rate` defaults to "
            f"`{code_head_lr}`**{finetune_head_rates(finetune)}. With a frozen backbone the dev-best head rate for "
            f"ent+con+rev / {picked} is {heads_lr:g} (tuning grid below).",
        ]
    )


def finetune_head_rates(finetune: dict[str, dict]) -> str:
    """``", the rate of the full fine-tuning runs (k of n beat the length baseline on SNLI test)"``, or ``""``."""
    if not finetune:
        return ""
    beaten = sum(
        direction["similarity_rule"] > direction["length_baseline"]
        for direction in (next(iter(run["eval"]["models"].values()))["direction"]["snli"] for run in finetune.values())
    )
    return (
        f", the head rate of the full fine-tuning runs ({beaten} of {len(finetune)} beat the length baseline on "
        "SNLI-test direction)"
    )


def selection_section(study: dict) -> str:
    """What selecting by SNLI-dev AUPRC (the paper's criterion) costs in direction accuracy, from the tuning grid:
    the dev direction accuracy of the chosen cell against the best dev direction accuracy of any cell."""
    rows = []
    for label, grid in study["tuning"].items():
        if not all("snli_dev_direction_accuracy" in row for row in grid):
            continue
        chosen = next(
            row
            for row in grid
            if {"batch_size": row["batch_size"], "learning_rate": row["learning_rate"]} == study["chosen"][label]
        )
        top = max(grid, key=lambda row: row["snli_dev_direction_accuracy"])
        rows.append(
            [
                label,
                f"{chosen['snli_dev_auprc']:.2f} / {chosen['snli_dev_direction_accuracy']:.2f} "
                f"(batch {chosen['batch_size']}, lr {chosen['learning_rate']:g}, step {chosen['step']})",
                f"{top['snli_dev_auprc']:.2f} / {top['snli_dev_direction_accuracy']:.2f} "
                f"(batch {top['batch_size']}, lr {top['learning_rate']:g}, step {top['step']})",
            ]
        )
    return "\n\n".join(
        [
            "## Selecting by SNLI-dev AUPRC and the direction it leaves behind",
            "The paper keeps the checkpoint with the best SNLI-dev AUPRC, and so does this study. AUPRC only ranks "
            "sim(hyp‖pre) across pairs; it does not see which way a pair entails. Tuning grid, tuning seed, values at "
            "each cell's AUPRC-best step: SNLI-dev AUPRC / direction accuracy of the chosen cell, and of the cell "
            "with the highest dev direction accuracy.",
            markdown_table(["configuration", "chosen by AUPRC", "best dev direction in the grid"], rows),
        ]
    )


def finetune_section(finetune: dict[str, dict]) -> str | None:
    """Full fine-tuning of the backbone, one run per reduction (see :func:`finetune_runs`); ``None`` without runs."""
    if not finetune:
        return None
    columns = ("snli", "mnli_mismatched", "sick")
    rows = []
    for reduction, run in finetune.items():
        train, evaluation = run["train"], run["eval"]
        results = next(iter(evaluation["models"].values()))
        rows.append(
            [
                f"`{reduction}`",
                f"{train['eval_snli_dev_auprc']:.2f}",
                f"{train['eval_snli_dev_direction_accuracy']:.2f}",
                *(f"{results['nli'][column]['accuracy']:.2f}" for column in columns),
                *(f"{results['direction'][column]['similarity_rule']:.2f}" for column in columns),
                f"{train['train_runtime'] / 60:.1f}",
            ]
        )
    length = [f"{results['direction'][column]['length_baseline']:.2f}" for column in columns]
    header = ["similarity reduction", "dev AUPRC", "dev direction"]
    header += [f"NLI acc {NLI_COLUMNS[column]}" for column in columns]
    header += [f"direction {NLI_COLUMNS[column]}" for column in columns] + ["training (min)"]
    return "\n\n".join(
        [
            "## Full fine-tuning check: one seed per reduction (`configs/quickstart.yaml`)",
            "The backbone trained too (200 packed steps of batch 64, backbone 5e-5, heads 1e-3, the final weights), "
            "as `bash scripts/quickstart.sh` does, once with each reduction. Dev: the final SNLI-dev evaluation of "
            f"training (first {train['eval_max_examples']} dev pairs); test: first "
            f"{evaluation['meta']['max_examples']} rows of each split. Length baseline on the same rows: "
            f"{', '.join(length)}.",
            markdown_table(header, rows),
        ]
    )


def heads_only_report(study: dict, plots_folder: str, finetune_folder: Path) -> str:
    """The text of ``HEADS_ONLY.md``: the frozen-backbone study ``study`` (its ``study.json``), with its plots under
    ``plots_folder`` (relative to the report) and the full fine-tuning check's runs in ``finetune_folder``."""
    entries = load_entries(study)
    finetune = finetune_runs(finetune_folder)
    data = study["meta"]["training_data"]
    sections = [
        "# Frozen-backbone study: GaussCSE heads on the earlier offline sample",
        "> Superseded for the defaults by the full-fine-tuning study in [`REPRODUCTION.md`](REPRODUCTION.md). This "
        "study trained only the μ/σ² heads on the earlier offline sample "
        f"({data['examples_used']:,} examples, {data['complete_triplets']:,} triplets); its JSON is kept as it was.",
        f"Generated by `studies/heads_only_report.py` from `results/study/study.json`; rerun everything with "
        f"`{REBUILD}`.",
        setup_section(study),
        findings_section(study),
        defaults_section(study, finetune),
        selection_section(study),
        finetune_section(finetune),
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
    return "\n\n".join(section for section in sections if section) + "\n"


def _flatten_findings(findings: dict) -> dict:
    return {contrast: tests for contrasts in findings.values() for contrast, tests in contrasts.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", type=Path, default=Path("results/study"), help="the folder of study.json")
    parser.add_argument("--output", type=Path, default=Path("results"), help="the folder HEADS_ONLY.md goes to")
    args = parser.parse_args(argv)
    study_file = args.study / "study.json"
    if not study_file.is_file():
        raise SystemExit(f"No {study_file}: run `{REBUILD}` first")
    study = json.loads(study_file.read_text())
    plots_folder = Path(os.path.relpath(args.study, args.output)).as_posix()
    write_atomic(args.output / "HEADS_ONLY.md", heads_only_report(study, plots_folder, args.study / "finetune"))
    print(f"Wrote {args.output / 'HEADS_ONLY.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
