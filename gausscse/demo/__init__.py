"""The demo: a Gradio app on a GaussCSE model (``app.py`` at the repository root launches it).

``core`` computes (direction of two sentences, the asymmetric similarity matrix, entailment search over a small corpus,
their figures) and imports no UI; ``app`` builds the Gradio page on it. The top layer: it uses ``model``, ``data`` and
``search``.
"""
