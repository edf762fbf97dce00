"""The Gradio app: three tabs (Direction, Similarity, Search) on one GaussCSE model; ``app.py`` at the repository root
launches it (locally or as a Hugging Face Space)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import gradio as gr

from gausscse.model.gaussian import similarity_formula

from .core import (
    DEFAULT_MODEL,
    DIRECTION_EXAMPLES,
    MAX_RESULTS,
    MAX_SENTENCES,
    SEARCH_EXAMPLES,
    SIMILARITY_EXAMPLE,
    Corpus,
    DemoError,
    direction,
    load_model,
    similarity_figure,
)

INTRODUCTION = """# GaussCSE: which sentence entails which?

GaussCSE ([Yoda et al., EACL 2024](https://aclanthology.org/2024.eacl-short.36/)) turns a sentence into a Gaussian
N(μ, σ²) instead of a point. Its similarity sim(a‖b) = {formula} is **asymmetric**: it is high when
b's Gaussian is broad enough to cover a's, i.e. when b entails a. A premise (the entailing, more general side) learns
the larger variance: its *generality* Σ log σ² is larger.

Model: `{model}`"""

SEARCH_HELP = """Type a claim: the app ranks the sentences of its corpus that entail it, by sim(claim‖sentence)
(the claim's Gaussian should fit inside the sentence's). Corpus: {corpus}."""


def page_errors(function: Callable) -> Callable:
    """Show a [`DemoError`] (bad input, missing model) in the page as a message that stays until closed; anything
    else as a short message too, never a stack trace."""

    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except DemoError as error:
            raise gr.Error(str(error), duration=None, print_exception=False) from error
        except Exception as error:  # an unexpected failure: the page gets its type and message only
            raise gr.Error(f"{type(error).__name__}: {error}", duration=None) from error

    return wrapped


def build_app(model_name: str | None = None) -> gr.Blocks:
    """The app on the model ``model_name`` (default ``$GAUSSCSE_MODEL``, else ``outputs/quickstart``). A model that
    cannot be loaded gives a page that says so, in its header and on every action."""
    model_name = model_name or os.environ.get("GAUSSCSE_MODEL") or DEFAULT_MODEL
    try:
        model, problem = load_model(model_name), None
    except DemoError as error:
        model, problem = None, str(error)
    corpus = Corpus(model) if model is not None else None

    def require_model() -> None:
        if problem is not None:
            raise DemoError(problem)

    @page_errors
    def run_direction(sentence_a: str, sentence_b: str):
        require_model()
        result = direction(model, sentence_a, sentence_b)
        return result.verdict(), result.scores(), result.figure

    @page_errors
    def run_similarity(text: str):
        require_model()
        sentences, matrix, figure = similarity_figure(model, text)
        return {"sentences": sentences, "similarity": matrix}, figure

    @page_errors
    def run_search(claim: str, k: float):
        require_model()
        hits = corpus.search(claim, int(k))
        return SEARCH_HELP.format(corpus=corpus.description), [
            [rank + 1, round(score, 4), sentence] for rank, (score, sentence) in enumerate(hits)
        ]

    with gr.Blocks(title="GaussCSE demo") as app:
        formula = (
            "1 / (1 + KL(N_a‖N_b))"
            if model is None
            else f"{similarity_formula(model.config.similarity_reduction)} (this model's "
            f"`{model.config.similarity_reduction}` reduction)"
        )
        gr.Markdown(INTRODUCTION.format(model=model_name, formula=formula))
        if problem is not None:
            gr.Markdown(f"**The model could not be loaded.** {problem}", elem_id="model-error")
        with gr.Tab("Direction"):
            gr.Markdown(
                "Two sentences → which entails which. Similarity rule: A entails B iff sim(B‖A) > sim(A‖B). "
                "Variance rule: A entails B iff A is the broader Gaussian (larger Σ log σ²)."
            )
            with gr.Row():
                sentence_a = gr.Textbox(label="Sentence A", lines=2, value=DIRECTION_EXAMPLES[0][0])
                sentence_b = gr.Textbox(label="Sentence B", lines=2, value=DIRECTION_EXAMPLES[0][1])
            direction_button = gr.Button("Which entails which?", variant="primary")
            with gr.Row():
                with gr.Column():
                    verdict = gr.Markdown(elem_id="direction-verdict")
                    scores = gr.JSON(label="scores")
                picture = gr.Plot(
                    label="the two Gaussians: 1σ ellipses projected onto a plane of the embedding space",
                    format="png",
                    elem_id="direction-plot",
                )
            gr.Examples([list(pair) for pair in DIRECTION_EXAMPLES], inputs=[sentence_a, sentence_b])
            direction_button.click(
                run_direction, [sentence_a, sentence_b], [verdict, scores, picture], api_name="direction"
            )
        with gr.Tab("Similarity"):
            gr.Markdown(
                f"Up to {MAX_SENTENCES} sentences, one per line → the matrix S_ij = sim(s_i‖s_j). It is not symmetric: "
                "S_ij is high when sentence j (column) entails sentence i (row)."
            )
            sentences = gr.Textbox(label="Sentences, one per line", lines=6, value="\n".join(SIMILARITY_EXAMPLE))
            similarity_button = gr.Button("Similarity matrix", variant="primary")
            heatmap = gr.Plot(label="sim(row‖column)", format="png", elem_id="similarity-plot")
            matrix = gr.JSON(label="matrix", visible=True)
            similarity_button.click(run_similarity, [sentences], [matrix, heatmap], api_name="similarity")
        with gr.Tab("Search"):
            search_help = gr.Markdown(
                elem_id="search-help",
                value="Type a claim: the app ranks the sentences of its corpus that entail it, by sim(claim‖sentence). "
                "The corpus is encoded on the first search.",
            )
            with gr.Row():
                claim = gr.Textbox(label="Claim", value=SEARCH_EXAMPLES[0], scale=4)
                k = gr.Slider(1, MAX_RESULTS, value=5, step=1, label="results", scale=1)
            search_button = gr.Button("Find sentences that entail it", variant="primary")
            hits = gr.Dataframe(
                headers=["rank", "sim(claim‖sentence)", "sentence"], label="entailing sentences", elem_id="search-hits"
            )
            gr.Examples([[example] for example in SEARCH_EXAMPLES], inputs=[claim])
            search_button.click(run_search, [claim, k], [search_help, hits], api_name="search")
    return app


__all__ = ["build_app", "page_errors"]
