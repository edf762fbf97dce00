"""Shared fixtures: tiny random models, the packaged MiniLM tokenizer, a tiny NLI data folder (all offline)."""

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from gausscse import GaussCSEModel
from gausscse.evaluation.encoding_cache import CACHE_ENV

from .helpers import MINILM_PATH, nli_rows, run_fresh_python, tiny_model, write_jsonl_gz


@pytest.fixture(autouse=True)
def private_encoding_cache(tmp_path_factory, monkeypatch) -> Path:
    """Every test its own folder of kept baseline encodings: none reads what another (or the user) left."""
    folder = tmp_path_factory.mktemp("encodings")
    monkeypatch.setenv(CACHE_ENV, str(folder))
    return folder


@pytest.fixture(scope="session")
def minilm_tokenizer():
    return AutoTokenizer.from_pretrained(MINILM_PATH)


@pytest.fixture
def make_tiny_model():
    """Factory: ``make_tiny_model(model_type="bert", seed=0, **GaussCSEConfig fields)`` → an eval-mode tiny model."""
    return tiny_model


@pytest.fixture
def spread_model_folder(tmp_path, minilm_tokenizer) -> Path:
    """A saved tiny ``mean_kl`` model with the MiniLM tokenizer, its sentences far apart (initializer_range 0.2)."""
    folder = tmp_path / "model"
    model = tiny_model(similarity_reduction="mean_kl", initializer_range=0.2)
    model.get_tokenizer(minilm_tokenizer)
    model.save_pretrained(folder)
    return folder


@pytest.fixture
def fresh_python():
    """``fresh_python(code, cwd)`` runs code in a new interpreter without this project on its path."""
    return run_fresh_python


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """Offline NLI files in the layout of shared/data: SNLI train (full triplets), MNLI train (no contradictions),
    SNLI dev."""
    root = tmp_path_factory.mktemp("data")
    write_jsonl_gz(root / "snli/train_100k.jsonl.gz", nli_rows(24))
    write_jsonl_gz(root / "mnli/train_subset.jsonl.gz", nli_rows(16, offset=100, with_contradiction=False))
    write_jsonl_gz(root / "snli/validation.jsonl.gz", nli_rows(12, offset=500))
    return root


@pytest.fixture(scope="session")
def backbone(tmp_path_factory) -> Path:
    """A tiny random BERT with the MiniLM tokenizer, saved like a Hub checkpoint."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(MINILM_PATH)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        initializer_range=0.2,  # distinct sentence vectors, so the random model does not start at the saddle KL = 0
    )
    torch.manual_seed(0)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def minilm_gausscse() -> GaussCSEModel:
    """The packaged MiniLM with fresh seeded heads and the paper's "sum" similarity, in eval mode (do not modify):
    real sentence vectors, so different sentences get clearly different Gaussians."""
    torch.manual_seed(0)
    return GaussCSEModel.from_backbone(MINILM_PATH, start="paper", similarity_reduction="sum").eval()
