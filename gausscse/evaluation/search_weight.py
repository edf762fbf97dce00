"""The λ of a model's search score cos(μ_q, μ_x) − λ · KL(q‖x) / d (λ = 0: the cosine): the smallest λ of a fixed grid
with the best nDCG@10 of entailment retrieval on SNLI dev, chosen at the end of training or by this module's CLI."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

import torch

from gausscse.model.encoding_gausscse import DEFAULT_MAX_LENGTH
from gausscse.model.gaussian import KL_REDUCTIONS, cosine_matrix, kl_divergence_matrix, search_score_from

from .encoders import EncodedSentences, GaussianEncoder
from .tasks import NLI_DEV, RetrievalSet, load_nli, ranking_metrics, retrieval_set

logger = logging.getLogger(__name__)

# 0 (the cosine) and 10⁻⁴ … 10³ in quarter decades: a choice at the top is logged (the KL alone ranks as well)
KL_WEIGHT_GRID = (0.0, *(round(10 ** (exponent / 4), 6) for exponent in range(-16, 13)))


def kl_weight_curve(
    mu_q: torch.Tensor, logvar_q: torch.Tensor, mu_x: torch.Tensor, logvar_x: torch.Tensor, relevant: list[list[int]]
) -> dict[float, float]:
    """nDCG@10 (percent) of cos(μ_q, μ_x) − λ · KL(q‖x) / d for every λ of ``KL_WEIGHT_GRID``."""
    cosine, kl = cosine_matrix(mu_q, mu_x), kl_divergence_matrix(mu_q, logvar_q, mu_x, logvar_x)
    dim = mu_q.shape[-1]
    ndcg = {weight: ranking_metrics(search_score_from(cosine, kl, weight, dim), relevant) for weight in KL_WEIGHT_GRID}
    return {weight: metrics["ndcg@10"] for weight, metrics in ndcg.items()}


def best_kl_weight(curve: dict[float, float]) -> float:
    """The λ of the highest nDCG@10, the smallest among equal ones; a warning where it is the grid's largest."""
    best = max(curve.values())
    weight = min(weight for weight, ndcg in curve.items() if ndcg == best)
    if weight == max(curve):
        logger.warning("search score: λ = %g, the grid's top: the KL alone ranks as well as any mix", weight)
    return weight


def choose_kl_weight(
    model,
    retrieval: RetrievalSet,
    batch_size: int = 128,
    max_length: int | None = DEFAULT_MAX_LENGTH,
    encoded: EncodedSentences | None = None,
):
    """``(λ, curve)`` for a GaussCSE model of a KL reduction on ``retrieval``; ``encoded``: its sentences' Gaussians
    where they are already encoded (each distinct sentence once, shared with the other end-of-training choices)."""
    reduction = model.config.similarity_reduction
    if reduction not in KL_REDUCTIONS:
        raise ValueError(f"the search score needs a KL reduction {KL_REDUCTIONS}, got {reduction!r}")
    if encoded is None:
        encoder = GaussianEncoder(model, batch_size=batch_size, max_length=max_length)
        encoded = encoder.encode_unique(retrieval.sentences)
    queries, corpus = encoded.gaussians(retrieval.queries), encoded.gaussians(retrieval.corpus)
    curve = kl_weight_curve(queries.mu, queries.logvar, corpus.mu, corpus.logvar, retrieval.relevant)
    return best_kl_weight(curve), curve


def saved_model_command(description: str, argv: list[str] | None) -> tuple[argparse.Namespace, Any]:
    """The arguments of a command that chooses a score's setting for a saved folder (``--model``, ``--data_dir``,
    ``--max_length``) and the folder's model, loaded in eval mode."""
    from gausscse.loading import load_model

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", required=True, help="a saved GaussCSE folder (its config.json is updated)")
    parser.add_argument("--data_dir", default=None, help="the offline data (default: ../shared/data)")
    parser.add_argument("--max_length", type=int, default=DEFAULT_MAX_LENGTH, help="default: the encoder's limit")
    args = parser.parse_args(argv)
    return args, load_model(args.model).eval()


def main(argv: list[str] | None = None) -> dict:
    """Choose λ for a saved model on SNLI dev and write it into the folder's config.json."""
    args, model = saved_model_command(__doc__.split("\n\n")[0], argv)
    dev = retrieval_set(load_nli("snli_dev", *NLI_DEV, data_dir=args.data_dir))
    weight, curve = choose_kl_weight(model, dev, max_length=args.max_length)
    model.config.search_kl_weight = weight
    model.config.save_pretrained(args.model)  # config.json (and the sentence-transformers files), each written whole
    result = {"search_kl_weight": weight, "snli_dev_ndcg@10": {str(key): value for key, value in curve.items()}}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
