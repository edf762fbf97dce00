"""The Gradio demo (``app.py`` at the repository root launches it): ``core`` computes, ``app`` builds the page."""
