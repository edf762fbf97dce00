"""The evaluation's PNG figures; each function writes one PNG atomically and returns its path."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from gausscse.drawing.gaussians import draw_gaussians_2d, draw_generality_gap, finish_pr_axis, save_png
from gausscse.evaluation.encoders import EncodedSentences, SentenceEncoder
from gausscse.evaluation.metrics import precision_recall_sweep
from gausscse.evaluation.report import NLI_COLUMNS
from gausscse.evaluation.suite import ModelRun
from gausscse.evaluation.tasks import NLIPairs, entailment_direction

# A premise, sentences it entails (ever more general) and an unrelated one, as in the paper's Figure 1
FIGURE1_SENTENCES = (
    "A man is playing a guitar on stage in front of a crowd.",
    "A man is playing a guitar.",
    "A man is playing an instrument.",
    "Someone is making music.",
    "A woman is slicing a tomato in the kitchen.",
)


def _draw_pr_curve(axis, scores: np.ndarray, is_entailment: np.ndarray, label: str) -> None:
    sweep = precision_recall_sweep(scores, is_entailment)
    axis.plot(sweep.recall, sweep.precision, label=label)


def plot_pr_curves(runs: Sequence[ModelRun], test_sets: dict[str, NLIPairs], path: str | Path) -> Path:
    """One panel per NLI test set, one precision–recall curve (the 0.001-step threshold sweep) per model."""
    names = [name for name in NLI_COLUMNS if name in test_sets]
    figure, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4), squeeze=False)
    for axis, name in zip(axes[0], names, strict=True):
        for run in runs:
            if name in run.nli:
                label = f"{run.name} (AUPRC {run.nli[name].metrics['auprc']:.1f})"
                _draw_pr_curve(axis, run.nli[name].scores, test_sets[name].is_entailment, label)
        finish_pr_axis(axis, float(test_sets[name].is_entailment.mean()), NLI_COLUMNS[name])
    figure.suptitle("Binary NLI: precision–recall of the entailment score (Gaussian: sim(hyp‖pre); point: (cos+1)/2)")
    return save_png(figure, path)


def plot_generality_gap(run: ModelRun, path: str | Path) -> Path:
    """Histograms of Σlogσ²(pre) − Σlogσ²(hyp) on the direction pairs; > 0 is the variance rule's right answer."""
    names = [name for name in NLI_COLUMNS if name in run.direction and run.direction[name].generality_gap is not None]
    if not names:
        raise ValueError(f"{run.name} has no variance: no generality gap to plot")
    figure, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    for axis, name in zip(axes[0], names, strict=True):
        draw_generality_gap(axis, run.direction[name].generality_gap, NLI_COLUMNS[name])
    figure.suptitle(f"{run.name}: generality gap on entailment pairs (share > 0: the variance rule's accuracy)")
    return save_png(figure, path)


def plot_gaussians_2d(encoder: SentenceEncoder, path: str | Path, sentences: Sequence[str] = FIGURE1_SENTENCES) -> Path:
    """A few sentences' Gaussians projected onto the top-2 principal directions of their means (cf. Figure 1)."""
    encoded = encoder.encode_unique(sentences)
    if not encoded.is_gaussian:
        raise ValueError(f"{encoder.name} is a point encoder: it has no Gaussians to draw")
    rows = encoded.rows(sentences)
    figure, axis = plt.subplots(figsize=(6, 6))
    draw_gaussians_2d(axis, encoded.mu[rows], encoded.logvar[rows], sentences)
    axis.set(xlabel="PC 1 of μ", ylabel="PC 2 of μ")
    axis.set_title(f"{encoder.name}: sentence Gaussians (1σ ellipses, 2-D projection)")
    return save_png(figure, path)


def plot_dev_summary(encoded: EncodedSentences, pairs: NLIPairs, title: str, path: str | Path) -> Path:
    """The model card's figure from encoded dev sentences: the precision–recall curve of sim(hyp‖pre) and, Gaussian
    encoders, the generality gap titled with each direction rule's accuracy."""
    direction = entailment_direction(encoded, pairs) if encoded.is_gaussian else None
    panels = 1 if direction is None else 2
    figure, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.8), squeeze=False, layout="constrained")
    scores = encoded.entailment_score(pairs.premises, pairs.hypotheses).numpy().astype(np.float64)
    _draw_pr_curve(axes[0, 0], scores, pairs.is_entailment, "sim(hyp‖pre)")
    finish_pr_axis(axes[0, 0], float(pairs.is_entailment.mean()), "binary NLI (entailment vs rest)")
    if direction is not None:
        draw_generality_gap(axes[0, 1], direction.generality_gap, "direction")
        rules = direction.metrics
        axes[0, 1].set_title(
            f"direction, {rules['examples']} entailment pairs\n"
            f"variance rule Σlogσ²(pre) > Σlogσ²(hyp): {rules['variance_rule']:.2f}%\n"
            f"similarity rule sim(hyp‖pre) > sim(pre‖hyp): {rules['similarity_rule']:.2f}%",
            fontsize=9,
        )
    figure.suptitle(title)
    return save_png(figure, path)
