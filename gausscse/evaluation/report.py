"""Results as JSON and as a Markdown report that puts the paper's published numbers beside the measured ones.

Files are written atomically (``gausscse.io``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import metrics
from .suite import ModelRun, flatten

# Yoda et al. (EACL 2024), BERT-base trained on entailment + contradiction + reversed pairs. The paper has one
# MNLI column; as in the released code it is MNLI mismatched. Percentages.
PAPER_NLI_ACCURACY = {
    "GaussCSE (paper, BERT-base)": {"snli": 76.64, "mnli_mismatched": 76.85, "sick": 83.15},
    "SimCSE sup. (paper, BERT-base)": {"snli": 74.96, "mnli_mismatched": 78.18, "sick": 86.11},
}
PAPER_DIRECTION = {
    "GaussCSE (paper, BERT-base): similarity rule": {"snli": 97.38, "mnli_mismatched": 91.92, "sick": 86.22},
    "Length baseline (paper)": {"snli": 92.63, "mnli_mismatched": 82.64, "sick": 69.14},
}

NLI_COLUMNS = {"snli": "SNLI", "mnli_mismatched": "MNLI (mm)", "sick": "SICK", "mnli_matched": "MNLI (m)"}
STS_COLUMNS = {
    "sts12": "STS12",
    "sts13": "STS13",
    "sts14": "STS14",
    "sts15": "STS15",
    "sts16": "STS16",
    "stsb": "STS-B",
    "sickr": "SICK-R",
    "avg": "Avg.",
}

REPORT_TITLE = "# GaussCSE evaluation"  # the first line of every report.md


@dataclass
class Entry:
    """One row group of the report: a label and its runs (several runs = seeds, shown as mean ± std)."""

    label: str
    runs: list[ModelRun]

    def cell(self, key: str, digits: int = 2) -> str:
        """The value of the flattened result ``key`` (mean ± std over runs), or ``—`` where it does not apply."""
        values = [flatten(run.results).get(key) for run in self.runs]
        values = [value for value in values if value is not None and value == value]
        if not values:
            return "—"
        if len(values) == 1:
            return f"{values[0]:.{digits}f}"
        mean, std = metrics.mean_and_std(values)
        return f"{mean:.{digits}f} ± {std:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _paper_row(label: str, numbers: dict[str, float], columns: Sequence[str], extra: int = 0) -> list[str]:
    return [label] + [f"{numbers[column]:.2f}" if column in numbers else "—" for column in columns] + ["—"] * extra


def nli_section(entries: Sequence[Entry]) -> str:
    """Binary NLI: accuracy at the SNLI-dev threshold, then AUPRC and average precision."""
    columns = list(NLI_COLUMNS)
    accuracy_rows = [_paper_row(label, numbers, columns, extra=1) for label, numbers in PAPER_NLI_ACCURACY.items()]
    accuracy_rows += [
        [entry.label]
        + [entry.cell(f"nli/{column}/accuracy") for column in columns]
        + [entry.cell("snli_dev/threshold", 3)]
        for entry in entries
    ]
    area_rows = [
        [entry.label]
        + [
            f"{entry.cell(f'nli/{column}/auprc')} / {entry.cell(f'nli/{column}/average_precision')}"
            for column in columns
        ]
        for entry in entries
    ]
    return "\n\n".join(
        [
            "## Binary NLI (paper §3.1): entailment vs. neutral + contradiction, score sim(hyp‖pre)",
            "Accuracy (%) at the threshold that is best on SNLI dev (grid 0, 0.001, …, 1; entailment iff score ≥ "
            "threshold), applied unchanged to every test set. The paper's single MNLI column is MNLI mismatched. "
            "Point-embedding baselines score (cos + 1) / 2.",
            markdown_table(["model", *NLI_COLUMNS.values(), "SNLI-dev threshold"], accuracy_rows),
            "AUPRC (%, the paper's protocol: precision/recall at each 0.001-step threshold plus the (0, 1) anchor, "
            "trapezoid over recall) / average precision (%, sklearn's step-wise AP over all distinct scores).",
            markdown_table(["model", *NLI_COLUMNS.values()], area_rows),
        ]
    )


def direction_section(entries: Sequence[Entry]) -> str:
    """Entailment direction: similarity rule, variance rule, length baselines."""
    columns = list(NLI_COLUMNS)
    rows = [_paper_row(label, numbers, columns) for label, numbers in PAPER_DIRECTION.items()]
    if entries:  # the length baselines depend on the data only: take them from the first entry
        for key, label in (("length_baseline", "characters"), ("length_baseline_words", "words")):
            rows.append(
                [f"Length baseline (measured, {label})"] + [entries[0].cell(f"direction/{c}/{key}") for c in columns]
            )
    for entry in entries:
        for rule in ("similarity_rule", "variance_rule"):
            rows.append(
                [f"{entry.label}: {rule.replace('_', ' ')}"] + [entry.cell(f"direction/{c}/{rule}") for c in columns]
            )
    return "\n\n".join(
        [
            "## Entailment direction (paper §3.2): entailment pairs only, accuracy (%)",
            "Similarity rule: sim(hyp‖pre) > sim(pre‖hyp); variance rule: Σlogσ²(pre) > Σlogσ²(hyp); length "
            "baseline: the premise is strictly longer (characters, as the paper; or whitespace words); ties are "
            "wrong. SICK leaves out pairs that entail both ways (A_entails_B and B_entails_A). Symmetric "
            "(point-embedding) models have no direction: —.",
            markdown_table(["model / rule", *NLI_COLUMNS.values()], rows),
        ]
    )


def sts_section(entries: Sequence[Entry]) -> str:
    """STS Spearman ρ × 100 with each symmetric score."""
    rows = []
    for entry in entries:
        for score in ("cosine", "symmetric_kl"):
            cells = [entry.cell(f"sts/{column}/{score}") for column in STS_COLUMNS]
            if any(cell != "—" for cell in cells):
                rows.append([f"{entry.label} ({score.replace('_', ' ')})", *cells])
    return "\n\n".join(
        [
            "## STS: Spearman ρ × 100",
            '"all" aggregation as SimCSE (one ρ over all subsets of a year\'s file); STS-B and SICK-R: test set. '
            "cosine: cos(μ_a, μ_b); symmetric kl: ½[sim(a‖b) + sim(b‖a)].",
            markdown_table(["model (score)", *STS_COLUMNS.values()], rows),
        ]
    )


RETRIEVAL_COLUMNS = {"snli": "SNLI test", "mnli_mismatched": "MNLI (mm)", "sick": "SICK test", "snli_dev": "SNLI dev"}
RETRIEVAL_SCORES = {
    "search": "search score cos − λ·KL(claim‖premise)/d",
    "similarity": "own similarity sim(claim‖premise)",
    "cosine": "cosine of μ",
}


def retrieval_section(entries: Sequence[Entry]) -> str:
    """Entailment retrieval: nDCG@10 / recall@10 per set, for each score of each model."""
    rows = []
    for entry in entries:
        for score, label in RETRIEVAL_SCORES.items():
            cells = [
                " / ".join(entry.cell(f"retrieval/{column}/{score}/{metric}") for metric in ("ndcg@10", "recall@10"))
                for column in RETRIEVAL_COLUMNS
            ]
            if any(cell != "— / —" for cell in cells):
                rows.append([f"{entry.label} ({label})", *cells])
    sizes = [
        f"{name} {entries[0].cell(f'retrieval/{column}/size/queries', 0)} claims × "
        f"{entries[0].cell(f'retrieval/{column}/size/corpus', 0)} premises"
        for column, name in RETRIEVAL_COLUMNS.items()
    ]
    return "\n\n".join(
        [
            "## Entailment retrieval: nDCG@10 / recall@10 (%)",
            "Queries: the split's first entailment hypotheses (claims, file order); corpus: all its premises; "
            "relevant: the premises labelled as entailing the claim. Ranked by the model's search score (models "
            "that state its λ, chosen on SNLI dev at the end of training), by its own similarity (for sum/mean_kl: "
            "−KL(claim‖premise), what encode_query·encode_document and the search index rank by) or by the cosine "
            f"of μ (a point encoder: of its embedding). Sets: {'; '.join(sizes)}.",
            markdown_table(["model (score)", *RETRIEVAL_COLUMNS.values()], rows),
        ]
    )


def significance_section(tests: dict[str, dict[str, dict]]) -> str:
    """McNemar tables: ``tests`` maps a comparison label to ``{task/test_set: McNemar fields}``."""
    rows = [
        [
            comparison,
            key,
            str(result["only_a_correct"]),
            str(result["only_b_correct"]),
            f"{result['p_value']:.3g}",
            f"{result['chi2_p_value']:.3g}",
        ]
        for comparison, results in tests.items()
        for key, result in results.items()
    ]
    return "\n\n".join(
        [
            "## Significance: McNemar's test on per-example correctness",
            "b: only A correct, c: only B correct; exact two-sided binomial p on b + c discordant pairs, and the "
            "continuity-corrected χ² p for reference.",
            markdown_table(["A vs. B", "task/test set", "b", "c", "p (exact)", "p (χ², cc)"], rows)
            if rows
            else "(none)",
        ]
    )


def markdown_report(entries: Sequence[Entry], tests: dict[str, dict[str, dict]], notes: Sequence[str] = ()) -> str:
    """The whole report: NLI, direction, STS, retrieval (whichever were measured) and significance."""
    sections = [REPORT_TITLE, *notes]
    tasks = {key.split("/")[0] for entry in entries for run in entry.runs for key in flatten(run.results)}
    if "nli" in tasks:
        sections.append(nli_section(entries))
    if "direction" in tasks:
        sections.append(direction_section(entries))
    if "sts" in tasks:
        sections.append(sts_section(entries))
    if "retrieval" in tasks:
        sections.append(retrieval_section(entries))
    if tests:
        sections.append(significance_section(tests))
    return "\n\n".join(sections) + "\n"
