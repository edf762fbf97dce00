"""Entailment retrieval through sentence-transformers' own ``InformationRetrievalEvaluator`` (the MTEB-style flow).

Queries are SNLI-test entailment hypotheses (claims), the corpus is every SNLI-test premise, and a premise is relevant
to a claim when SNLI labels the pair entailment. Scored three ways on the same set:

* GaussCSE routes: ``SentenceTransformer(model, trust_remote_code=True)``, ``encode_query`` / ``encode_document``,
  ``dot`` = −KL(claim‖premise): they rank by the total KL;
* μ cosine: the same model with ``direction="none"`` (every route gives μ) and cosine similarity;
* the −KL matrix and the model's own similarity (``similarity_matrix`` with its ``similarity_reduction``) from the
  model's API, top-k fed to the evaluator's own metrics;

plus how well the −KL ranking agrees with the model's own ranking per claim (Spearman over the corpus, top-1,
top-10 overlap): identical for ``sum`` and ``mean_kl`` models (monotone in the KL), approximate for ``mean_dim``.
Writes ``<output>/retrieval.json`` and ``<output>/RETRIEVAL.md``.

    python -m studies.retrieval --model /work/main/outputs/quickstart
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.stats
import sentence_transformers
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

from gausscse import GaussCSEModel
from gausscse.evaluation import tasks
from gausscse.io import write_atomic, write_json
from gausscse.model.gaussian import kl_divergence_matrix, similarity_matrix
from gausscse.training.precision import cpu_name

# (the evaluator's metric, its cut-off, the report's label); the evaluator names the value "<metric with k>"
METRICS = (
    ("accuracy@k", 1, "accuracy@1"),
    ("mrr@k", 10, "MRR@10"),
    ("ndcg@k", 10, "nDCG@10"),
    ("recall@k", 10, "recall@10"),
    ("map@k", 100, "MAP@100"),
)
MAX_K = 100  # the deepest cut-off the evaluator scores (MAP@100)


def retrieval_set(data_dir: str | None, max_queries: int) -> tuple[dict[str, str], dict[str, str], dict[str, set[str]]]:
    """``(queries, corpus, relevant)`` in the evaluator's id form: the SNLI-test set of ``gausscse-evaluate --tasks
    retrieval`` (``evaluation.tasks.retrieval_set``: the first ``max_queries`` distinct entailment hypotheses, every
    distinct premise, for each hypothesis the premises that entail it)."""
    found = tasks.retrieval_set(tasks.load_nli("snli", "snli", "test", data_dir=data_dir), max_queries)
    queries = {f"q{row}": text for row, text in enumerate(found.queries)}
    corpus = {f"p{row}": text for row, text in enumerate(found.corpus)}
    relevant = {f"q{row}": {f"p{premise}" for premise in premises} for row, premises in enumerate(found.relevant)}
    return queries, corpus, relevant


def top_hits(scores: torch.Tensor, corpus_ids: list[str]) -> list[list[dict]]:
    """Each row's ``MAX_K`` best corpus ids, in the evaluator's order (score descending, then corpus id)."""
    hits = []
    for row in scores.double().tolist():
        ranked = sorted(zip(row, corpus_ids, strict=True), key=lambda pair: (-pair[0], pair[1]))[:MAX_K]
        hits.append([{"corpus_id": cid, "score": score} for score, cid in ranked])
    return hits


def rank_agreement(first: torch.Tensor, second: torch.Tensor, k: int = 10) -> dict[str, float]:
    """Per row (query) of two score matrices: Spearman's ρ over the corpus (scipy), whether the top-1 is the same,
    and the share of the top-k they have in common; summarised over the rows."""
    rhos = np.array([scipy.stats.spearmanr(a, b).statistic for a, b in zip(first.numpy(), second.numpy(), strict=True)])
    same_top1 = (first.argmax(dim=1) == second.argmax(dim=1)).double()
    first_top, second_top = first.topk(k, dim=1).indices, second.topk(k, dim=1).indices
    overlap = torch.tensor(
        [len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(first_top, second_top, strict=True)]
    )
    return {
        "spearman_mean": float(rhos.mean()),
        "spearman_median": float(np.median(rhos)),
        "spearman_p05": float(np.quantile(rhos, 0.05)),
        "spearman_min": float(rhos.min()),
        "top1_same": float(same_top1.mean()),
        f"top{k}_overlap": float(overlap.mean()),
    }


def sentence_transformers_folder(model_path: str, workdir: Path) -> tuple[str, bool]:
    """``(folder to load, re-saved?)``: ``model_path`` itself if it has ``modules.json`` (or is a Hub id); a folder
    saved before the sentence-transformers files existed is written again by this checkout's ``save_pretrained`` (same
    weights, config and tokenizer) into ``workdir``."""
    if not Path(model_path).is_dir() or (Path(model_path) / "modules.json").is_file():
        return model_path, False
    model = GaussCSEModel.from_pretrained(model_path)
    model.save_pretrained(workdir)
    model.get_tokenizer().save_pretrained(workdir)
    return str(workdir), True


def run(model_path: str, max_queries: int, data_dir: str | None, batch_size: int, workdir: Path) -> dict:
    loaded_from, resaved = sentence_transformers_folder(model_path, workdir / "model")
    queries, corpus, relevant = retrieval_set(data_dir, max_queries)
    evaluator_options = {"batch_size": batch_size, "write_csv": False}
    results: dict = {
        "model": model_path,
        "resaved_with_sentence_transformers_files": resaved,
        "queries": len(queries),
        "corpus": len(corpus),
        "relevant_per_query": float(np.mean([len(ids) for ids in relevant.values()])),
        "scores": {},
        "seconds": {},
    }

    started = time.perf_counter()
    routes = SentenceTransformer(loaded_from, trust_remote_code=True)
    metrics = InformationRetrievalEvaluator(queries, corpus, relevant, name="routes", **evaluator_options)(routes)
    results["seconds"]["routes"] = time.perf_counter() - started
    results["scores"]["routes_dot"] = evaluated(metrics, "routes_dot_")
    results["similarity_reduction"] = routes[0].model.config.similarity_reduction

    started = time.perf_counter()
    point = SentenceTransformer(loaded_from, trust_remote_code=True, similarity_fn_name="cosine")
    point[0].direction = "none"  # μ on every route
    metrics = InformationRetrievalEvaluator(queries, corpus, relevant, name="mu", **evaluator_options)(point)
    results["seconds"]["mu_cosine"] = time.perf_counter() - started
    results["scores"]["mu_cosine"] = evaluated(metrics, "mu_cosine_")

    # the model's own API: −KL and the model's own similarity on the same Gaussians, the evaluator's own metric code
    started = time.perf_counter()
    model = routes[0].model
    claims = model.encode(list(queries.values()), batch_size=batch_size)
    premises = model.encode(list(corpus.values()), batch_size=batch_size)
    kl_scores = -kl_divergence_matrix(claims.mu, claims.logvar, premises.mu, premises.logvar)  # what dot ranks by
    own_scores = similarity_matrix(
        claims.mu, claims.logvar, premises.mu, premises.logvar, results["similarity_reduction"]
    )
    evaluator = InformationRetrievalEvaluator(queries, corpus, relevant, name="api", **evaluator_options)
    for name, scores in (("kl_api", kl_scores), ("model_api", own_scores)):
        metrics = evaluator.compute_metrics(top_hits(scores, list(corpus)))
        results["scores"][name] = {label: metrics[kind][k] for kind, k, label in METRICS}
    results["agreement_kl_vs_model"] = rank_agreement(kl_scores, own_scores)
    results["seconds"]["api_kl_and_model"] = time.perf_counter() - started
    return results


def evaluated(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    """The report's metrics out of an evaluator call's flat results (``<name>_<score function>_ndcg@10``, ...)."""
    return {label: metrics[prefix + kind.replace("@k", f"@{k}")] for kind, k, label in METRICS}


def report(results: dict, command: str) -> str:
    """``RETRIEVAL.md`` from ``results``."""
    reduction = results["similarity_reduction"]
    rows = (
        ("routes_dot", "GaussCSE routes: `encode_query` · `encode_document` (dot = −KL)"),
        ("kl_api", "−KL matrix from the model's API, same metric code"),
        ("model_api", f"the model's own similarity from its API (`{reduction}`)"),
        ("mu_cosine", 'μ cosine (`direction="none"`, `encode` vectors)'),
    )
    lines = [
        "# Entailment retrieval through sentence-transformers",
        "",
        "Written by `studies/retrieval.py`; every figure below comes from `retrieval.json`, which that run wrote.",
        "",
        f"- Command: `{command}`",
        f"- Hardware: {results['hardware']}",
        f"- Model: `{results['model']}` (similarity_reduction `{results['similarity_reduction']}`)"
        + (
            "; the folder predates `modules.json`, so the study wrote it again with this checkout's `save_pretrained` "
            "(same weights) and loaded that copy"
            if results["resaved_with_sentence_transformers_files"]
            else ""
        ),
        f"- Set: {results['queries']} claims (SNLI-test entailment hypotheses, file order), a corpus of "
        f"{results['corpus']} SNLI-test premises, {results['relevant_per_query']:.3f} relevant premises per claim "
        "(the premises SNLI labels as entailing it).",
        "- Scored by sentence-transformers' `InformationRetrievalEvaluator` (its own encode_query / encode_document "
        "calls and metric code; the API rows feed their top-100 to the same evaluator's `compute_metrics`).",
        "",
        "| scoring | " + " | ".join(label for _, _, label in METRICS) + " |",
        "|---|" + "---:|" * len(METRICS),
    ]
    for key, label in rows:
        scores = results["scores"][key]
        lines.append(f"| {label} | " + " | ".join(f"{100 * scores[label]:.2f}" for _, _, label in METRICS) + " |")
    agreement = results["agreement_kl_vs_model"]
    lines += [
        "",
        "Metrics in %. Agreement of the −KL ranking (what the sentence-transformers routes rank by) with the model's "
        f"own `{reduction}` ranking, per claim over the whole corpus:",
        "",
        "| Spearman ρ mean | median | 5th percentile | min | same top-1 | top-10 overlap |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {agreement['spearman_mean']:.4f} | {agreement['spearman_median']:.4f} | {agreement['spearman_p05']:.4f} "
        f"| {agreement['spearman_min']:.4f} | {100 * agreement['top1_same']:.2f} % "
        f"| {100 * agreement['top10_overlap']:.2f} % |",
        "",
        "Seconds (load + encode + score): "
        + ", ".join(f"{name} {seconds:.1f}" for name, seconds in results["seconds"].items())
        + ".",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a GaussCSE folder or Hub id")
    parser.add_argument("--max_queries", type=int, default=2000)
    parser.add_argument("--data_dir", default=None, help="the shared/data layout (default: found beside the checkout)")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--output", default="results", help="folder for retrieval.json and RETRIEVAL.md")
    args = parser.parse_args(argv)
    if args.max_queries < 1:
        parser.error(f"--max_queries must be a positive integer, got {args.max_queries}")
    with tempfile.TemporaryDirectory() as workdir:
        results = run(args.model, args.max_queries, args.data_dir, args.batch_size, Path(workdir))
    results["hardware"] = f"{cpu_name()}, {os.cpu_count()} CPU cores, " + (
        torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    )
    results["versions"] = {"torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__}
    command = "python -m studies.retrieval " + " ".join(argv if argv is not None else sys.argv[1:])
    results["command"] = command
    output = Path(args.output)
    write_json(output / "retrieval.json", results)
    write_atomic(output / "RETRIEVAL.md", report(results, command))
    return results


if __name__ == "__main__":
    main()
