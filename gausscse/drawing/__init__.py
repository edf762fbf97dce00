"""Figures (matplotlib, Agg): ``gaussians`` draws on an axis (demo, model card), ``reports`` the evaluation's PNGs."""
