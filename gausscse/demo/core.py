"""What the demo app computes, without any UI: direction of two sentences, the asymmetric similarity matrix, entailment
search over a small corpus, and their figures. Bad input raises [`DemoError`] with a message meant for the page."""

from __future__ import annotations

import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from gausscse.data.registry import default_data_dir, load_split
from gausscse.drawing.gaussians import draw_direction, draw_similarity_matrix
from gausscse.loading import ModelLoadError
from gausscse.loading import load_model as load_gausscse_model
from gausscse.model.gaussian import similarity_formula
from gausscse.model.modeling_gausscse import GaussCSEModel
from gausscse.search import SentenceIndex

DEFAULT_MODEL = "outputs/quickstart"  # the quickstart's output (bash scripts/quickstart.sh)
MAX_SENTENCES = 12  # rows of the similarity matrix
MAX_CHARACTERS = 500  # per sentence
CORPUS_SIZE = 1000  # SNLI-test premises in the search corpus
MAX_RESULTS = 20
DISPLAY_DIGITS = 4  # decimals of every number the page shows

# The search corpus where no data folder is at hand (a Space): sentences written for this demo, one a line.
EXAMPLE_CORPUS = (
    "A man is playing an electric guitar on a stage in front of a large crowd.",
    "A woman is playing the violin in a small orchestra.",
    "Two children are building a sandcastle on a sunny beach.",
    "A boy in a red jacket is riding his bicycle down a steep hill.",
    "An old man is reading a newspaper on a park bench.",
    "A chef is chopping onions in a busy restaurant kitchen.",
    "Three dogs are chasing a ball across a snowy field.",
    "A girl is painting a picture of a horse at an easel.",
    "A group of friends is hiking up a rocky mountain trail.",
    "A woman in a blue dress is dancing at a wedding.",
    "A man is repairing the engine of an old truck in a garage.",
    "Two men are playing chess in a crowded cafe.",
    "A baby is sleeping in a crib next to a window.",
    "A fisherman is pulling a net full of fish onto his boat.",
    "A teenager is skateboarding in an empty parking lot at night.",
    "A crowd is cheering at a football match in the rain.",
    "A woman is buying vegetables at an outdoor market.",
    "A firefighter is spraying water on a burning house.",
    "A couple is eating pizza at a table by the sea.",
    "A little girl is feeding ducks at a pond with her grandmother.",
    "A man in a suit is talking on the phone while crossing the street.",
    "Students are listening to a lecture in a large hall.",
    "A cat is sleeping on top of a warm laptop.",
    "A band is performing jazz music in a dark club.",
    "A surfer is riding a huge wave in the ocean.",
    "A man is playing the drums while a woman sings into a microphone.",
    "Two women are jogging along a river early in the morning.",
    "A farmer is driving a tractor through a wheat field.",
    "A doctor is examining a patient in a hospital room.",
    "Children are playing soccer on a dusty field after school.",
)

DIRECTION_EXAMPLES = (
    ("A man is playing an electric guitar on a stage in front of a large crowd.", "A man is playing music."),
    ("Someone is outside.", "Two children are building a sandcastle on a sunny beach."),
    ("A chef is chopping onions in a busy restaurant kitchen.", "A person is cooking."),
)
SIMILARITY_EXAMPLE = (
    "A man is playing an electric guitar on a stage.",
    "A man is playing a guitar.",
    "A man is playing music.",
    "Someone is making a sound.",
    "A woman is slicing a tomato.",
)
SEARCH_EXAMPLES = ("A person is playing music.", "Animals are outside.", "Someone is cooking.")


class DemoError(ValueError):
    """An input or set-up problem, with a message to show in the page."""


def shown(value: float) -> str:
    """A model setting (λ, a threshold) as the page shows it: at most ``DISPLAY_DIGITS`` decimals, no trailing zeros."""
    return f"{round(value, DISPLAY_DIGITS):g}"


def rounded(value: Any, digits: int = DISPLAY_DIGITS) -> Any:
    """``value`` with every float in it (also in lists, tuples and dicts) rounded to ``digits`` decimals."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {key: rounded(item, digits) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(rounded(item, digits) for item in value)
    return value


def load_model(name_or_path: str) -> GaussCSEModel:
    """The GaussCSE model of a folder or Hub id ([`gausscse.loading.load_model`]); [`DemoError`] where there is none."""
    try:
        return load_gausscse_model(name_or_path)
    except ModelLoadError as error:
        raise DemoError(
            f"No GaussCSE model at {name_or_path!r}: set GAUSSCSE_MODEL to a model folder or Hub id, or train one "
            f"with `bash scripts/quickstart.sh` ({error})"
        ) from error


def check_sentence(argument: str, text: str | None) -> str:
    """``text`` stripped; [`DemoError`] naming ``argument`` when it is no text, empty (also when only invisible format
    characters such as zero-width spaces) or longer than ``MAX_CHARACTERS``."""
    if text is not None and not isinstance(text, str):
        raise DemoError(f"{argument} must be text (a sentence), got {type(text).__name__}")
    text = (text or "").strip()
    if not "".join(character for character in text if unicodedata.category(character) != "Cf").strip():
        raise DemoError(f"{argument} is empty: type a sentence")
    if len(text) > MAX_CHARACTERS:
        raise DemoError(f"{argument} has {len(text)} characters; at most {MAX_CHARACTERS}")
    return text


@dataclass
class Direction:
    """Which of two sentences entails the other, by both rules of the paper."""

    sentence_a: str
    sentence_b: str
    sim_ab: float  # sim(a‖b): the score of "b entails a"
    sim_ba: float  # sim(b‖a): the score of "a entails b"
    generality_a: float  # Σ log σ²(a)
    generality_b: float
    figure: Figure
    dimensions: list[int]  # the two embedding dimensions the figure shows (x, y)
    entailment_ab: float | None = None  # the model's entailment score that a entails b (binary NLI)
    threshold: float | None = None  # the model's entailment_threshold: a entails b iff entailment_ab ≥ it

    @property
    def a_entails_b(self) -> bool:
        """The similarity rule: a entails b iff sim(b‖a) > sim(a‖b)."""
        return self.sim_ba > self.sim_ab

    @property
    def a_is_more_general(self) -> bool:
        """The variance rule: a entails b iff Σlog σ²(a) > Σlog σ²(b)."""
        return self.generality_a > self.generality_b

    def scores(self) -> dict[str, float]:
        """Both similarities and both generalities, at full precision."""
        names = ("sim(a||b)", "sim(b||a)", "generality(a)", "generality(b)")
        scores = dict(zip(names, (self.sim_ab, self.sim_ba, self.generality_a, self.generality_b), strict=True))
        return scores | ({} if self.entailment_ab is None else {"entailment score(a => b)": self.entailment_ab})

    def verdict(self) -> str:
        """Markdown: the similarity rule's answer and whether the variance rule agrees, or that neither rule can tell
        a direction (the same scores both ways, e.g. the same sentence twice)."""
        if self.sim_ab == self.sim_ba and self.generality_a == self.generality_b:
            return (
                f"**No direction**: sim(A‖B) = sim(B‖A) = {self.sim_ab:.{DISPLAY_DIGITS}f} and both Gaussians are "
                "equally broad, so neither rule says which entails which (the same sentence twice gives this)."
            )
        entailing, entailed = ("A", "B") if self.a_entails_b else ("B", "A")
        general, specific = ("A", "B") if self.a_is_more_general else ("B", "A")
        agreement = "agrees" if self.a_entails_b == self.a_is_more_general else "disagrees"
        high, low = max(self.sim_ab, self.sim_ba), min(self.sim_ab, self.sim_ba)
        broad, narrow = max(self.generality_a, self.generality_b), min(self.generality_a, self.generality_b)
        digits = DISPLAY_DIGITS
        decision = ""
        if self.entailment_ab is not None and self.threshold is not None:  # binary NLI: does A entail B at all?
            verdict = "entails" if self.entailment_ab >= self.threshold else "does not entail"
            relation = "≥" if self.entailment_ab >= self.threshold else "<"
            decision = (
                f"\n\nBinary NLI: A {verdict} B (the model's entailment score {self.entailment_ab:.{digits}f} "
                f"{relation} its threshold {shown(self.threshold)})."
            )
        return (
            f"**{entailing} entails {entailed}** (similarity rule: sim({entailed}‖{entailing}) = {high:.{digits}f} > "
            f"sim({entailing}‖{entailed}) = {low:.{digits}f})\n\nVariance rule: {general} is the broader Gaussian "
            f"(Σlog σ² {broad:.1f} vs {narrow:.1f}), so {general} entails {specific}: it {agreement}.{decision}"
        )


def direction(model: GaussCSEModel, sentence_a: str | None, sentence_b: str | None) -> Direction:
    """Both sentences encoded once: sim(a‖b), sim(b‖a), both generalities and the picture of the two Gaussians on the
    two dimensions where the broader one covers the narrower one most ([`draw_direction`])."""
    sentence_a, sentence_b = check_sentence("sentence A", sentence_a), check_sentence("sentence B", sentence_b)
    gaussians = model.encode([sentence_a, sentence_b])
    result = model.entailment_direction(gaussians[0:1], gaussians[1:2])
    figure, axis = plt.subplots(figsize=(6.4, 7), layout="constrained")
    dimensions = draw_direction(axis, gaussians.mu, gaussians.logvar, [sentence_a, sentence_b])
    plt.close(figure)  # gradio renders the figure itself; pyplot keeps no reference
    similarities = float(result.sim_ab[0]), float(result.sim_ba[0])
    generalities = float(gaussians.generality[0]), float(gaussians.generality[1])
    entailment = float(model.entailment_score(gaussians[0:1], gaussians[1:2])[0])
    return Direction(
        sentence_a,
        sentence_b,
        *similarities,
        *generalities,
        figure=figure,
        dimensions=dimensions,
        entailment_ab=entailment,
        threshold=model.config.entailment_threshold,
    )


def similarity_figure(model: GaussCSEModel, text: str | None) -> tuple[list[str], list[list[float]], Figure]:
    """The sentences (one per non-empty line, 2 to ``MAX_SENTENCES``, each checked by [`check_sentence`]),
    S_ij = sim(s_i‖s_j) and its heatmap."""
    if text is not None and not isinstance(text, str):
        raise DemoError(f"sentences must be text (one sentence per line), got {type(text).__name__}")
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not 2 <= len(lines) <= MAX_SENTENCES:
        limits = f"at least 2 sentences, one per line, and at most {MAX_SENTENCES} sentences"
        raise DemoError(f"sentences: give {limits}, got {len(lines)}")
    sentences = [check_sentence(f"sentence {row + 1}", line) for row, line in enumerate(lines)]
    embeddings = model.encode(sentences)  # once, for both sides
    matrix = model.similarity(embeddings, embeddings)
    labels = [f"{row + 1}. {line if len(line) <= 40 else line[:39] + '…'}" for row, line in enumerate(sentences)]
    size = 2.5 + 0.75 * len(sentences)
    figure, axis = plt.subplots(figsize=(size + 2.5, size + 1), layout="constrained")
    draw_similarity_matrix(axis, matrix.numpy(), labels)
    formula = similarity_formula(model.config.similarity_reduction, "row", "column")
    axis.set_title(f"sim(row‖column) = {formula}: high where the column entails the row", fontsize=9)
    plt.close(figure)
    return sentences, matrix.tolist(), figure


def search_rule(model: GaussCSEModel | None) -> str:
    """What the search ranks by, in words: the model's search score where its config states λ, else its similarity."""
    weight = None if model is None else getattr(model.config, "search_kl_weight", None)
    if weight is None:
        return "sim(claim‖sentence) (the claim's Gaussian should fit inside the sentence's)"
    return (
        f"the model's search score cos(μ_claim, μ_sentence) − {shown(weight)}·KL(claim‖sentence)/d: relevance (the "
        "cosine) plus direction (the claim's Gaussian should fit inside the sentence's)"
    )


class Corpus:
    """The search corpus, encoded into a [`SentenceIndex`] on first use (once, also under concurrent requests): the
    first ``CORPUS_SIZE`` distinct SNLI-test premises of the data folder where there is one, else ``EXAMPLE_CORPUS``."""

    def __init__(self, model: GaussCSEModel, data_dir: str | Path | None = None):
        self.model, self.description = model, ""
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self._lock = threading.Lock()
        self._index: SentenceIndex | None = None

    def index(self) -> SentenceIndex:
        with self._lock:
            if self._index is None:
                sentences = list(EXAMPLE_CORPUS)
                self.description = f"{len(EXAMPLE_CORPUS)} example sentences written for this demo"
                if self.data_dir is not None and (self.data_dir / "snli" / "test.jsonl.gz").is_file():
                    premises = load_split("snli", "test", self.data_dir)["premise"]
                    sentences = list(dict.fromkeys(premises))[:CORPUS_SIZE]
                    self.description = f"the first {len(sentences)} distinct premises of the SNLI test set"
                self._index = SentenceIndex.build(self.model, sentences, show_progress_bar=False)
            return self._index

    @property
    def sentences(self) -> list[str]:
        """The corpus (empty until the first search)."""
        return self._index.sentences if self._index is not None else []

    def search(self, claim: str | None, k: int) -> list[tuple[float, str]]:
        """The ``(score, sentence)`` of the ``k`` corpus sentences that best entail ``claim``, best first; ``k``: whole,
        from 1 to ``MAX_RESULTS`` (a whole float such as the slider's 3.0 too)."""
        claim = check_sentence("claim", claim)
        if isinstance(k, bool) or not (isinstance(k, int) or (isinstance(k, float) and k.is_integer())):
            raise DemoError(f"k must be a whole number of results from 1 to {MAX_RESULTS}, got {k!r}")
        if not 1 <= k <= MAX_RESULTS:
            raise DemoError(f"k must be between 1 and {MAX_RESULTS}, got {k!r}")
        index = self.index()
        hits = index.entailing(self.model, [claim], k=min(int(k), len(index)))[0]
        return [(hit.score, hit.sentence) for hit in hits]
