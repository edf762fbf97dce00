"""Write a study's report (``results/<NAME>.md``) from its YAML and its committed results.

The YAML's ``sections`` are written in order, each one of:

- ``text: STRING`` — markdown; ``{meta[hardware]}`` (``study.json``), ``{evaluation[device]}`` (the first joint
  evaluation's meta), ``{train[data][examples]:,}`` (the first run's ``train_results.json``), ``{flags[NAME][FLAG]}``,
  ``{seeds}``, ``{mean[CANDIDATE][PATH - PATH]:.2f}`` and ``{backbone[PATH - 1.5]:.2f}`` (sums and differences of
  candidate means / backbone values and numbers) are filled in;
- ``rule`` — the rule's text as the YAML states it;
- ``table: {columns, rows, rows_before, rows_after, frontier, row_label}`` — a row per candidate (means ± sample std
  over its seeds) or, with ``rows: runs``, per run; a column is ``{label, metric | train | per_seed | seeds | design |
  probe | eligible | score | frontier}`` (a metric with ``{set}`` is given for each of ``sets``, default SNLI / MNLI
  (mm) / SICK test); ``rows_before`` / ``rows_after`` add ``{label, run: backbone | first, cells}`` rows (a cell is a
  column or a literal); ``frontier`` lists the axes of the Pareto frontier (larger is better; ``negate`` flips one);
- ``ranking`` — the rule applied (seed 42, then the finalists) and the selected candidate;
- ``targets: {measures}`` — each candidate against fixed targets or the backbone's (✓, or ✗ with how far off);
- ``significance: {skip}`` — the joint evaluations' McNemar tests;
- ``release`` — the release run's section (``--release OUT`` copies it into the study first).

    python -m studies.report studies/keep.yaml [--release OUT]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gausscse.io import write_atomic
from studies.study import Study, cli_flags, mean, seed_of, shown, value

SET_LABELS = {"snli": "SNLI", "mnli_mismatched": "MNLI (mm)", "mnli_matched": "MNLI (m)", "sick": "SICK"}
TEST_SETS = ("snli", "mnli_mismatched", "sick")
RELEASE_FILES = ("eval/results.json", "eval/report.md", "release_curve.png")  # what --release keeps of OUT


def summary(values: list[float], decimals: int = 2) -> str:
    """``mean`` or ``mean ± std``."""
    if len(values) == 1:
        return f"{values[0]:.{decimals}f}"
    return f"{statistics.mean(values):.{decimals}f} ± {statistics.stdev(values):.{decimals}f}"


def expanded(path: str | list[str], sets: list[str]) -> list[str]:
    """The paths of a column or measure: a list as given, one path per set where it has ``{set}``."""
    if isinstance(path, list):
        return path
    return [path.format(set=name) for name in sets] if "{set}" in path else [path]


class Terms:
    """``terms["A - B + 1.5"]``: sums and differences of numbers and of ``reader(PATH)``."""

    def __init__(self, reader: Callable[[str], float]) -> None:
        self.reader = reader

    def __getitem__(self, expression: str) -> float:
        total, sign = 0.0, 1.0
        for token in expression.split():
            if token in "+-":
                sign = -1.0 if token == "-" else 1.0
                continue
            total += sign * (float(token) if re.fullmatch(r"[\d.]+", token) else self.reader(token))
        return total


class Report:
    """The report of one study ([`Study`])."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self.frontier: set[str] = set()  # the candidates on the frontier of the table being written

    def cell(self, runs: dict[str, dict], column: dict | str, candidate: str = "") -> str:
        """One table cell of ``candidate``'s ``runs`` (``{run: results}``; a literal stays as it is)."""
        if isinstance(column, str):
            return column
        study = self.study
        if "metric" in column:
            return " / ".join(
                self.summary(runs, path, column) for path in expanded(column["metric"], self.sets(column))
            )
        if "train" in column:
            values = [study.train_results(run).get(column["train"]) for run in runs]
            values = [number for number in values if number is not None]
            return summary(values, column.get("decimals", 2)) if values else "—"
        if "per_seed" in column:
            return " / ".join(f"{value(results, column['per_seed']):.2f}" for results in runs.values())
        if "design" in column:
            return f"{study.design(candidate)[column['design'] == 'cost']:.2f}×"
        if "probe" in column:
            per_step = study.seconds_per_step(candidate)
            if per_step is None:
                return "?"
            return f"{per_step:.2f}" if column["probe"] == "seconds_per_step" else str(study.budget_steps(candidate))
        if column.get("seeds"):
            return str(len(runs))
        if column.get("eligible"):
            return "yes" if study.eligible(candidate, study.runs) else "no"
        if column.get("score"):
            return f"{study.score(runs):.2f}"
        if column.get("frontier"):
            return "yes" if candidate in self.frontier else ""
        raise ValueError(f"{study.file}: a column needs metric, train, per_seed, design, probe or a flag: {column}")

    def summary(self, runs: dict[str, dict], path: str, column: dict) -> str:
        values = []
        for results in runs.values():
            try:
                values.append(value(results, path))
            except KeyError:
                continue
        return summary(values, column.get("decimals", 2)) if values else "—"

    def sets(self, spec: dict) -> list[str]:
        return spec.get("sets", list(TEST_SETS))

    # sections
    def table(self, spec: dict) -> list[str]:
        columns = spec["columns"]
        self.frontier = self.frontier_of(spec["frontier"]) if "frontier" in spec else set()
        align = [":---:" if column.get("eligible") or column.get("frontier") else "---:" for column in columns]
        lines = [
            "| "
            + " | ".join([spec.get("first", "candidate"), *(self.filled(column["label"]) for column in columns)])
            + " |",
            "|---|" + "|".join(align) + "|",
        ]
        lines += [self.extra_row(row, columns) for row in spec.get("rows_before", [])]
        label = spec.get("row_label", "{name}")
        rows = [(label.format(name=name), name, runs) for name, runs in self.study.runs.items()]
        if spec.get("rows") == "runs":  # a row per run, seed by seed (a stable sort keeps the candidates' order)
            rows = [
                (f"{row} seed {seed_of(run)}", name, {run: results})
                for row, name, runs in rows
                for run, results in runs.items()
            ]
            rows.sort(key=lambda row: self.study.seed_order(seed_of(next(iter(row[2])))))
        for row, name, runs in rows:
            lines.append("| " + " | ".join([row, *(self.cell(runs, column, name) for column in columns)]) + " |")
        lines += [self.extra_row(row, columns) for row in spec.get("rows_after", [])]
        return [*lines, ""]

    def extra_row(self, row: dict, columns: list[dict]) -> str:
        if row.get("run") == "backbone":
            runs = {"backbone": self.study.backbone}
        else:
            first = next(iter(self.study.runs.values()))
            runs = dict([next(iter(first.items()))])
        cells = [self.cell(runs, cell) if isinstance(cell, dict) else str(cell) for cell in row["cells"]]
        return "| " + " | ".join([row["label"], *cells]) + " |"

    def frontier_of(self, axes: list[dict]) -> set[str]:
        """The candidates no other candidate is ≥ on every axis and > on one (axes larger-is-better, means)."""

        def point(name: str, runs: dict[str, dict]) -> tuple[float, ...]:
            values = []
            for axis in axes:
                if "design" in axis:
                    number = self.study.design(name)[axis["design"] == "cost"]
                else:
                    number = statistics.mean(mean(runs, path) for path in expanded(axis["metric"], self.sets(axis)))
                values.append(-number if axis.get("negate") else number)
            return tuple(values)

        points = {name: point(name, runs) for name, runs in self.study.runs.items()}
        return {
            name
            for name, mine in points.items()
            if not any(
                all(o >= p for o, p in zip(other, mine, strict=True)) and other != mine
                for other_name, other in points.items()
                if other_name != name
            )
        }

    def candidates(self, _spec: Any) -> list[str]:
        lines = [f"Candidates, each the recipe `{self.study.spec['recipe']}` with the flags named:", ""]
        for name, candidate in self.study.spec["candidates"].items():
            flags = " ".join(cli_flags(self.study.flags(name)))
            lines.append(
                f"- `{name}`" + (f" (`{flags}`)" if flags else "") + f": {candidate.get('about', '')}".rstrip(": ")
            )
        return [*lines, ""]

    def rule(self, _spec: Any) -> list[str]:
        return ["Rule, written in `" + self.yaml_path() + "` before the runs:", "", *self.study.rule["text"], ""]

    def ranking(self, _spec: Any) -> list[str]:
        selection = self.study.selection
        lines = [
            f"Seed 42, all candidates: ranking {' > '.join(selection['first']) or '(none eligible)'} (ineligible "
            "candidates left out).",
            "",
        ]
        text = ""
        if selection["final"]:
            text = (
                f"Finalists with more seeds ({', '.join(selection['finalists'])}): ranking "
                + " > ".join(selection["final"])
                + ". "
            )
        if selection["selected"] is None:
            return [*lines, text + "**No candidate is eligible.**", ""]
        if selection["selected"] != selection["winner"]:
            prefer = self.study.rule["prefer"]
            text += (
                f"`{selection['winner']}` wins by the rule; `{prefer['candidate']}` is within {prefer['within']} of "
                "it on " + " and ".join(f"`{path}`" for path in prefer["metrics"]) + ": a tie it takes. "
            )
        return [*lines, text + f"**Selected: `{selection['selected']}`.**", ""]

    def targets(self, spec: dict) -> list[str]:
        return [
            *(
                f"- `{name}`: {self.target_line(name, runs, spec['measures'])}"
                for name, runs in self.study.runs.items()
            ),
            "",
        ]

    def target_line(self, name: str, runs: dict[str, dict], measures: list[dict]) -> str:
        parts = []
        for measure in measures:
            if "design" in measure:
                got = self.study.design(name)[measure["design"] == "cost"]
                target = measure["at_most"]
                parts.append(f"{measure['label']} {got:.2f}× " + self.mark(target - got))
                continue
            sets = self.sets(measure)
            paths = expanded(measure["metric"], sets)
            for index, path in enumerate(paths):
                label = measure["label"] + (f" {SET_LABELS[sets[index]]}" if len(paths) > 1 else "")
                target = measure["target"]
                if isinstance(target, list):
                    target = target[index]
                elif isinstance(target, dict):
                    target = value(self.study.backbone, expanded(target["backbone"], sets)[index]) + target.get(
                        "plus", 0.0
                    )
                got = mean(runs, path)
                parts.append(f"{label} {got:.2f} " + self.mark(got - target))
        return ", ".join(parts)

    @staticmethod
    def mark(margin: float) -> str:
        return "✓" if margin >= 0 else f"✗ (off by {-margin:.2f})"

    def significance(self, spec: dict) -> list[str]:
        files = self.study.evaluation_files()
        per_seed = any(file.parent.name.startswith("seed") for file in files)
        lines = ["| " + ("seed | " if per_seed else "") + "A vs. B | task / test set | b | c | p |"]
        lines.append("|" + ("---|" if per_seed else "") + "---|---|---:|---:|---:|")
        for file in files:
            payload = json.loads(file.read_text(encoding="utf-8"))
            for comparison, tests in payload["significance"].items():
                if spec.get("skip") and spec["skip"] in comparison:
                    continue
                for task, test in sorted(tests.items()):
                    if task.split("/")[1] not in TEST_SETS:
                        continue
                    p = test["p_value"]
                    row = [re.sub(r"_seed\d+", "", comparison), task, str(test["only_a_correct"])]
                    row += [str(test["only_b_correct"]), f"{p:.2g}" if p < 0.001 else f"{p:.3f}"]
                    seed = [file.parent.name.removeprefix("seed")] if per_seed else []
                    lines.append("| " + " | ".join([*seed, *row]) + " |")
        return [*lines, ""]

    def release(self, _spec: Any) -> list[str]:
        """The release section of the copied report (``scripts/release_card.py``'s, one heading level down)."""
        from gausscse.evaluation.report import REPORT_TITLE

        report = self.study.results / "release" / "report.md"
        if not report.is_file():
            return [
                "## The release run",
                "",
                f"Not run yet: `bash scripts/release.sh OUT`, then `python -m studies.report {self.yaml_path()} "
                "--release OUT`.",
                "",
            ]
        section = report.read_text(encoding="utf-8").split(REPORT_TITLE, 1)[0].strip()
        section = section.replace("## Release", "## The release run", 1)
        folder = Path(os.path.relpath(self.study.results, self.study.output.parent))
        return [section.replace("](../release_curve.png)", f"]({folder.as_posix()}/release/release_curve.png)"), ""]

    def text(self, text: str) -> list[str]:
        return [self.filled(text.strip()), ""]

    def filled(self, text: str) -> str:
        """``text`` with its fields (see the module docstring) filled in."""
        return text.format_map(self.fields)

    @functools.cached_property
    def fields(self) -> dict[str, Any]:
        """The fields a text may name, read once per report."""
        study = self.study
        runs = study.runs
        first_run = next(iter(next(iter(runs.values()))), "") if runs else ""
        evaluation = {}
        if study.evaluation_files() and not (study.results / "eval").is_dir():
            evaluation = json.loads(study.evaluation_files()[0].read_text(encoding="utf-8"))["meta"]
        return {
            "meta": {"hardware": "?", "precision": "?", **study.meta},
            "evaluation": evaluation,
            "train": study.train_results(first_run) if first_run else {},
            "flags": {name: study.flags(name) for name in study.spec["candidates"]},
            "seeds": ", ".join(
                map(str, sorted({seed_of(run) for group in runs.values() for run in group}, key=study.seed_order))
            ),
            "mean": {
                name: Terms(lambda path, runs=candidate_runs: mean(runs, path)) for name, candidate_runs in runs.items()
            },
            "backbone": Terms(lambda path: value(study.backbone, path)),
        }

    def yaml_path(self) -> str:
        return shown(self.study.file)

    def render(self) -> str:
        path = self.yaml_path()
        lines = [
            f"# {self.study.spec['title']}",
            "",
            f"Produced by `python -m studies.run {path} train SEED CANDIDATE...` then `python -m studies.run {path} "
            f"evaluate`, which writes this report (`python -m studies.report {path}` writes it again from "
            f"`{self.study.spec['results']}`); candidates, recipe and rule are in `{path}`. Means ± sample std over "
            "seeds where a candidate has several.",
            "",
        ]
        for section in self.study.spec["sections"]:
            kind, spec = next(iter(section.items())) if isinstance(section, dict) else (section, None)
            lines += getattr(self, kind)(spec)
        return "\n".join(lines)


def copy_release(study: Study, out: Path) -> None:
    """The release's one evaluation (``OUT/eval/results.json`` and ``report.md``, with the release section that
    ``scripts/release_card.py`` wrote) and its curve into the study's ``release/`` folder."""
    report = out / "eval" / "report.md"
    if not report.is_file() or "## Release" not in report.read_text(encoding="utf-8"):
        raise SystemExit(f"{report}: no release section (run scripts/release_card.py, as scripts/release.sh does)")
    (study.results / "release").mkdir(parents=True, exist_ok=True)
    for name in RELEASE_FILES:
        if (out / name).is_file():
            shutil.copyfile(out / name, study.results / "release" / Path(name).name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", type=Path, help="the study's YAML (studies/<name>.yaml)")
    parser.add_argument("--release", type=Path, help="the folder scripts/release.sh wrote: its results join the report")
    parser.add_argument("--output", type=Path, help="where to write (default: the study's output)")
    args = parser.parse_args(argv)
    study = Study.load(args.study)
    if args.release is not None:
        copy_release(study, args.release)
    output = args.output or study.output
    write_atomic(output, Report(study).render())
    print(f"Wrote {output}")


if __name__ == "__main__":
    main()
