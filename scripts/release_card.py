"""The release summary of ``scripts/release.sh``: GaussCSE next to its SimCSE twin, written into the one evaluation.

Reads ``OUT/eval/results.json`` (one ``gausscse-evaluate`` run: GaussCSE as the model, the SimCSE twin and the
backbone as baselines, McNemar between GaussCSE and each), both models' ``train_results.json`` (minutes, the dev
evaluations during training with their elapsed seconds) and the stage timings ``release.sh`` measured, then writes

* a ``release`` block into ``OUT/eval/results.json``: recipe, data, hardware, minutes, both models' test metrics, the
  targets of issue 25 with whether each is met, and the dev curves (metric against training minutes, both models);
* the same as a Markdown section at the top of ``OUT/eval/report.md`` and as the ``## Release`` section of the model
  card ``OUT/README.md``, with the curve ``OUT/release_curve.png`` (also uploaded with the model).

Every number comes from those files.

    python scripts/release_card.py OUT TWIN --config configs/release.yaml --precision bf16 --timing FILE
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from gausscse.drawing.gaussians import save_png
from gausscse.evaluation.report import REPORT_TITLE
from gausscse.hub.model_card import with_section
from gausscse.io import write_atomic, write_json
from gausscse.training.precision import cpu_name
from gausscse.training.save import add_final_model_file

GAUSSCSE, TWIN, BACKBONE = "GaussCSE", "SimCSE twin", "all-MiniLM-L6-v2"  # the labels release.sh evaluates under
TEST_SETS = (("snli", "SNLI"), ("mnli_mismatched", "MNLI (mm)"), ("sick", "SICK"), ("mnli_matched", "MNLI (m)"))
CURVE_FILE = "release_curve.png"
HEADING = "## Release"
# issue 47's targets on the full test splits: the direction bars, and binary NLI against the twin — accuracy on at
# least two of the three sets, AUPRC on all three
DIRECTION_TARGETS = {"snli": 96.5, "mnli_mismatched": 89.0, "sick": 87.0}
NLI_SETS = ("snli", "mnli_mismatched", "sick")
ACCURACY_WINS = 2  # of NLI_SETS
CURVE_METRICS = (("snli_dev_auprc", "SNLI-dev AUPRC"), ("snli_dev_accuracy", "SNLI-dev accuracy"))


def metric(results: Mapping[str, Any], *path: str) -> float:
    for key in path:
        results = results[key]
    return float(results)


def targets(models: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each target of the release (issues 25 and 47): what, GaussCSE's value, the bar and whether it is met."""
    gauss, twin, backbone = models[GAUSSCSE], models[TWIN], models[BACKBONE]
    rows = [
        {
            "target": f"direction {label} ≥ {DIRECTION_TARGETS[key]}",
            "value": metric(gauss, "direction", key, "similarity_rule"),
            "bar": DIRECTION_TARGETS[key],
        }
        for key, label in TEST_SETS
        if key in DIRECTION_TARGETS
    ]
    labels = dict(TEST_SETS)
    against_twin = {
        measure: [
            {
                "target": f"{name} {labels[key]} ≥ {TWIN}",
                "value": metric(gauss, "nli", key, measure),
                "bar": metric(twin, "nli", key, measure),
            }
            for key in NLI_SETS
        ]
        for measure, name in (("accuracy", "NLI accuracy"), ("auprc", "AUPRC"))
    }
    rows += against_twin["accuracy"] + against_twin["auprc"]
    wins = sum(round(row["value"], 2) >= round(row["bar"], 2) for row in against_twin["accuracy"])
    rows.append(
        {
            "target": f"NLI accuracy ≥ {TWIN} on at least {ACCURACY_WINS} of {len(NLI_SETS)} sets",
            "value": float(wins),
            "bar": float(ACCURACY_WINS),
        }
    )
    rows.append(
        {
            "target": "STS avg (cos μ) ≥ the backbone's",
            "value": metric(gauss, "sts", "avg", "cosine"),
            "bar": metric(backbone, "sts", "avg", "cosine"),
        }
    )
    scores = [("similarity", "own similarity"), ("cosine", "cos μ")]
    if "search" in gauss["retrieval"]["snli"]:  # a model that states its search score's λ (issue 36)
        scores.insert(0, ("search", "search score"))
    for score, name in scores:
        rows.append(
            {
                "target": f"SNLI-test retrieval nDCG@10 ({name}) ≥ the backbone's cosine",
                "value": metric(gauss, "retrieval", "snli", score, "ndcg@10"),
                "bar": metric(backbone, "retrieval", "snli", "cosine", "ndcg@10"),
            }
        )
    for row in rows:
        row["met"] = round(row["value"], 2) >= round(row["bar"], 2)
    return rows


def curve(train_results: Mapping[str, Any]) -> list[dict[str, float]]:
    """A run's dev evaluations during training as ``{"minutes", <metric>...}``."""
    return [
        {"minutes": point["elapsed_seconds"] / 60, **{name: point[name] for name, _ in CURVE_METRICS if name in point}}
        for point in train_results.get("dev_curve", [])
        if point.get("elapsed_seconds") is not None
    ]


def plot_curves(curves: Mapping[str, Sequence[Mapping[str, float]]], path: Path) -> Path:
    """SNLI-dev AUPRC and accuracy against training minutes, one line per model."""
    figure, axes = plt.subplots(1, len(CURVE_METRICS), figsize=(5 * len(CURVE_METRICS), 3.6))
    for axis, (name, title) in zip(axes, CURVE_METRICS, strict=True):
        for label, points in curves.items():
            shown = [point for point in points if name in point]
            axis.plot([p["minutes"] for p in shown], [p[name] for p in shown], marker="o", markersize=3, label=label)
        axis.set_xlabel("training minutes")
        axis.set_title(title)
        axis.grid(alpha=0.3)
    axes[0].legend()
    return save_png(figure, path)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def markdown(release: Mapping[str, Any], models: Mapping[str, Mapping[str, Any]], curve_file: str | None) -> str:
    minutes = release["minutes"]
    labels = [label for label in (GAUSSCSE, TWIN, BACKBONE) if label in models]
    nli = table(
        ["model", *(label for _, label in TEST_SETS)],
        [
            [label, *(f"{metric(models[label], 'nli', key, 'accuracy'):.2f}" for key, _ in TEST_SETS)]
            for label in labels
        ],
    )
    direction = table(
        ["rule", *(label for _, label in TEST_SETS)],
        [
            [f"{GAUSSCSE}: {rule.replace('_', ' ')}"]
            + [f"{metric(models[GAUSSCSE], 'direction', key, rule):.2f}" for key, _ in TEST_SETS]
            for rule in ("similarity_rule", "variance_rule", "length_baseline")
        ],
    )
    keep = table(
        ["model", "STS avg (cos μ)", "SNLI-test retrieval nDCG@10 (own similarity)", "(cos μ)"],
        [
            [
                label,
                f"{metric(models[label], 'sts', 'avg', 'cosine'):.2f}",
                f"{metric(models[label], 'retrieval', 'snli', 'similarity', 'ndcg@10'):.2f}"
                if "similarity" in models[label]["retrieval"]["snli"]
                else "—",
                f"{metric(models[label], 'retrieval', 'snli', 'cosine', 'ndcg@10'):.2f}",
            ]
            for label in labels
        ],
    )
    mcnemar = table(
        ["test set", f"only {GAUSSCSE} correct", f"only {TWIN} correct", "p (exact)"],
        [
            [
                name.removeprefix("nli/"),
                str(test["only_a_correct"]),
                str(test["only_b_correct"]),
                f"{test['p_value']:.3g}",
            ]
            for name, test in sorted(release["mcnemar_vs_twin"].items())
        ],
    )
    goals = table(
        ["target", "GaussCSE", "bar", "met"],
        [
            [row["target"], f"{row['value']:.2f}", f"{row['bar']:.2f}", "✓" if row["met"] else "✗"]
            for row in release["targets"]
        ],
    )
    timing = ", ".join(f"{name} {value:.1f}" for name, value in minutes.items())
    parts = [
        HEADING,
        f"Trained by `bash scripts/release.sh` with `{release['config']}` on {release['hardware']} "
        f"(precision {release['precision']}); the SimCSE twin has the same config, backbone, data, steps, batch and "
        f"seed, with the cosine loss on one trained encoder (`--loss simcse --frozen_mean false`). Minutes: {timing}.",
        f"Recipe (`{release['config']}`):\n\n```yaml\n{release['recipe'].strip()}\n```",
        f"Data: {release['data']['examples']} training examples from {release['data']['rows']} rows "
        f"({', '.join(f'{Path(source).name}: {rows}' for source, rows in release['data']['per_source'].items())}). "
        "Test sets: full SNLI test, MNLI matched/mismatched dev, SICK test; STS12–16, STS-B, SICK-R; entailment "
        "retrieval (2,000 claims × all premises).",
        f"Binary NLI accuracy (%, threshold best on SNLI dev):\n\n{nli}",
        f"Entailment direction (%, entailment pairs):\n\n{direction}",
        f"STS and entailment retrieval:\n\n{keep}",
        f"McNemar, {GAUSSCSE} against the {TWIN} (binary NLI):\n\n{mcnemar}",
        f"Targets (issues 25 and 47; the per-set accuracy rows count towards the at-least-{ACCURACY_WINS} row):"
        f"\n\n{goals}",
    ]
    if curve_file:
        parts.append(
            f"![SNLI-dev metrics against training minutes]({curve_file})\n\nThe dev evaluations during training "
            "(SNLI dev, the first pairs `eval_max_examples` sets) against the minutes since training began: whether "
            "a longer run would still gain."
        )
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the release model folder (with eval/results.json)")
    parser.add_argument("twin", type=Path, help="the SimCSE twin's folder")
    parser.add_argument("--config", type=Path, required=True, help="the recipe both were trained with")
    parser.add_argument("--precision", required=True, help="the training precision (bf16 or fp32)")
    parser.add_argument("--timing", type=Path, help="release.sh's stage timings: lines 'STAGE SECONDS'")
    args = parser.parse_args(argv)
    results_file = args.out / "eval" / "results.json"
    for path in (results_file, args.out / "train_results.json", args.twin / "train_results.json", args.config):
        if not path.is_file():
            parser.error(f"{path}: no such file (run scripts/release.sh first)")
    payload = json.loads(results_file.read_text(encoding="utf-8"))
    models = {**payload["models"], **payload["baselines"]}
    missing = [label for label in (GAUSSCSE, TWIN, BACKBONE) if label not in models]
    if missing:
        parser.error(f"{results_file}: no results for {', '.join(missing)} (the labels release.sh evaluates under)")
    trained = {
        GAUSSCSE: json.loads((args.out / "train_results.json").read_text(encoding="utf-8")),
        TWIN: json.loads((args.twin / "train_results.json").read_text(encoding="utf-8")),
    }
    minutes = {f"{label} training": results["train_runtime"] / 60 for label, results in trained.items()}
    if args.timing is not None:
        for line in args.timing.read_text(encoding="utf-8").splitlines():
            stage, seconds = line.rsplit(" ", 1)
            minutes[stage] = int(seconds) / 60
    curves = {label: curve(results) for label, results in trained.items()}
    release = {
        "config": str(args.config),
        "recipe": args.config.read_text(encoding="utf-8"),
        "hardware": f"{cpu_name()}, {os.cpu_count()} cores, CPU only",
        "precision": args.precision,
        "minutes": minutes,
        "data": trained[GAUSSCSE]["data"],
        "targets": targets(models),
        "mcnemar_vs_twin": payload["significance"].get(f"{GAUSSCSE} vs. {TWIN}", {}),
        "dev_curves": curves,
    }
    curve_file = None
    if any(curves.values()):
        plot_curves(curves, args.out / CURVE_FILE)
        add_final_model_file(args.out, CURVE_FILE)
        curve_file = CURVE_FILE
    section = markdown(release, models, curve_file)
    write_json(results_file, {**payload, "release": release})
    report = args.out / "eval" / "report.md"
    body = report.read_text(encoding="utf-8") if report.is_file() else ""
    body = body[body.find(REPORT_TITLE) :] if REPORT_TITLE in body else body  # a rerun replaces its section
    section_in_eval = section.replace(f"]({CURVE_FILE})", f"](../{CURVE_FILE})")
    write_atomic(report, f"{section_in_eval}\n\n{body}")
    card = args.out / "README.md"
    if card.is_file():
        write_atomic(card, with_section(card.read_text(encoding="utf-8"), HEADING, section))
    print(f"Wrote the release summary into {results_file}, {report} and {card}")
    return release


if __name__ == "__main__":
    main()
