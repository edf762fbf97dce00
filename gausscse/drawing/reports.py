"""The evaluation's PNG figures; each function writes one PNG atomically and returns its path."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Ellipse

from gausscse.drawing.gaussians import draw_generality_gap, projection_plane, save_png
from gausscse.evaluation.encoders import EncodedSentences, SentenceEncoder
from gausscse.evaluation.metrics import load_metric
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


def _draw_pr_panel(axis, curves: dict[str, np.ndarray], is_entailment: np.ndarray, title: str) -> None:
    """A precision–recall curve (the 0.001-step sweep) per label → scores of ``curves``, and the chance line."""
    for label, scores in curves.items():
        sweep = load_metric("binary_nli").precision_recall_sweep(scores, is_entailment)
        axis.plot(sweep.recall, sweep.precision, label=label)
    positive_rate = float(is_entailment.mean())
    axis.axhline(positive_rate, color="grey", linestyle=":", label=f"chance ({100 * positive_rate:.1f})")
    axis.set(title=title, xlabel="recall", ylabel="precision", xlim=(0, 1), ylim=(0, 1.02))
    axis.legend(fontsize=7, loc="lower left")


def plot_pr_curves(runs: Sequence[ModelRun], test_sets: dict[str, NLIPairs], path: str | Path) -> Path:
    """One panel per NLI test set, one precision–recall curve per model."""
    names = [name for name in NLI_COLUMNS if name in test_sets]
    figure, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4), squeeze=False)
    for axis, name in zip(axes[0], names, strict=True):
        shown = [run for run in runs if name in run.nli]
        curves = {f"{run.name} (AUPRC {run.nli[name].metrics['auprc']:.1f})": run.nli[name].scores for run in shown}
        _draw_pr_panel(axis, curves, test_sets[name].is_entailment, NLI_COLUMNS[name])
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
    """A few sentences' Gaussians (cf. Figure 1), each N(μ, diag σ²) projected onto the [`projection_plane`] P as
    N(P μ, P diag(σ²) Pᵀ): its 1σ ellipse and centre, legend "Σlogσ² = …: sentence"."""
    encoded = encoder.encode_unique(sentences)
    if not encoded.is_gaussian:
        raise ValueError(f"{encoder.name} is a point encoder: it has no Gaussians to draw")
    rows = encoded.rows(sentences)
    mu, logvar = encoded.mu[rows].double(), encoded.logvar[rows].double()
    plane = projection_plane(mu, logvar.exp())
    centres = (mu @ plane.T).numpy()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    figure, axis = plt.subplots(figsize=(6, 6))
    extent = 0.0
    for row, sentence in enumerate(sentences):
        eigenvalues, eigenvectors = np.linalg.eigh(((plane * logvar[row].exp()) @ plane.T).numpy())
        angle = float(np.degrees(np.arctan2(eigenvectors[1, -1], eigenvectors[0, -1])))
        width, height = 2.0 * np.sqrt(np.clip(eigenvalues[::-1], 0.0, None))
        extent = max(extent, float(np.abs(centres[row]).max() + width / 2))
        colour = colours[row % len(colours)]
        axis.add_patch(Ellipse(centres[row], width, height, angle=angle, fill=False, color=colour, linewidth=2))
        axis.plot(*centres[row], "o", color=colour, label=f"Σlogσ² = {float(logvar[row].sum()):.1f}: {sentence}")
    extent *= 1.1
    axis.set(xlim=(-extent, extent), ylim=(-extent, extent), aspect="equal", xlabel="PC 1 of μ", ylabel="PC 2 of μ")
    axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    axis.set_title(f"{encoder.name}: sentence Gaussians (1σ ellipses, 2-D projection)")
    return save_png(figure, path)


def plot_dev_summary(encoded: EncodedSentences, pairs: NLIPairs, title: str, path: str | Path) -> Path:
    """The model card's figure from encoded dev sentences: the precision–recall curve of sim(hyp‖pre) and, Gaussian
    encoders, the generality gap titled with each direction rule's accuracy."""
    direction = entailment_direction(encoded, pairs) if encoded.is_gaussian else None
    panels = 1 if direction is None else 2
    figure, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.8), squeeze=False, layout="constrained")
    scores = encoded.entailment_score(pairs.premises, pairs.hypotheses).numpy().astype(np.float64)
    _draw_pr_panel(axes[0, 0], {"sim(hyp‖pre)": scores}, pairs.is_entailment, "binary NLI (entailment vs rest)")
    if direction is not None:
        draw_generality_gap(axes[0, 1], direction.generality_gap, "direction")
        axes[0, 1].set_title(
            f"direction, {direction.metrics['examples']} entailment pairs\n"
            f"variance rule Σlogσ²(pre) > Σlogσ²(hyp): {direction.metrics['variance_rule']:.2f}%\n"
            f"similarity rule sim(hyp‖pre) > sim(pre‖hyp): {direction.metrics['similarity_rule']:.2f}%",
            fontsize=9,
        )
    figure.suptitle(title)
    return save_png(figure, path)
