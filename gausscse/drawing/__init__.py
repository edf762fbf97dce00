"""Figures (matplotlib, Agg backend): ``gaussians`` draws Gaussians and scores on an axis (the demo and the model card
use it; it needs only the model's tensors), ``reports`` composes the evaluation's PNG figures from its results."""
