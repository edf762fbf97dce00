"""Write ``results/RELEASE.md`` from the release study (``studies/run_release_study.sh``) and, once it has run, the
release itself (``scripts/release.sh OUT``).

Reads ``results/release_study/eval/<run>/results.json`` (one ``gausscse-evaluate`` per trained run: SNLI dev and the
test splits, retrieval), ``results/release_study/eval/backbone/results.json`` (the untouched backbone, cosine),
``results/release_study/train/<run>.json`` and ``probe/<configuration>.json`` (seconds per step); applies the runner's
selection rule (SNLI dev only, :func:`choose`). With ``--release OUT`` it first copies the release's
``OUT/eval/results.json`` (with its ``release`` block from ``scripts/release_card.py``) and curve into
``results/release_study/release/`` and reports them too. Every number comes from those files.

    python -m studies.release_report [--release OUT]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from gausscse.evaluation.report import REPORT_TITLE
from gausscse.io import write_atomic
from studies.keep_report import TEST_SETS, cell, mean_of, study_inputs, test_cells

REPO_ROOT = Path(__file__).resolve().parent.parent
STUDY = REPO_ROOT / "results" / "release_study"
OUTPUT = REPO_ROOT / "results" / "RELEASE.md"
PROBE_STEPS = 30  # the runner's probe length
RETRIEVAL_SLACK = 1.5  # points below the backbone's SNLI-dev cosine nDCG@10 that are still eligible
TIE_MARGIN = 0.5  # points of direction + AUPRC
DIRECTION_DEV = ("snli_dev", "direction_accuracy")
AUPRC_DEV = ("snli_dev", "auprc")
ACCURACY_DEV = ("snli_dev", "accuracy")
RETRIEVAL_DEV = ("retrieval", "snli_dev", "similarity", "ndcg@10")
BACKBONE_RETRIEVAL_DEV = ("retrieval", "snli_dev", "cosine", "ndcg@10")
RULE = (
    "1. per candidate, the mean over its seeds of, on SNLI dev: direction accuracy (similarity rule, all entailment "
    "pairs), AUPRC (binary NLI) and entailment-retrieval nDCG@10 through the model's own similarity (2,000 claims × "
    "all premises);",
    f"2. a candidate is eligible if that retrieval nDCG@10 is at least the untouched backbone's cosine nDCG@10 on the "
    f"same set minus {RETRIEVAL_SLACK} points;",
    f"3. among eligible candidates the highest score = direction + AUPRC wins; candidates within {TIE_MARGIN} points "
    "of the best score are ordered by retrieval nDCG@10;",
    "4. seed 42 for every candidate; the two best by 1–3 also get seed 1, and the rule is applied again to the "
    "two-seed means of those two. The winner's flags, trained for the hour, are `configs/release.yaml`.",
)


def score(runs: dict[str, dict]) -> float:
    return mean_of(runs, DIRECTION_DEV) + mean_of(runs, AUPRC_DEV)


def choose(candidates: dict[str, dict[str, dict]], backbone: dict) -> list[str]:
    """The rule (``RULE``, steps 1–3) on ``candidates`` (``{candidate: {run: results}}``): the eligible candidates,
    best first."""
    floor = mean_of({"backbone": backbone}, BACKBONE_RETRIEVAL_DEV) - RETRIEVAL_SLACK
    eligible = [name for name, runs in candidates.items() if mean_of(runs, RETRIEVAL_DEV) >= floor]
    if not eligible:
        return []
    best = max(score(candidates[name]) for name in eligible)

    def key(name: str) -> tuple:
        near = score(candidates[name]) >= best - TIE_MARGIN
        return near, 0.0 if near else score(candidates[name]), mean_of(candidates[name], RETRIEVAL_DEV)

    return sorted(eligible, key=key, reverse=True)


def seconds_per_step(candidate: str) -> float | None:
    shape = "base" if candidate == "base" or candidate.startswith("lr_") else candidate
    probe = STUDY / "probe" / f"{shape}.json"
    if not probe.is_file():
        return None
    return json.loads(probe.read_text(encoding="utf-8"))["train_runtime"] / PROBE_STEPS


RELEASE_FILES = ("eval/results.json", "eval/report.md", "release_curve.png")  # what --release keeps of OUT


def copy_release(out: Path) -> None:
    """The release's one evaluation (``OUT/eval/results.json`` and ``report.md``, with the release section that
    ``scripts/release_card.py`` wrote) and its curve into ``STUDY/release/``."""
    report = out / "eval" / "report.md"
    if not report.is_file() or "## Release" not in report.read_text(encoding="utf-8"):
        raise SystemExit(f"{report}: no release section (run scripts/release_card.py, as scripts/release.sh does)")
    (STUDY / "release").mkdir(parents=True, exist_ok=True)
    for name in RELEASE_FILES:
        if (out / name).is_file():
            shutil.copyfile(out / name, STUDY / "release" / Path(name).name)


def release_section() -> list[str]:
    """The release section of the copied report (``scripts/release_card.py``'s, one heading level down)."""
    report = STUDY / "release" / "report.md"
    if not report.is_file():
        return [
            "## The release run",
            "",
            "Not run yet: `bash scripts/release.sh OUT`, then `python -m studies.release_report --release OUT`.",
            "",
        ]
    section = report.read_text(encoding="utf-8").split(REPORT_TITLE, 1)[0].strip()
    section = section.replace("## Release", "## The release run", 1)
    return [section.replace("](../release_curve.png)", "](release_study/release/release_curve.png)"), ""]


def report() -> str:
    candidates, backbone, study, first_round = study_inputs(STUDY)
    ranking_first = choose(first_round, backbone)
    finalists = [name for name in candidates if len(candidates[name]) > 1]
    ranking = choose({name: candidates[name] for name in finalists}, backbone) if len(finalists) >= 2 else []
    winner = (ranking or ranking_first or ["none eligible"])[0]
    floor = mean_of({"backbone": backbone}, BACKBONE_RETRIEVAL_DEV) - RETRIEVAL_SLACK
    lines = [
        "# The release recipe: the release study",
        "",
        "Produced by `bash studies/run_release_study.sh train SEED CANDIDATE...` then "
        "`bash studies/run_release_study.sh evaluate` (which runs `python -m studies.release_report`); candidates and "
        "rule are in the runner's header. "
        f"Hardware: {study.get('hardware', 'see results/release_study/study.json')}; precision "
        f"{study.get('precision', '?')}. Each candidate trains for {study.get('budget_seconds', '?')} s of its own "
        "seconds per step (a 30-step probe of its configuration; the linear schedule ends there). Means ± sample std "
        "over seeds where a candidate has several.",
        "",
        "## Selection (SNLI dev only)",
        "",
        "Rule, written in the runner before the runs:",
        "",
        *RULE,
        "",
        "| candidate | seeds | s/step (probe) | steps | SNLI-dev direction | AUPRC | accuracy "
        "| retrieval nDCG@10 (own) | eligible | direction + AUPRC |",
        "|---|---:|---:|---:|---:|---:|---:|---:|:---:|---:|",
    ]
    budget = study.get("budget_seconds", 0)
    for name, runs in candidates.items():
        per_step = seconds_per_step(name)  # the runner trains int(budget / per_step) steps
        lines.append(
            f"| {name} | {len(runs)} | {'?' if per_step is None else f'{per_step:.2f}'} | "
            f"{'?' if per_step is None else int(budget / per_step)} | {cell(runs, DIRECTION_DEV)} | "
            f"{cell(runs, AUPRC_DEV)} | "
            f"{cell(runs, ACCURACY_DEV)} | {cell(runs, RETRIEVAL_DEV)} | "
            f"{'yes' if mean_of(runs, RETRIEVAL_DEV) >= floor else 'no'} | {score(runs):.2f} |"
        )
    lines += [
        f"| backbone (cosine) | – | – | – | – | {cell({'b': backbone}, AUPRC_DEV)} | "
        f"{cell({'b': backbone}, ACCURACY_DEV)} | {cell({'b': backbone}, BACKBONE_RETRIEVAL_DEV)} (cos) | – | – |",
        "",
        f"Eligibility floor: {floor:.2f} (the backbone's SNLI-dev cosine nDCG@10 − {RETRIEVAL_SLACK}).",
        "",
        f"Seed 42, all candidates: ranking {' > '.join(ranking_first) or '—'} (ineligible ones left out).",
        "",
        (f"Finalists with two seeds ({', '.join(finalists)}): ranking {' > '.join(ranking)}. " if ranking else "")
        + f"**Selected: `{winner}`.**",
        "",
        "## Test sets (reported, not used to choose)",
        "",
        "Full test splits; direction by the similarity rule; retrieval: SNLI test, 2,000 claims × all premises.",
        "",
        "| candidate | direction SNLI | MNLI (mm) | SICK | NLI acc SNLI | MNLI (mm) | SICK "
        "| retrieval nDCG@10 own | cos μ |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, runs in candidates.items():
        lines.append(
            f"| {name} | {test_cells(runs)} | {cell(runs, ('retrieval', 'snli', 'similarity', 'ndcg@10'))} | "
            + f"{cell(runs, ('retrieval', 'snli', 'cosine', 'ndcg@10'))} |"
        )
    lines += [
        "| backbone (cosine) | – | – | – | "
        + " | ".join(cell({"b": backbone}, ("nli", key, "accuracy")) for key, _ in TEST_SETS)
        + f" | – | {cell({'b': backbone}, ('retrieval', 'snli', 'cosine', 'ndcg@10'))} |",
        "",
        *release_section(),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", type=Path, help="the folder scripts/release.sh wrote: its results join the report")
    args = parser.parse_args(argv)
    if args.release is not None:
        copy_release(args.release)
    write_atomic(OUTPUT, report())
    print(f"Wrote {OUTPUT.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
