"""Command line: ``gausscse-evaluate --model PATH --tasks nli,direction,sts --output DIR``
(or ``python -m gausscse.cli.evaluate``).

Writes ``DIR/results.json``, ``DIR/report.md`` and PNG plots (``pr_curves.png``; for Gaussian models
``generality_gap_<name>.png`` and ``gaussians_2d_<name>.png``). A ``--model`` folder with a GaussCSE model card
(``README.md`` as gausscse-train writes it) gets the results in its card: every metric in the metadata's
``model-index`` and in the card's evaluation tables (not with ``--max_examples``: subsets are not the test splits).

Several ``--model`` paths are runs (seeds) of one configuration: the report shows mean ± std and the
significance tests use the first. ``--baseline`` paths are evaluated by the same code (a GaussCSE folder or any
encoder, e.g. the packaged all-MiniLM-L6-v2 with its own pooling and cosine).
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import torch
from huggingface_hub import EvalResult
from tqdm.auto import tqdm

from gausscse.drawing.reports import plot_gaussians_2d, plot_generality_gap, plot_pr_curves
from gausscse.evaluation.encoders import load_encoder
from gausscse.evaluation.encoding import DEFAULT_BATCH_SIZE
from gausscse.evaluation.report import Entry, markdown_report
from gausscse.evaluation.suite import (
    TASKS,
    ModelRun,
    TaskData,
    aggregate_seeds,
    flatten,
    parse_tasks,
    run_encoder,
    significance,
    significance_against_length,
)
from gausscse.evaluation.tasks import NLI_DEV, NLI_TEST_SETS, RETRIEVAL_SETS, STS_DEV, STS_SETS
from gausscse.hub.model_card import dev_eval_results, eval_result, hub_dataset, update_model_card
from gausscse.io import write_atomic, write_json
from gausscse.model.modeling_gausscse import DEFAULT_MAX_LENGTH


def build_parser() -> argparse.ArgumentParser:
    """The CLI's arguments."""
    parser = argparse.ArgumentParser(prog="gausscse-evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", nargs="+", required=True, help="model folder(s) or Hub id(s); several = seeds")
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {','.join(TASKS)}")
    parser.add_argument("--data_dir", default=None, help="folder in the layout of shared/data (default: auto)")
    parser.add_argument("--baseline", nargs="*", default=[], help="point-embedding or GaussCSE models to compare")
    parser.add_argument("--model_names", nargs="*", default=None, help="report labels of --model (default: folder)")
    parser.add_argument("--baseline_names", nargs="*", default=None, help="report labels of --baseline")
    parser.add_argument("--output", required=True, help="folder for results.json, report.md and the PNGs")
    parser.add_argument("--max_examples", type=int, default=None, help="use the first N rows of every split")
    parser.add_argument("--batch_size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument(
        "--max_length",
        type=int,
        default=DEFAULT_MAX_LENGTH,
        help="truncation length in tokens (default: the encoder's limit)",
    )
    parser.add_argument("--bf16", action="store_true", help="encode under bfloat16 autocast (KL stays float32)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--no_plots", action="store_true", help="skip the PNGs")
    return parser


def _file_label(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_") or "model"


def _labels(paths: list[str], names: list[str] | None, argument: str, taken: set[str]) -> list[str]:
    """Distinct report labels: ``names`` if given, else the folder names; ``-2``, ``-3``… when labels repeat."""
    if names is not None and len(names) != len(paths):
        raise ValueError(f"{argument} needs one name per path: got {len(names)} names for {len(paths)} paths")
    labels = []
    for path, name in zip(paths, names or [None] * len(paths), strict=True):
        base = name or Path(path.rstrip("/")).name or path
        label, count = base, 1
        while label in taken:
            count += 1
            label = f"{base}-{count}"
        taken.add(label)
        labels.append(label)
    return labels


PLOT_PATTERNS = ("pr_curves.png", "generality_gap_*.png", "gaussians_2d_*.png")


def check_output_folder(output: Path) -> Path:
    """Create ``output`` and make sure a file can be written there, or raise ``ValueError`` naming it."""
    try:
        output.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=output, prefix=".write-check-"):
            pass
    except OSError as error:
        raise ValueError(f"--output {output}: cannot write there ({error.strerror or error})") from error
    return output


def remove_stale_plots(output: Path, written: list[Path]) -> None:
    """Delete plots an earlier run left in ``output`` that this run did not write (they would be mistaken for its
    own)."""
    keep = {Path(path).resolve() for path in written}
    for pattern in PLOT_PATTERNS:
        for path in output.glob(pattern):
            if path.resolve() not in keep:
                path.unlink()


# results block -> (model-index task type, the (dataset, split) of each of its sets, prefix of its metric types)
CARD_BLOCKS = {
    "nli": ("binary-classification", NLI_TEST_SETS, ""),
    "direction": ("entailment-direction", NLI_TEST_SETS, ""),
    "sts": ("semantic-similarity", STS_SETS, "spearman_"),
    "sts_dev": ("semantic-similarity", dict([STS_DEV]), "spearman_"),
    "retrieval": ("information-retrieval", {**RETRIEVAL_SETS, "snli_dev": NLI_DEV}, ""),
}
# results that are no metric of the model: counts, the test sets' copy of the SNLI-dev threshold, the length baselines
NOT_CARD_METRICS = {"examples", "positives", "size", "threshold", "length_baseline", "length_baseline_words"}


def card_eval_results(results: dict) -> list[EvalResult]:
    """One model's ``results`` (``ModelRun.results``) as model-index entries: the SNLI dev block as the dev evaluator's
    metrics, then every metric of every set of ``CARD_BLOCKS`` (retrieval ones as ``<score>_<metric>``), but
    ``NOT_CARD_METRICS`` and the STS average (a mean over sets, no dataset)."""
    entries = dev_eval_results(results["snli_dev"], hub_dataset(*NLI_DEV)) if "snli_dev" in results else []
    for block, (task, sets, prefix) in CARD_BLOCKS.items():
        for name, values in results.get(block, {}).items():
            if name not in sets:
                continue
            for key, value in flatten(values).items():
                if key.split("/")[0] not in NOT_CARD_METRICS:
                    entries.append(eval_result(task, hub_dataset(*sets[name]), prefix + key.replace("/", "_"), value))
    return entries


def update_model_cards(paths: list[str], runs: list[ModelRun], max_examples: int | None) -> None:
    """Merge each ``--model`` folder's results into its GaussCSE model card (a Hub id, a folder without such a card:
    untouched); not after ``--max_examples``, whose subsets are not the test splits."""
    if max_examples is not None:
        print("Model cards left as they were: --max_examples scores subsets, not the test splits", file=sys.stderr)
        return
    for path, run in zip(paths, runs, strict=True):
        try:
            updated = update_model_card(path, card_eval_results(run.results))
        except OSError as error:  # a read-only folder: the results are in --output all the same
            print(f"Model card {Path(path) / 'README.md'} left as it was: {error}", file=sys.stderr)
            continue
        if updated:
            print(f"Wrote the results into the model card {Path(path) / 'README.md'}", file=sys.stderr)


def significance_tests(reference: ModelRun, baselines: list[ModelRun], tasks: tuple[str, ...]) -> dict[str, dict]:
    """McNemar between ``reference`` and each baseline and, with the direction task, between every Gaussian model's
    similarity rule and the length baseline; comparisons with no shared task left out."""
    tests = {f"{reference.name} vs. {run.name}": significance(reference, run) for run in baselines}
    if "direction" in tasks:  # every Gaussian model (the reference first) against counting characters
        for run in [reference, *baselines]:
            if run.is_gaussian:
                tests[f"{run.name} similarity rule vs. length baseline"] = significance_against_length(run)
    return {comparison: results for comparison, results in tests.items() if results}


def task_plots(shown: list[ModelRun], data: TaskData, tasks: tuple[str, ...], output: Path) -> list[Path]:
    """The figures of the tasks run for the models ``shown``: precision–recall curves (nli) and each Gaussian model's
    generality gap (direction), written into ``output``."""
    plots = [plot_pr_curves(shown, data.nli_test, output / "pr_curves.png")] if "nli" in tasks else []
    if "direction" in tasks:
        plots += [
            plot_generality_gap(run, output / f"generality_gap_{_file_label(run.name)}.png")
            for run in shown
            if run.is_gaussian
        ]
    return plots


def main(argv: list[str] | None = None) -> dict:
    """Run the CLI; returns the ``results.json`` payload."""
    args = build_parser().parse_args(argv)
    tasks = parse_tasks(args.tasks)
    if args.max_examples is not None and args.max_examples < 1:
        raise ValueError(f"--max_examples must be a positive integer, got {args.max_examples}")
    output = check_output_folder(Path(args.output))  # before any computing: a bad folder must not lose the run
    started = time.perf_counter()
    data = TaskData.load(tasks, data_dir=args.data_dir, max_examples=args.max_examples)
    taken: set[str] = set()
    model_labels = _labels(args.model, args.model_names, "--model_names", taken)
    baseline_labels = _labels(args.baseline, args.baseline_names, "--baseline_names", taken)
    jobs = list(zip(args.model + args.baseline, model_labels + baseline_labels, strict=True))

    runs, timings, gaussian_plots = {}, {}, []
    for path, label in tqdm(jobs, desc="Models", unit="model"):
        job_started = time.perf_counter()
        encoder = load_encoder(path, args.batch_size, args.max_length, bf16=args.bf16, device=args.device)
        encoder.name = label
        runs[label] = run_encoder(encoder, data, show_progress_bar=True)
        runs[label].results["path"] = path
        timings[label] = time.perf_counter() - job_started
        if not args.no_plots and runs[label].is_gaussian:
            gaussian_plots.append(plot_gaussians_2d(encoder, output / f"gaussians_2d_{_file_label(label)}.png"))

    tests = significance_tests(runs[model_labels[0]], [runs[label] for label in baseline_labels], tasks)

    group_label = (
        model_labels[0] if len(model_labels) == 1 else f"{model_labels[0]} (mean ± std, {len(model_labels)} runs)"
    )
    entries = [Entry(group_label, [runs[label] for label in model_labels])]
    entries += [Entry(label, [runs[label]]) for label in baseline_labels]
    plots = []
    if not args.no_plots:
        shown = [runs[model_labels[0]], *(runs[label] for label in baseline_labels)]
        plots = [*task_plots(shown, data, tasks, output), *gaussian_plots]

    payload = {
        "meta": {
            "command": ["gausscse-evaluate", *(argv if argv is not None else sys.argv[1:])],
            "tasks": list(tasks),
            "data_dir": args.data_dir,
            "max_examples": args.max_examples,
            "batch_size": args.batch_size,
            "max_length": args.max_length,
            "bf16": args.bf16,
            "device": args.device,
            "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(),
            "seconds_per_model": timings,
            "seconds_total": time.perf_counter() - started,
            "units": "percent (0-100) except thresholds (0-1), counts and p-values",
        },
        "models": {label: runs[label].results for label in model_labels},
        "baselines": {label: runs[label].results for label in baseline_labels},
        "significance": tests,
        "plots": [path.name for path in plots],
    }
    if len(model_labels) > 1:
        payload["seed_aggregate"] = aggregate_seeds([runs[label] for label in model_labels])
    notes = [
        f"Command: `gausscse-evaluate {' '.join(argv if argv is not None else sys.argv[1:])}`",
        (
            f"Sentences truncated to {args.max_length} tokens"
            if args.max_length
            else "Sentences truncated at each encoder's limit"
        )
        + (f"; first {args.max_examples} rows of every split only" if args.max_examples else "")
        + f". Wall-clock: {payload['meta']['seconds_total']:.0f} s on {args.device}.",
    ]
    write_json(output / "results.json", payload)
    remove_stale_plots(output, plots)
    write_atomic(output / "report.md", markdown_report(entries, tests, notes))
    update_model_cards(args.model, [runs[label] for label in model_labels], args.max_examples)
    print(f"Wrote {output / 'results.json'} and {output / 'report.md'}", file=sys.stderr)
    return payload


def run() -> None:
    """Console-script entry point (``gausscse-evaluate``): errors in the input (a missing file or model, an unknown
    task) are printed as one line with exit status 2, without a traceback."""
    try:
        main()
    except (ValueError, FileNotFoundError, FileExistsError) as error:  # DataError and ModelLoadError are ValueErrors
        print(f"gausscse-evaluate: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    run()
