"""The paper's tasks and STS on top of :class:`~evaluation.encoders.EncodedSentences`.

* Binary NLI (paper §3.1): entailment vs. neutral + contradiction, score sim(hyp‖pre); accuracy at the SNLI-dev
  best threshold (grid 0, 0.001, …, 1), the threshold-sweep AUPRC and the average precision.
* Entailment direction (paper §3.2), entailment pairs only (for SICK without the pairs that entail both ways):
  similarity rule sim(hyp‖pre) > sim(pre‖hyp), variance rule Σlogσ²(pre) > Σlogσ²(hyp), and the length
  baseline (the longer sentence is the premise; length in characters as the paper, also in words; ties wrong).
* STS: Spearman ρ × 100 with symmetric scores, "all" aggregation as SimCSE.
* Entailment retrieval: an NLI split's entailment hypotheses (claims) as queries, all its premises as the corpus,
  relevant = the premises that entail the claim; ranked by the model's own similarity sim(claim‖premise) (for
  ``sum``/``mean_kl``: −KL, what the sentence-transformers routes and the search index rank by) and by the cosine of
  μ; nDCG@10, recall@10, MRR@10, accuracy@1, MAP@100 (the ``retrieval`` module, sentence-transformers' definitions).

Every number reported here is a percentage (0–100) except thresholds (0–1) and counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from gausscse.data.registry import load_split
from gausscse.model.gaussian import (
    KL_REDUCTIONS,
    cosine_matrix,
    kl_divergence_matrix,
    kl_scale,
    search_score_from,
    similarity_from_kl,
    similarity_matrix,
)

from .encoders import EncodedSentences
from .metrics import load_metric

# task name -> (dataset, split)
NLI_DEV = ("snli", "validation")
NLI_TEST_SETS: dict[str, tuple[str, str]] = {
    "snli": ("snli", "test"),
    "mnli_mismatched": ("mnli", "validation_mismatched"),
    "mnli_matched": ("mnli", "validation_matched"),
    "sick": ("sick", "test"),
}
# entailment retrieval: the test sets (file order, the first MAX_RETRIEVAL_QUERIES claims) and SNLI dev for selection
RETRIEVAL_SETS: dict[str, tuple[str, str]] = {
    "snli": ("snli", "test"),
    "mnli_mismatched": ("mnli", "validation_mismatched"),
    "sick": ("sick", "test"),
}
MAX_RETRIEVAL_QUERIES = 2000
RETRIEVAL_DEPTH = 100  # the deepest cut-off scored (MAP@100)
# STS-B dev: scored with the STS sets for model selection, not part of their average
STS_DEV = ("stsb_dev", ("stsb", "validation"))
STS_SETS: dict[str, tuple[str, str]] = {
    "sts12": ("sts12", "test"),
    "sts13": ("sts13", "test"),
    "sts14": ("sts14", "test"),
    "sts15": ("sts15", "test"),
    "sts16": ("sts16", "test"),
    "stsb": ("stsb", "test"),
    "sickr": ("sickr", "test"),
}


@dataclass
class NLIPairs:
    """Premise/hypothesis pairs of one NLI split.

    Attributes:
        name: e.g. ``"snli"``.
        premises, hypotheses: the sentences.
        is_entailment: gold label == entailment.
        entails_both_ways: SICK pairs with ``entailment_AB == A_entails_B`` and ``entailment_BA == B_entails_A``
            (all ``False`` for other datasets); left out of the direction task.
    """

    name: str
    premises: list[str]
    hypotheses: list[str]
    is_entailment: np.ndarray
    entails_both_ways: np.ndarray

    def __len__(self) -> int:
        return len(self.premises)

    @property
    def sentences(self) -> list[str]:
        """All premises and hypotheses (with repeats)."""
        return self.premises + self.hypotheses

    @property
    def direction_mask(self) -> np.ndarray:
        """Pairs of the direction task: entailment, and not entailment both ways."""
        return self.is_entailment & ~self.entails_both_ways

    def select(self, mask: np.ndarray) -> NLIPairs:
        """The pairs where ``mask`` is true."""
        rows = np.flatnonzero(mask)
        return NLIPairs(
            name=self.name,
            premises=[self.premises[row] for row in rows],
            hypotheses=[self.hypotheses[row] for row in rows],
            is_entailment=self.is_entailment[rows],
            entails_both_ways=self.entails_both_ways[rows],
        )


@dataclass
class STSPairs:
    """Sentence pairs with gold similarity scores of one STS file.

    Attributes:
        name: e.g. ``"sts12"``.
        sentence1, sentence2: the sentences.
        gold: gold scores.
        subsets: the ``subset`` field (STS12–16), or ``None``.
    """

    name: str
    sentence1: list[str]
    sentence2: list[str]
    gold: np.ndarray
    subsets: list[str] | None = None

    @property
    def sentences(self) -> list[str]:
        """All sentences (with repeats)."""
        return self.sentence1 + self.sentence2


def _truncated(dataset, max_examples: int | None):
    if max_examples is not None:
        if max_examples < 1:
            raise ValueError(f"max_examples must be a positive integer or None, got {max_examples}")
        dataset = dataset.select(range(min(max_examples, len(dataset))))
    return dataset


def load_nli(
    name: str, dataset: str, split: str, data_dir: str | None = None, max_examples: int | None = None
) -> NLIPairs:
    """Load an NLI split as :class:`NLIPairs` (the first ``max_examples`` rows if given)."""
    rows = _truncated(load_split(dataset, split, data_dir), max_examples)
    columns = rows.column_names
    for column in ("premise", "hypothesis", "label"):
        if column not in columns:
            raise ValueError(f"{dataset}/{split} has no column {column!r} (columns: {columns})")
    if "entailment_AB" in columns:
        both_ways = (np.asarray(rows["entailment_AB"]) == "A_entails_B") & (
            np.asarray(rows["entailment_BA"]) == "B_entails_A"
        )
    else:
        both_ways = np.zeros(len(rows), dtype=bool)
    return NLIPairs(
        name=name,
        premises=list(rows["premise"]),
        hypotheses=list(rows["hypothesis"]),
        is_entailment=np.array([label == "entailment" for label in rows["label"]], dtype=bool),
        entails_both_ways=both_ways,
    )


def load_sts(name: str, dataset: str, split: str, data_dir: str | None = None, max_examples: int | None = None):
    """Load an STS split as :class:`STSPairs` (the first ``max_examples`` rows if given)."""
    rows = _truncated(load_split(dataset, split, data_dir), max_examples)
    for column in ("sentence1", "sentence2", "score"):
        if column not in rows.column_names:
            raise ValueError(f"{dataset}/{split} has no column {column!r} (columns: {rows.column_names})")
    return STSPairs(
        name=name,
        sentence1=list(rows["sentence1"]),
        sentence2=list(rows["sentence2"]),
        gold=np.asarray(rows["score"], dtype=np.float64),
        subsets=list(rows["subset"]) if "subset" in rows.column_names else None,
    )


@dataclass
class NLIResult:
    """Binary NLI on one test set: metrics (percent) and the per-pair arrays behind them."""

    metrics: dict[str, float]
    scores: np.ndarray
    correct: np.ndarray = field(repr=False)


def binary_nli(encoded: EncodedSentences, pairs: NLIPairs, threshold: float) -> NLIResult:
    """Entailment vs. rest with score s = sim(hyp‖pre), predicted entailment iff s >= ``threshold``.

    Metrics: ``accuracy`` at the given threshold, ``best_accuracy`` (oracle threshold on this set, for
    reference), ``auprc`` (the paper's threshold sweep), ``average_precision`` — all × 100.
    """
    scores = encoded.entailment_score(pairs.premises, pairs.hypotheses).numpy().astype(np.float64)
    correct = (scores >= threshold) == pairs.is_entailment
    measured = load_metric("binary_nli").compute(
        predictions=scores, references=pairs.is_entailment, threshold=threshold
    )
    return NLIResult(
        metrics={
            "accuracy": 100.0 * measured["accuracy"],
            "threshold": measured["threshold"],
            "best_accuracy": 100.0 * measured["best_accuracy"],
            "best_threshold": measured["best_threshold"],
            "auprc": 100.0 * measured["auprc"],
            "average_precision": 100.0 * measured["average_precision"],
            "examples": len(pairs),
            "positives": int(pairs.is_entailment.sum()),
        },
        scores=scores,
        correct=correct,
    )


def dev_threshold(encoded: EncodedSentences, dev: NLIPairs) -> tuple[float, float]:
    """``(accuracy, threshold)``: the grid threshold that is most accurate on ``dev`` (smallest among ties)."""
    scores = encoded.entailment_score(dev.premises, dev.hypotheses).numpy()
    measured = load_metric("binary_nli").compute(predictions=scores, references=dev.is_entailment)
    return measured["best_accuracy"], measured["best_threshold"]


LENGTH_UNITS = ("characters", "words")


def length_rule_correct(premises: Sequence[str], hypotheses: Sequence[str], unit: str = "characters") -> np.ndarray:
    """Length baseline per pair: correct iff the premise is strictly longer than the hypothesis.

    ``unit="characters"``: ``len(sentence)`` (Python characters, spaces and punctuation included, text as
    stored); this reproduces the paper's 92.63 / 82.64 / 69.14 on SNLI / MNLI-mismatched / SICK.
    ``unit="words"``: ``len(sentence.split())`` (whitespace tokens; punctuation attached to a word is part of it).
    A tie counts as wrong (the rule cannot pick a side).
    """
    if unit not in LENGTH_UNITS:
        raise ValueError(f"unit must be one of {LENGTH_UNITS}, got {unit!r}")
    if len(premises) != len(hypotheses):
        raise ValueError(f"premises and hypotheses must have the same length, got {len(premises)}, {len(hypotheses)}")

    def length(sentence: str) -> int:
        return len(sentence) if unit == "characters" else len(sentence.split())

    return np.array([length(pre) > length(hyp) for pre, hyp in zip(premises, hypotheses, strict=True)], dtype=bool)


@dataclass
class DirectionResult:
    """Entailment direction on one test set: metrics (percent) and per-pair arrays (empty rules are ``None``)."""

    metrics: dict[str, float | None]
    similarity_correct: np.ndarray | None
    variance_correct: np.ndarray | None
    length_correct: np.ndarray
    generality_gap: np.ndarray | None


def entailment_direction(encoded: EncodedSentences, pairs: NLIPairs) -> DirectionResult:
    """Direction accuracies on the entailment pairs of ``pairs`` (both-way SICK pairs left out).

    similarity rule: correct iff sim(hyp‖pre) > sim(pre‖hyp); variance rule: correct iff
    Σlogσ²(pre) > Σlogσ²(hyp); ties are wrong. For a point encoder (symmetric) both are ``None``.
    The length baseline (:func:`length_rule_correct`, characters; also words) is always reported.
    """
    selected = pairs.select(pairs.direction_mask)
    if len(selected) == 0:
        raise ValueError(f"{pairs.name}: no entailment pairs for the direction task")
    length_correct = length_rule_correct(selected.premises, selected.hypotheses, unit="characters")
    length_words_correct = length_rule_correct(selected.premises, selected.hypotheses, unit="words")
    result = DirectionResult(
        metrics={
            "similarity_rule": None,
            "variance_rule": None,
            "length_baseline": 100.0 * float(length_correct.mean()),
            "length_baseline_words": 100.0 * float(length_words_correct.mean()),
            "examples": len(selected),
        },
        similarity_correct=None,
        variance_correct=None,
        length_correct=length_correct,
        generality_gap=None,
    )
    if encoded.is_gaussian:
        forward = encoded.asymmetric_similarity(selected.hypotheses, selected.premises)
        backward = encoded.asymmetric_similarity(selected.premises, selected.hypotheses)
        gap = (encoded.generality(selected.premises) - encoded.generality(selected.hypotheses)).numpy()
        result.similarity_correct = (forward > backward).numpy()
        result.variance_correct = gap > 0
        result.generality_gap = gap
        result.metrics["similarity_rule"] = 100.0 * float(result.similarity_correct.mean())
        result.metrics["variance_rule"] = 100.0 * float(result.variance_correct.mean())
    return result


def sts_spearman(encoded: EncodedSentences, pairs: STSPairs) -> dict[str, float]:
    """Spearman ρ × 100 of each symmetric score against the gold scores.

    "all" aggregation (SimCSE): one ρ over the concatenation of all subsets of the file — not the mean of
    per-subset ρ. STS-B and SICK-R have a single test set, so it is just their ρ.
    """
    scores = encoded.symmetric_similarities(pairs.sentence1, pairs.sentence2)
    spearman = load_metric("spearman")
    return {
        name: 100.0 * spearman.compute(predictions=values.numpy(), references=pairs.gold)["spearman"]
        for name, values in scores.items()
    }


@dataclass
class RetrievalSet:
    """An entailment-retrieval set: claims (queries), premises (corpus) and, per claim, the corpus rows of the
    premises that entail it."""

    name: str
    queries: list[str]
    corpus: list[str]
    relevant: list[list[int]]

    @property
    def sentences(self) -> list[str]:
        """Queries and corpus."""
        return self.queries + self.corpus


def retrieval_set(pairs: NLIPairs, max_queries: int = MAX_RETRIEVAL_QUERIES) -> RetrievalSet:
    """From an NLI split: the first ``max_queries`` distinct entailment hypotheses (file order) as queries, every
    distinct premise as the corpus, relevant = the premises labelled as entailing the query (SICK pairs that entail
    both ways included: the premise does entail the claim)."""
    corpus_rows: dict[str, int] = {}
    for premise in pairs.premises:
        corpus_rows.setdefault(premise, len(corpus_rows))
    relevant: dict[str, list[int]] = {}
    for premise, hypothesis, entailment in zip(pairs.premises, pairs.hypotheses, pairs.is_entailment, strict=True):
        if not entailment or (hypothesis not in relevant and len(relevant) == max_queries):
            continue
        rows = relevant.setdefault(hypothesis, [])
        if corpus_rows[premise] not in rows:
            rows.append(corpus_rows[premise])
    if not relevant:
        raise ValueError(f"{pairs.name}: no entailment pair to build a retrieval set from")
    return RetrievalSet(pairs.name, list(relevant), list(corpus_rows), list(relevant.values()))


def rank_corpus(scores: torch.Tensor, depth: int = RETRIEVAL_DEPTH) -> list[list[int]]:
    """Each row's best ``depth`` corpus columns, best first."""
    return scores.topk(min(depth, scores.shape[1]), dim=1).indices.tolist()


def retrieval_scores(encoded: EncodedSentences, retrieval: RetrievalSet) -> dict[str, torch.Tensor]:
    """``(queries, corpus)`` score matrices by name: ``similarity`` = sim(query‖premise) with the model's reduction
    (Gaussian models), ``cosine`` = cos of μ (or of the point embeddings), ``search`` = the model's search score
    cos − λ·KL(query‖premise)/d (models that state λ, ``search_kl_weight``)."""
    queries, corpus = encoded.rows(retrieval.queries), encoded.rows(retrieval.corpus)
    scores = {"cosine": cosine_matrix(encoded.mu[queries], encoded.mu[corpus])}
    if not encoded.is_gaussian:
        return scores
    gaussians = (encoded.mu[queries], encoded.logvar[queries], encoded.mu[corpus], encoded.logvar[corpus])
    dim = encoded.mu.shape[-1]
    by_kl = encoded.reduction in KL_REDUCTIONS
    kl = kl_divergence_matrix(*gaussians) if by_kl or encoded.search_kl_weight is not None else None  # once for both
    scores["similarity"] = (
        similarity_from_kl(kl, kl_scale(encoded.reduction, dim)) if by_kl else similarity_matrix(*gaussians, "mean_dim")
    )
    if encoded.search_kl_weight is not None:
        scores["search"] = search_score_from(scores["cosine"], kl, encoded.search_kl_weight, dim)
    return scores


def entailment_retrieval(encoded: EncodedSentences, retrieval: RetrievalSet) -> dict[str, dict[str, float]]:
    """Per score (see :func:`retrieval_scores`): accuracy@1, MRR@10, nDCG@10, recall@10, MAP@100, in percent, plus
    the set's size."""
    metric = load_metric("retrieval")
    results = {
        name: {
            key: 100.0 * value
            for key, value in metric.compute(predictions=rank_corpus(scores), references=retrieval.relevant).items()
        }
        for name, scores in retrieval_scores(encoded, retrieval).items()
    }
    results["size"] = {"queries": len(retrieval.queries), "corpus": len(retrieval.corpus)}
    return results
