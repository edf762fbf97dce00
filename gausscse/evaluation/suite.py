"""The requested tasks for each encoder: each distinct sentence of the :class:`~evaluation.tasks.TaskData` encoded once,
every task scored into a :class:`ModelRun`; seed aggregation and McNemar tests between runs."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .dev_evaluator import dev_metrics
from .encoders import SentenceEncoder
from .encoding_cache import EncodingCache
from .metrics import load_metric, mean_and_std
from .tasks import (
    DirectionResult,
    NLIResult,
    TaskData,
    binary_nli,
    entailment_direction,
    entailment_retrieval,
    sts_spearman,
)


@dataclass
class ModelRun:
    """Everything measured for one encoder: JSON-ready ``results`` (``{"nli": {test_set: metrics}, "snli_dev": …,
    "direction": …, "sts": …, "sts_dev": …, "retrieval": …}``) and per test set the per-pair ``nli``/``direction``."""

    name: str
    is_gaussian: bool
    results: dict = field(default_factory=dict)
    nli: dict[str, NLIResult] = field(default_factory=dict)
    direction: dict[str, DirectionResult] = field(default_factory=dict)


def on_each_split(task: str, splits: Mapping[str, Any], compute: Callable[[Any], Any]) -> dict[str, Any]:
    """``{name: compute(split)}`` for every split; a ``ValueError`` names the task and split it came from."""
    results = {}
    for name, split in splits.items():
        try:
            results[name] = compute(split)
        except ValueError as error:
            raise ValueError(f"{task} on {name}: {str(error).removeprefix(f'{name}: ')}") from error
    return results


def run_encoder(
    encoder: SentenceEncoder, data: TaskData, show_progress_bar: bool = False, cache: EncodingCache | None = None
) -> ModelRun:
    """Encode all sentences of ``data`` once with ``encoder`` (or read them from ``cache``) and compute every
    requested task."""
    sentences = data.sentences()
    if cache is not None:
        encoded = cache.encode_unique(encoder, sentences, show_progress_bar=show_progress_bar)
    else:
        encoded = encoder.encode_unique(sentences, show_progress_bar=show_progress_bar)
    run = ModelRun(name=encoder.name, is_gaussian=encoded.is_gaussian)
    run.results["unique_sentences"] = len(encoded.index)
    if encoded.entailment_cosine_weight is not None:
        run.results["entailment_cosine_weight"] = encoded.entailment_cosine_weight
    if "nli" in data.tasks:
        measured = on_each_split("nli", {"snli_dev": data.nli_dev}, lambda pairs: dev_metrics(encoded, pairs))
        dev = {key.removeprefix("snli_dev_"): value for key, value in measured["snli_dev"].items()}
        run.results["snli_dev"] = dev
        if data.lingnli_dev is not None:  # AUPRC, accuracy at the SNLI-dev threshold, direction
            lingnli = binary_nli(encoded, data.lingnli_dev, dev["threshold"]).metrics
            run.results["lingnli_dev"] = {key: lingnli[key] for key in ("auprc", "accuracy", "threshold")}
            if encoded.is_gaussian:
                direction = entailment_direction(encoded, data.lingnli_dev).metrics["similarity_rule"]
                run.results["lingnli_dev"]["direction_accuracy"] = direction
        run.nli = on_each_split("nli", data.nli_test, lambda pairs: binary_nli(encoded, pairs, dev["threshold"]))
        run.results["nli"] = {name: result.metrics for name, result in run.nli.items()}
    if "direction" in data.tasks:
        run.direction = on_each_split("direction", data.nli_test, lambda pairs: entailment_direction(encoded, pairs))
        run.results["direction"] = {name: result.metrics for name, result in run.direction.items()}
    if "sts" in data.tasks:
        spearman = functools.partial(sts_spearman, encoded)
        sts = on_each_split("sts", data.sts, spearman)
        scores = next(iter(sts.values()))
        sts["avg"] = {score: float(np.mean([sts[name][score] for name in data.sts])) for score in scores}  # "Avg."
        run.results["sts"] = sts
        run.results["sts_dev"] = on_each_split("sts", {data.sts_dev.name: data.sts_dev}, spearman)
    if "retrieval" in data.tasks:
        retrieval = functools.partial(entailment_retrieval, encoded)
        run.results["retrieval"] = on_each_split("retrieval", data.retrieval, retrieval)
    return run


def flatten(results: dict, prefix: str = "") -> dict[str, float]:
    """Nested results → ``{"nli/snli/accuracy": value, ...}`` with the numeric leaves only."""
    flat = {}
    for key, value in results.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[name] = float(value)
    return flat


def aggregate_seeds(runs: Sequence[ModelRun]) -> dict[str, dict[str, float]]:
    """``{key: {"mean", "std" (ddof = 1), "runs"}}`` of every numeric result shared by the runs (seeds)."""
    flat_runs = [flatten(run.results) for run in runs]
    shared = [key for key in flat_runs[0] if all(key in flat for flat in flat_runs)]
    statistics = {key: mean_and_std([flat[key] for flat in flat_runs]) for key in shared}
    return {key: {"mean": mean, "std": std, "runs": len(runs)} for key, (mean, std) in statistics.items()}


def mcnemar(correct_a: np.ndarray, correct_b: np.ndarray) -> dict:
    return load_metric("mcnemar").compute(correct_a=correct_a, correct_b=correct_b)


def significance(reference: ModelRun, other: ModelRun) -> dict[str, dict]:
    """McNemar's test of ``reference`` against ``other`` on binary-NLI correctness per test set and, both Gaussian, on
    the similarity rule's direction correctness."""
    tests = {}
    for name in reference.nli.keys() & other.nli.keys():
        tests[f"nli/{name}"] = mcnemar(reference.nli[name].correct, other.nli[name].correct)
    for name in reference.direction.keys() & other.direction.keys():
        ours, theirs = reference.direction[name].similarity_correct, other.direction[name].similarity_correct
        if ours is not None and other.is_gaussian:
            tests[f"direction/{name}"] = mcnemar(ours, theirs)
    return dict(sorted(tests.items()))


def significance_tests(reference: ModelRun, baselines: Sequence[ModelRun]) -> dict[str, dict]:
    """:func:`significance` of ``reference`` against each baseline and, with the direction task, McNemar of every
    Gaussian model's similarity rule against the length baseline; comparisons with no shared task left out."""
    tests = {f"{reference.name} vs. {run.name}": significance(reference, run) for run in baselines}
    for run in [reference, *baselines]:  # a point encoder's similarity_correct is None
        tests[f"{run.name} similarity rule vs. length baseline"] = {
            f"direction/{name}": mcnemar(result.similarity_correct, result.length_correct)
            for name, result in sorted(run.direction.items())
            if result.similarity_correct is not None
        }
    return {comparison: results for comparison, results in tests.items() if results}
