"""The Markdown report: the paper's published numbers beside the measured ones, task by task."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .metrics import mean_and_std
from .suite import ModelRun, flatten
from .tasks import STS_SETS

# Yoda et al. (EACL 2024), BERT-base; the paper's one MNLI column is MNLI mismatched (as in its released code).
PAPER_NLI_ACCURACY = {
    "GaussCSE (paper, BERT-base)": {"snli": 76.64, "mnli_mismatched": 76.85, "sick": 83.15},
    "SimCSE sup. (paper, BERT-base)": {"snli": 74.96, "mnli_mismatched": 78.18, "sick": 86.11},
}
PAPER_DIRECTION = {
    "GaussCSE (paper, BERT-base): similarity rule": {"snli": 97.38, "mnli_mismatched": 91.92, "sick": 86.22},
    "Length baseline (paper)": {"snli": 92.63, "mnli_mismatched": 82.64, "sick": 69.14},
}
NLI_COLUMNS = {"snli": "SNLI", "mnli_mismatched": "MNLI (mm)", "sick": "SICK", "mnli_matched": "MNLI (m)"}
STS_LABELS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg.")
STS_COLUMNS = dict(zip([*STS_SETS, "avg"], STS_LABELS, strict=True))
STS_SCORES = {"cosine": "cosine", "symmetric_kl": "symmetric kl"}
RETRIEVAL_COLUMNS = {"snli": "SNLI test", "mnli_mismatched": "MNLI (mm)", "sick": "SICK test", "snli_dev": "SNLI dev"}
RETRIEVAL_SCORES = {
    "search": "search score cos − λ·KL(claim‖premise)/d",
    "similarity": "own similarity sim(claim‖premise)",
    "cosine": "cosine of μ",
}
RETRIEVAL_KEYS = ("retrieval/{column}/{score}/ndcg@10", "retrieval/{column}/{score}/recall@10")
REPORT_TITLE = "# GaussCSE evaluation"  # the first line of every report.md


@dataclass
class Entry:
    """One row group of the report: a label and its runs (several runs = seeds, shown as mean ± std)."""

    label: str
    runs: list[ModelRun]

    def cell(self, key: str, digits: int = 2) -> str:
        """The flattened result ``key`` (mean ± std over runs), or ``—`` where it does not apply (missing, NaN)."""
        values = [flatten(run.results).get(key) for run in self.runs]
        values = [value for value in values if value is not None and value == value]
        if len(values) < 2:
            return f"{values[0]:.{digits}f}" if values else "—"
        mean, std = mean_and_std(values)
        return f"{mean:.{digits}f} ± {std:.{digits}f}"

    def cells(self, columns: Iterable[str], *keys: str, **fields: str) -> list[str]:
        """Per column, the :meth:`cell` of each key (``{column}`` and ``fields`` filled in), joined by `` / ``."""
        return [" / ".join(self.cell(key.format(column=column, **fields)) for key in keys) for column in columns]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _paper_row(label: str, numbers: dict[str, float], columns: Iterable[str], extra: int = 0) -> list[str]:
    return [label] + [f"{numbers[column]:.2f}" if column in numbers else "—" for column in columns] + ["—"] * extra


def _score_table(entries: Sequence[Entry], columns: dict[str, str], scores: dict[str, str], *keys: str) -> str:
    """A row ``label (score label)`` per entry and score (``{score}`` in ``keys``), left out where all cells are —."""
    rows = [
        [f"{entry.label} ({label})", *entry.cells(columns, *keys, score=score)]
        for entry in entries
        for score, label in scores.items()
    ]
    rows = [row for row in rows if any(cell.strip("— /") for cell in row[1:])]
    return markdown_table(["model (score)", *columns.values()], rows)


def _paragraphs(*parts: str) -> str:
    return "\n\n".join(parts)


def nli_section(entries: Sequence[Entry]) -> str:
    accuracy_rows = [_paper_row(label, numbers, NLI_COLUMNS, extra=2) for label, numbers in PAPER_NLI_ACCURACY.items()]
    accuracy_rows += [
        [
            entry.label,
            *entry.cells(NLI_COLUMNS, "nli/{column}/accuracy"),
            entry.cell("snli_dev/threshold", 3),
            entry.cell("entailment_cosine_weight", 3),
        ]
        for entry in entries
    ]
    area_keys = ("nli/{column}/auprc", "nli/{column}/average_precision")
    return _paragraphs(
        "## Binary NLI (paper §3.1): entailment vs. neutral + contradiction, by the model's entailment score",
        "A GaussCSE model scores a pair by its config's entailment score: sim(hyp‖pre), or 1 / (1/sim(hyp‖pre) + "
        "α·(1 − cos(μ_hyp, μ_pre))) where it states α (column α). Accuracy (%) at the threshold that is best on SNLI "
        "dev (grid 0, 0.001, …, 1; entailment iff score ≥ threshold), applied unchanged to every test set. The paper's "
        "single MNLI column is MNLI mismatched. Point-embedding baselines score (cos + 1) / 2.",
        markdown_table(["model", *NLI_COLUMNS.values(), "SNLI-dev threshold", "α"], accuracy_rows),
        "AUPRC (%, the paper's protocol: precision/recall at each 0.001-step threshold plus the (0, 1) anchor, "
        "trapezoid over recall) / average precision (%, sklearn's step-wise AP over all distinct scores).",
        markdown_table(
            ["model", *NLI_COLUMNS.values()],
            [[entry.label, *entry.cells(NLI_COLUMNS, *area_keys)] for entry in entries],
        ),
    )


def direction_section(entries: Sequence[Entry]) -> str:
    rows = [_paper_row(label, numbers, NLI_COLUMNS) for label, numbers in PAPER_DIRECTION.items()]
    rows += [  # the length baselines depend on the data only: taken from the first entry
        [f"Length baseline (measured, {unit})", *entries[0].cells(NLI_COLUMNS, "direction/{column}/" + key)]
        for key, unit in (("length_baseline", "characters"), ("length_baseline_words", "words"))
        if entries
    ]
    rows += [
        [f"{entry.label}: {rule.replace('_', ' ')}", *entry.cells(NLI_COLUMNS, "direction/{column}/" + rule)]
        for entry in entries
        for rule in ("similarity_rule", "variance_rule")
    ]
    return _paragraphs(
        "## Entailment direction (paper §3.2): entailment pairs only, accuracy (%)",
        "Similarity rule: sim(hyp‖pre) > sim(pre‖hyp); variance rule: Σlogσ²(pre) > Σlogσ²(hyp); length "
        "baseline: the premise is strictly longer (characters, as the paper; or whitespace words); ties are "
        "wrong. SICK leaves out pairs that entail both ways (A_entails_B and B_entails_A). Symmetric "
        "(point-embedding) models have no direction: —.",
        markdown_table(["model / rule", *NLI_COLUMNS.values()], rows),
    )


def sts_section(entries: Sequence[Entry]) -> str:
    return _paragraphs(
        "## STS: Spearman ρ × 100",
        '"all" aggregation as SimCSE (one ρ over all subsets of a year\'s file); STS-B and SICK-R: test set. '
        "cosine: cos(μ_a, μ_b); symmetric kl: ½[sim(a‖b) + sim(b‖a)].",
        _score_table(entries, STS_COLUMNS, STS_SCORES, "sts/{column}/{score}"),
    )


def retrieval_section(entries: Sequence[Entry]) -> str:
    sizes = [
        f"{name} {entries[0].cell(f'retrieval/{column}/size/queries', 0)} claims × "
        f"{entries[0].cell(f'retrieval/{column}/size/corpus', 0)} premises"
        for column, name in RETRIEVAL_COLUMNS.items()
    ]
    return _paragraphs(
        "## Entailment retrieval: nDCG@10 / recall@10 (%)",
        "Queries: the split's first entailment hypotheses (claims, file order); corpus: all its premises; "
        "relevant: the premises labelled as entailing the claim. Ranked by the model's search score (models "
        "that state its λ, chosen on SNLI dev at the end of training), by its own similarity (for sum/mean_kl: "
        "−KL(claim‖premise), what encode_query·encode_document and the search index rank by) or by the cosine "
        f"of μ (a point encoder: of its embedding). Sets: {'; '.join(sizes)}.",
        _score_table(entries, RETRIEVAL_COLUMNS, RETRIEVAL_SCORES, *RETRIEVAL_KEYS),
    )


def significance_section(tests: dict[str, dict[str, dict]]) -> str:
    """``tests``: comparison label → ``{task/test_set: McNemar fields}``."""
    rows = [
        [comparison, key, str(result["only_a_correct"]), str(result["only_b_correct"])]
        + [f"{result[p]:.3g}" for p in ("p_value", "chi2_p_value")]
        for comparison, results in tests.items()
        for key, result in results.items()
    ]
    return _paragraphs(
        "## Significance: McNemar's test on per-example correctness",
        "b: only A correct, c: only B correct; exact two-sided binomial p on b + c discordant pairs, and the "
        "continuity-corrected χ² p for reference.",
        markdown_table(["A vs. B", "task/test set", "b", "c", "p (exact)", "p (χ², cc)"], rows) if rows else "(none)",
    )


TASK_SECTIONS = {"nli": nli_section, "direction": direction_section, "sts": sts_section, "retrieval": retrieval_section}


def markdown_report(entries: Sequence[Entry], tests: dict[str, dict[str, dict]], notes: Sequence[str] = ()) -> str:
    """The whole report: the sections of the tasks measured, then significance."""
    measured = {key.split("/")[0] for entry in entries for run in entry.runs for key in flatten(run.results)}
    sections = [REPORT_TITLE, *notes]
    sections += [section(entries) for task, section in TASK_SECTIONS.items() if task in measured]
    sections += [significance_section(tests)] if tests else []
    return _paragraphs(*sections) + "\n"
