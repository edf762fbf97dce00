"""Ranking metrics with binary relevance, as sentence-transformers' ``InformationRetrievalEvaluator`` defines them, as a
self-contained `evaluate` module (numpy only). `predictions`: per query, the retrieved ids, best first (top 100);
`references`: per query, its relevant ids (at least one). Means over queries, in [0, 1]: `accuracy@1` (the first hit is
relevant), `mrr@10` (1 / rank of the first relevant hit in the top 10, else 0), `ndcg@10` (DCG = Σ_i rel_i / log2(i + 1)
over ranks 1..10, / the DCG of min(|relevant|, 10) relevant hits), `recall@10` (|relevant ∩ top 10| / |relevant|) and
`map@100` (Σ of the precision at each relevant hit within 100, / min(|relevant|, 100))."""

import datasets
import evaluate
import numpy as np

CITATION = "Thakur, Reimers, Rücklé, Srivastava, Gurevych. BEIR. NeurIPS Datasets and Benchmarks 2021."
DISCOUNTS = 1.0 / np.log2(np.arange(2, 12))


def query_metrics(ranked, relevant) -> dict[str, float]:
    relevant = set(relevant)
    if not relevant:
        raise ValueError("every query needs at least one relevant id")
    hits = np.array([doc in relevant for doc in ranked[:100]], dtype=np.float64)
    top10, first = hits[:10], np.flatnonzero(hits[:10])
    return {
        "accuracy@1": float(hits[:1].sum() > 0),
        "mrr@10": float(1.0 / (first[0] + 1)) if first.size else 0.0,
        "ndcg@10": float((top10 * DISCOUNTS[: top10.size]).sum() / DISCOUNTS[: min(len(relevant), 10)].sum()),
        "recall@10": float(top10.sum() / len(relevant)),
        "map@100": float((np.cumsum(hits) / np.arange(1, hits.size + 1) * hits).sum() / min(len(relevant), 100)),
    }


class Retrieval(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        ids = datasets.Sequence(datasets.Value("int64"))
        features = datasets.Features({"predictions": ids, "references": ids})
        return evaluate.MetricInfo(description=__doc__, citation=CITATION, features=features)

    def _compute(self, predictions, references) -> dict[str, float]:
        if len(predictions) != len(references) or not predictions:
            got = f"got {len(predictions)} rankings and {len(references)} relevant sets"
            raise ValueError(f"need one ranking per query and at least one query, {got}")
        per_query = [query_metrics(ranked, relevant) for ranked, relevant in zip(predictions, references, strict=True)]
        return {name: float(np.mean([metrics[name] for metrics in per_query])) for name in per_query[0]}
