"""Direction in upward- and downward-entailing contexts: a measured limitation of variance-as-generality.

``PAIRS`` holds 32 hand-written entailment pairs: 16 in downward-entailing contexts
(negation, "no", "never", "every"/"all" on the restrictor: "No animals are allowed in the park." ⇒ "No dogs are allowed
in the park.", where the *more specific* sentence is the premise) and their 16 upward twins ("A dog is running" ⇒ "An
animal is running"). For each context, the share of pairs whose direction the model gets right by the similarity rule
(sim(hyp‖pre) > sim(pre‖hyp)) and the variance rule (Σlog σ²(pre) > Σlog σ²(hyp)). Writes ``results/MONOTONICITY.md``
and ``results/monotonicity.json``.

    python -m studies.monotonicity --model outputs/quickstart
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

from gausscse.io import write_atomic, write_json
from gausscse.loading import load_model

REPO_ROOT = Path(__file__).resolve().parent.parent
# 32 hand-written entailment pairs (premise, hypothesis): 16 in downward-entailing contexts, where the premise is the
# more specific sentence, and their 16 upward twins (the same words, the entailment the usual way round)
PAIRS = {
    "downward": (
        ("No animals are allowed in the park.", "No dogs are allowed in the park."),
        ("Nobody in the room is eating fruit.", "Nobody in the room is eating apples."),
        ("The children never play sports on weekdays.", "The children never play football on weekdays."),
        ("There are no vehicles on the bridge.", "There are no trucks on the bridge."),
        ("She does not own any pets.", "She does not own a cat."),
        ("No musicians performed at the festival.", "No guitarists performed at the festival."),
        ("Every animal in the shelter was vaccinated.", "Every dog in the shelter was vaccinated."),
        ("All birds in the zoo are fed twice a day.", "All parrots in the zoo are fed twice a day."),
        ("None of the workers wears a hat.", "None of the workers wears a red hat."),
        ("The man did not drink anything at dinner.", "The man did not drink wine at dinner."),
        ("No food is served after midnight.", "No pizza is served after midnight."),
        ("Nobody is swimming in the water.", "Nobody is swimming in the lake."),
        ("The woman is not holding any instrument.", "The woman is not holding a violin."),
        ("Every student in the class passed the exam.", "Every tall student in the class passed the exam."),
        ("No people are standing on the street.", "No women are standing on the street."),
        ("The boy never eats vegetables.", "The boy never eats carrots."),
    ),
    "upward": (
        ("A dog is running in the park.", "An animal is running in the park."),
        ("Someone is eating apples in the room.", "Someone is eating fruit in the room."),
        ("The children play football on weekdays.", "The children play sports on weekdays."),
        ("There is a truck on the bridge.", "There is a vehicle on the bridge."),
        ("She owns a cat.", "She owns a pet."),
        ("A guitarist performed at the festival.", "A musician performed at the festival."),
        ("A dog in the shelter was vaccinated.", "An animal in the shelter was vaccinated."),
        ("Some parrots in the zoo are fed twice a day.", "Some birds in the zoo are fed twice a day."),
        ("One of the workers wears a red hat.", "One of the workers wears a hat."),
        ("The man drank wine at dinner.", "The man drank something at dinner."),
        ("Pizza is served after midnight.", "Food is served after midnight."),
        ("A person is swimming in the lake.", "A person is swimming in the water."),
        ("The woman is holding a violin.", "The woman is holding an instrument."),
        ("A tall student in the class passed the exam.", "A student in the class passed the exam."),
        ("Two women are standing on the street.", "Two people are standing on the street."),
        ("The boy eats carrots.", "The boy eats vegetables."),
    ),
}


def measure(model_path: str) -> dict:
    """Per context: pairs, and the percent of pairs each rule directs right; per pair the similarity rule's verdict."""
    model = load_model(model_path).eval()
    results: dict = {"model": model_path, "contexts": {}, "pairs": []}
    for context in ("upward", "downward"):
        chosen = [
            {"premise": premise, "hypothesis": hypothesis, "context": context} for premise, hypothesis in PAIRS[context]
        ]
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
            "the 32 hand-written pairs of `studies/monotonicity.py` (`PAIRS`): 16 downward-entailing (negation, "
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
