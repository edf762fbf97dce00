"""Command line: ``gausscse-evaluate --model PATH --tasks nli,direction,sts --output DIR``

Writes ``DIR/results.json``, ``DIR/report.md``, PNGs and, without ``--max_examples``, a ``--model`` folder's model card.
Several ``--model`` paths are seeds (mean ± std; significance uses the first); ``--baseline``: any encoders."""

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
from gausscse.evaluation.encoders import DEFAULT_BATCH_SIZE, load_encoder
from gausscse.evaluation.encoding_cache import EncodingCache
from gausscse.evaluation.report import Entry, markdown_report
from gausscse.evaluation.suite import aggregate_seeds, flatten, run_encoder, significance_tests
from gausscse.evaluation.tasks import (
    NLI_DEV,
    NLI_TEST_SETS,
    RETRIEVAL_SETS,
    STS_DEV,
    STS_SETS,
    TASKS,
    TaskData,
    parse_tasks,
)
from gausscse.hub.model_card import dev_eval_results, eval_result, hub_dataset, update_model_card
from gausscse.io import write_atomic, write_json
from gausscse.model.encoding_gausscse import DEFAULT_MAX_LENGTH


def build_parser() -> argparse.ArgumentParser:
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
    length_help = "truncation length in tokens (default: the encoder's limit)"
    parser.add_argument("--max_length", type=int, default=DEFAULT_MAX_LENGTH, help=length_help)
    parser.add_argument("--bf16", action="store_true", help="encode under bfloat16 autocast (KL stays float32)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--no_plots", action="store_true", help="skip the PNGs")
    cache_help = "folder of the baselines' kept encodings (default: $GAUSSCSE_CACHE_DIR or $HF_HOME/gausscse/encodings)"
    parser.add_argument("--cache_dir", default=None, help=cache_help)
    parser.add_argument("--no_cache", action="store_true", help="encode the baselines again (their entries replaced)")
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


RUN_SETTINGS = ("data_dir", "max_examples", "batch_size", "max_length", "bf16", "device")  # into results.json's meta
UNITS = "percent (0-100) except thresholds (0-1), counts and p-values"
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
    """``ModelRun.results`` as model-index entries: the SNLI dev block as the dev evaluator's metrics, then every metric
    of every set of ``CARD_BLOCKS`` (retrieval: ``<score>_<metric>``) but ``NOT_CARD_METRICS`` and the STS average."""
    entries = dev_eval_results(results["snli_dev"], hub_dataset(*NLI_DEV)) if "snli_dev" in results else []
    for block, (task, sets, prefix) in CARD_BLOCKS.items():
        for key, value in flatten(results.get(block, {})).items():
            name, metric = key.split("/", 1)
            if name in sets and metric.split("/")[0] not in NOT_CARD_METRICS:
                entries.append(eval_result(task, hub_dataset(*sets[name]), prefix + metric.replace("/", "_"), value))
    return entries


def main(argv: list[str] | None = None) -> dict:
    """Run the CLI; returns the ``results.json`` payload."""
    args = build_parser().parse_args(argv)
    command = argv if argv is not None else sys.argv[1:]
    tasks = parse_tasks(args.tasks)
    if args.max_examples is not None and args.max_examples < 1:
        raise ValueError(f"--max_examples must be a positive integer, got {args.max_examples}")
    output = Path(args.output)
    try:  # before any computing: a bad folder must not lose the run
        output.mkdir(parents=True, exist_ok=True)
        tempfile.NamedTemporaryFile(dir=output, prefix=".write-check-").close()  # a file can be written there
    except OSError as error:
        raise ValueError(f"--output {output}: cannot write there ({error.strerror or error})") from error
    started = time.perf_counter()
    data = TaskData.load(tasks, data_dir=args.data_dir, max_examples=args.max_examples)
    taken: set[str] = set()
    models = _labels(args.model, args.model_names, "--model_names", taken)
    baselines = _labels(args.baseline, args.baseline_names, "--baseline_names", taken)
    jobs = list(zip(args.model + args.baseline, models + baselines, strict=True))
    runs, timings, pictures = {}, {}, []
    baseline_cache = EncodingCache(args.cache_dir, refresh=args.no_cache)
    for path, label in tqdm(jobs, desc="Models", unit="model"):
        job_started = time.perf_counter()
        encoder = load_encoder(path, args.batch_size, args.max_length, bf16=args.bf16, device=args.device)
        encoder.name = label
        cache = baseline_cache if label in baselines else None  # a baseline does not change between runs
        runs[label] = run_encoder(encoder, data, show_progress_bar=True, cache=cache)
        runs[label].results["path"] = path
        timings[label] = time.perf_counter() - job_started
        if not args.no_plots and runs[label].is_gaussian:
            pictures.append(plot_gaussians_2d(encoder, output / f"gaussians_2d_{_file_label(label)}.png"))
    tests = significance_tests(runs[models[0]], [runs[label] for label in baselines])
    shown = [runs[models[0]], *(runs[label] for label in baselines)]
    plots = []
    if not args.no_plots:
        if "nli" in tasks:
            plots.append(plot_pr_curves(shown, data.nli_test, output / "pr_curves.png"))
        for run in shown:
            if "direction" in tasks and run.is_gaussian:
                plots.append(plot_generality_gap(run, output / f"generality_gap_{_file_label(run.name)}.png"))
        plots += pictures
    meta = {"command": ["gausscse-evaluate", *command], "tasks": list(tasks)}
    meta |= {key: getattr(args, key) for key in RUN_SETTINGS}
    meta |= {"torch_threads": torch.get_num_threads(), "platform": platform.platform()}
    meta |= {"baselines_from_cache": baseline_cache.hits}
    meta |= {"seconds_per_model": timings, "seconds_total": time.perf_counter() - started, "units": UNITS}
    payload = {
        "meta": meta,
        "models": {label: runs[label].results for label in models},
        "baselines": {label: runs[label].results for label in baselines},
        "significance": tests,
        "plots": [path.name for path in plots],
    }
    if len(models) > 1:
        payload["seed_aggregate"] = aggregate_seeds([runs[label] for label in models])
    group = models[0] if len(models) == 1 else f"{models[0]} (mean ± std, {len(models)} runs)"
    entries = [Entry(group, [runs[label] for label in models]), *(Entry(label, [runs[label]]) for label in baselines)]
    write_json(output / "results.json", payload)
    for pattern in ("pr_curves.png", "generality_gap_*.png", "gaussians_2d_*.png"):  # an earlier run's plots
        for stale in set(output.glob(pattern)) - set(plots):
            stale.unlink()
    truncation = f"truncated to {args.max_length} tokens" if args.max_length else "truncated at each encoder's limit"
    rows = f"; first {args.max_examples} rows of every split only" if args.max_examples else ""
    notes = [
        f"Command: `gausscse-evaluate {' '.join(command)}`",
        f"Sentences {truncation}{rows}. Wall-clock: {meta['seconds_total']:.0f} s on {args.device}.",
    ]
    write_atomic(output / "report.md", markdown_report(entries, tests, notes))
    if args.max_examples is not None:
        print("Model cards left as they were: --max_examples scores subsets, not the test splits", file=sys.stderr)
    else:
        for path, label in zip(args.model, models, strict=True):
            try:  # into the folder's GaussCSE model card, if it has one
                if update_model_card(path, card_eval_results(runs[label].results)):
                    print(f"Wrote the results into the model card {Path(path) / 'README.md'}", file=sys.stderr)
            except OSError as error:  # a read-only folder: the results are in --output all the same
                print(f"Model card {Path(path) / 'README.md'} left as it was: {error}", file=sys.stderr)
    print(f"Wrote {output / 'results.json'} and {output / 'report.md'}", file=sys.stderr)
    return payload


def run() -> None:
    """Console-script entry point: an input error (a missing file or model, an unknown task) is one line, exit 2."""
    try:
        main()
    except (ValueError, FileNotFoundError, FileExistsError) as error:  # DataError and ModelLoadError are ValueErrors
        print(f"gausscse-evaluate: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    run()
