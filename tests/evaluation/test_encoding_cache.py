"""Kept baseline encodings (``gausscse-evaluate``'s cache): a second run reads them instead of encoding, in a fresh
process too, with the same figures; a changed model, changed settings, ``--no_cache`` or a damaged entry encode again;
the evaluated ``--model`` is never kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel

from gausscse.cli.evaluate import main
from gausscse.evaluation.encoders import GaussianEncoder, PointEncoder, load_encoder
from gausscse.evaluation.encoding_cache import CACHE_ENV, EncodingCache, encoder_identity

from ..helpers import tiny_model

TINY_BERT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
SENTENCES = ["A man plays a guitar.", "A woman reads.", "A man plays a guitar.", "Dogs run in a park."]


def save_point_encoder(folder: Path, minilm_tokenizer, seed: int) -> Path:
    torch.manual_seed(seed)
    BertModel(BertConfig(vocab_size=minilm_tokenizer.vocab_size, **TINY_BERT)).save_pretrained(folder)
    minilm_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def folders(tmp_path, minilm_tokenizer) -> dict[str, Path]:
    gaussian = tmp_path / "gaussian"
    model = tiny_model(similarity_reduction="mean_kl", initializer_range=0.2)
    model.get_tokenizer(minilm_tokenizer)
    model.save_pretrained(gaussian)
    return {
        "model": gaussian,
        "point": save_point_encoder(tmp_path / "point", minilm_tokenizer, seed=1),
        "gaussian_baseline": gaussian,
    }


def evaluate(folders: dict[str, Path], output: Path, *extra: str) -> dict:
    return main(["--model", str(folders["model"]), "--baseline", str(folders["point"]), str(folders["model"]),
                 "--baseline_names", "point", "gaussian_baseline", "--tasks", "nli,direction,sts,retrieval",
                 "--max_examples", "40", "--no_plots", "--output", str(output), *extra])  # fmt: skip


def count_encodes(monkeypatch) -> list[str]:
    """The names of the encoders that encode from now on (``PointEncoder`` and ``GaussianEncoder``)."""
    calls: list[str] = []
    for kind in (PointEncoder, GaussianEncoder):
        original = kind.encode_unique

        def counted(self, *args, original=original, **kwargs):
            calls.append(self.name)
            return original(self, *args, **kwargs)

        monkeypatch.setattr(kind, "encode_unique", counted)
    return calls


def test_a_second_run_reads_the_baselines_back_with_the_same_figures(folders, tmp_path, monkeypatch,
                                                                     private_encoding_cache):  # fmt: skip
    first = evaluate(folders, tmp_path / "first")
    assert first["meta"]["baselines_from_cache"] == 0
    assert len(list(private_encoding_cache.glob("*.safetensors"))) == 2  # the baselines, not --model
    calls = count_encodes(monkeypatch)
    second = evaluate(folders, tmp_path / "second")
    assert calls == ["gaussian"]  # only the evaluated model encodes again
    assert second["meta"]["baselines_from_cache"] == 2
    assert second["baselines"] == first["baselines"]  # the same figures, to the last digit
    assert second["significance"] == first["significance"]


def test_no_cache_a_changed_model_and_a_damaged_entry_encode_again(folders, tmp_path, monkeypatch, minilm_tokenizer,
                                                                   private_encoding_cache):  # fmt: skip
    first = evaluate(folders, tmp_path / "first")
    calls = count_encodes(monkeypatch)
    evaluate(folders, tmp_path / "refreshed", "--no_cache")
    assert sorted(calls) == ["gaussian", "gaussian_baseline", "point"]
    entries = sorted(private_encoding_cache.glob("*.safetensors"))
    entries[0].write_bytes(entries[0].read_bytes()[:100])  # a cut entry
    calls.clear()
    damaged = evaluate(folders, tmp_path / "damaged")
    assert len(calls) == 2 and damaged["baselines"] == first["baselines"]  # the model and the cut baseline
    save_point_encoder(folders["point"], minilm_tokenizer, seed=2)  # new weights in the same folder
    calls.clear()
    changed = evaluate(folders, tmp_path / "changed")
    assert sorted(calls) == ["gaussian", "point"]
    assert changed["baselines"]["point"]["nli"] != first["baselines"]["point"]["nli"]


def test_the_key_holds_every_setting_that_changes_the_vectors(folders):
    point = load_encoder(str(folders["point"]))
    same = load_encoder(str(folders["point"]))
    assert encoder_identity(point) == encoder_identity(same)  # loaded twice: one entry
    for setting, value in [("max_length", 8), ("pooling", "cls"), ("normalize", True), ("batch_size", 3),
                           ("bf16", True)]:  # fmt: skip
        changed = load_encoder(str(folders["point"]))
        setattr(changed, setting, value)
        assert encoder_identity(changed) != encoder_identity(point), setting
    retokenized = load_encoder(str(folders["point"]))
    retokenized.tokenizer.add_tokens(["guitarist"])  # other token ids
    assert encoder_identity(retokenized) != encoder_identity(point)
    gaussian = load_encoder(str(folders["model"]))
    identity = encoder_identity(gaussian)
    gaussian.model.config.similarity_reduction = "sum"
    assert encoder_identity(gaussian) != identity
    assert encoder_identity(object()) is None


def test_an_entry_is_read_back_as_it_was_written(folders, tmp_path):
    cache = EncodingCache(tmp_path / "cache")
    for name in ("point", "model"):
        encoder = load_encoder(str(folders[name]))
        written = cache.encode_unique(encoder, SENTENCES)
        read = cache.encode_unique(encoder, SENTENCES)
        assert cache.hits == (1 if name == "point" else 2)
        assert read.index == written.index
        assert list(read.index) == ["A man plays a guitar.", "A woman reads.", "Dogs run in a park."]
        torch.testing.assert_close(read.mu, written.mu, rtol=0, atol=0)
        if written.logvar is not None:
            torch.testing.assert_close(read.logvar, written.logvar, rtol=0, atol=0)
        for setting in ("reduction", "search_kl_weight", "entailment_cosine_weight"):
            assert getattr(read, setting) == getattr(written, setting)
        other = cache.encode_unique(encoder, SENTENCES[::-1])  # other sentences (or order): another entry
        assert other.index != written.index
    encoder.model.config.search_kl_weight = 0.25  # λ changes no vector: the entry is read, scored by the new λ
    hits = cache.hits
    assert cache.encode_unique(encoder, SENTENCES).search_kl_weight == 0.25 and cache.hits == hits + 1


def test_a_fresh_process_reads_the_entry(folders, tmp_path, private_encoding_cache):
    first = evaluate(folders, tmp_path / "first")
    command = [sys.executable, "-m", "gausscse.cli.evaluate", "--model", str(folders["model"]),
               "--baseline", str(folders["point"]), str(folders["model"]), "--baseline_names", "point",
               "gaussian_baseline", "--tasks", "nli,direction,sts,retrieval", "--max_examples", "40", "--no_plots",
               "--output", str(tmp_path / "fresh")]  # fmt: skip
    env = {**os.environ, CACHE_ENV: str(private_encoding_cache), "HF_HUB_OFFLINE": "1"}
    subprocess.run(command, check=True, env=env, capture_output=True, text=True, cwd=tmp_path)
    fresh = json.loads((tmp_path / "fresh/results.json").read_text())
    assert fresh["meta"]["baselines_from_cache"] == 2
    assert fresh["baselines"] == json.loads(json.dumps(first["baselines"]))
