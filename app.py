"""GaussCSE demo: ``python app.py`` (or a Hugging Face Space with ``sdk: gradio``).

The model comes from ``$GAUSSCSE_MODEL`` (a folder or Hub id; default ``outputs/quickstart``, the quickstart's
output); the address from Gradio's ``$GRADIO_SERVER_NAME`` / ``$GRADIO_SERVER_PORT`` (default 127.0.0.1:7860).
"""

from gausscse.demo.app import build_app

demo = build_app()

if __name__ == "__main__":
    demo.launch()
