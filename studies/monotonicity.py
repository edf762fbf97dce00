"""Direction in upward- and downward-entailing contexts: a measured limitation of variance-as-generality.

``studies/data/monotonicity_pairs.jsonl`` holds 32 hand-written entailment pairs: 16 in downward-entailing contexts
(negation, "no", "never", "every"/"all" on the restrictor: "No animals are allowed in the park." ⇒ "No dogs are allowed
in the park.", where the *more specific* sentence is the premise) and their 16 upward twins ("A dog is running" ⇒ "An
animal is running"). For each context, the share of pairs whose direction the model gets right by the similarity rule
(sim(hyp‖pre) > sim(pre‖hyp)) and the variance rule (Σlog σ²(pre) > Σlog σ²(hyp)). Writes ``results/MONOTONICITY.md``
and ``results/monotonicity.json``.

    python -m studies.monotonicity --model outputs/quickstart
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

from gausscse.io import write_atomic, write_json
from gausscse.loading import load_model

REPO_ROOT = Path(__file__).resolve().parent.parent
PAIRS = REPO_ROOT / "studies" / "data" / "monotonicity_pairs.jsonl"
CONTEXTS = ("upward", "downward")


def measure(model_path: str) -> dict:
    """Per context: pairs, and the percent of pairs each rule directs right; per pair the similarity rule's verdict."""
    pairs = [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines() if line.strip()]
    model = load_model(model_path).eval()
    results: dict = {"model": model_path, "contexts": {}, "pairs": []}
    for context in CONTEXTS:
        chosen = [pair for pair in pairs if pair["context"] == context]
        rules = model.entailment_direction(
            [pair["premise"] for pair in chosen], [pair["hypothesis"] for pair in chosen]
        )
        by_similarity, by_variance = rules.by_similarity.tolist(), rules.by_variance.tolist()
        results["contexts"][context] = {
            "pairs": len(chosen),
            "similarity_rule": 100.0 * sum(by_similarity) / len(chosen),
            "variance_rule": 100.0 * sum(by_variance) / len(chosen),
        }
        results["pairs"] += [
            {**pair, "similarity_rule_right": right} for pair, right in zip(chosen, by_similarity, strict=True)
        ]
    return results


def report(results: dict) -> str:
    rows = [
        f"| {context} | {measured['pairs']} | {measured['similarity_rule']:.1f} | {measured['variance_rule']:.1f} |"
        for context, measured in results["contexts"].items()
    ]
    wrong = [pair for pair in results["pairs"] if pair["context"] == "downward" and not pair["similarity_rule_right"]]
    return "\n".join(
        [
            "# Direction in upward- and downward-entailing contexts",
            "",
            f"Produced by `python -m studies.monotonicity --model {results['model']}` ({platform.machine()}, CPU) on "
            "the 32 hand-written pairs of `studies/data/monotonicity_pairs.jsonl`: 16 downward-entailing (negation, "
            "'no', 'never', 'every'/'all' on the restrictor), where the premise is the *more specific* sentence, and "
            "their 16 upward twins. Direction accuracy (%), ties wrong.",
            "",
            "| context | pairs | similarity rule | variance rule |",
            "|---|---:|---:|---:|",
            *rows,
            "",
            "GaussCSE learns variance as generality: the broader Gaussian is taken for the entailing side. In a "
            'downward-entailing context the entailing sentence is the more specific one ("No animals are allowed" ⇒ '
            '"No dogs are allowed"), so there the model takes the premise for the hypothesis: the similarity rule '
            f"directs {len(wrong)} of the {results['contexts']['downward']['pairs']} downward pairs the wrong way.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a GaussCSE folder or Hub id")
    parser.add_argument("--output", default=str(REPO_ROOT / "results"), help="where MONOTONICITY.md and the JSON go")
    args = parser.parse_args(argv)
    results = measure(args.model)
    output = Path(args.output)
    write_json(output / "monotonicity.json", results)
    write_atomic(output / "MONOTONICITY.md", report(results))
    print(report(results))


if __name__ == "__main__":
    main()
