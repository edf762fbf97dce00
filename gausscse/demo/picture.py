"""The Direction tab's picture: two sentences' Gaussians on the two embedding dimensions where the broader Gaussian
covers the narrower one with the widest margin, so the picture shows what the variance rule means: the entailing
(broader) Gaussian covering the entailed (narrower) one. Its title says in how many of all dimensions that holds.

A diagonal Gaussian restricted to two coordinates is exactly N((μ_i, μ_j), diag(σ_i², σ_j²)): an axis-aligned ellipse,
no projection needed."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.patches import Ellipse

SIGMAS = (1.0, 2.0)  # contours drawn: solid 1σ (filled), dashed 2σ


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


__all__ = ["broader_row", "coverage_margin", "covering_dimensions", "draw_direction"]
