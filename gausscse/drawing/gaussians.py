"""Matplotlib panels of Gaussians and scores (Agg backend), shared by the reports' figures, the model card and the demo.

* Several Gaussians as in the paper's Figure 1 (``draw_gaussians_2d``): each N(μ, diag σ²) projected linearly onto a
  plane P (2×d), the exact 2-D Gaussian N(P μ, P diag(σ²) Pᵀ), drawn as its 1σ ellipse.
* Two Gaussians for the direction (``draw_direction``): on the two embedding dimensions where the broader covers the
  narrower with the widest margin. A diagonal Gaussian restricted to two coordinates is exactly
  N((μ_i, μ_j), diag(σ_i², σ_j²)): an axis-aligned ellipse, no projection needed.
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

SIGMAS = (1.0, 2.0)  # the direction picture's contours: solid 1σ (filled), dashed 2σ
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



def broader_row(logvar: torch.Tensor) -> int:
    """The row (0 or 1) of ``logvar`` ``(2, d)`` with the broader Gaussian: the larger generality Σ log σ² (ties: 0)."""
    generality = logvar.double().sum(dim=-1)
    return int(generality[1] > generality[0])


def coverage_margin(mu: torch.Tensor, logvar: torch.Tensor) -> np.ndarray:
    """Per dimension ``(d,)``: how much of the broader Gaussian's 1σ interval is left around the narrower one's,
    (σ_broad − σ_narrow − |μ_broad − μ_narrow|) / σ_broad. At most 1; ≥ 0 where the broader 1σ interval contains
    the narrower one."""
    broad = broader_row(logvar)
    mu, std = mu.double().numpy(), logvar.double().mul(0.5).exp().numpy()
    offset = np.abs(mu[broad] - mu[1 - broad])
    return (std[broad] - std[1 - broad] - offset) / std[broad]


def covering_dimensions(mu: torch.Tensor, logvar: torch.Tensor, count: int = 2) -> list[int]:
    """The ``count`` dimensions with the widest [`coverage_margin`], widest first (ties: the lower dimension)."""
    return [int(dimension) for dimension in np.argsort(-coverage_margin(mu, logvar), kind="stable")[:count]]


def axis_label(dimension: int, names: Sequence[str], std: np.ndarray) -> str:
    """``dimension d: σ(A) = …, σ(B) = …`` (the standard deviations of both sentences along it)."""
    deviations = ", ".join(f"σ({name}) = {value:.3g}" for name, value in zip(names, std, strict=True))
    return f"dimension {dimension}: {deviations}"


def draw_ellipses(axis: Axes, centre: np.ndarray, std: np.ndarray, colour: str) -> None:
    """One Gaussian's contours at [`SIGMAS`]: the first filled, the others dashed."""
    for sigmas in SIGMAS:
        first = sigmas == SIGMAS[0]
        axis.add_patch(
            Ellipse(
                tuple(centre),
                *(2.0 * sigmas * std),
                facecolor=colour if first else "none",
                edgecolor=colour,
                alpha=0.3 if first else 0.8,
                linestyle="-" if first else "--",
                linewidth=2 if first else 1,
            )
        )


def draw_direction(
    axis: Axes, mu: torch.Tensor, logvar: torch.Tensor, sentences: Sequence[str], names: Sequence[str] = ("A", "B")
) -> list[int]:
    """Draw two Gaussians (rows of ``mu``, ``logvar``: ``(2, d)``) on their [`covering_dimensions`]: filled 1σ and
    dashed 2σ ellipses and the means, legend "name (Σlogσ² = …): sentence". Returns the dimensions drawn (x first)."""
    dimensions = covering_dimensions(mu, logvar)
    centres = mu.double()[:, dimensions].numpy()
    std = logvar.double()[:, dimensions].mul(0.5).exp().numpy()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, (name, sentence) in enumerate(zip(names, sentences, strict=True)):
        draw_ellipses(axis, centres[row], std[row], colours[row])
        generality = float(logvar[row].double().sum())
        axis.plot(*centres[row], "o", color=colours[row], label=f"{name} (Σlogσ² = {generality:.1f}): {sentence}")
    reach = max(SIGMAS) * std * 1.1
    low, high = (centres - reach).min(axis=0), (centres + reach).max(axis=0)
    broad = broader_row(logvar)
    covered = int((coverage_margin(mu, logvar) >= 0).sum())
    axis.set_title(
        f"{names[broad]}, the broader Gaussian, covers {names[1 - broad]} (1σ intervals) in {covered} of "
        f"{mu.shape[-1]} dimensions;\ndrawn: the 2 where it does so with the widest margin (filled: 1σ, dashed: 2σ)",
        fontsize=9,
    )
    axis.set(
        xlim=(low[0], high[0]),
        ylim=(low[1], high[1]),
        aspect="equal",
        xlabel=axis_label(dimensions[0], names, std[:, 0]),
        ylabel=axis_label(dimensions[1], names, std[:, 1]),
    )
    axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    return dimensions
