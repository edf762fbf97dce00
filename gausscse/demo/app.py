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
    rounded,
    search_rule,
    similarity_figure,
)

LOGGER = logging.getLogger(__name__)

INTRODUCTION = """# GaussCSE: which sentence entails which?

GaussCSE ([Yoda et al., EACL 2024](https://aclanthology.org/2024.eacl-short.36/)) turns a sentence into a Gaussian
N(μ, σ²) instead of a point. Its similarity sim(a‖b) = {formula} is **asymmetric**: it is high when
b's Gaussian is broad enough to cover a's, i.e. when b entails a. A premise (the entailing, more general side) learns
the larger variance: its *generality* Σ log σ² is larger.

Model: `{model}`"""

SEARCH_HELP = """Type a claim: the app ranks the sentences of its corpus that entail it, by {rule}. Corpus: {corpus}."""


def error_message(error: Exception) -> str:
    """What the page and the API say about a failure: a [`DemoError`]'s message (bad input, missing model); for
    anything else its type and message, never a stack trace (that goes to the server's log)."""
    if isinstance(error, DemoError):
        return str(error)
    LOGGER.error("the demo failed", exc_info=error)
    return f"{type(error).__name__}: {error}"


def error_box(elem_id: str) -> gr.Markdown:
    """A tab's error message: hidden until an answer fails, hidden and emptied again by the next good answer."""
    return gr.Markdown(visible=False, elem_id=elem_id, elem_classes=["demo-error"])


def shown_error(error: Exception) -> dict:
    """The update that shows ``error`` in an [`error_box`]."""
    return gr.update(value=f"**Error:** {error_message(error)}", visible=True)


def hidden_error() -> dict:
    """The update that empties and hides an [`error_box`]."""
    return gr.update(value="", visible=False)


def in_page(answer: Callable[..., tuple], cleared: tuple) -> Callable[..., tuple]:
    """``answer`` for a button: its outputs after the tab's [`error_box`], hidden on success; on failure the box shows
    the message and the outputs become ``cleared`` (no answer to other input stays beside the message)."""

    @functools.wraps(answer)
    def shown(*inputs):
        try:
            outputs = answer(*inputs)
        except Exception as error:
            return shown_error(error), *cleared
        return hidden_error(), *outputs

    return shown


@contextlib.contextmanager
def api_errors() -> Iterator[None]:
    """Raise a failure inside the block as [`gr.Error`] (the client's ``AppError``) with [`error_message`]."""
    try:
        yield
    except Exception as error:
        raise gr.Error(error_message(error), print_exception=False) from error


class Answers:
    """What the app answers on one model: for the page (numbers rounded to ``core.DISPLAY_DIGITS`` decimals, with
    figures) and for the API (data at full precision; failures raised by [`api_errors`]). A model that cannot be
    loaded makes every answer fail with the reason."""

    def __init__(self, model: GaussCSEModel | None, problem: str | None = None):
        self.model, self.problem = model, problem
        self.corpus = Corpus(model) if model is not None else None

    @classmethod
    def load(cls, model_name: str) -> "Answers":
        """The answers on the model of a folder or Hub id; where it cannot be loaded, the reason as the problem."""
        try:
            return cls(load_model(model_name))
        except DemoError as error:
            return cls(None, str(error))

    def require_model(self) -> None:
        if self.problem is not None:
            raise DemoError(self.problem)

    def direction_page(self, sentence_a: str, sentence_b: str) -> tuple[str, dict[str, float], Figure]:
        self.require_model()
        result = direction(self.model, sentence_a, sentence_b)
        return result.verdict(), rounded(result.scores()), result.figure

    def similarity_page(self, text: str) -> tuple[dict[str, list], Figure]:
        self.require_model()
        sentences, matrix, figure = similarity_figure(self.model, text)
        return {"sentences": sentences, "similarity": rounded(matrix)}, figure

    def search_page(self, claim: str, k: float) -> tuple[str, list[list]]:
        self.require_model()
        hits = self.corpus.search(claim, k)
        rows = [[rank + 1, rounded(score), sentence] for rank, (score, sentence) in enumerate(hits)]
        return SEARCH_HELP.format(rule=search_rule(self.model), corpus=self.corpus.description), rows

    def direction(self, sentence_a: str, sentence_b: str) -> tuple[str, dict[str, float]]:
        """Which of two sentences entails the other: the verdict (Markdown) and sim(a||b), sim(b||a) and both
        generalities."""
        with api_errors():
            self.require_model()
            result = direction(self.model, sentence_a, sentence_b)
            return result.verdict(), result.scores()

    def similarity(self, sentences: str) -> dict[str, list]:
        """The sentences (one per line) and the matrix S_ij = sim(s_i||s_j)."""
        with api_errors():
            self.require_model()
            lines, matrix, _figure = similarity_figure(self.model, sentences)
            return {"sentences": lines, "similarity": matrix}

    def search(self, claim: str, k: int = 5) -> list[dict[str, int | float | str]]:
        """The k corpus sentences that best entail the claim, highest score first (the model's search score, or
        sim(claim||sentence): `search_rule`)."""
        with api_errors():
            self.require_model()
            hits = self.corpus.search(claim, k)
            return [{"rank": rank + 1, "score": score, "sentence": text} for rank, (score, text) in enumerate(hits)]


def direction_tab(answers: Answers) -> None:
    """The Direction tab (inside the app's ``gr.Blocks``): two sentences → which entails which, with a picture."""
    with gr.Tab("Direction"):
        gr.Markdown(
            "Two sentences → which entails which. Similarity rule: A entails B iff sim(B‖A) > sim(A‖B). "
            "Variance rule: A entails B iff A is the broader Gaussian (larger Σ log σ²)."
        )
        with gr.Row():
            sentence_a = gr.Textbox(label="Sentence A", lines=2, value=DIRECTION_EXAMPLES[0][0])
            sentence_b = gr.Textbox(label="Sentence B", lines=2, value=DIRECTION_EXAMPLES[0][1])
        direction_button = gr.Button("Which entails which?", variant="primary")
        direction_error = error_box("direction-error")
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
        gr.Examples([list(pair) for pair in DIRECTION_EXAMPLES], inputs=[sentence_a, sentence_b])
        direction_button.click(
            in_page(answers.direction_page, cleared=("", None, None)),
            [sentence_a, sentence_b],
            [direction_error, verdict, scores, picture],
            api_visibility="private",
        )


def similarity_tab(answers: Answers) -> None:
    """The Similarity tab: the asymmetric matrix S_ij = sim(s_i‖s_j) of a list of sentences, as a heatmap."""
    with gr.Tab("Similarity"):
        gr.Markdown(
            f"Up to {MAX_SENTENCES} sentences, one per line → the matrix S_ij = sim(s_i‖s_j). It is not symmetric: "
            "S_ij is high when sentence j (column) entails sentence i (row)."
        )
        sentences = gr.Textbox(label="Sentences, one per line", lines=6, value="\n".join(SIMILARITY_EXAMPLE))
        similarity_button = gr.Button("Similarity matrix", variant="primary")
        similarity_error = error_box("similarity-error")
        heatmap = gr.Plot(label="sim(row‖column)", format="png", elem_id="similarity-plot")
        matrix = gr.JSON(label="matrix", visible=True)
        similarity_button.click(
            in_page(answers.similarity_page, cleared=(None, None)),
            [sentences],
            [similarity_error, matrix, heatmap],
            api_visibility="private",
        )


def search_tab(answers: Answers) -> None:
    """The Search tab: the corpus sentences that entail a claim, best first (``search_rule``)."""
    with gr.Tab("Search"):
        search_help = gr.Markdown(
            elem_id="search-help",
            value="Type a claim: the app ranks the sentences of its corpus that entail it, by "
            f"{search_rule(answers.model)}. The corpus is encoded on the first search.",
        )
        with gr.Row():
            claim = gr.Textbox(label="Claim", value=SEARCH_EXAMPLES[0], scale=4)
            k = gr.Slider(1, MAX_RESULTS, value=5, step=1, label="results", scale=1)
        search_button = gr.Button("Find sentences that entail it", variant="primary")
        search_error = error_box("search-error")
        hits = gr.Dataframe(headers=["rank", "score", "sentence"], label="entailing sentences", elem_id="search-hits")
        gr.Examples([[example] for example in SEARCH_EXAMPLES], inputs=[claim])
        search_button.click(
            in_page(answers.search_page, cleared=(gr.skip(), None)),
            [claim, k],
            [search_error, search_help, hits],
            api_visibility="private",
        )


def build_app(model_name: str | None = None, answers: Answers | None = None) -> gr.Blocks:
    """The app on the model ``model_name`` (default ``$GAUSSCSE_MODEL``, else ``outputs/quickstart``), or on
    ``answers`` where given (``model_name`` is then only shown). A model that cannot be loaded gives a page that says
    so, in its header and in each tab's error box.

    Each tab's button shows its answer, or what went wrong in the tab's error box, emptied by the next good answer;
    the API endpoints ``/direction``, ``/similarity`` and ``/search`` answer with data ([`Answers`])."""
    model_name = model_name or os.environ.get("GAUSSCSE_MODEL") or DEFAULT_MODEL
    answers = answers if answers is not None else Answers.load(model_name)
    model, problem = answers.model, answers.problem

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
        direction_tab(answers)
        similarity_tab(answers)
        search_tab(answers)
        gr.api(answers.direction, api_name="direction")
        gr.api(answers.similarity, api_name="similarity")
        gr.api(answers.search, api_name="search")
    return app


__all__ = ["Answers", "build_app", "error_message", "in_page"]
