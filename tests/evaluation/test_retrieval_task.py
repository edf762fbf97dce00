"""Entailment retrieval (``gausscse-evaluate --tasks retrieval``): the set construction, the ``retrieval`` metric
module against sentence-transformers' ``InformationRetrievalEvaluator``, and the model's own ranking against an
independent KL (``torch.distributions``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
from torch.distributions import Independent, Normal, kl_divergence

from gausscse.evaluation import load_metric
from gausscse.evaluation.encoders import EncodedSentences
from gausscse.evaluation.tasks import NLIPairs, RetrievalSet, entailment_retrieval, rank_corpus, retrieval_set

METRICS = ("accuracy@1", "mrr@10", "ndcg@10", "recall@10", "map@100")


def sentence_transformers_metrics(scores: torch.Tensor, relevant: list[list[int]]) -> dict[str, float]:
    """The evaluator's own ``compute_metrics`` on the top-100 of ``scores`` (ids are the column numbers)."""
    queries = {f"q{row}": f"query {row}" for row in range(scores.shape[0])}
    corpus = {f"c{column}": f"doc {column}" for column in range(scores.shape[1])}
    relevant_docs = {f"q{row}": {f"c{column}" for column in columns} for row, columns in enumerate(relevant)}
    evaluator = InformationRetrievalEvaluator(
        queries,
        corpus,
        relevant_docs,
        accuracy_at_k=[1],
        mrr_at_k=[10],
        ndcg_at_k=[10],
        precision_recall_at_k=[10],
        map_at_k=[100],
        write_csv=False,
    )
    top = scores.topk(100, dim=1)
    hits = [
        [{"corpus_id": f"c{column}", "score": float(score)} for score, column in zip(values, columns, strict=True)]
        for values, columns in zip(top.values.tolist(), top.indices.tolist(), strict=True)
    ]
    found = evaluator.compute_metrics(hits)
    return {
        "accuracy@1": found["accuracy@k"][1],
        "mrr@10": found["mrr@k"][10],
        "ndcg@10": found["ndcg@k"][10],
        "recall@10": found["recall@k"][10],
        "map@100": found["map@k"][100],
    }


def random_relevance(rng: np.random.Generator, queries: int, corpus: int) -> list[list[int]]:
    return [rng.choice(corpus, size=rng.integers(1, 5), replace=False).tolist() for _ in range(queries)]


def test_retrieval_module_matches_sentence_transformers() -> None:
    """Every metric equals the evaluator's on random scores (no ties), with 1–4 relevant documents per query,
    including queries whose relevant documents are beyond the top 10 or the top 100."""
    rng = np.random.default_rng(0)
    scores = torch.from_numpy(rng.normal(size=(40, 300)))
    relevant = random_relevance(rng, 40, 300)
    ours = load_metric("retrieval").compute(predictions=rank_corpus(scores), references=relevant)
    theirs = sentence_transformers_metrics(scores, relevant)
    assert set(ours) == set(METRICS)
    for name in METRICS:
        assert ours[name] == pytest.approx(theirs[name], abs=1e-12), name
    assert 0 < ours["ndcg@10"] < 1


def test_retrieval_module_hand_worked_and_bad_input() -> None:
    metric = load_metric("retrieval")
    # relevant {1, 4}: hits at ranks 2 and 3 of [7, 1, 4]
    found = metric.compute(predictions=[[7, 1, 4, 0]], references=[[1, 4]])
    assert found["accuracy@1"] == 0.0
    assert found["mrr@10"] == pytest.approx(0.5)
    assert found["recall@10"] == pytest.approx(1.0)
    ideal = 1 + 1 / np.log2(3)
    assert found["ndcg@10"] == pytest.approx((1 / np.log2(3) + 1 / np.log2(4)) / ideal)
    assert found["map@100"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    with pytest.raises(ValueError, match="at least one relevant id"):
        metric.compute(predictions=[[1, 2]], references=[[]])
    with pytest.raises(ValueError, match="at least one query, got 0 rankings"):
        metric.compute(predictions=[], references=[])


def pairs(rows: list[tuple[str, str, bool]]) -> NLIPairs:
    return NLIPairs(
        name="tiny",
        premises=[row[0] for row in rows],
        hypotheses=[row[1] for row in rows],
        is_entailment=np.array([row[2] for row in rows]),
        entails_both_ways=np.zeros(len(rows), dtype=bool),
    )


def test_retrieval_set_construction() -> None:
    """Queries: distinct entailment hypotheses in file order, capped; corpus: every distinct premise (also those of
    non-entailment rows); relevant: all premises that entail the query, once each."""
    rows = [
        ("P1", "H1", True),
        ("P2", "H2", False),
        ("P2", "H1", True),  # a second premise entails H1
        ("P1", "H1", True),  # a repeat adds nothing
        ("P3", "H3", True),
        ("P4", "H4", True),
    ]
    found = retrieval_set(pairs(rows), max_queries=2)
    assert found.queries == ["H1", "H3"]
    assert found.corpus == ["P1", "P2", "P3", "P4"]
    assert found.relevant == [[0, 1], [2]]
    assert retrieval_set(pairs(rows)).queries == ["H1", "H3", "H4"]
    with pytest.raises(ValueError, match="tiny: no entailment pair"):
        retrieval_set(pairs([("P", "H", False)]))


def test_entailment_retrieval_ranks_by_the_models_own_kl() -> None:
    """For a Gaussian encoder the "similarity" ranking is that of −KL(query‖premise) computed with
    torch.distributions, and differs from the cosine ranking; the metrics are those of the module on that ranking."""
    generator = torch.Generator().manual_seed(0)
    queries, corpus = [f"q{i}" for i in range(12)], [f"p{i}" for i in range(60)]
    mu = torch.randn(72, 8, generator=generator)
    logvar = 1.5 * torch.randn(72, 8, generator=generator)
    encoded = EncodedSentences(
        index={text: row for row, text in enumerate(queries + corpus)}, mu=mu, logvar=logvar, reduction="mean_kl"
    )
    rng = np.random.default_rng(1)
    retrieval = RetrievalSet("tiny", queries, corpus, random_relevance(rng, 12, 60))
    results = entailment_retrieval(encoded, retrieval)
    std = (0.5 * logvar).exp()
    kl = torch.stack(
        [
            kl_divergence(Independent(Normal(mu[row], std[row]), 1), Independent(Normal(mu[12:], std[12:]), 1))
            for row in range(12)
        ]
    )
    expected = load_metric("retrieval").compute(predictions=rank_corpus(-kl), references=retrieval.relevant)
    for name in METRICS:
        assert results["similarity"][name] == pytest.approx(100 * expected[name], abs=1e-9), name
    cosine = torch.nn.functional.normalize(mu[:12], dim=-1) @ torch.nn.functional.normalize(mu[12:], dim=-1).T
    assert rank_corpus(cosine) != rank_corpus(-kl)
    assert results["size"] == {"queries": 12, "corpus": 60}
    point = EncodedSentences(index=encoded.index, mu=mu, logvar=None)
    assert set(entailment_retrieval(point, retrieval)) == {"cosine", "size"}
