"""The Gradio app: three tabs (Direction, Similarity, Search) on one GaussCSE model; ``app.py`` at the repository root
launches it (locally or as a Hugging Face Space)."""

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator

import gradio as gr
from matplotlib.figure import Figure

from gausscse.model.gaussian import similarity_formula
from gausscse.model.modeling_gausscse import GaussCSEModel

from . import core
from .core import DemoError, rounded

LOGGER = logging.getLogger(__name__)

INTRODUCTION = """# GaussCSE: which sentence entails which?

GaussCSE ([Yoda et al., EACL 2024](https://aclanthology.org/2024.eacl-short.36/)) turns a sentence into a Gaussian
N(μ, σ²) instead of a point. Its similarity sim(a‖b) = {formula} is **asymmetric**: it is high when
b's Gaussian is broad enough to cover a's, i.e. when b entails a. A premise (the entailing, more general side) learns
the larger variance: its *generality* Σ log σ² is larger.

Model: `{model}`"""

SEARCH_HELP = "Type a claim: the app ranks the sentences of its corpus that entail it, by {rule}. {corpus}"


def error_message(error: Exception) -> str:
    """What the page and the API say of a failure: a [`DemoError`]'s message, else its type and message (and a log)."""
    if isinstance(error, DemoError):
        return str(error)
    LOGGER.error("the demo failed", exc_info=error)
    return f"{type(error).__name__}: {error}"


def answer_button(label: str, tab: str, answer: Callable[..., tuple], cleared: tuple) -> Callable[[list, list], None]:
    """A tab's button and, below it, its error box (``<tab>-error``: hidden until an answer fails, hidden and emptied
    again by the next good answer); returns the function that, given the tab's inputs and outputs, makes the button
    show the error box update and ``answer``'s outputs (``cleared`` on failure)."""
    button = gr.Button(label, variant="primary")
    error_box = gr.Markdown(visible=False, elem_id=f"{tab}-error", elem_classes=["demo-error"])

    @functools.wraps(answer)
    def shown(*inputs):
        try:
            outputs = answer(*inputs)
        except Exception as error:
            return gr.update(value=f"**Error:** {error_message(error)}", visible=True), *cleared
        return gr.update(value="", visible=False), *outputs

    def wire(inputs: list, outputs: list) -> None:
        button.click(shown, inputs, [error_box, *outputs], api_visibility="private")

    return wire


@contextlib.contextmanager
def api_errors() -> Iterator[None]:
    """Raise a failure inside the block as [`gr.Error`] (the client's ``AppError``) with [`error_message`]."""
    try:
        yield
    except Exception as error:
        raise gr.Error(error_message(error), print_exception=False) from error


class Answers:
    """The app's answers on one model: for the page (numbers rounded to ``DISPLAY_DIGITS`` decimals, with figures) and
    for the API (full precision; failures raised by [`api_errors`]); without a model, each fails saying ``problem``."""

    def __init__(self, model: GaussCSEModel | None, problem: str | None = None):
        self.model, self.problem = model, problem
        self.corpus = core.Corpus(model) if model is not None else None

    def require_model(self) -> GaussCSEModel:
        if self.problem is not None:
            raise DemoError(self.problem)
        return self.model

    def direction_page(self, sentence_a: str, sentence_b: str) -> tuple[str, dict[str, float], Figure]:
        result = core.direction(self.require_model(), sentence_a, sentence_b)
        return result.verdict(), rounded(result.scores()), result.figure

    def similarity_page(self, text: str) -> tuple[dict[str, list], Figure]:
        sentences, matrix, figure = core.similarity_figure(self.require_model(), text)
        return {"sentences": sentences, "similarity": rounded(matrix)}, figure

    def ranked(self, claim: str, k: float) -> list[tuple[int, float, str]]:
        """``(rank, score, sentence)`` of the ``k`` corpus sentences that best entail ``claim``, rank 1 first."""
        self.require_model()
        return [(rank + 1, score, sentence) for rank, (score, sentence) in enumerate(self.corpus.search(claim, k))]

    def search_page(self, claim: str, k: float) -> tuple[str, list[list]]:
        rows = [[rank, rounded(score), sentence] for rank, score, sentence in self.ranked(claim, k)]
        corpus = f"Corpus: {self.corpus.description}."
        return SEARCH_HELP.format(rule=core.search_rule(self.model), corpus=corpus), rows

    def direction(self, sentence_a: str, sentence_b: str) -> tuple[str, dict[str, float]]:
        """Which of two sentences entails the other: the verdict (Markdown) and sim(a||b), sim(b||a) and both
        generalities."""
        with api_errors():
            result = core.direction(self.require_model(), sentence_a, sentence_b)
            return result.verdict(), result.scores()

    def similarity(self, sentences: str) -> dict[str, list]:
        """The sentences (one per line) and the matrix S_ij = sim(s_i||s_j)."""
        with api_errors():
            lines, matrix, _figure = core.similarity_figure(self.require_model(), sentences)
            return {"sentences": lines, "similarity": matrix}

    def search(self, claim: str, k: int = 5) -> list[dict[str, int | float | str]]:
        """The k corpus sentences that best entail the claim, highest score first (the model's search score, or
        sim(claim||sentence): `search_rule`)."""
        with api_errors():
            return [{"rank": rank, "score": score, "sentence": text} for rank, score, text in self.ranked(claim, k)]


def direction_tab(answers: Answers) -> None:
    """The Direction tab (inside the app's ``gr.Blocks``): two sentences → which entails which, with a picture."""
    with gr.Tab("Direction"):
        gr.Markdown(
            "Two sentences → which entails which. Similarity rule: A entails B iff sim(B‖A) > sim(A‖B). "
            "Variance rule: A entails B iff A is the broader Gaussian (larger Σ log σ²)."
        )
        with gr.Row():
            sentence_a = gr.Textbox(label="Sentence A", lines=2, value=core.DIRECTION_EXAMPLES[0][0])
            sentence_b = gr.Textbox(label="Sentence B", lines=2, value=core.DIRECTION_EXAMPLES[0][1])
        show = answer_button("Which entails which?", "direction", answers.direction_page, cleared=("", None, None))
        with gr.Row():
            with gr.Column():
                verdict = gr.Markdown(elem_id="direction-verdict")
                scores = gr.JSON(label="scores")
            picture = gr.Plot(
                label="the two Gaussians on the two dimensions where the broader one covers the narrower one most",
                show_label=False,  # the figure's own title says it; the label would cover it
                format="png",
                elem_id="direction-plot",
            )
        gr.Examples([list(pair) for pair in core.DIRECTION_EXAMPLES], inputs=[sentence_a, sentence_b])
        show([sentence_a, sentence_b], [verdict, scores, picture])


def build_app(model_name: str | None = None, answers: Answers | None = None) -> gr.Blocks:
    """The app on the model ``model_name`` (default ``$GAUSSCSE_MODEL``, else ``outputs/quickstart``), or on
    ``answers`` where given (``model_name`` is then only shown); a model that cannot be loaded is named in the header
    and each tab's error box. The tabs' API endpoints ``/direction``, ``/similarity`` and ``/search`` give data."""
    model_name = model_name or os.environ.get("GAUSSCSE_MODEL") or core.DEFAULT_MODEL
    if answers is None:
        try:
            answers = Answers(core.load_model(model_name))
        except DemoError as error:
            answers = Answers(None, str(error))

    with gr.Blocks(title="GaussCSE demo") as app:
        formula = "1 / (1 + KL(N_a‖N_b))"
        if answers.model is not None:
            reduction = answers.model.config.similarity_reduction
            formula = f"{similarity_formula(reduction)} (this model's `{reduction}` reduction)"
        gr.Markdown(INTRODUCTION.format(model=model_name, formula=formula))
        if answers.problem is not None:
            gr.Markdown(f"**The model could not be loaded.** {answers.problem}", elem_id="model-error")
        direction_tab(answers)
        with gr.Tab("Similarity"):
            gr.Markdown(
                f"Up to {core.MAX_SENTENCES} sentences, one per line → the matrix S_ij = sim(s_i‖s_j). It is not "
                "symmetric: S_ij is high when sentence j (column) entails sentence i (row)."
            )
            sentences = gr.Textbox(label="Sentences, one per line", lines=6, value="\n".join(core.SIMILARITY_EXAMPLE))
            show = answer_button("Similarity matrix", "similarity", answers.similarity_page, cleared=(None, None))
            heatmap = gr.Plot(label="sim(row‖column)", format="png", elem_id="similarity-plot")
            matrix = gr.JSON(label="matrix", visible=True)
            show([sentences], [matrix, heatmap])
        with gr.Tab("Search"):
            search_help = gr.Markdown(
                elem_id="search-help",
                value=SEARCH_HELP.format(
                    rule=core.search_rule(answers.model), corpus="The corpus is encoded on the first search."
                ),
            )
            with gr.Row():
                claim = gr.Textbox(label="Claim", value=core.SEARCH_EXAMPLES[0], scale=4)
                k = gr.Slider(1, core.MAX_RESULTS, value=5, step=1, label="results", scale=1)
            show = answer_button(
                "Find sentences that entail it", "search", answers.search_page, cleared=(gr.skip(), None)
            )
            hits = gr.Dataframe(
                headers=["rank", "score", "sentence"], label="entailing sentences", elem_id="search-hits"
            )
            gr.Examples([[example] for example in core.SEARCH_EXAMPLES], inputs=[claim])
            show([claim, k], [search_help, hits])
        gr.api(answers.direction, api_name="direction")
        gr.api(answers.similarity, api_name="similarity")
        gr.api(answers.search, api_name="search")
    return app


def main() -> None:
    """``gausscse-demo [MODEL]``: the app on MODEL (a folder or Hub id; default as [`build_app`]), served by Gradio
    (``$GRADIO_SERVER_NAME`` / ``$GRADIO_SERVER_PORT``, default 127.0.0.1:7860) until interrupted. A model that does
    not load ends it at once, in one line with exit status 2 (a Space, built by ``app.py``, shows it on its page)."""
    import argparse

    parser = argparse.ArgumentParser(prog="gausscse-demo", description=main.__doc__.split("\n")[0])
    parser.add_argument("model", nargs="?", default=None, help="a GaussCSE folder or Hub id (default: $GAUSSCSE_MODEL, "
                        f"else {core.DEFAULT_MODEL})")  # fmt: skip
    model_name = parser.parse_args().model or os.environ.get("GAUSSCSE_MODEL") or core.DEFAULT_MODEL
    try:
        answers = Answers(core.load_model(model_name))
    except DemoError as error:
        parser.exit(2, f"gausscse-demo: error: {error}\n")
    build_app(model_name, answers).launch()
