"""The paper's binary NLI (§3.1) and entailment direction (§3.2), STS and entailment retrieval on top of
:class:`~evaluation.encoders.EncodedSentences`, and :class:`TaskData`, the requested tasks' data. Every number is a
percentage (0–100) except thresholds (0–1) and counts."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from gausscse.data.registry import load_split
from gausscse.model import gaussian

from .encoders import EncodedSentences
from .metrics import load_metric

logger = logging.getLogger(__name__)

# task name -> (dataset, split)
NLI_DEV = ("snli", "validation")
# an MNLI-genre dev set (premises outside every test set), scored at the SNLI-dev threshold; local data only
LINGNLI_DEV = ("lingnli", "validation")
NLI_TEST_SETS = {
    "snli": ("snli", "test"),
    "mnli_mismatched": ("mnli", "validation_mismatched"),
    "mnli_matched": ("mnli", "validation_matched"),
    "sick": ("sick", "test"),
}
# entailment retrieval (the first MAX_RETRIEVAL_QUERIES claims of each; SNLI dev is added for selection)
RETRIEVAL_SETS = {name: NLI_TEST_SETS[name] for name in ("snli", "mnli_mismatched", "sick")}
MAX_RETRIEVAL_QUERIES = 2000
RETRIEVAL_DEPTH = 100  # the deepest cut-off scored (MAP@100)
STS_DEV = ("stsb_dev", ("stsb", "validation"))  # for model selection, not part of the STS average
STS_SETS = {name: (name, "test") for name in ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr")}


@dataclass
class NLIPairs:
    """Premise/hypothesis pairs of one NLI split; ``entails_both_ways`` marks the SICK pairs with A_entails_B and
    B_entails_A (left out of the direction task; all ``False`` elsewhere)."""

    name: str
    premises: list[str]
    hypotheses: list[str]
    is_entailment: np.ndarray
    entails_both_ways: np.ndarray

    def __len__(self) -> int:
        return len(self.premises)

    @property
    def sentences(self) -> list[str]:
        return self.premises + self.hypotheses

    @property
    def direction_mask(self) -> np.ndarray:
        """The pairs of the direction task: entailment, not both ways."""
        return self.is_entailment & ~self.entails_both_ways

    def select(self, mask: np.ndarray) -> NLIPairs:
        rows = np.flatnonzero(mask)
        premises, hypotheses = [self.premises[row] for row in rows], [self.hypotheses[row] for row in rows]
        return NLIPairs(self.name, premises, hypotheses, self.is_entailment[rows], self.entails_both_ways[rows])


@dataclass
class STSPairs:
    """Sentence pairs and gold scores of one STS file; ``subsets``: its ``subset`` field (STS12–16) or ``None``."""

    name: str
    sentence1: list[str]
    sentence2: list[str]
    gold: np.ndarray
    subsets: list[str] | None = None

    @property
    def sentences(self) -> list[str]:
        return self.sentence1 + self.sentence2


def _load_rows(dataset: str, split: str, data_dir, max_examples: int | None, columns: Sequence[str]):
    rows = load_split(dataset, split, data_dir)
    if max_examples is not None:
        if max_examples < 1:
            raise ValueError(f"max_examples must be a positive integer or None, got {max_examples}")
        rows = rows.select(range(min(max_examples, len(rows))))
    for column in columns:
        if column not in rows.column_names:
            raise ValueError(f"{dataset}/{split} has no column {column!r} (columns: {rows.column_names})")
    return rows


def load_nli(
    name: str, dataset: str, split: str, data_dir: str | None = None, max_examples: int | None = None
) -> NLIPairs:
    """An NLI split as :class:`NLIPairs` (its first ``max_examples`` rows if given)."""
    rows = _load_rows(dataset, split, data_dir, max_examples, ("premise", "hypothesis", "label"))
    both_ways = np.zeros(len(rows), dtype=bool)
    if "entailment_AB" in rows.column_names:
        a_entails_b, b_entails_a = np.asarray(rows["entailment_AB"]), np.asarray(rows["entailment_BA"])
        both_ways = (a_entails_b == "A_entails_B") & (b_entails_a == "B_entails_A")
    is_entailment = np.array([label == "entailment" for label in rows["label"]], dtype=bool)
    return NLIPairs(name, list(rows["premise"]), list(rows["hypothesis"]), is_entailment, both_ways)


def load_sts(name: str, dataset: str, split: str, data_dir: str | None = None, max_examples: int | None = None):
    """An STS split as :class:`STSPairs` (its first ``max_examples`` rows if given)."""
    rows = _load_rows(dataset, split, data_dir, max_examples, ("sentence1", "sentence2", "score"))
    subsets = list(rows["subset"]) if "subset" in rows.column_names else None
    gold = np.asarray(rows["score"], dtype=np.float64)
    return STSPairs(name, list(rows["sentence1"]), list(rows["sentence2"]), gold, subsets)


@dataclass
class NLIResult:
    """Binary NLI on one test set: metrics (percent) and the per-pair scores and correctness."""

    metrics: dict[str, float]
    scores: np.ndarray
    correct: np.ndarray = field(repr=False)


def binary_nli(encoded: EncodedSentences, pairs: NLIPairs, threshold: float | None = None) -> NLIResult:
    """Entailment iff s = sim(hyp‖pre) >= ``threshold`` (default: the set's own best grid threshold): the
    ``binary_nli`` metrics × 100, the per-pair scores and correctness."""
    scores = encoded.entailment_score(pairs.premises, pairs.hypotheses).numpy().astype(np.float64)
    labels = pairs.is_entailment
    measured = load_metric("binary_nli").compute(predictions=scores, references=labels, threshold=threshold)
    metrics = {key: value if key.endswith("threshold") else 100.0 * value for key, value in measured.items()}
    metrics.update(examples=len(pairs), positives=int(labels.sum()))
    return NLIResult(metrics, scores, (scores >= metrics["threshold"]) == labels)


def length_rule_correct(premises: Sequence[str], hypotheses: Sequence[str], unit: str = "characters") -> np.ndarray:
    """Length baseline per pair: correct iff the premise is strictly longer (a tie is wrong), in characters as stored
    (the paper's 92.63 / 82.64 / 69.14 on SNLI / MNLI-mm / SICK) or in whitespace ``words``."""
    if unit not in ("characters", "words"):
        raise ValueError(f"unit must be 'characters' or 'words', got {unit!r}")
    if len(premises) != len(hypotheses):
        raise ValueError(f"premises and hypotheses must have the same length, got {len(premises)}, {len(hypotheses)}")
    if unit == "words":
        premises, hypotheses = [pre.split() for pre in premises], [hyp.split() for hyp in hypotheses]
    return np.array([len(pre) > len(hyp) for pre, hyp in zip(premises, hypotheses, strict=True)], dtype=bool)


@dataclass
class DirectionResult:
    """Entailment direction on one test set: metrics (percent) and per-pair arrays (``None`` for a point encoder)."""

    metrics: dict[str, float | None]
    similarity_correct: np.ndarray | None
    variance_correct: np.ndarray | None
    length_correct: np.ndarray
    generality_gap: np.ndarray | None


def entailment_direction(encoded: EncodedSentences, pairs: NLIPairs) -> DirectionResult:
    """Direction on the entailment pairs (both-way SICK pairs left out), ties wrong: sim(hyp‖pre) > sim(pre‖hyp),
    Σlogσ²(pre) > Σlogσ²(hyp) (both ``None`` for a point encoder) and the length baselines (characters, words)."""
    selected = pairs.select(pairs.direction_mask)
    if len(selected) == 0:
        raise ValueError(f"{pairs.name}: no entailment pairs for the direction task")
    premises, hypotheses = selected.premises, selected.hypotheses
    length_correct = length_rule_correct(premises, hypotheses)
    similarity_correct = variance_correct = gap = None
    if encoded.is_gaussian:  # the model's rules (gaussian.entailment_direction), premise a, hypothesis b
        premise, hypothesis = encoded.gaussians(premises), encoded.gaussians(hypotheses)
        model_rules = gaussian.entailment_direction(premise, hypothesis, encoded.reduction)
        similarity_correct, variance_correct = model_rules.by_similarity.numpy(), model_rules.by_variance.numpy()
        gap = (premise.generality - hypothesis.generality).numpy()
    rules = dict(similarity_rule=similarity_correct, variance_rule=variance_correct, length_baseline=length_correct)
    rules["length_baseline_words"] = length_rule_correct(premises, hypotheses, unit="words")
    metrics = {rule: None if correct is None else 100.0 * float(correct.mean()) for rule, correct in rules.items()}
    metrics["examples"] = len(selected)
    return DirectionResult(metrics, similarity_correct, variance_correct, length_correct, gap)


def sts_spearman(encoded: EncodedSentences, pairs: STSPairs) -> dict[str, float]:
    """Spearman ρ × 100 of each symmetric score against the gold scores, one ρ over all subsets of the file."""
    spearman = load_metric("spearman")
    return {
        name: 100.0 * spearman.compute(predictions=values.numpy(), references=pairs.gold)["spearman"]
        for name, values in encoded.symmetric_similarities(pairs.sentence1, pairs.sentence2).items()
    }


@dataclass
class RetrievalSet:
    """Claims (queries), premises (corpus) and, per claim, the corpus rows of the premises that entail it."""

    name: str
    queries: list[str]
    corpus: list[str]
    relevant: list[list[int]]

    @property
    def sentences(self) -> list[str]:
        return self.queries + self.corpus


def retrieval_set(pairs: NLIPairs, max_queries: int = MAX_RETRIEVAL_QUERIES) -> RetrievalSet:
    """The first ``max_queries`` distinct entailment hypotheses (file order) as queries, every distinct premise as the
    corpus, relevant = the premises labelled as entailing the query (both-way SICK pairs included)."""
    corpus_rows = {premise: row for row, premise in enumerate(dict.fromkeys(pairs.premises))}
    relevant: dict[str, dict[int, None]] = {}  # claim -> the corpus rows of its premises, once each, in file order
    for premise, hypothesis, entailment in zip(pairs.premises, pairs.hypotheses, pairs.is_entailment, strict=True):
        if entailment and (hypothesis in relevant or len(relevant) < max_queries):
            relevant.setdefault(hypothesis, {})[corpus_rows[premise]] = None
    if not relevant:
        raise ValueError(f"{pairs.name}: no entailment pair to build a retrieval set from")
    return RetrievalSet(pairs.name, list(relevant), list(corpus_rows), [list(rows) for rows in relevant.values()])


def rank_corpus(scores: torch.Tensor, depth: int = RETRIEVAL_DEPTH) -> list[list[int]]:
    """Each row's best ``depth`` corpus columns, best first."""
    return scores.topk(min(depth, scores.shape[1]), dim=1).indices.tolist()


def ranking_metrics(scores: torch.Tensor, relevant: list[list[int]]) -> dict[str, float]:
    """accuracy@1, MRR@10, nDCG@10, recall@10 and MAP@100 (percent) of ranking by ``(queries, corpus)`` scores."""
    measured = load_metric("retrieval").compute(predictions=rank_corpus(scores), references=relevant)
    return {key: 100.0 * value for key, value in measured.items()}


def entailment_retrieval(encoded: EncodedSentences, retrieval: RetrievalSet) -> dict[str, dict[str, float]]:
    """:func:`ranking_metrics` by each score and the set's size. Scores: ``cosine`` of μ (or of the point embeddings);
    for Gaussian models ``similarity`` = sim(query‖premise) with the model's reduction (−KL order for ``sum``/
    ``mean_kl``) and, where the model states λ (``search_kl_weight``), ``search`` = cos − λ·KL(query‖premise)/d."""
    queries, corpus = encoded.rows(retrieval.queries), encoded.rows(retrieval.corpus)
    scores = {"cosine": gaussian.cosine_matrix(encoded.mu[queries], encoded.mu[corpus])}
    if encoded.is_gaussian:
        gaussians = (encoded.mu[queries], encoded.logvar[queries], encoded.mu[corpus], encoded.logvar[corpus])
        dim, weight, by_kl = encoded.mu.shape[-1], encoded.search_kl_weight, encoded.reduction in gaussian.KL_REDUCTIONS
        kl = gaussian.kl_divergence_matrix(*gaussians) if by_kl or weight is not None else None  # once for both scores
        if by_kl:
            scores["similarity"] = gaussian.similarity_from_kl(kl, gaussian.kl_scale(encoded.reduction, dim))
        else:
            scores["similarity"] = gaussian.similarity_matrix(*gaussians, "mean_dim")
        if weight is not None:
            scores["search"] = gaussian.search_score_from(scores["cosine"], kl, weight, dim)
    results = {name: ranking_metrics(matrix, retrieval.relevant) for name, matrix in scores.items()}
    results["size"] = {"queries": len(retrieval.queries), "corpus": len(retrieval.corpus)}
    return results


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
    """The pairs of every requested task, loaded once for all encoders."""

    tasks: tuple[str, ...]
    nli_dev: NLIPairs | None = None
    lingnli_dev: NLIPairs | None = None
    nli_test: dict[str, NLIPairs] = field(default_factory=dict)
    sts: dict[str, STSPairs] = field(default_factory=dict)
    sts_dev: STSPairs | None = None
    retrieval: dict[str, RetrievalSet] = field(default_factory=dict)

    @classmethod
    def load(
        cls, tasks: Sequence[str], data_dir: str | Path | None = None, max_examples: int | None = None
    ) -> TaskData:
        """SNLI dev for ``nli``/``retrieval``, the NLI test sets for ``nli``/``direction``, the STS files and STS-B
        dev for ``sts``, the retrieval sets; each file cut to its first ``max_examples`` rows if given."""
        data = cls(tasks=parse_tasks(tasks))
        nli = functools.partial(load_nli, data_dir=data_dir, max_examples=max_examples)
        sts = functools.partial(load_sts, data_dir=data_dir, max_examples=max_examples)
        if "nli" in data.tasks or "retrieval" in data.tasks:
            data.nli_dev = nli("snli_dev", *NLI_DEV)
        if "nli" in data.tasks:
            try:
                data.lingnli_dev = nli("lingnli_dev", *LINGNLI_DEV)
            except FileNotFoundError as error:
                logger.warning("%s; no LingNLI dev metrics", error)
        if "nli" in data.tasks or "direction" in data.tasks:
            data.nli_test = {name: nli(name, *where) for name, where in NLI_TEST_SETS.items()}
        if "sts" in data.tasks:
            data.sts = {name: sts(name, *where) for name, where in STS_SETS.items()}
            data.sts_dev = sts(STS_DEV[0], *STS_DEV[1])
        if "retrieval" in data.tasks:
            splits = {"snli_dev": data.nli_dev}
            splits |= {name: data.nli_test.get(name) or nli(name, *where) for name, where in RETRIEVAL_SETS.items()}
            data.retrieval = {name: retrieval_set(pairs) for name, pairs in splits.items()}
        return data

    def sentences(self) -> list[str]:
        """Every sentence of every loaded split, with repeats (the encoder keeps each distinct one once)."""
        splits = [
            self.nli_dev,
            self.lingnli_dev,
            *self.nli_test.values(),
            *self.sts.values(),
            self.sts_dev,
            *self.retrieval.values(),
        ]
        return [sentence for pairs in splits if pairs is not None for sentence in pairs.sentences]
