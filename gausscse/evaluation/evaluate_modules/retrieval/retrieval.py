"""Ranking metrics for retrieval with binary relevance as an `evaluate` module, kept in the repository.

Self-contained (numpy, datasets, evaluate only): ``evaluate.load("<this folder>")`` works in a process that cannot
import ``gausscse``; inside the project use ``gausscse.evaluation.load_metric("retrieval")``. The definitions are
those of sentence-transformers' ``InformationRetrievalEvaluator`` (the MTEB-style flow).
"""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = """Per query, a ranked list of retrieved corpus ids (best first) and the set of relevant ids; the mean
over queries of: accuracy@1 (the first hit is relevant), MRR@10 (1 / rank of the first relevant hit within 10, else
0), nDCG@10 (binary gains, DCG = Σ_i rel_i / log2(i + 1) over ranks i = 1..10, divided by the DCG of min(|relevant|,
10) relevant hits), recall@10 (|relevant ∩ top 10| / |relevant|) and MAP@100 (Σ of the precision at each relevant
hit within 100, divided by min(|relevant|, 100))."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `list` of `int`): per query, the retrieved corpus ids, best first (at least 100 where the
        corpus has them).
    references (`list` of `list` of `int`): per query, the relevant corpus ids (at least one).
Returns:
    dict with `accuracy@1`, `mrr@10`, `ndcg@10`, `recall@10`, `map@100` (fractions in [0, 1]).
Example:
    >>> metric = evaluate.load("gausscse/evaluation/evaluate_modules/retrieval")
    >>> metric.compute(predictions=[[3, 1, 2]], references=[[1]])
"""

_CITATION = """@inproceedings{thakur-etal-2021-beir,
  title = {{BEIR}: A Heterogeneous Benchmark for Zero-shot Evaluation of Information Retrieval Models},
  author = {Thakur, Nandan and Reimers, Nils and R{\"u}ckl{\'e}, Andreas and Srivastava, Abhishek and Gurevych, Iryna},
  booktitle = {NeurIPS Datasets and Benchmarks}, year = {2021}
}"""


def query_metrics(ranked, relevant) -> dict[str, float]:
    """The five metrics of one query (see the module description)."""
    relevant = set(relevant)
    if not relevant:
        raise ValueError("every query needs at least one relevant id")
    hits = np.array([doc in relevant for doc in ranked[:100]], dtype=np.float64)
    discounts = 1.0 / np.log2(np.arange(2, 12))
    top10 = hits[:10]
    ideal = discounts[: min(len(relevant), 10)].sum()
    first = np.flatnonzero(top10)
    precision_at_hits = np.cumsum(hits) / np.arange(1, hits.size + 1)
    return {
        "accuracy@1": float(hits[:1].sum() > 0),
        "mrr@10": float(1.0 / (first[0] + 1)) if first.size else 0.0,
        "ndcg@10": float((top10 * discounts[: top10.size]).sum() / ideal),
        "recall@10": float(top10.sum() / len(relevant)),
        "map@100": float((precision_at_hits * hits).sum() / min(len(relevant), 100)),
    }


def retrieval_metrics(predictions, references) -> dict[str, float]:
    """The mean over queries of :func:`query_metrics`."""
    if len(predictions) != len(references) or not predictions:
        raise ValueError(
            f"need one ranking per query and at least one query, got {len(predictions)} rankings and "
            f"{len(references)} relevant sets"
        )
    per_query = [query_metrics(ranked, relevant) for ranked, relevant in zip(predictions, references, strict=True)]
    return {name: float(np.mean([metrics[name] for metrics in per_query])) for name in per_query[0]}


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Retrieval(evaluate.Metric):
    """accuracy@1, MRR@10, nDCG@10, recall@10 and MAP@100 of ranked retrieval with binary relevance."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("int64")),
                    "references": datasets.Sequence(datasets.Value("int64")),
                }
            ),
        )

    def _compute(self, predictions, references) -> dict[str, float]:
        return retrieval_metrics(predictions, references)
