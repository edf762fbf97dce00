"""Shared fixtures: tiny random GaussCSE models and the packaged MiniLM tokenizer (all offline)."""

import pytest
from transformers import AutoTokenizer

from .helpers import MINILM_PATH, run_fresh_python, tiny_model


@pytest.fixture(scope="session")
def minilm_tokenizer():
    return AutoTokenizer.from_pretrained(MINILM_PATH)


@pytest.fixture
def make_tiny_model():
    """Factory: ``make_tiny_model(model_type="bert", seed=0, **GaussCSEConfig fields)`` → an eval-mode tiny model."""
    return tiny_model


@pytest.fixture
def fresh_python():
    """``fresh_python(code, cwd)`` runs code in a new interpreter without this project on its path."""
    return run_fresh_python
