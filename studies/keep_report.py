"""Write ``results/KEEP.md`` from the keep study (``studies/run_keep_study.sh``): which start and training keep the
backbone's STS and retrieval quality while learning direction.

Reads ``results/keep_study/eval/<run>/results.json`` (one ``gausscse-evaluate`` per trained run: full SNLI dev and
test splits, STS, STS-B dev, retrieval), ``results/keep_study/eval/backbone/results.json`` (the untouched backbone,
cosine) and ``results/keep_study/train/<run>.json``; applies the selection rule of the runner (dev data only,
:func:`choose`) and marks the test-set frontier (STS avg, retrieval, direction). Every number comes from those files.

    python -m studies.keep_report
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from gausscse.io import write_atomic
from studies.finetune_report import config_of, summary

REPO_ROOT = Path(__file__).resolve().parent.parent
STUDY = REPO_ROOT / "results" / "keep_study"
OUTPUT = REPO_ROOT / "results" / "KEEP.md"
TIE_MARGIN = 0.5  # points
DIRECTION_SLACK = 0.5  # points below paper's SNLI-dev direction that still "keep direction"
REFERENCE = "paper"  # the earlier default the direction criterion is measured against
# selection metrics (dev): flattened result keys
STS_DEV = ("sts_dev", "stsb_dev", "cosine")
RETRIEVAL_DEV = ("retrieval", "snli_dev", "similarity", "ndcg@10")
DIRECTION_DEV = ("snli_dev", "direction_accuracy")
AUPRC_DEV = ("snli_dev", "auprc")
RULE = (
    "1. per candidate, the mean over its seeds of: STS-B dev Spearman (cosine of μ), SNLI-dev retrieval nDCG@10 "
    "through the model's own similarity, SNLI-dev direction (similarity rule) and SNLI-dev AUPRC;",
    f"2. a candidate keeps direction if its SNLI-dev direction is at least `{REFERENCE}`'s minus {DIRECTION_SLACK} "
    "points;",
    f"3. among those, the highest keep = STS-B dev + retrieval nDCG@10 wins; within {TIE_MARGIN} of the best keep, "
    "the higher SNLI-dev direction, then AUPRC;",
    "4. seed 42 for every candidate; the two best by 1–3 also get seed 1, and the rule is applied again to the "
    "two-seed means of those two.",
)
TEST_SETS = (("snli", "SNLI"), ("mnli_mismatched", "MNLI (mm)"), ("sick", "SICK"))
# the target a default should reach: STS avg and SNLI-test retrieval nDCG@10 (own route and cos μ) at least those of a
# model that keeps its backbone, direction on the three test sets at least the earlier quickstart's level
TARGETS = {"sts": 78.0, "retrieval": 68.0, "direction": (96.0, 86.5, 86.0)}


def value(results: dict, path: tuple[str, ...]) -> float:
    for key in path:
        results = results[key]
    return float(results)


def load_runs(study: Path = STUDY) -> dict[str, dict[str, dict]]:
    """``{candidate: {run: results}}`` of every evaluated run of the study folder ``study``."""
    runs: dict[str, dict[str, dict]] = {}
    for file in sorted((study / "eval").glob("*_seed*/results.json")):
        run = file.parent.name
        payload = json.loads(file.read_text(encoding="utf-8"))
        runs.setdefault(config_of(run), {})[run] = next(iter(payload["models"].values()))
    return runs


def study_inputs(study: Path) -> tuple[dict[str, dict[str, dict]], dict, dict, dict[str, dict[str, dict]]]:
    """What a study's report reads from its folder ``study``: the candidates' runs ([`load_runs`]), the untouched
    backbone's results, ``study.json`` (empty where missing) and each candidate's seed-42 runs (the first round)."""
    candidates = load_runs(study)
    backbone = next(iter(json.loads((study / "eval/backbone/results.json").read_text())["models"].values()))
    meta = json.loads((study / "study.json").read_text()) if (study / "study.json").is_file() else {}
    first_round = {
        name: {run: r for run, r in runs.items() if run.endswith("_seed42")} for name, runs in candidates.items()
    }
    return candidates, backbone, meta, first_round


def mean_of(runs: dict[str, dict], path: tuple[str, ...]) -> float:
    return statistics.mean(value(results, path) for results in runs.values())


def rank_by_keep(candidates: dict[str, dict[str, dict]], names: list[str], retrieval_dev: tuple[str, ...]) -> list[str]:
    """``names`` best first by keep = STS-B dev + ``retrieval_dev`` nDCG@10 (candidate means); keeps within
    ``TIE_MARGIN`` of the best count as equal and go by SNLI-dev direction, then AUPRC."""

    def keep(name: str) -> float:
        return mean_of(candidates[name], STS_DEV) + mean_of(candidates[name], retrieval_dev)

    best_keep = max((keep(name) for name in names), default=0.0)
    return sorted(
        names,
        key=lambda name: (
            keep(name) >= best_keep - TIE_MARGIN,
            keep(name) if keep(name) < best_keep - TIE_MARGIN else 0.0,
            mean_of(candidates[name], DIRECTION_DEV),
            mean_of(candidates[name], AUPRC_DEV),
        ),
        reverse=True,
    )


def choose(candidates: dict[str, dict[str, dict]]) -> tuple[str, list[str]]:
    """The rule (``RULE``) on ``candidates`` (``{candidate: {run: results}}``): the winner and the ranking."""
    floor = mean_of(candidates[REFERENCE], DIRECTION_DEV) - DIRECTION_SLACK
    keeping = [name for name, runs in candidates.items() if mean_of(runs, DIRECTION_DEV) >= floor]
    ranking = rank_by_keep(candidates, keeping, RETRIEVAL_DEV)
    return ranking[0], ranking


def cell(runs: dict[str, dict], path: tuple[str, ...]) -> str:
    values = []
    for results in runs.values():
        try:
            values.append(value(results, path))
        except KeyError:
            continue
    return summary(values) if values else "—"


def test_cells(runs: dict[str, dict]) -> str:
    """The table cells of the test-set direction (similarity rule) and then binary NLI accuracy, SNLI / MNLI (mm) /
    SICK."""
    return " | ".join(
        [cell(runs, ("direction", key, "similarity_rule")) for key, _ in TEST_SETS]
        + [cell(runs, ("nli", key, "accuracy")) for key, _ in TEST_SETS]
    )


def mean_test_direction(runs: dict[str, dict]) -> float:
    """The mean over the three test sets of the similarity-rule direction (candidate means)."""
    return statistics.mean(mean_of(runs, ("direction", key, "similarity_rule")) for key, _ in TEST_SETS)


def frontier(rows: dict[str, tuple[float, ...]]) -> set[str]:
    """The names whose tuple no other tuple is ≥ on every axis and > on one (Pareto frontier, larger is better)."""
    return {
        name
        for name, point in rows.items()
        if not any(
            all(o >= p for o, p in zip(other, point, strict=True)) and other != point
            for other_name, other in rows.items()
            if other_name != name
        )
    }


def target_check(runs: dict[str, dict]) -> str:
    """Each target measure of ``TARGETS`` with ✓ or ✗ (candidate means)."""
    measures = [
        ("STS avg", mean_of(runs, ("sts", "avg", "cosine")), TARGETS["sts"]),
        ("retrieval own", mean_of(runs, ("retrieval", "snli", "similarity", "ndcg@10")), TARGETS["retrieval"]),
        ("retrieval cos μ", mean_of(runs, ("retrieval", "snli", "cosine", "ndcg@10")), TARGETS["retrieval"]),
    ]
    measures += [
        (f"direction {label}", mean_of(runs, ("direction", key, "similarity_rule")), target)
        for (key, label), target in zip(TEST_SETS, TARGETS["direction"], strict=True)
    ]
    return ", ".join(f"{label} {value:.2f} {'✓' if value >= target else '✗'}" for label, value, target in measures)


def report() -> str:
    candidates, backbone, study, first_round = study_inputs(STUDY)
    winner_first, ranking_first = choose(first_round)
    finalists = [name for name in candidates if len(candidates[name]) > 1]
    if len(finalists) >= 2:
        winner, ranking = choose({name: candidates[name] for name in finalists} | {REFERENCE: candidates[REFERENCE]})
        ranking = [name for name in ranking if name in finalists]
        winner = ranking[0]
    else:
        winner, ranking = winner_first, ranking_first
    lines = [
        "# Keeping the backbone: the keep study",
        "",
        "Produced by `bash studies/run_keep_study.sh train SEED CANDIDATE...` then `bash studies/run_keep_study.sh "
        "evaluate` (which runs `python -m studies.keep_report`); candidates, recipe and rule are in the runner's "
        f"header. Hardware: {study.get('hardware', 'see results/keep_study/study.json')}; precision "
        f"{study.get('precision', '?')}. Means ± sample std over seeds where a candidate has several. Training times "
        "are not compared here (the runs shared the cores with other work); the quickstart measures the default's.",
        "",
        "## Selection (dev data only)",
        "",
        "Rule, written in the runner before the runs:",
        "",
        *RULE,
        "",
        "| candidate | seeds | STS-B dev (cos μ) | SNLI-dev retrieval nDCG@10 (own) | SNLI-dev direction "
        "| SNLI-dev AUPRC |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, runs in candidates.items():
        lines.append(
            f"| {name} | {len(runs)} | {cell(runs, STS_DEV)} | {cell(runs, RETRIEVAL_DEV)} | "
            f"{cell(runs, DIRECTION_DEV)} | {cell(runs, AUPRC_DEV)} |"
        )
    lines += [
        f"| backbone (cosine) | – | {cell({'b': backbone}, STS_DEV)} | "
        f"{cell({'b': backbone}, ('retrieval', 'snli_dev', 'cosine', 'ndcg@10'))} | – | "
        f"{cell({'b': backbone}, AUPRC_DEV)} |",
        "",
        "`paper` is the reduction study's `mean_kl` seed-42 run (the same recipe; `results/REPRODUCTION.md`). "
        "`two_paths_retrieval` joined after the seed-42 evaluation of the other four, all of which ranked premises "
        "by their own similarity well below the backbone's cosine; the rule was not changed.",
        "",
        f"Seed 42, all candidates: ranking {' > '.join(ranking_first)} (candidates that lose direction are left out).",
        "",
        (
            f"Finalists with two seeds ({', '.join(finalists)}): ranking {' > '.join(ranking)}. "
            if len(finalists) >= 2
            else ""
        )
        + f"**Selected: `{winner}`.**",
        "",
        "## Test sets (reported, not used to choose)",
        "",
        "STS avg: STS12–16, STS-B, SICK-R, Spearman × 100 of cos μ. Retrieval: SNLI test, 2,000 claims × all "
        "premises, nDCG@10 / recall@10 by the model's own similarity (its sentence-transformers route and search "
        "index rank the same) and by cos μ. Direction: similarity rule, full test splits.",
        "",
        "| candidate | STS avg (cos μ) | retrieval own | retrieval cos μ | own nDCG@10 MNLI (mm) / SICK "
        "| direction SNLI | MNLI (mm) | SICK | NLI acc SNLI | MNLI (mm) | SICK | frontier |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    points = {
        name: (
            mean_of(runs, ("sts", "avg", "cosine")),
            mean_of(runs, ("retrieval", "snli", "similarity", "ndcg@10")),
            mean_test_direction(runs),
        )
        for name, runs in candidates.items()
    }
    on_frontier = frontier(points)
    for name, runs in candidates.items():
        retrieval = [
            " / ".join(cell(runs, ("retrieval", "snli", score, metric)) for metric in ("ndcg@10", "recall@10"))
            for score in ("similarity", "cosine")
        ]
        other_sets = " / ".join(
            cell(runs, ("retrieval", key, "similarity", "ndcg@10")) for key in ("mnli_mismatched", "sick")
        )
        lines.append(
            f"| {name} | {cell(runs, ('sts', 'avg', 'cosine'))} | {retrieval[0]} | {retrieval[1]} | {other_sets} | "
            + test_cells(runs)
            + f" | {'yes' if name in on_frontier else ''} |"
        )
    lines += [
        f"| backbone (cosine) | {cell({'b': backbone}, ('sts', 'avg', 'cosine'))} | – | "
        + " / ".join(cell({"b": backbone}, ("retrieval", "snli", "cosine", m)) for m in ("ndcg@10", "recall@10"))
        + " | "
        + " / ".join(
            cell({"b": backbone}, ("retrieval", key, "cosine", "ndcg@10")) for key in ("mnli_mismatched", "sick")
        )
        + " (cos) | – | – | – | "
        + " | ".join(cell({"b": backbone}, ("nli", key, "accuracy")) for key, _ in TEST_SETS)
        + " | |",
        "",
        "Frontier: no other candidate is at least as good on all of STS avg, SNLI-test retrieval nDCG@10 (own) and "
        "the mean test direction, and better on one.",
        "",
        "## Against the target",
        "",
        f"Target: STS avg ≥ {TARGETS['sts']}, SNLI-test retrieval nDCG@10 ≥ {TARGETS['retrieval']} through the "
        "model's own similarity and through cos μ, direction ≥ "
        + " / ".join(f"{value}" for value in TARGETS["direction"])
        + " (SNLI / MNLI (mm) / SICK). Candidate means; a ✗ names what falls short.",
        "",
        *[f"- `{name}`: {target_check(runs)}" for name, runs in candidates.items()],
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    write_atomic(OUTPUT, report())
    print(f"Wrote {OUTPUT.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
