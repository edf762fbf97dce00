"""The model card: Hub metadata that huggingface_hub's ModelCard parses into the final metrics, the figure it shows,
and its usage and search snippets run as written against a saved model."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard

from gausscse.training.model_card import render_model_card, sentence_transformers_usage

from .helpers import reference_similarity

METRICS = {"snli_dev_auprc": 61.234567, "snli_dev_accuracy": 70.5, "snli_dev_direction_accuracy": 95.25}


def card(base_model: str = "sentence-transformers/all-MiniLM-L6-v2", **kwargs) -> str:
    arguments = {"model_name": "me/gausscse-minilm", "base_model": base_model, "datasets": ["snli", "mnli"],
                 "metrics": METRICS, "training_arguments": {"loss": "ent+con+rev"}, "data_stats": {"examples": 3},
                 "reduction": "sum", "embedding_size": 384}
    return render_model_card(**{**arguments, **kwargs})


def test_hub_model_card_parses_the_metadata_and_the_final_metrics():
    parsed = ModelCard(card(figure="evaluation.png"))  # raises on a malformed model-index
    data = parsed.data
    assert data.library_name == "transformers" and data.pipeline_tag == "sentence-similarity"
    assert data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert data.datasets == ["stanfordnlp/snli", "nyu-mll/multi_nli"]
    assert data.model_name == "me/gausscse-minilm"
    results = {result.metric_type: result for result in data.eval_results}
    assert {name: result.metric_value for name, result in results.items()} == {
        "auprc": 61.2346, "accuracy": 70.5, "direction_accuracy": 95.25
    }
    assert {(r.dataset_type, r.dataset_split) for r in data.eval_results} == {("stanfordnlp/snli", "validation")}
    assert "![" in parsed.text and "](evaluation.png)" in parsed.text
    assert sentence_transformers_usage("me/gausscse-minilm", "sum", 384) in parsed.text
    assert "python app.py" in parsed.text and "huggingface.co/spaces" in parsed.text


def test_a_local_base_model_is_kept_out_of_the_metadata(tmp_path):
    parsed = ModelCard(card(base_model=str(tmp_path), metrics={}))
    assert parsed.data.base_model is None and parsed.data.eval_results is None
    assert str(tmp_path) in parsed.text and "No evaluation ran inside training" in parsed.text
    assert "![" not in parsed.text


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("reduction", ["sum", "mean_kl"])
def test_the_cards_usage_and_search_snippets_run_against_a_saved_model(reduction, minilm_gausscse, tmp_path):
    """Each snippet of a card written for the model's reduction prints the model's own similarities."""
    model = copy.deepcopy(minilm_gausscse)
    model.config.similarity_reduction = reduction
    folder = tmp_path / "me" / "gausscse-minilm"  # the card's model name, as a folder
    model.save_pretrained(folder)
    model.get_tokenizer().save_pretrained(folder)
    usage, st_usage, search = python_blocks(card(reduction=reduction, embedding_size=model.config.embedding_size))
    found, scores = run_snippets(usage + search, tmp_path)
    passages = re.search(r"^passages = (\[.*\])$", search, re.M).group(1)
    passages = eval(passages)
    claim = re.search(r"model\.encode\(\[(\".*?\")\]\)", search).group(1).strip('"')
    encoded_passages, encoded_claim = model.encode(passages), model.encode([claim])
    expected = reference_similarity(encoded_claim.mu, encoded_claim.logvar, encoded_passages.mu,
                                    encoded_passages.logvar, reduction)[0]
    best = expected.argsort(descending=True)[:2]
    assert found == [passages[i] for i in best.tolist()]
    torch.testing.assert_close(torch.tensor(scores, dtype=torch.float64), expected[best], rtol=1e-5, atol=0)
    # the sentence-transformers snippet prints sim(claim‖passage) for each of its passages
    st_passages = model.encode(eval(re.search(r"^passages = (\[.*\])$", st_usage, re.M).group(1)))
    st_claim = model.encode([re.search(r'^claims = \["(.*)"\]$', st_usage, re.M).group(1)])
    st_expected = reference_similarity(st_claim.mu, st_claim.logvar, st_passages.mu, st_passages.logvar, reduction)[0]
    printed = run_python(st_usage, tmp_path)
    st_scores = torch.tensor(eval(re.search(r"tensor\((\[\[.*?\]\])", printed, re.S).group(1)), dtype=torch.float64)
    torch.testing.assert_close(st_scores[0], st_expected, rtol=1e-5, atol=0)


def run_python(code: str, cwd: Path) -> str:
    """Run ``code`` in a fresh interpreter (tensors printed with 10 digits); return its stdout."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_MODULES_CACHE": str(cwd / "hf_modules")}
    done = subprocess.run(
        [sys.executable, "-c", "import torch\ntorch.set_printoptions(precision=10)\n" + code],
        cwd=cwd, capture_output=True, text=True, timeout=300, env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def run_snippets(code: str, cwd: Path) -> tuple[list[str], list[float]]:
    """Run the card's snippets in a fresh interpreter (the search snippet imports the installed gausscse) and read the
    search's printout: the found passages and their scores."""
    last = run_python(code, cwd).strip().splitlines()[-1]
    found = eval(last[: last.index("] tensor(") + 1])
    scores = eval(re.search(r"tensor\((\[.*?\])", last).group(1))
    return found, scores


@pytest.mark.parametrize("adapter", [False, True])
def test_the_card_names_how_to_load_the_folder(adapter):
    loading = python_blocks(card(adapter=adapter))[0]
    assert ("load_adapter_model" in loading) == adapter and ("AutoModel.from_pretrained" in loading) != adapter
