"""Spearman's ρ for STS as a self-contained `evaluate` module (numpy and scipy only): `spearman` of `predictions`
against `references` (scipy.stats.spearmanr), NaN when either is constant. SimCSE's "all": pass every subset at once.
"""

import datasets
import evaluate
import numpy as np
from scipy import stats

CITATION = "Gao, Yao, Chen. SimCSE: Simple Contrastive Learning of Sentence Embeddings. EMNLP 2021."


class Spearman(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        features = datasets.Features({name: datasets.Value("float64") for name in ("predictions", "references")})
        return evaluate.MetricInfo(description=__doc__, citation=CITATION, features=features)

    def _compute(self, predictions, references) -> dict[str, float]:
        predicted, gold = np.asarray(predictions, dtype=np.float64), np.asarray(references, dtype=np.float64)
        if predicted.shape != gold.shape or predicted.ndim != 1:
            raise ValueError(f"predicted and gold must be 1-D of the same length, got {predicted.shape}, {gold.shape}")
        if predicted.size < 2:
            raise ValueError(f"Spearman needs at least 2 pairs, got {predicted.size}")
        if np.ptp(predicted) == 0 or np.ptp(gold) == 0:  # scipy would warn and give NaN
            return {"spearman": float("nan")}
        return {"spearman": float(stats.spearmanr(predicted, gold).statistic)}
