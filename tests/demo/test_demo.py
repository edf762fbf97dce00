"""The demo: its computations against torch.distributions, its errors (shown in the tab, cleared by the next good
answer), its rounded numbers, the Direction picture's dimensions, the 2-D projection, and the app itself started as
``python app.py`` and called through ``gradio_client`` (tiny random model)."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from unittest import mock

import gradio as gr
import numpy as np
import pytest
import torch
from gradio_client import Client
from gradio_client.exceptions import AppError
from huggingface_hub import SpaceCard

from gausscse import GaussCSEConfig, GaussCSEModel
from gausscse.demo.app import Answers, build_app
from gausscse.demo.core import (
    DISPLAY_DIGITS,
    EXAMPLE_CORPUS,
    MAX_SENTENCES,
    Corpus,
    DemoError,
    direction,
    load_model,
    similarity_figure,
)
from gausscse.drawing.gaussians import SIGMAS, covering_dimensions, projection_plane

from ..helpers import reference_similarity, tiny_encoder_config, write_jsonl_gz

REPO_ROOT = Path(__file__).resolve().parents[2]
SENTENCE_A = "a man is playing a red guitar on a stage in front of a crowd"
SENTENCE_B = "a man is playing music"


def distinct_tiny_model() -> GaussCSEModel:
    """A tiny random model with weights of std 0.2, so different sentences get clearly different Gaussians."""
    torch.manual_seed(0)
    config = GaussCSEConfig(encoder_config=tiny_encoder_config(initializer_range=0.2), similarity_reduction="sum")
    return GaussCSEModel(config).eval()


@pytest.fixture
def model(minilm_tokenizer):
    tiny = distinct_tiny_model()
    tiny.get_tokenizer(minilm_tokenizer)  # encode() uses it
    return tiny


def reference(model, a: list[str], b: list[str]) -> torch.Tensor:
    """sim(a_i‖b_j) from torch.distributions on the model's own Gaussians."""
    ga, gb = model.encode(a), model.encode(b)
    return reference_similarity(ga.mu, ga.logvar, gb.mu, gb.logvar, model.config.similarity_reduction)


def test_direction_reports_both_similarities_generalities_and_the_rules(model):
    result = direction(model, f"  {SENTENCE_A} ", SENTENCE_B)
    sim_ab = float(reference(model, [SENTENCE_A], [SENTENCE_B])[0, 0])
    sim_ba = float(reference(model, [SENTENCE_B], [SENTENCE_A])[0, 0])
    assert abs(sim_ab - sim_ba) > 1e-6  # the orientations are told apart
    assert result.sim_ab == pytest.approx(sim_ab, rel=1e-5) and result.sim_ba == pytest.approx(sim_ba, rel=1e-5)
    logvar = model.encode([SENTENCE_A, SENTENCE_B]).logvar.double()
    assert [result.generality_a, result.generality_b] == pytest.approx(logvar.sum(-1).tolist(), rel=1e-5)
    assert result.a_entails_b == (sim_ba > sim_ab)
    assert result.a_is_more_general == bool(logvar[0].sum() > logvar[1].sum())
    entailing, entailed = ("A", "B") if sim_ba > sim_ab else ("B", "A")
    assert result.verdict().startswith(f"**{entailing} entails {entailed}**")
    assert result.sentence_a == SENTENCE_A  # stripped
    assert len(result.figure.axes[0].patches) == 2 * len(SIGMAS)  # each sentence's contours


def test_direction_states_binary_nli_by_the_models_entailment_score(model, monkeypatch):
    assert "Binary NLI" not in direction(model, SENTENCE_A, SENTENCE_B).verdict()  # no threshold stated
    monkeypatch.setattr(model.config, "entailment_cosine_weight", 2.0)
    score = float(model.entailment_score([SENTENCE_A], [SENTENCE_B])[0])  # that A entails B
    sim_ba = float(reference(model, [SENTENCE_B], [SENTENCE_A])[0, 0])
    assert score != pytest.approx(sim_ba, rel=1e-4)  # α changes the score
    for threshold, verdict in ((score - 0.01, "A entails B"), (score + 0.01, "A does not entail B")):
        monkeypatch.setattr(model.config, "entailment_threshold", threshold)
        result = direction(model, SENTENCE_A, SENTENCE_B)
        assert result.entailment_ab == pytest.approx(score, rel=1e-6)
        assert f"Binary NLI: {verdict} (the model's entailment score {score:.4f}" in result.verdict()
        assert result.scores()["entailment score(a => b)"] == pytest.approx(score, rel=1e-6)


def test_similarity_matrix_is_sim_row_given_column(model):
    text = f"{SENTENCE_A}\n\n{SENTENCE_B}\nan old dog sleeps\n"
    sentences, matrix, figure = similarity_figure(model, text)
    assert sentences == [SENTENCE_A, SENTENCE_B, "an old dog sleeps"]
    expected = reference(model, sentences, sentences)
    torch.testing.assert_close(torch.tensor(matrix, dtype=torch.float64), expected, rtol=1e-4, atol=0)
    assert not torch.allclose(expected, expected.T, rtol=1e-4, atol=0)  # a transposed matrix would fail
    labels = [tick.get_text() for tick in figure.axes[0].get_yticklabels()]
    assert labels[0].startswith("1. a man is playing a red guitar") and labels[1] == f"2. {SENTENCE_B}"
    assert figure.axes[0].get_title().startswith("sim(row‖column) = 1 / (1 + KL(row‖column)):")  # the model's sum


def test_a_mean_kl_models_matrix_and_title_are_its_own_similarity(model):
    model.config.similarity_reduction = "mean_kl"  # the fixture's model is built afresh for each test
    sentences, matrix, figure = similarity_figure(model, f"{SENTENCE_A}\n{SENTENCE_B}")
    expected = reference(model, sentences, sentences)  # 1 / (1 + KL/d) from torch.distributions
    torch.testing.assert_close(torch.tensor(matrix, dtype=torch.float64), expected, rtol=1e-4, atol=0)
    assert figure.axes[0].get_title().startswith("sim(row‖column) = 1 / (1 + KL(row‖column) / d):")


def test_search_ranks_the_corpus_by_sim_claim_given_sentence(model, tmp_path):
    premises = [f"premise number {k} about a dog in a park" for k in range(6)]
    rows = [{"premise": p, "hypothesis": "h", "label": "entailment"} for p in premises + premises[:2]]  # repeats
    write_jsonl_gz(tmp_path / "snli" / "test.jsonl.gz", rows)
    corpus = Corpus(model, data_dir=tmp_path)
    hits = corpus.search("a dog is outside", 4)
    assert corpus.sentences == premises and "SNLI test" in corpus.description
    scores = reference(model, ["a dog is outside"], premises)[0]
    assert [score for score, _ in hits] == pytest.approx(sorted(scores.tolist(), reverse=True)[:4], rel=1e-5)
    for score, sentence in hits:
        assert score == pytest.approx(float(scores[premises.index(sentence)]), rel=1e-5)

    fallback = Corpus(model, data_dir=tmp_path / "no-data")
    assert len(fallback.search("a dog is outside", 3)) == 3 and fallback.sentences == list(EXAMPLE_CORPUS)


def test_search_ranks_by_the_models_search_score_when_it_states_one(model, tmp_path):
    """A model with λ (search_kl_weight): the demo's hits are its search score cos − λ·KL(claim‖sentence)/d
    (scikit-learn, torch.distributions), best first, and the page says so."""
    import copy

    from gausscse.demo.core import search_rule

    from ..helpers import reference_search_score

    searching = copy.deepcopy(model)
    searching.config.search_kl_weight = 0.5
    premises = [f"premise number {k} about a dog in a park" for k in range(6)]
    write_jsonl_gz(tmp_path / "snli" / "test.jsonl.gz", [{"premise": p, "hypothesis": "h"} for p in premises])
    hits = Corpus(searching, data_dir=tmp_path).search("a dog is outside", 6)
    claim, sentences = searching.encode(["a dog is outside"]), searching.encode(premises)
    expected = reference_search_score(claim, sentences, 0.5, "entailing")[0]
    assert [score for score, _ in hits] == pytest.approx(sorted(expected.tolist(), reverse=True), rel=1e-5, abs=1e-6)
    assert "search score" in search_rule(searching) and "0.5·KL(claim‖sentence)/d" in search_rule(searching)
    assert search_rule(model).startswith("sim(claim‖sentence)")
    searching.config.search_kl_weight = 10**-1.25  # a grid value of many digits: shown with DISPLAY_DIGITS decimals
    assert "− 0.0562·KL(claim‖sentence)/d" in search_rule(searching)


def test_bad_input_and_a_missing_model_give_clear_messages(model, tmp_path):
    with pytest.raises(DemoError, match="sentence A is empty"):
        direction(model, "   ", SENTENCE_B)
    with pytest.raises(DemoError, match="sentence B has 501 characters; at most 500"):
        direction(model, SENTENCE_A, "x" * 501)
    with pytest.raises(DemoError, match="at least 2 sentences"):
        similarity_figure(model, f"{SENTENCE_A}\n  \n")
    with pytest.raises(DemoError, match=f"at most {MAX_SENTENCES} sentences, got {MAX_SENTENCES + 1}"):
        similarity_figure(model, "\n".join(f"sentence {k}" for k in range(MAX_SENTENCES + 1)))
    with pytest.raises(DemoError, match="claim is empty"):
        Corpus(model, data_dir=tmp_path).search("", 3)
    with pytest.raises(DemoError, match=r"No GaussCSE model at .*missing.* set GAUSSCSE_MODEL.* scripts/quickstart.sh"):
        load_model(str(tmp_path / "missing"))


def test_gausscse_demo_without_a_model_ends_at_start_in_one_line(tmp_path, monkeypatch, capsys):
    """The command, on a folder with no model: one line naming it, exit status 2, and no server started (it used to
    start and fail at the first request)."""
    from gausscse.demo import app

    monkeypatch.setattr(gr.Blocks, "launch", lambda *args, **kwargs: pytest.fail("the server started"))
    monkeypatch.setattr(sys, "argv", ["gausscse-demo", str(tmp_path / "missing")])
    with pytest.raises(SystemExit) as stopped:
        app.main()
    error = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and error.splitlines() == [error]
    assert error.startswith(f"gausscse-demo: error: No GaussCSE model at '{tmp_path / 'missing'}'"), error


@pytest.mark.parametrize(
    ("claim", "k", "message"),
    [
        ("A dog runs.", 2.7, r"k must be a whole number of results from 1 to \d+, got 2\.7"),
        ("A dog runs.", "5", r"k must be a whole number of results .* got '5'"),
        ("A dog runs.", True, r"k must be a whole number of results .* got True"),
        ("A dog runs.", 0, r"k must be between 1 and \d+, got 0"),
        (123, 3, "claim must be text \\(a sentence\\), got int"),
        (["A dog runs."], 3, "claim must be text \\(a sentence\\), got list"),
    ],
)
def test_the_search_api_names_a_bad_claim_or_count(model, tmp_path, claim, k, message):
    """The API answers a fractional, textual or boolean k and a claim that is not text with one message (k = 2.7 was
    truncated to 2 silently; claim = 123 gave "AttributeError: 'int' object has no attribute 'strip'"); a whole
    float such as the slider's 3.0 is a count."""
    answers = Answers(model)
    answers.corpus = Corpus(model, data_dir=tmp_path / "no-data")
    with pytest.raises(gr.Error, match=message):
        answers.search(claim, k)
    assert len(answers.search("A dog runs.", 3.0)) == 3
    with pytest.raises(gr.Error, match="sentences must be text"):
        answers.similarity(42)


def widest_covering_pair(mu: torch.Tensor, logvar: torch.Tensor) -> list[int]:
    """Independently of the demo, in plain Python: the broader Gaussian (larger Σ log σ²) and, per dimension, the
    room its 1σ interval leaves on the tighter side of the narrower one's 1σ interval, in its own σ; the two
    dimensions with the most room (ties: the lower dimension)."""
    means, logvars = mu.tolist(), logvar.tolist()
    broad = 0 if sum(logvars[0]) >= sum(logvars[1]) else 1
    narrow = 1 - broad
    room = []
    for dimension in range(len(means[0])):
        std_broad, std_narrow = math.exp(logvars[broad][dimension] / 2), math.exp(logvars[narrow][dimension] / 2)
        low_room = (means[narrow][dimension] - std_narrow) - (means[broad][dimension] - std_broad)
        high_room = (means[broad][dimension] + std_broad) - (means[narrow][dimension] + std_narrow)
        room.append(min(low_room, high_room) / std_broad)
    return sorted(range(len(room)), key=lambda dimension: (-room[dimension], dimension))[:2]


def test_the_picture_shows_the_dimensions_where_the_broader_gaussian_covers_the_narrower_one_most():
    # built so that the answer is known: B is broader; in 3 and 7 it covers A (7 with more room), in 0 the variance
    # gap is the largest but the means lie far apart, so a largest-variance-gap rule would pick 0
    mu, logvar = torch.zeros(2, 16), torch.zeros(2, 16)
    mu[1] = 5.0  # far apart everywhere but in 3 and 7
    mu[1, 3] = mu[1, 7] = 0.0
    logvar[0, 3], logvar[0, 7], logvar[0, 0] = -2.0, -4.0, -8.0
    assert covering_dimensions(mu, logvar) == [7, 3] == widest_covering_pair(mu, logvar)
    assert covering_dimensions(mu.flip(0), logvar.flip(0)) == [7, 3]  # whichever row is the broader
    # random Gaussians: the same two dimensions as the independent computation, in the same order
    for seed in range(5):
        torch.manual_seed(seed)
        mu, logvar = 0.3 * torch.randn(2, 64), torch.randn(2, 64)
        assert covering_dimensions(mu, logvar) == widest_covering_pair(mu, logvar)


def test_the_direction_picture_draws_both_gaussians_on_those_dimensions(model):
    result = direction(model, SENTENCE_A, SENTENCE_B)
    gaussians = model.encode([SENTENCE_A, SENTENCE_B])
    x, y = widest_covering_pair(gaussians.mu, gaussians.logvar)
    assert result.dimensions == [x, y]
    axis = result.figure.axes[0]
    assert axis.get_xlabel().startswith(f"dimension {x}: ") and axis.get_ylabel().startswith(f"dimension {y}: ")
    mu, std = gaussians.mu.double(), gaussians.logvar.double().mul(0.5).exp()
    one_sigma = axis.patches[:: len(SIGMAS)]  # each sentence's first contour: 1σ
    for row, ellipse in enumerate(one_sigma):
        np.testing.assert_allclose(ellipse.center, [mu[row, x], mu[row, y]], rtol=1e-6)
        np.testing.assert_allclose([ellipse.width, ellipse.height], [2 * std[row, x], 2 * std[row, y]], rtol=1e-6)


def assert_readable(figure) -> None:
    """The axes are no strip, the broader 1σ ellipse spans at least a quarter of them in both directions and the
    narrower one a hundredth (no line), and the legend is clear of the axes and their labels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)  # as gradio renders it (the demo closed it in pyplot)
    canvas.draw()
    axis = figure.axes[0]
    box, renderer = axis.get_window_extent(), canvas.get_renderer()
    assert min(box.width, box.height) >= 0.3 * max(box.width, box.height), box  # the axes are no strip either
    extents = [ellipse.get_window_extent(renderer) for ellipse in axis.patches[:: len(SIGMAS)]]
    broad = max(extents, key=lambda extent: extent.width * extent.height)
    assert broad.width >= 0.25 * box.width and broad.height >= 0.25 * box.height, (broad, box)
    for extent in extents:
        assert extent.width >= 0.01 * box.width and extent.height >= 0.01 * box.height, (extent, box)
    legend = (figure.legends[0] if figure.legends else axis.get_legend()).get_window_extent(renderer)
    for label in (axis.xaxis.label, axis.yaxis.label):
        assert not legend.overlaps(label.get_window_extent(renderer))
    assert not legend.overlaps(axis.get_tightbbox(renderer))


def test_the_picture_is_readable_when_the_dimensions_differ_a_hundredfold_and_for_the_apps_examples(
    model, minilm_gausscse, minilm_tokenizer
):
    """The user's case: the covering dimensions' σ differ by ×100 (x-axis ±150, y-axis ±1): both ellipses stay
    ellipses; and every example of the app's Direction tab draws readably."""
    import matplotlib.pyplot as plt

    from gausscse.demo.core import DIRECTION_EXAMPLES
    from gausscse.drawing.gaussians import draw_direction

    mu = torch.tensor([[0.0, 0.0, 5.0], [10.0, 0.1, 5.0]])
    logvar = torch.log(torch.tensor([[150.0, 1.5, 1.0], [20.0, 0.2, 1.0]]) ** 2)
    figure, axis = plt.subplots(figsize=(6.4, 7), layout="constrained")
    assert draw_direction(axis, mu, logvar, ["a broad sentence", "a narrow sentence"]) == [0, 1]
    assert_readable(figure)
    plt.close(figure)
    for pair in DIRECTION_EXAMPLES:
        assert_readable(direction(model, *pair).figure)
        minilm_gausscse.get_tokenizer(minilm_tokenizer)
        assert_readable(direction(minilm_gausscse, *pair).figure)


def test_projection_plane_is_orthonormal_and_spans_what_separates_the_gaussians():
    torch.manual_seed(0)
    mu, var = torch.randn(5, 16), torch.rand(5, 16) + 0.1
    plane = projection_plane(mu, var)
    torch.testing.assert_close(plane @ plane.T, torch.eye(2, dtype=torch.float64))
    # five sentences: the top-2 principal directions of the centred means (numpy's SVD, up to sign)
    principal = np.linalg.svd((mu - mu.mean(0)).numpy().astype(np.float64))[2][:2]
    np.testing.assert_allclose(np.abs(plane.numpy() @ principal.T), np.eye(2), atol=1e-6)
    # two sentences: the first axis runs along μ_a − μ_b, the second along what separates their variances
    plane = projection_plane(mu[:2], var[:2])
    difference = (mu[0] - mu[1]).double()
    assert abs(float(plane[0] @ difference)) == pytest.approx(float(difference.norm()))
    spread = (var[0] - var[1]).double()
    spread = spread - (spread @ plane[0]) * plane[0]
    assert abs(float(plane[1] @ spread)) == pytest.approx(float(spread.norm()))
    # identical sentences: the first two coordinate axes
    torch.testing.assert_close(
        projection_plane(mu[:1].repeat(2, 1), var[:1].repeat(2, 1)).abs(), torch.eye(2, 16, dtype=torch.float64)
    )


def page_answers(model, tmp_path) -> Answers:
    """The app's answers on ``model``, searching the 30 example sentences (no data folder in ``tmp_path``)."""
    answers = Answers(model)
    answers.corpus = Corpus(model, data_dir=tmp_path)
    return answers


def button_handler(app, error_box: str):
    """What the tab's button runs: the app's function whose outputs start with the error box ``#error_box``."""
    return next(
        block_fn.fn
        for block_fn in app.fns.values()
        if block_fn.outputs[:1] and block_fn.outputs[0].elem_id == error_box
    )


def assert_error_shown(update: dict, message: str) -> None:
    assert update["visible"] is True and message in update["value"], update


def assert_error_cleared(update: dict) -> None:
    assert update["visible"] is False and update["value"] == "", update


def test_an_error_shows_in_its_tab_and_the_next_good_answer_clears_it(model, tmp_path):
    app = build_app("tiny", answers=page_answers(model, tmp_path))
    run_direction = button_handler(app, "direction-error")
    error, verdict, scores, picture = run_direction("", SENTENCE_B)
    assert_error_shown(error, "sentence A is empty: type a sentence")
    assert (verdict, scores, picture) == ("", None, None)  # no answer to other input beside the message
    error, verdict, scores, picture = run_direction(SENTENCE_A, SENTENCE_B)
    assert_error_cleared(error)
    names = {"sim(a||b)", "sim(b||a)", "generality(a)", "generality(b)", "entailment score(a => b)"}
    assert "entails" in verdict and set(scores) == names

    run_similarity = button_handler(app, "similarity-error")
    assert_error_shown(run_similarity(SENTENCE_A)[0], "give at least 2 sentences")
    error, matrix, _heatmap = run_similarity(f"{SENTENCE_A}\n{SENTENCE_B}")
    assert_error_cleared(error)
    assert matrix["sentences"] == [SENTENCE_A, SENTENCE_B]

    run_search = button_handler(app, "search-error")
    assert_error_shown(run_search("", 3)[0], "claim is empty")
    error, _help, rows = run_search("a dog is outside", 3)
    assert_error_cleared(error)
    assert len(rows) == 3

    broken = build_app("missing", answers=Answers(None, "No GaussCSE model at 'missing'"))
    assert_error_shown(button_handler(broken, "direction-error")(SENTENCE_A, SENTENCE_B)[0], "No GaussCSE model")


def decimals(value: float) -> int:
    """How many decimals ``value`` is written with."""
    return len(repr(value).partition(".")[2])


def test_the_page_shows_numbers_rounded_to_display_digits(model, tmp_path):
    assert DISPLAY_DIGITS == 4
    answers = page_answers(model, tmp_path)
    verdict, scores, _picture = answers.direction_page(SENTENCE_A, SENTENCE_B)
    gaussians = model.encode([SENTENCE_A, SENTENCE_B])
    exact = {
        "sim(a||b)": float(reference(model, [SENTENCE_A], [SENTENCE_B])[0, 0]),
        "sim(b||a)": float(reference(model, [SENTENCE_B], [SENTENCE_A])[0, 0]),
        "generality(a)": float(gaussians.logvar[0].double().sum()),
        "generality(b)": float(gaussians.logvar[1].double().sum()),
        "entailment score(a => b)": float(model.entailment_score([SENTENCE_A], [SENTENCE_B])[0]),
    }
    assert all(decimals(value) <= 4 for value in scores.values()), scores
    assert scores == pytest.approx(exact, abs=5.1e-5)  # rounded, not some other number
    assert any(decimals(value) > 4 for value in exact.values())  # so the rounding was needed
    assert re.findall(r"\d\.\d+", verdict) and not re.findall(r"\d\.\d{5,}", verdict)

    shown, _heatmap = answers.similarity_page(f"{SENTENCE_A}\n{SENTENCE_B}")
    expected = reference(model, [SENTENCE_A, SENTENCE_B], [SENTENCE_A, SENTENCE_B]).tolist()
    for shown_row, expected_row in zip(shown["similarity"], expected, strict=True):
        assert all(decimals(value) <= 4 for value in shown_row), shown_row
        assert shown_row == pytest.approx(expected_row, abs=5.1e-5)

    _help, rows = answers.search_page("a dog is outside", 5)
    assert [rank for rank, _score, _sentence in rows] == [1, 2, 3, 4, 5]
    for _rank, score, sentence in rows:
        assert decimals(score) <= 4
        assert score == pytest.approx(float(reference(model, ["a dog is outside"], [sentence])[0, 0]), abs=5.1e-5)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(url: str, server: subprocess.Popen, log: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"the app exited with {server.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the app did not answer at {url} within {timeout} s:\n{log.read_text()[-4000:]}")


def test_the_app_serves_direction_as_the_model_computes_it(minilm_tokenizer, tmp_path):
    folder = tmp_path / "model"
    tiny = distinct_tiny_model()
    tiny.save_pretrained(folder)
    minilm_tokenizer.save_pretrained(folder)
    port = free_port()
    env = {
        **os.environ,
        "GAUSSCSE_MODEL": str(folder),
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
        "HF_MODULES_CACHE": str(tmp_path / "hf_modules"),
    }
    log = tmp_path / "app.log"
    with log.open("w") as output:
        server = subprocess.Popen([sys.executable, "app.py"], cwd=REPO_ROOT, env=env, stdout=output, stderr=output)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_for(url, server, log)
        client = Client(url, verbose=False)
        verdict, scores = client.predict(SENTENCE_A, SENTENCE_B, api_name="/direction")  # full precision
        tiny.get_tokenizer(minilm_tokenizer)
        expected = tiny.similarity([SENTENCE_A, SENTENCE_B], [SENTENCE_A, SENTENCE_B])
        assert scores["sim(a||b)"] == pytest.approx(float(expected[0, 1]), rel=1e-5)
        assert scores["sim(b||a)"] == pytest.approx(float(expected[1, 0]), rel=1e-5)
        entailing, entailed = ("A", "B") if expected[1, 0] > expected[0, 1] else ("B", "A")
        assert verdict.startswith(f"**{entailing} entails {entailed}**")
        with pytest.raises(AppError, match="sentence A is empty"):
            client.predict("", SENTENCE_B, api_name="/direction")
        answer = client.predict(f"{SENTENCE_A}\n{SENTENCE_B}", api_name="/similarity")
        assert answer["sentences"] == [SENTENCE_A, SENTENCE_B]
        assert answer["similarity"][0][1] == pytest.approx(float(expected[0, 1]), rel=1e-5)
        with pytest.raises(AppError, match="at least 2 sentences"):
            client.predict(SENTENCE_A, api_name="/similarity")
    finally:
        server.terminate()
        server.wait(timeout=30)


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_space_folder_deploys_as_is(tmp_path):
    build_space = load_script("build_space")
    with mock.patch.object(build_space, "HfApi") as hf_api:
        build_space.main(["--output", str(tmp_path / "space"), "--space_id", "me/demo", "--model", "me/gausscse"])
    folder = tmp_path / "space"
    metadata = SpaceCard((folder / "README.md").read_text()).data
    gradio_pin = next(
        line for line in (REPO_ROOT / "requirements.txt").read_text().splitlines() if line.startswith("gradio==")
    )
    assert metadata.sdk == "gradio" and metadata.app_file == "app.py"
    assert f"gradio=={metadata.sdk_version}" == gradio_pin  # the Space runs the Gradio the tests ran
    requirements = (folder / "requirements.txt").read_text().splitlines()
    assert requirements and set(requirements) <= set((REPO_ROOT / "requirements.txt").read_text().splitlines())
    assert {line.split("==")[0] for line in requirements} >= {"torch", "transformers", "datasets", "matplotlib"}
    assert (folder / "app.py").read_text() == (REPO_ROOT / "app.py").read_text()
    api = hf_api.return_value
    api.create_repo.assert_called_once_with("me/demo", repo_type="space", space_sdk="gradio", exist_ok=True)
    api.add_space_variable.assert_called_once_with("me/demo", "GAUSSCSE_MODEL", "me/gausscse")
    assert api.upload_folder.call_args.kwargs["folder_path"] == str(folder)
    # the copied package is complete for the app: it imports from the folder alone
    code = "import gausscse.demo.app, gausscse; print(gausscse.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONSAFEPATH": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(folder / "gausscse" / "__init__.py")
