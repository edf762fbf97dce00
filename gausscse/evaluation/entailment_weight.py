"""The entailment score a model decides binary NLI by: α of 1 / (1/sim(hyp‖pre) + α·(1 − cos(μ_hyp, μ_pre))) (α = 0:
sim(hyp‖pre) alone; α → ∞: the cosine alone) and the SNLI-dev threshold of "entails", chosen on dev NLI pairs — SNLI
dev and, where the data folder has it, LingNLI validation (MultiNLI genres, premises outside every test set) — at the
end of training or by this module's CLI. The α of the grid with the best mean of: each dev set's AUPRC, SNLI dev's
best accuracy and LingNLI validation's accuracy at the SNLI-dev threshold (the threshold has to carry to other
genres); the smallest among equal ones."""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Sequence

import numpy as np
import torch

from gausscse.model.encoding_gausscse import DEFAULT_MAX_LENGTH
from gausscse.model.gaussian import entailment_score_from, paired_similarity

from .encoders import EncodedSentences, GaussianEncoder
from .metrics import load_metric
from .search_weight import saved_model_command
from .tasks import NLI_DEV, NLIPairs, load_nli

logger = logging.getLogger(__name__)

# 0 (sim alone) and 10⁻² … 10³ in quarter decades: past 10³ the cosine alone ranks (a choice there is logged)
COSINE_WEIGHT_GRID = (0.0, *(round(10 ** (exponent / 4), 6) for exponent in range(-8, 13)))
LINGNLI_DEV = ("lingnli", "validation")


def dev_pairs(data_dir: str | None = None, max_examples: int | None = None) -> list[NLIPairs]:
    """SNLI dev and, where the local data folder holds it, LingNLI validation (first ``max_examples`` pairs each)."""
    pairs = [load_nli("snli_dev", *NLI_DEV, data_dir=data_dir, max_examples=max_examples)]
    try:
        pairs.append(load_nli("lingnli_dev", *LINGNLI_DEV, data_dir=data_dir, max_examples=max_examples))
    except FileNotFoundError as error:
        logger.warning("%s; the entailment score is chosen on SNLI dev alone", error)
    return pairs


def score_parts(model, pairs: NLIPairs, encoded: EncodedSentences) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sim(hyp‖pre), cos(μ_hyp, μ_pre))`` per pair of ``pairs`` from their Gaussians in ``encoded``, float32."""
    hypotheses, premises = encoded.gaussians(pairs.hypotheses), encoded.gaussians(pairs.premises)
    reduction = model.config.similarity_reduction
    similarity = paired_similarity(hypotheses.mu, hypotheses.logvar, premises.mu, premises.logvar, reduction)
    cosine = torch.nn.functional.cosine_similarity(hypotheses.mu.float(), premises.mu.float(), dim=-1)
    return similarity.float(), cosine


def weight_metrics(parts: Sequence[tuple[torch.Tensor, torch.Tensor]], labels: Sequence[np.ndarray], weight: float):
    """For one α: per dev set (the first is SNLI dev, whose best threshold is applied to the others) its AUPRC and
    accuracy (percent), and that threshold."""
    metric = load_metric("binary_nli")
    measured, threshold = [], None
    for (similarity, cosine), references in zip(parts, labels, strict=True):
        scores = entailment_score_from(similarity.double(), cosine.double(), weight).numpy()
        result = metric.compute(predictions=scores, references=references, threshold=threshold)
        threshold = result["threshold"] if threshold is None else threshold
        measured.append({"auprc": 100.0 * result["auprc"], "accuracy": 100.0 * result["accuracy"]})
    return measured, threshold


def choose_cosine_weight(
    model,
    pairs: Sequence[NLIPairs],
    batch_size: int = 128,
    max_length: int | None = DEFAULT_MAX_LENGTH,
    encoded: EncodedSentences | None = None,
) -> tuple[float, float, dict[float, float]]:
    """``(α, threshold, curve)``: the grid's α of the best objective (the module's rule), its SNLI-dev threshold and
    the objective of every α; ``encoded``: the pairs' Gaussians where they are already encoded (else each distinct
    sentence is encoded once here)."""
    if encoded is None:
        encoder = GaussianEncoder(model, batch_size=batch_size, max_length=max_length)
        encoded = encoder.encode_unique(sentence for split in pairs for sentence in split.sentences)
    parts = [score_parts(model, split, encoded) for split in pairs]
    labels = [split.is_entailment for split in pairs]
    curve, thresholds = {}, {}
    for weight in COSINE_WEIGHT_GRID:
        measured, thresholds[weight] = weight_metrics(parts, labels, weight)
        curve[weight] = statistics.mean([m["auprc"] for m in measured] + [m["accuracy"] for m in measured])
    best = max(curve.values())
    weight = min(weight for weight, value in curve.items() if value == best)
    if weight == COSINE_WEIGHT_GRID[-1]:
        logger.warning("entailment score: α = %g, the grid's top: the cosine alone decides as well", weight)
    return weight, thresholds[weight], curve


def set_entailment_score(
    model,
    pairs: Sequence[NLIPairs],
    max_length: int | None = DEFAULT_MAX_LENGTH,
    encoded: EncodedSentences | None = None,
) -> dict:
    """Choose α and the threshold on ``pairs`` ([`choose_cosine_weight`]), write them into ``model.config`` and return
    what to report."""
    weight, threshold, curve = choose_cosine_weight(model, pairs, max_length=max_length, encoded=encoded)
    model.config.entailment_cosine_weight, model.config.entailment_threshold = weight, threshold
    names = "+".join(split.name for split in pairs)
    logger.info(
        "entailment score 1/(1/sim + α(1 − cos)): α = %g, threshold %.3f (%s objective %.2f; α = 0: %.2f)",
        *(weight, threshold, names, curve[weight], curve[0.0]),
    )
    return {
        "entailment_cosine_weight": weight,
        "entailment_threshold": threshold,
        "entailment_dev_sets": [split.name for split in pairs],
        "entailment_dev_pairs": [len(split.premises) for split in pairs],
        "entailment_dev_objective": curve[weight],
        "entailment_dev_objective_similarity": curve[0.0],
        "entailment_at_grid_edge": weight == COSINE_WEIGHT_GRID[-1],
    }


def main(argv: list[str] | None = None) -> dict:
    """Choose α and the threshold for a saved model and write them into the folder's config.json."""
    args, model = saved_model_command(__doc__.split("\n\n")[0], argv)
    logging.basicConfig(level=logging.INFO)
    result = set_entailment_score(model, dev_pairs(args.data_dir), max_length=args.max_length)
    model.config.save_pretrained(args.model)  # config.json (and the sentence-transformers files), each written whole
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
