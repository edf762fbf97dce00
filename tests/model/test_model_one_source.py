"""Each choice lives in one place and every reader takes it from there: the poolings (the model's, and the point
encoders' superset), and the truncation defaults (encoding and evaluation: the encoder's limit; training: 32)."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path
from unittest import mock

import pytest
import torch

from gausscse import GaussCSEConfig
from gausscse.cli.evaluate import build_parser as evaluate_parser
from gausscse.cli.search import build_parser as search_parser
from gausscse.data.tokenize import TRAIN_MAX_LENGTH
from gausscse.evaluation.dev_evaluator import SNLIDevEvaluator
from gausscse.evaluation.encoders import GaussianEncoder, PointEncoder, encode_hidden, load_encoder
from gausscse.model.backbone_gausscse import start_fields
from gausscse.model.configuration_gausscse import POOLINGS, TOKEN_POOLINGS
from gausscse.model.encoding_gausscse import DEFAULT_MAX_LENGTH, pool_tokens
from gausscse.model.modeling_gausscse import GaussCSEModel
from gausscse.model.sentence_transformer_gausscse import GaussCSETransformer
from gausscse.search.corpus import SentenceIndex
from gausscse.training.arguments import DataArguments
from gausscse.training.batch import TripletCollator
from gausscse.training.precision import training_step_seconds

from ..helpers import tiny_encoder_config

# ---------------------------------------------------------------------------------------------------- poolings


def test_the_token_poolings_are_the_models_plus_the_point_encoders_max():
    assert TOKEN_POOLINGS[: len(POOLINGS)] == POOLINGS and set(TOKEN_POOLINGS) - set(POOLINGS) == {"max"}
    with pytest.raises(ValueError, match="pooling must be one of"):
        GaussCSEConfig(encoder_config=tiny_encoder_config(), pooling="max")


@pytest.mark.parametrize("pooling", POOLINGS)
def test_every_model_pooling_is_a_config_a_token_pooling_and_a_start(pooling, tmp_path: Path):
    """A pooling the config takes is one ``pool_tokens`` computes and one a sentence-transformers backbone starts
    with (packing: tests/training/test_packing.py runs every one of them)."""
    config = GaussCSEConfig(encoder_config=tiny_encoder_config(), pooling=pooling)
    model = GaussCSEModel(config).eval()
    hidden, mask = torch.randn(2, 5, 32), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    torch.testing.assert_close(model.pool(hidden, mask), pool_tokens(hidden, mask, pooling))
    folder = tmp_path / "st"
    (folder / "1_Pooling").mkdir(parents=True)
    modules = [{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": pooling}))
    assert start_fields(str(folder), "backbone")["pooling"] == pooling


@pytest.mark.parametrize("pooling", TOKEN_POOLINGS)
def test_every_token_pooling_pools(pooling):
    hidden = torch.randn(2, 4, 8)
    assert pool_tokens(hidden, torch.ones(2, 4), pooling).shape == (2, 8)


# ------------------------------------------------------------------------------------------ truncation defaults


def default_of(function, argument: str):
    return inspect.signature(function).parameters[argument].default


def field_default(cls, name: str):
    return next(item.default for item in dataclasses.fields(cls) if item.name == name)


def test_every_entry_point_that_encodes_truncates_by_the_one_default():
    """encode(), the sentence-transformers module, the evaluation encoders, the SNLI-dev evaluator (directly and as
    gausscse-train's --eval_max_seq_length), gausscse-evaluate, gausscse-search and the search index all default to
    ``DEFAULT_MAX_LENGTH``: all the encoder takes (the README's one truncation policy)."""
    assert DEFAULT_MAX_LENGTH is None
    defaults = {
        "GaussCSEModel.encode": default_of(GaussCSEModel.encode, "max_length"),
        "GaussCSETransformer": default_of(GaussCSETransformer.__init__, "max_seq_length"),
        "GaussianEncoder": default_of(GaussianEncoder.__init__, "max_length"),
        "PointEncoder": default_of(PointEncoder.__init__, "max_length"),
        "load_encoder": default_of(load_encoder, "max_length"),
        "encode_hidden": default_of(encode_hidden, "max_length"),
        "SNLIDevEvaluator": default_of(SNLIDevEvaluator.__init__, "max_length"),
        "--eval_max_seq_length": field_default(DataArguments, "eval_max_seq_length"),
        "gausscse-evaluate --max_length": evaluate_parser().parse_args(["--model", "m", "--output", "o"]).max_length,
        "gausscse-search build --max_length": search_parser()
        .parse_args(["build", "--model", "m", "--corpus", "c", "--index", "i"])
        .max_length,
        "SentenceIndex.build": default_of(SentenceIndex.build, "max_length"),
    }
    assert defaults == dict.fromkeys(defaults, DEFAULT_MAX_LENGTH)


def test_training_truncates_by_the_one_training_default(backbone: Path):
    """gausscse-train's --max_seq_length, the collator's pack length (2 ×) and the precision probe's training step
    all follow ``TRAIN_MAX_LENGTH``."""
    assert field_default(DataArguments, "max_seq_length") == TRAIN_MAX_LENGTH == 32
    assert TripletCollator().pack_length == 2 * TRAIN_MAX_LENGTH
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(backbone)
    calls = []

    def recording(*args, **kwargs):
        calls.append(kwargs.get("max_length"))
        return tokenizer(*args, **kwargs)

    with mock.patch("transformers.AutoTokenizer.from_pretrained", return_value=recording):
        training_step_seconds(backbone, bf16=False, batch_size=2, repeats=1)
    assert calls == [TRAIN_MAX_LENGTH]
