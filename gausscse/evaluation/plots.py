"""PNG figures (matplotlib, Agg backend): PR curves, the generality gap, and a 2-D picture of Gaussians.

Every function writes one PNG atomically (``gausscse.io.atomic_path``) and returns its path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import Ellipse

from gausscse.io import atomic_path

from .encoders import SentenceEncoder
from .metrics import precision_recall_sweep
from .report import NLI_COLUMNS
from .suite import ModelRun
from .tasks import NLIPairs

# A premise, sentences it entails (ever more general), and an unrelated one — as in the paper's Figure 1.
FIGURE1_SENTENCES = (
    "A man is playing a guitar on stage in front of a crowd.",
    "A man is playing a guitar.",
    "A man is playing an instrument.",
    "Someone is making music.",
    "A woman is slicing a tomato in the kitchen.",
)


def _save(figure, path: Path) -> Path:
    try:
        with atomic_path(path) as temporary:
            figure.savefig(temporary, format="png", dpi=120, bbox_inches="tight")
    finally:
        plt.close(figure)
    return path


def plot_pr_curves(runs: Sequence[ModelRun], test_sets: dict[str, NLIPairs], path: str | Path) -> Path:
    """One panel per NLI test set, one precision–recall curve (the 0.001-step threshold sweep) per model."""
    names = [name for name in NLI_COLUMNS if name in test_sets]
    figure, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4), squeeze=False)
    for axis, name in zip(axes[0], names, strict=True):
        positive_rate = float(test_sets[name].is_entailment.mean())
        for run in runs:
            if name in run.nli:
                sweep = precision_recall_sweep(run.nli[name].scores, test_sets[name].is_entailment)
                auprc = run.nli[name].metrics["auprc"]
                axis.plot(sweep.recall, sweep.precision, label=f"{run.name} (AUPRC {auprc:.1f})")
        axis.axhline(positive_rate, color="grey", linestyle=":", label=f"chance ({100 * positive_rate:.1f})")
        axis.set(title=NLI_COLUMNS[name], xlabel="recall", ylabel="precision", xlim=(0, 1), ylim=(0, 1.02))
        axis.legend(fontsize=7, loc="lower left")
    figure.suptitle("Binary NLI: precision–recall of the entailment score (Gaussian: sim(hyp‖pre); point: (cos+1)/2)")
    return _save(figure, Path(path))


def plot_generality_gap(run: ModelRun, path: str | Path) -> Path:
    """Histograms of Σlogσ²(pre) − Σlogσ²(hyp) on the direction pairs; > 0 is the variance rule's right answer."""
    names = [name for name in NLI_COLUMNS if name in run.direction and run.direction[name].generality_gap is not None]
    if not names:
        raise ValueError(f"{run.name} has no variance: no generality gap to plot")
    figure, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    for axis, name in zip(axes[0], names, strict=True):
        gap = run.direction[name].generality_gap
        axis.hist(gap, bins=50, color="tab:blue", alpha=0.8)
        axis.axvline(0.0, color="black", linewidth=1)
        axis.set(
            title=f"{NLI_COLUMNS[name]}: {100 * float(np.mean(gap > 0)):.1f}% > 0",
            xlabel="Σlogσ²(premise) − Σlogσ²(hypothesis)",
            ylabel="entailment pairs",
        )
    figure.suptitle(f"{run.name}: generality gap on entailment pairs")
    return _save(figure, Path(path))


def plot_gaussians_2d(encoder: SentenceEncoder, path: str | Path, sentences: Sequence[str] = FIGURE1_SENTENCES) -> Path:
    """A few sentences' Gaussians projected onto the top-2 principal directions of their means (cf. Figure 1).

    With P the 2×d matrix of principal directions of the centred μ, a sentence's projection is the 2-D
    Gaussian N(P μ, P diag(σ²) Pᵀ) — an exact linear projection; drawn as its 1σ ellipse.
    """
    encoded = encoder.encode_unique(sentences)
    if not encoded.is_gaussian:
        raise ValueError(f"{encoder.name} is a point encoder: it has no Gaussians to draw")
    mu, var = encoded.mu[encoded.rows(sentences)].double(), encoded.logvar[encoded.rows(sentences)].double().exp()
    _, _, right_vectors = torch.linalg.svd(mu - mu.mean(dim=0), full_matrices=False)
    projection = right_vectors[:2]  # (2, d)
    centres = (mu @ projection.T).numpy()
    figure, axis = plt.subplots(figsize=(6, 6))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    extent = 0.0
    for row, sentence in enumerate(sentences):
        covariance = (projection * var[row]) @ projection.T
        eigenvalues, eigenvectors = np.linalg.eigh(covariance.numpy())
        angle = float(np.degrees(np.arctan2(eigenvectors[1, -1], eigenvectors[0, -1])))
        width, height = 2.0 * np.sqrt(np.clip(eigenvalues[::-1], 0.0, None))
        extent = max(extent, float(np.abs(centres[row]).max() + width / 2))
        colour = colours[row % len(colours)]
        axis.add_patch(Ellipse(centres[row], width, height, angle=angle, fill=False, color=colour, linewidth=2))
        axis.plot(*centres[row], "o", color=colour, label=f"Σlogσ² = {float(np.log(var[row]).sum()):.1f}: {sentence}")
    extent *= 1.1
    axis.set(xlim=(-extent, extent), ylim=(-extent, extent), aspect="equal", xlabel="PC 1 of μ", ylabel="PC 2 of μ")
    axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    axis.set_title(f"{encoder.name}: sentence Gaussians (1σ ellipses, 2-D projection)")
    return _save(figure, Path(path))
