"""Write ``results/NLI.md`` from the NLI study (``studies/run_nli_study.sh``): which training mix and σ-path capacity
beat the backbone at binary NLI on every test set, MNLI included, at the quickstart's price.

Reads ``results/nli_study/eval/<run>/results.json`` (one ``gausscse-evaluate`` per trained run),
``results/nli_study/eval/backbone/results.json`` (the untouched backbone, cosine), ``results/nli_study/study.json``
and, for a design above the layer-count price, its encode bench (``results/nli_study/bench_encode_cpu_k<k>.json``,
``python -m bench.bench_encode --variance_layers k --sentences 2000 --batch_size 32 --json FILE``); counts each
design's parameters and forward cost by building it from the packaged backbone; applies the runner's selection rule
(dev data only, :func:`choose`) and checks issue 47's targets on the test sets. Every number comes from those files or
from the models built here.

    python -m studies.nli_report
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from gausscse.io import write_atomic
from studies.keep_report import STS_DEV, TEST_SETS, TIE_MARGIN, cell, frontier, mean_of, study_inputs, value
from studies.onepass_report import MAX_PARAMETERS, MIN_SPEED, design_cost

REPO_ROOT = Path(__file__).resolve().parent.parent
STUDY = REPO_ROOT / "results" / "nli_study"
OUTPUT = REPO_ROOT / "results" / "NLI.md"
# each candidate's variance_layers (the runner's candidate_flags)
DESIGNS = {"quickstart": 1, "lingnli": 1, "lingnli_k2": 2, "lingnli_x2": 1}
AUPRC_DEV = {"SNLI dev": ("snli_dev", "auprc"), "LingNLI val": ("lingnli_dev", "auprc")}
DIRECTION_DEV = {"SNLI dev": ("snli_dev", "direction_accuracy"), "LingNLI val": ("lingnli_dev", "direction_accuracy")}
SEARCH_DEV = ("retrieval", "snli_dev", "search", "ndcg@10")
STS_SLACK = 0.5
RULE = (
    "1. per candidate, the mean over its seeds of: AUPRC on SNLI dev and on LingNLI validation, direction accuracy "
    "(similarity rule) on SNLI dev and on LingNLI validation, STS-B dev Spearman (cos μ), SNLI-dev retrieval nDCG@10 "
    "through the search score;",
    f"2. eligible: at most {MAX_PARAMETERS}× the backbone's parameters and at least {MIN_SPEED}× its encode speed (a "
    f"forward cost of at most 1/{MIN_SPEED} of the backbone's layers, or the committed encode bench where the layer "
    f"count is above it); STS-B dev at least the backbone's minus {STS_SLACK}; SNLI-dev retrieval nDCG@10 at least "
    "the backbone's cosine;",
    "3. among the eligible, the highest NLI score = mean dev AUPRC + mean dev direction (the two sets' means) wins; "
    f"within {TIE_MARGIN} of the best, the higher LingNLI-validation AUPRC;",
    "4. seed 42 for every candidate; the two best by 1–3 also get seed 1, and the rule is applied again to the "
    "two-seed means of those two.",
)


def encode_speed(variance_layers: int) -> float | None:
    """The design's measured encode speed as a multiple of sentence-transformers' on the backbone (the committed
    bench ``results/nli_study/bench_encode_cpu_k<k>.json``), ``None`` where there is none."""
    bench = STUDY / f"bench_encode_cpu_k{variance_layers}.json"
    if not bench.is_file():
        return None
    speeds = json.loads(bench.read_text(encoding="utf-8"))["sentences_per_second"]
    return speeds["gausscse"] / speeds["sentence_transformers"]


def nli_score(runs: dict[str, dict]) -> float:
    """Mean dev AUPRC + mean dev direction (candidate means over seeds)."""
    auprc = statistics.mean(mean_of(runs, path) for path in AUPRC_DEV.values())
    return auprc + statistics.mean(mean_of(runs, path) for path in DIRECTION_DEV.values())


def eligible(name: str, runs: dict[str, dict], backbone: dict) -> bool:
    parameters, cost = design_cost(DESIGNS[name])
    speed = encode_speed(DESIGNS[name]) if cost > 1 / MIN_SPEED else None
    fast_enough = cost <= 1 / MIN_SPEED or (speed is not None and speed >= MIN_SPEED)
    keeps_sts = mean_of(runs, STS_DEV) >= value(backbone, STS_DEV) - STS_SLACK
    keeps_search = mean_of(runs, SEARCH_DEV) >= value(backbone, ("retrieval", "snli_dev", "cosine", "ndcg@10"))
    return parameters <= MAX_PARAMETERS and fast_enough and keeps_sts and keeps_search


def choose(candidates: dict[str, dict[str, dict]], backbone: dict) -> list[str]:
    """The rule (``RULE``): the eligible candidates, best first."""
    names = [name for name, runs in candidates.items() if eligible(name, runs, backbone)]
    best = max((nli_score(candidates[name]) for name in names), default=0.0)

    def key(name: str) -> tuple:
        score = nli_score(candidates[name])
        tied = score >= best - TIE_MARGIN
        return tied, 0.0 if tied else score, mean_of(candidates[name], AUPRC_DEV["LingNLI val"])

    return sorted(names, key=key, reverse=True)


def test_point(name: str, runs: dict[str, dict]) -> tuple[float, ...]:
    """The frontier's axes (larger is better): −forward cost and the test sets' mean accuracy, AUPRC, direction and
    SNLI-test search nDCG@10 (candidate means)."""
    means = [
        statistics.mean(mean_of(runs, (*prefix, key, metric)) for key, _ in TEST_SETS)
        for prefix, metric in ((("nli",), "accuracy"), (("nli",), "auprc"), (("direction",), "similarity_rule"))
    ]
    return (-design_cost(DESIGNS[name])[1], *means, mean_of(runs, ("retrieval", "snli", "search", "ndcg@10")))


def targets(runs: dict[str, dict], backbone: dict, parameters: float) -> list[tuple[str, float, float]]:
    """Issue 47's targets as ``(label, candidate mean, target)``."""
    measures = [("parameters (−×)", -parameters, -MAX_PARAMETERS)]
    for key, label in TEST_SETS:
        measures.append(
            (
                f"NLI acc {label}",
                mean_of(runs, ("nli", key, "accuracy")),
                value(backbone, ("nli", key, "accuracy")) + 1.0,
            )
        )
    for key, label in TEST_SETS:
        measures.append(
            (f"AUPRC {label}", mean_of(runs, ("nli", key, "auprc")), value(backbone, ("nli", key, "auprc")) + 2.0)
        )
    for (key, label), target in zip(TEST_SETS, (96.5, 89.0, 87.0), strict=True):
        measures.append((f"direction {label}", mean_of(runs, ("direction", key, "similarity_rule")), target))
    measures.append(("search SNLI", mean_of(runs, ("retrieval", "snli", "search", "ndcg@10")), 70.0))
    for key, label in TEST_SETS[1:]:
        measures.append(
            (
                f"search {label}",
                mean_of(runs, ("retrieval", key, "search", "ndcg@10")),
                value(backbone, ("retrieval", key, "cosine", "ndcg@10")),
            )
        )
    measures.append(("STS avg", mean_of(runs, ("sts", "avg", "cosine")), 78.5))
    return measures


def target_line(measures: list[tuple[str, float, float]]) -> str:
    return ", ".join(
        f"{label} {abs(got):.2f} " + ("✓" if got >= target else f"✗ (off by {target - got:.2f})")
        for label, got, target in measures
    )


def report() -> str:
    candidates, backbone, study, first_round = study_inputs(STUDY)
    base = {"backbone": backbone}
    ranking_first = choose(first_round, backbone)
    finalists = [name for name in candidates if len(candidates[name]) > 1]
    ranking = choose({name: candidates[name] for name in finalists}, backbone) if len(finalists) >= 2 else None
    selected = (ranking or ranking_first or [None])[0]
    lines = [
        "# Beating the backbone at binary NLI on every test set: the NLI study",
        "",
        "Produced by `bash studies/run_nli_study.sh train SEED CANDIDATE...` then `bash studies/run_nli_study.sh "
        "evaluate` (which runs `python -m studies.nli_report`); candidates, recipe and rule are in the runner's "
        "header. "
        f"Hardware: {study.get('hardware', '?')}; precision {study.get('precision', '?')}. Means ± sample std over "
        "seeds where a candidate has several. Parameters and forward cost (encoder layers run per sentence) are "
        "multiples of the backbone's, counted on each design built from it.",
        "",
        "Every GaussCSE figure is by the run's own decision score, chosen at the end of its training on dev data: the "
        "entailment score 1 / (1/sim(hyp‖pre) + α·(1 − cos(μ_hyp, μ_pre))) for binary NLI (α = 0: sim alone; "
        "`gausscse.evaluation.entailment_weight`) and the search score cos − λ·KL/d for retrieval.",
        "",
        "## Selection (dev data only)",
        "",
        "Rule, written in the runner before the runs:",
        "",
        *RULE,
        "",
        "| candidate | seeds | parameters | cost | α | STS-B dev | SNLI-dev nDCG@10 | AUPRC SNLI dev | AUPRC LingNLI "
        "val | direction SNLI dev | direction LingNLI val | NLI score | eligible |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for name, runs in candidates.items():
        parameters, cost = design_cost(DESIGNS[name])
        alpha = cell(runs, ("entailment_cosine_weight",))
        auprc = " | ".join(cell(runs, path) for path in AUPRC_DEV.values())
        direction = " | ".join(cell(runs, path) for path in DIRECTION_DEV.values())
        lines.append(
            f"| {name} | {len(runs)} | {parameters:.2f}× | {cost:.2f}× | {alpha} | {cell(runs, STS_DEV)} | "
            f"{cell(runs, SEARCH_DEV)} | {auprc} | {direction} | {nli_score(runs):.2f} | "
            f"{'yes' if eligible(name, runs, backbone) else 'no'} |"
        )
    auprc = " | ".join(cell(base, path) for path in AUPRC_DEV.values())
    lines += [
        f"| backbone (cosine) | – | 1.00× | 1.00× | – | {cell(base, STS_DEV)} | "
        f"{cell(base, ('retrieval', 'snli_dev', 'cosine', 'ndcg@10'))} | {auprc} | – | – | – | |",
        "",
        f"Seed 42, all candidates: ranking {' > '.join(ranking_first) or '(none eligible)'}.",
        "",
        (f"Finalists with two seeds ({', '.join(finalists)}): ranking {' > '.join(ranking)}. " if ranking else "")
        + (f"**Selected: `{selected}`.**" if selected else "**No candidate is eligible.**"),
        "",
        "## Test sets (reported, not used to choose)",
        "",
        "Binary NLI at the SNLI-dev threshold and AUPRC on the full test splits; direction by the similarity rule; "
        "retrieval nDCG@10 of 2,000 claims × all premises by the search score (backbone: cosine); STS avg: STS12–16, "
        "STS-B, SICK-R, Spearman × 100 of cos μ.",
        "",
        "| candidate | NLI acc SNLI / MNLI (mm) / SICK | MNLI (m) | AUPRC SNLI / MNLI (mm) / SICK | direction SNLI / "
        "MNLI (mm) / SICK | search SNLI / MNLI (mm) / SICK | STS avg | frontier |",
        "|---|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    on_frontier = frontier({name: test_point(name, runs) for name, runs in candidates.items()})

    def triple(runs: dict[str, dict], *path: str) -> str:
        return " / ".join(cell(runs, tuple(part.format(key=key) for part in path)) for key, _ in TEST_SETS)

    rows = {**candidates, "backbone (cosine)": base}
    for name, runs in rows.items():
        score = "cosine" if runs is base else "search"
        direction = "–" if runs is base else triple(runs, "direction", "{key}", "similarity_rule")
        lines.append(
            f"| {name} | {triple(runs, 'nli', '{key}', 'accuracy')} | "
            f"{cell(runs, ('nli', 'mnli_matched', 'accuracy'))} | {triple(runs, 'nli', '{key}', 'auprc')} | "
            f"{direction} | {triple(runs, 'retrieval', '{key}', score, 'ndcg@10')} | "
            f"{cell(runs, ('sts', 'avg', 'cosine'))} | {'yes' if name in on_frontier else ''} |"
        )
    lines += [
        "",
        "Frontier: no other candidate is at least as good on all of forward cost and the test sets' mean binary NLI "
        "accuracy, mean AUPRC, mean direction and SNLI-test search nDCG@10, and better on one.",
        "",
        "## Against the targets (issue 47)",
        "",
        "Binary NLI accuracy ≥ the backbone's + 1.0 and AUPRC ≥ the backbone's + 2.0 on SNLI, MNLI (mm) and SICK; "
        "direction ≥ 96.5 / 89.0 / 87.0; search nDCG@10 ≥ 70.0 on SNLI test and ≥ the backbone's cosine on MNLI (mm) "
        "and SICK; STS avg ≥ 78.5; ≤ 1.3× parameters (encode speed: `results/BENCHMARKS.md`). Candidate means; ✗ with "
        "how far off.",
        "",
        *[
            f"- `{name}`: {target_line(targets(runs, backbone, design_cost(DESIGNS[name])[0]))}"
            for name, runs in candidates.items()
        ],
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    write_atomic(OUTPUT, report())
    print(f"Wrote {OUTPUT.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
