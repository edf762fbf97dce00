"""Matplotlib drawing shared by the evaluation plots, the model card's figure and the demo app (Agg backend).

Gaussians are drawn as in the paper's Figure 1: each sentence's N(μ, diag σ²) is projected linearly onto a plane
P (2×d), giving the exact 2-D Gaussian N(P μ, P diag(σ²) Pᵀ), drawn as its 1σ ellipse.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Ellipse

from gausscse.io import atomic_path

DEGENERATE = 1e-6  # a direction this short (relative; after removing the axes already chosen) adds nothing


def save_png(figure: Figure, path: str | Path) -> Path:
    """Write ``figure`` as a PNG atomically, close it and return the path."""
    path = Path(path)
    try:
        with atomic_path(path) as temporary:
            figure.savefig(temporary, format="png", dpi=120, bbox_inches="tight")
    finally:
        plt.close(figure)
    return path


def principal_directions(centred: torch.Tensor) -> torch.Tensor:
    """The right singular vectors of ``centred`` whose singular values are not zero (relative to the largest)."""
    _, singular_values, right_vectors = torch.linalg.svd(centred, full_matrices=False)
    return right_vectors[singular_values > DEGENERATE * max(float(singular_values.max()), 1.0)]


def projection_plane(mu: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """An orthonormal plane ``(2, d)`` to draw Gaussians ``(N, d)`` on: the principal directions of the centred μ
    first; where they span less than two dimensions (two sentences span one), completed by the principal directions
    of the centred σ², then by the first coordinate axes (identical sentences)."""
    mu, var = mu.double(), var.double()
    candidates = [
        *principal_directions(mu - mu.mean(dim=0)),
        *principal_directions(var - var.mean(dim=0)),
        *torch.eye(2, mu.shape[-1], dtype=torch.float64),
    ]
    axes: list[torch.Tensor] = []
    for candidate in candidates:
        for axis in axes:
            candidate = candidate - (candidate @ axis) * axis
        if float(candidate.norm()) > DEGENERATE:
            axes.append(candidate / candidate.norm())
        if len(axes) == 2:
            break
    return torch.stack(axes)


def draw_gaussians_2d(axis: Axes, mu: torch.Tensor, logvar: torch.Tensor, labels: Sequence[str]) -> None:
    """Draw each row's Gaussian on ``axis`` as its 1σ ellipse and centre on the [`projection_plane`], legend entries
    "Σlogσ² = …: label"."""
    mu, var = mu.double(), logvar.double().exp()
    plane = projection_plane(mu, var)
    centres = (mu @ plane.T).numpy()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    extent = 0.0
    for row, label in enumerate(labels):
        covariance = (plane * var[row]) @ plane.T
        eigenvalues, eigenvectors = np.linalg.eigh(covariance.numpy())
        angle = float(np.degrees(np.arctan2(eigenvectors[1, -1], eigenvectors[0, -1])))
        width, height = 2.0 * np.sqrt(np.clip(eigenvalues[::-1], 0.0, None))
        extent = max(extent, float(np.abs(centres[row]).max() + width / 2))
        colour = colours[row % len(colours)]
        axis.add_patch(Ellipse(centres[row], width, height, angle=angle, fill=False, color=colour, linewidth=2))
        generality = float(logvar[row].double().sum())
        axis.plot(*centres[row], "o", color=colour, label=f"Σlogσ² = {generality:.1f}: {label}")
    extent *= 1.1
    axis.set(xlim=(-extent, extent), ylim=(-extent, extent), aspect="equal", xlabel="axis 1", ylabel="axis 2")
    axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12))


def finish_pr_axis(axis: Axes, positive_rate: float, title: str) -> None:
    """The chance line (the share of positives), axis labels and limits, and the legend of a PR panel."""
    axis.axhline(positive_rate, color="grey", linestyle=":", label=f"chance ({100 * positive_rate:.1f})")
    axis.set(title=title, xlabel="recall", ylabel="precision", xlim=(0, 1), ylim=(0, 1.02))
    axis.legend(fontsize=7, loc="lower left")


def draw_generality_gap(axis: Axes, gap: np.ndarray, title: str) -> None:
    """Histogram of Σlogσ²(premise) − Σlogσ²(hypothesis) over entailment pairs; > 0 is the variance rule's right
    answer, the title states its share."""
    axis.hist(gap, bins=50, color="tab:blue", alpha=0.8)
    axis.axvline(0.0, color="black", linewidth=1)
    axis.set(
        title=f"{title}: {100 * float(np.mean(gap > 0)):.1f}% > 0",
        xlabel="Σlogσ²(premise) − Σlogσ²(hypothesis)",
        ylabel="entailment pairs",
    )


def draw_similarity_matrix(axis: Axes, matrix: np.ndarray, labels: Sequence[str]) -> None:
    """Heatmap of S_ij = sim(s_i‖s_j) with each cell's value; rows and columns labelled by the sentences. The colours
    span the matrix's own range (trained similarities often lie close together)."""
    low, high = float(matrix.min()), float(matrix.max())
    image = axis.imshow(matrix, cmap="viridis", vmin=low, vmax=max(high, low + 1e-6))
    axis.figure.colorbar(image, ax=axis, fraction=0.046, pad=0.04, label="sim(row‖column)")
    ticks = range(len(labels))
    axis.set_xticks(ticks, labels, rotation=35, ha="right", fontsize=8)
    axis.set_yticks(ticks, labels, fontsize=8)
    for row in ticks:
        for column in ticks:
            value = float(matrix[row, column])
            bright = value > (low + high) / 2
            axis.text(
                column, row, f"{value:.3f}", ha="center", va="center", fontsize=8, color="black" if bright else "white"
            )
    axis.set(xlabel="column j: the entailing side (premise)", ylabel="row i: the entailed side (hypothesis)")


__all__ = [
    "draw_gaussians_2d",
    "draw_generality_gap",
    "draw_similarity_matrix",
    "finish_pr_axis",
    "projection_plane",
    "save_png",
]
