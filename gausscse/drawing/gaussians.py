"""Matplotlib panels (Agg backend) of Gaussians and scores for the report figures, the model card and the demo: a
Gaussian on two embedding dimensions (``draw_direction``); ``projection_plane``: reports.plot_gaussians_2d's plane."""

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

# the direction picture's contours: solid 1σ (filled), dashed 2σ
SIGMA_STYLES = {1.0: dict(alpha=0.3, linestyle="-", linewidth=2), 2.0: dict(alpha=0.8, linestyle="--", linewidth=1)}
SIGMAS = tuple(SIGMA_STYLES)
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


def projection_plane(mu: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """An orthonormal plane ``(2, d)`` for Gaussians ``(N, d)``: the principal directions of the centred μ, completed
    where they span less than two dimensions by those of the centred σ², then by the first coordinate axes."""
    mu, var = mu.double(), var.double()
    candidates: list[torch.Tensor] = []
    for values in (mu, var):  # the principal directions of the centred μ, then of the centred σ²
        _, singular_values, right_vectors = torch.linalg.svd(values - values.mean(dim=0), full_matrices=False)
        candidates += list(right_vectors[singular_values > DEGENERATE * max(float(singular_values.max()), 1.0)])
    candidates += list(torch.eye(2, mu.shape[-1], dtype=torch.float64))  # then the first coordinate axes
    axes: list[torch.Tensor] = []
    for candidate in candidates:
        for axis in axes:
            candidate = candidate - (candidate @ axis) * axis
        if float(candidate.norm()) > DEGENERATE:
            axes.append(candidate / candidate.norm())
        if len(axes) == 2:
            break
    return torch.stack(axes)


def draw_generality_gap(axis: Axes, gap: np.ndarray, title: str) -> None:
    """Histogram of Σlogσ²(premise) − Σlogσ²(hypothesis); the title gives the share > 0 (the variance rule)."""
    axis.hist(gap, bins=50, color="tab:blue", alpha=0.8)
    axis.axvline(0.0, color="black", linewidth=1)
    share = 100 * float(np.mean(gap > 0))
    axis.set(
        title=f"{title}: {share:.1f}% > 0", xlabel="Σlogσ²(premise) − Σlogσ²(hypothesis)", ylabel="entailment pairs"
    )


def draw_similarity_matrix(axis: Axes, matrix: np.ndarray, labels: Sequence[str]) -> None:
    """Heatmap of S_ij = sim(s_i‖s_j) with each value written in, coloured over the matrix's own range."""
    low, high = float(matrix.min()), float(matrix.max())
    image = axis.imshow(matrix, cmap="viridis", vmin=low, vmax=max(high, low + 1e-6))
    axis.figure.colorbar(image, ax=axis, fraction=0.046, pad=0.04, label="sim(row‖column)")
    ticks = range(len(labels))
    axis.set_xticks(ticks, labels, rotation=35, ha="right", fontsize=8)
    axis.set_yticks(ticks, labels, fontsize=8)
    for row in ticks:
        for column in ticks:
            value = float(matrix[row, column])
            colour = "black" if value > (low + high) / 2 else "white"
            axis.text(column, row, f"{value:.3f}", ha="center", va="center", fontsize=8, color=colour)
    axis.set(xlabel="column j: the entailing side (premise)", ylabel="row i: the entailed side (hypothesis)")


def _coverage(mu: torch.Tensor, logvar: torch.Tensor) -> tuple[int, np.ndarray]:
    """The broader row of two Gaussians ``(2, d)`` (the larger Σlogσ²) and, per dimension, (σ_broad − σ_narrow −
    |μ_broad − μ_narrow|) / σ_broad: ≥ 0 where the broader one's 1σ interval contains the narrower one's."""
    generality = logvar.double().sum(dim=-1)
    broad = int(generality[1] > generality[0])
    mu, std = mu.double().numpy(), logvar.double().mul(0.5).exp().numpy()
    return broad, (std[broad] - std[1 - broad] - np.abs(mu[broad] - mu[1 - broad])) / std[broad]


def covering_dimensions(mu: torch.Tensor, logvar: torch.Tensor, count: int = 2) -> list[int]:
    """The ``count`` dimensions where the broader of two Gaussians ``(2, d)`` covers the other with the widest margin,
    widest first (ties: the lower dimension)."""
    return [int(dimension) for dimension in np.argsort(-_coverage(mu, logvar)[1], kind="stable")[:count]]


def draw_direction(
    axis: Axes, mu: torch.Tensor, logvar: torch.Tensor, sentences: Sequence[str], names: Sequence[str] = ("A", "B")
) -> list[int]:
    """Two Gaussians ``(2, d)`` on their [`covering_dimensions`], each axis on its own scale: filled 1σ and dashed 2σ
    ellipses and the means, a figure legend below (the figure needs ``layout="constrained"``) "name (Σlogσ² = …):
    sentence". Returns the dimensions drawn (x first)."""
    dimensions = covering_dimensions(mu, logvar)
    centres = mu.double()[:, dimensions].numpy()
    std = logvar.double()[:, dimensions].mul(0.5).exp().numpy()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, (name, sentence) in enumerate(zip(names, sentences, strict=True)):
        for sigmas, style in SIGMA_STYLES.items():
            face = colours[row] if sigmas == SIGMAS[0] else "none"
            width, height = 2.0 * sigmas * std[row]
            axis.add_patch(Ellipse(tuple(centres[row]), width, height, facecolor=face, edgecolor=colours[row], **style))
        generality = float(logvar[row].double().sum())
        axis.plot(*centres[row], "o", color=colours[row], label=f"{name} (Σlogσ² = {generality:.1f}): {sentence}")
    reach = max(SIGMAS) * std * 1.1
    low, high = (centres - reach).min(axis=0), (centres + reach).max(axis=0)
    broad, margin = _coverage(mu, logvar)
    covered = int((margin >= 0).sum())
    axis.set_title(
        f"{names[broad]}, the broader Gaussian, covers {names[1 - broad]} (1σ intervals) in {covered} of "
        f"{mu.shape[-1]} dimensions;\ndrawn: the 2 where it does so with the widest margin (filled: 1σ, dashed: 2σ)",
        fontsize=9,
    )
    deviations = [
        ", ".join(f"σ({name}) = {value:.3g}" for name, value in zip(names, column, strict=True)) for column in std.T
    ]
    xlabel, ylabel = (
        f"dimension {dimension}: {label}" for dimension, label in zip(dimensions, deviations, strict=True)
    )
    # each axis on its own scale (the two dimensions' σ can differ a hundredfold: one scale would flatten the
    # ellipses into a strip); the legend in the figure's margin below, clear of the axes' labels
    axis.set(xlim=(low[0], high[0]), ylim=(low[1], high[1]), aspect="auto", xlabel=xlabel, ylabel=ylabel)
    axis.figure.legend(*axis.get_legend_handles_labels(), fontsize=7, loc="outside lower center")
    return dimensions
