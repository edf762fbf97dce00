"""Run the requested tasks for one encoder: load the data once, encode each distinct sentence once, score.

The result of one encoder is a :class:`ModelRun`: JSON-ready ``results`` plus the per-pair arrays that the
significance tests and plots need.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import metrics
from .dev_evaluator import dev_metrics
from .encoders import SentenceEncoder
from .metrics import load_metric
from .tasks import (
    NLI_DEV,
    NLI_TEST_SETS,
    RETRIEVAL_SETS,
    STS_DEV,
    STS_SETS,
    DirectionResult,
    NLIPairs,
    NLIResult,
    RetrievalSet,
    STSPairs,
    binary_nli,
    entailment_direction,
    entailment_retrieval,
    load_nli,
    load_sts,
    retrieval_set,
    sts_spearman,
)

TASKS = ("nli", "direction", "sts", "retrieval")


def parse_tasks(tasks: str | Sequence[str]) -> tuple[str, ...]:
    """``"nli,direction,sts"`` (or a list) → a tuple of known task names; ``ValueError`` names an unknown one."""
    names = [name.strip() for name in (tasks.split(",") if isinstance(tasks, str) else tasks) if name.strip()]
    for name in names:
        if name not in TASKS:
            raise ValueError(f"--tasks: unknown task {name!r}; choose from {', '.join(TASKS)}")
    if not names:
        raise ValueError(f"--tasks is empty; choose from {', '.join(TASKS)}")
    return tuple(dict.fromkeys(names))


@dataclass
class TaskData:
    """The pairs of every requested task, loaded once and shared by all encoders."""

    tasks: tuple[str, ...]
    nli_dev: NLIPairs | None = None
    nli_test: dict[str, NLIPairs] = field(default_factory=dict)
    sts: dict[str, STSPairs] = field(default_factory=dict)
    sts_dev: STSPairs | None = None
    retrieval: dict[str, RetrievalSet] = field(default_factory=dict)

    @classmethod
    def load(
        cls, tasks: Sequence[str], data_dir: str | Path | None = None, max_examples: int | None = None
    ) -> TaskData:
        """Load SNLI dev (for the threshold) and the NLI test sets for ``nli``/``direction``, the STS files and STS-B
        dev for ``sts``, the retrieval sets of SNLI dev and the ``RETRIEVAL_SETS`` for ``retrieval``; each file
        truncated to its first ``max_examples`` rows if given."""
        data = cls(tasks=parse_tasks(tasks))
        if "nli" in data.tasks or "retrieval" in data.tasks:
            data.nli_dev = load_nli("snli_dev", *NLI_DEV, data_dir=data_dir, max_examples=max_examples)
        if "nli" in data.tasks or "direction" in data.tasks:
            data.nli_test = {
                name: load_nli(name, dataset, split, data_dir=data_dir, max_examples=max_examples)
                for name, (dataset, split) in NLI_TEST_SETS.items()
            }
        if "sts" in data.tasks:
            data.sts = {
                name: load_sts(name, dataset, split, data_dir=data_dir, max_examples=max_examples)
                for name, (dataset, split) in STS_SETS.items()
            }
            name, (dataset, split) = STS_DEV
            data.sts_dev = load_sts(name, dataset, split, data_dir=data_dir, max_examples=max_examples)
        if "retrieval" in data.tasks:
            splits = {
                name: data.nli_test.get(name)
                or load_nli(name, dataset, split, data_dir=data_dir, max_examples=max_examples)
                for name, (dataset, split) in RETRIEVAL_SETS.items()
            }
            data.retrieval = {
                name: retrieval_set(pairs) for name, pairs in {"snli_dev": data.nli_dev, **splits}.items()
            }
        return data

    def sentences(self) -> list[str]:
        """Every sentence of every loaded split, with repeats (the encoder keeps each distinct one once)."""
        splits = [self.nli_dev, *self.nli_test.values(), *self.sts.values(), self.sts_dev, *self.retrieval.values()]
        return [sentence for pairs in splits if pairs is not None for sentence in pairs.sentences]


@dataclass
class ModelRun:
    """Everything measured for one encoder.

    Attributes:
        name: the encoder's name.
        is_gaussian: whether it has variances (direction rules apply).
        results: ``{"nli": {test_set: metrics}, "snli_dev": {...}, "direction": {...}, "sts": {...},
            "sts_dev": {"stsb_dev": {...}}, "retrieval": {set: {score: metrics}}}``.
        nli: per-test-set :class:`NLIResult` (scores and correctness per pair).
        direction: per-test-set :class:`DirectionResult`.
    """

    name: str
    is_gaussian: bool
    results: dict = field(default_factory=dict)
    nli: dict[str, NLIResult] = field(default_factory=dict)
    direction: dict[str, DirectionResult] = field(default_factory=dict)


def on_each_split(task: str, splits: Mapping[str, Any], compute: Callable[[Any], Any]) -> dict[str, Any]:
    """``{name: compute(split)}`` for every split; a ``ValueError`` says which task and split it came from (a split
    cut to one row by ``--max_examples`` cannot give a precision–recall curve or a Spearman correlation)."""
    results = {}
    for name, split in splits.items():
        try:
            results[name] = compute(split)
        except ValueError as error:
            raise ValueError(f"{task} on {name}: {str(error).removeprefix(f'{name}: ')}") from error
    return results


def run_encoder(encoder: SentenceEncoder, data: TaskData, show_progress_bar: bool = False) -> ModelRun:
    """Encode all sentences of ``data`` once with ``encoder`` and compute every requested task."""
    encoded = encoder.encode_unique(data.sentences(), show_progress_bar=show_progress_bar)
    run = ModelRun(name=encoder.name, is_gaussian=encoded.is_gaussian)
    run.results["unique_sentences"] = len(encoded.index)
    if "nli" in data.tasks:
        # accuracy at the best grid threshold, that threshold, AUPRC and (Gaussian models) direction on SNLI dev
        metrics = on_each_split("nli", {"snli_dev": data.nli_dev}, lambda pairs: dev_metrics(encoded, pairs))
        dev = {key.removeprefix("snli_dev_"): value for key, value in metrics["snli_dev"].items()}
        run.results["snli_dev"] = dev
        run.nli = on_each_split("nli", data.nli_test, lambda pairs: binary_nli(encoded, pairs, dev["threshold"]))
        run.results["nli"] = {name: result.metrics for name, result in run.nli.items()}
    if "direction" in data.tasks:
        run.direction = on_each_split("direction", data.nli_test, lambda pairs: entailment_direction(encoded, pairs))
        run.results["direction"] = {name: result.metrics for name, result in run.direction.items()}
    if "sts" in data.tasks:
        sts = on_each_split("sts", data.sts, lambda pairs: sts_spearman(encoded, pairs))
        score_names = next(iter(sts.values())).keys()
        for score_name in score_names:  # the SentEval/SimCSE "Avg." column
            sts.setdefault("avg", {})[score_name] = float(np.mean([sts[name][score_name] for name in data.sts]))
        run.results["sts"] = sts
        run.results["sts_dev"] = on_each_split(
            "sts", {data.sts_dev.name: data.sts_dev}, lambda pairs: sts_spearman(encoded, pairs)
        )
    if "retrieval" in data.tasks:
        run.results["retrieval"] = on_each_split(
            "retrieval", data.retrieval, lambda retrieval: entailment_retrieval(encoded, retrieval)
        )
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
    """Mean ± sample std (ddof = 1) of every numeric result over several runs (seeds) of one configuration."""
    flat_runs = [flatten(run.results) for run in runs]
    shared = [key for key in flat_runs[0] if all(key in flat for flat in flat_runs)]
    aggregate = {}
    for key in shared:
        mean, std = metrics.mean_and_std([flat[key] for flat in flat_runs])
        aggregate[key] = {"mean": mean, "std": std, "runs": len(runs)}
    return aggregate


def mcnemar(correct_a: np.ndarray, correct_b: np.ndarray) -> dict:
    """McNemar's test (the ``mcnemar`` evaluate module) of two per-example correctness arrays."""
    return load_metric("mcnemar").compute(correct_a=correct_a, correct_b=correct_b)


def significance(reference: ModelRun, other: ModelRun) -> dict[str, dict]:
    """McNemar's test of ``reference`` against ``other``: binary-NLI correctness per test set, and (when both
    have variances) the similarity-rule direction correctness."""
    tests = {}
    for name in reference.nli.keys() & other.nli.keys():
        tests[f"nli/{name}"] = mcnemar(reference.nli[name].correct, other.nli[name].correct)
    for name in reference.direction.keys() & other.direction.keys():
        if reference.direction[name].similarity_correct is not None and other.is_gaussian:
            tests[f"direction/{name}"] = mcnemar(
                reference.direction[name].similarity_correct, other.direction[name].similarity_correct
            )
    return dict(sorted(tests.items()))


def significance_against_length(run: ModelRun) -> dict[str, dict]:
    """McNemar's test of the similarity rule against the length baseline on each direction test set."""
    return {
        f"direction/{name}": mcnemar(result.similarity_correct, result.length_correct)
        for name, result in sorted(run.direction.items())
        if result.similarity_correct is not None
    }
