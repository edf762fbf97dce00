"""One trunk whose μ learns (``mean_layers`` = k, ``frozen_mean=False``): the encoder's top k layers and the trained
copies train, the embeddings and the layers below stay frozen and in eval mode; the gradients of what trains equal
those of a plain model in which everything takes gradients (a second formulation); the config, a command line and a
fresh process; the errors."""

from __future__ import annotations

import copy

import pytest
import torch

from gausscse import GaussCSEConfig, GaussCSEModel
from gausscse.cli.train import build_model
from gausscse.training.arguments import parse_arguments

from ..helpers import ACROSS_PROCESSES, tiny_encoder_config, tiny_inputs
from .test_variance_layers import encoder_layers

NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}  # one forward pass = another


def learning_trunk(mean_layers: int | None = 1, seed: int = 0, **config_kwargs) -> GaussCSEModel:
    """A tiny 2-layer one-trunk model whose μ learns through the encoder's top ``mean_layers`` layers."""
    torch.manual_seed(seed)
    fields = {"frozen_mean": False, "variance_layers": 1, "mean_layers": mean_layers, "pooling": "mean"}
    fields.update(config_kwargs)
    config = GaussCSEConfig(encoder_config=tiny_encoder_config(initializer_range=0.2, **NO_DROPOUT), **fields)
    return GaussCSEModel(config)


def trained_names(model: GaussCSEModel) -> set[str]:
    return {name for name, parameter in model.named_parameters() if parameter.requires_grad}


def test_the_top_layer_the_copies_and_the_heads_train_the_rest_stays_frozen_and_in_eval_mode():
    model = learning_trunk(1).train()
    top = f"encoder.{'encoder.layer'}.1."
    assert trained_names(model) == {
        name
        for name, _ in model.named_parameters()
        if name.startswith((top, "variance_layers.", "logvar_head.", "mean_head."))
    }
    layers = encoder_layers(model.encoder)
    assert layers[1].training and model.variance_layers.training
    assert not layers[0].training and not model.encoder.embeddings.training
    output = model(**tiny_inputs())
    assert output.mu.grad_fn is not None  # μ is part of the graph now
    (output.mu.sum() + output.logvar.sum()).backward()
    for name, parameter in model.named_parameters():
        assert (parameter.grad is not None) == (name in trained_names(model)), name


@pytest.mark.parametrize("mean_layers", [1, 2, None])
def test_gradients_equal_those_of_a_model_where_everything_trains(mean_layers):
    """The same loss through a deep copy whose every parameter takes gradients: the trained parameters get the same
    gradients, and the same values come out (freezing changes which gradients exist, not what they are)."""
    model = learning_trunk(mean_layers).train()
    free = copy.deepcopy(model).requires_grad_(True)
    inputs = tiny_inputs()
    weights = torch.randn(3, 32, generator=torch.Generator().manual_seed(5))
    outputs = [candidate(**inputs) for candidate in (model, free)]
    for output in outputs:
        ((output.mu * weights).sum() + (output.logvar * weights).square().sum()).backward()
    torch.testing.assert_close(outputs[0].mu, outputs[1].mu, rtol=0, atol=0)
    torch.testing.assert_close(outputs[0].logvar, outputs[1].logvar, rtol=0, atol=0)
    free_grads = dict(free.named_parameters())
    trained = trained_names(model)
    assert any(name.startswith("encoder.") for name in trained)
    if mean_layers is None:  # the whole encoder learns, its embeddings too
        assert {name for name, _ in model.encoder.named_parameters(prefix="encoder")} <= trained
    for name, parameter in model.named_parameters():
        if name in trained:
            torch.testing.assert_close(parameter.grad, free_grads[name].grad, rtol=1e-5, atol=1e-7)


def test_a_learning_trunk_round_trips_through_a_fresh_process(tmp_path, fresh_python, minilm_tokenizer):
    model = learning_trunk(1)
    with torch.no_grad():
        for parameter in encoder_layers(model.encoder)[1].parameters():  # trained away from the start
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.get_tokenizer(minilm_tokenizer)
    sentences = ["A man plays a guitar.", "Two dogs run through a field."]
    expected = model.encode(sentences)
    model.save_pretrained(tmp_path / "saved")
    printed = fresh_python(
        f"""
import torch
from transformers import AutoModel
model = AutoModel.from_pretrained({str(tmp_path / "saved")!r}, trust_remote_code=True).train()
encoded = model.encode({sentences!r})
torch.save({{"mu": encoded.mu, "logvar": encoded.logvar}}, "out.pt")
layers = model.encoder.encoder.layer
frozen = not layers[0].attention.self.query.weight.requires_grad
print(model.config.mean_layers, layers[0].training, layers[1].training, frozen)
""",
        cwd=tmp_path,
    )
    assert printed.split() == ["1", "False", "True", "True"]
    loaded = torch.load(tmp_path / "out.pt")
    torch.testing.assert_close(loaded["mu"], expected.mu, **ACROSS_PROCESSES)
    torch.testing.assert_close(loaded["logvar"], expected.logvar, **ACROSS_PROCESSES)


def test_the_command_line_builds_a_learning_trunk_from_a_backbone(backbone, tmp_path):
    flags = ["--model_name_or_path", str(backbone), "--output_dir", str(tmp_path), "--start", "backbone"]
    model_args, _, _ = parse_arguments([*flags, "--frozen_mean", "false", "--mean_layers", "1"])
    model = build_model(model_args)
    config = model.config
    trunk = (config.frozen_mean, config.variance_layers, config.mean_layers, config.head_init)
    assert trunk == (False, 1, 1, "identity")
    assert not model.mean_head.weight.requires_grad  # μ stays the pooled vector of the (learning) top layer
    model_args, _, _ = parse_arguments([*flags, "--frozen_mean", "false"])
    assert build_model(model_args).variance_layers is None  # no trunk flag: one trained encoder, as before


def test_bad_settings_are_named():
    config = tiny_encoder_config()
    needs = r"mean_layers .* needs variance_layers >= 1 \(one trunk\) and frozen_mean=False, got "
    with pytest.raises(ValueError, match=needs + "variance_layers=0, frozen_mean=False"):
        GaussCSEConfig(encoder_config=config, mean_layers=1)
    with pytest.raises(ValueError, match=needs + "variance_layers=1, frozen_mean=True"):
        GaussCSEConfig(encoder_config=config, frozen_mean=True, variance_layers=1, mean_layers=1)
    with pytest.raises(ValueError, match=r"mean_layers must be at most the encoder's layers \(2\), got mean_layers=3"):
        GaussCSEConfig(encoder_config=config, variance_layers=1, mean_layers=3)
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ValueError, match=r"mean_layers must be a whole number >= 0, got"):
            GaussCSEConfig(encoder_config=config, variance_layers=1, mean_layers=bad)
