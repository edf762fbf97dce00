"""One shared trunk (``variance_layers`` = k): the frozen encoder gives μ, trained copies of its top k layers give
log σ². Checked against a second formulation (a copy of the whole encoder with its top k layers replaced by the
trained ones, no hook), for padded and packed batches; what trains, what stays frozen; save/load in a fresh process;
the errors."""

from __future__ import annotations

import copy

import pytest
import torch

from gausscse import GaussCSEConfig, GaussCSEModel
from gausscse.cli.train import build_model
from gausscse.model.backbone_gausscse import encoder_layers_path
from gausscse.training.arguments import parse_arguments
from gausscse.training.batch import pack_sentences

from ..helpers import ACROSS_PROCESSES, tiny_encoder_config, tiny_inputs


def encoder_layers(encoder):
    """The encoder's stack of layers."""
    return encoder.get_submodule(encoder_layers_path(encoder))


def trunk_model(layers: int = 1, seed: int = 0, **config_kwargs) -> GaussCSEModel:
    """A tiny 2-layer trunk model whose copied layers and heads differ from what they were copied from / started as."""
    torch.manual_seed(seed)
    fields = {"frozen_mean": True, "variance_layers": layers, "pooling": "mean", "mean_activation": "none"}
    model = GaussCSEModel(
        GaussCSEConfig(encoder_config=tiny_encoder_config(initializer_range=0.2), **fields, **config_kwargs)
    )
    with torch.no_grad():
        for parameter in [*model.variance_layers.parameters(), *model.logvar_head.parameters()]:
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model.eval()


def by_replacement(model: GaussCSEModel, inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(μ, log σ²) without the trunk's hook: μ from the encoder as it is; log σ² from a copy of the whole encoder
    whose top k layers are the trained copies, pooled by hand (attention-masked mean)."""
    replaced = copy.deepcopy(model.encoder)
    layers = encoder_layers(replaced)
    for offset, trained in enumerate(model.variance_layers):
        layers[len(layers) - len(model.variance_layers) + offset].load_state_dict(trained.state_dict())
    mask = inputs["attention_mask"].unsqueeze(-1).float()

    def pooled(encoder):
        return (encoder(**inputs).last_hidden_state * mask).sum(1) / mask.sum(1)

    with torch.no_grad():
        mu = model.mean_head(pooled(model.encoder))
        logvar = model.logvar_head(pooled(replaced)).clamp(model.config.logvar_min, model.config.logvar_max)
    return mu, logvar


@pytest.mark.parametrize("layers", [1, 2])
def test_trunk_forward_equals_the_encoder_with_its_top_layers_replaced(layers):
    """Padding in the batch (rows of 9, 5 and 2 tokens): the copies see the encoder's own attention mask, so padded
    tokens change nothing."""
    model = trunk_model(layers)
    inputs = tiny_inputs()
    output = model(**inputs)
    mu, logvar = by_replacement(model, inputs)
    torch.testing.assert_close(output.mu, mu, rtol=0, atol=1e-6)
    torch.testing.assert_close(output.logvar, logvar, rtol=0, atol=1e-6)
    assert not torch.allclose(output.logvar, logvar.mean(0, keepdim=True))  # log σ² depends on the sentence


def test_packed_rows_give_the_padded_gaussians(minilm_tokenizer):
    model = trunk_model(1)
    sentences = ["A man is playing a red guitar.", "Dogs run.", "A woman cooks pasta in a small kitchen."]
    token_ids = [minilm_tokenizer(sentence)["input_ids"] for sentence in sentences]
    padded = minilm_tokenizer(sentences, padding=True, return_tensors="pt")
    packed = pack_sentences(token_ids, row_length=64, position_offset=0)
    with torch.no_grad():
        expected, got = model(**padded), model(**packed)
    torch.testing.assert_close(got.mu, expected.mu, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.logvar, expected.logvar, rtol=0, atol=1e-5)


def test_only_the_copies_and_the_variance_head_train_and_the_trunk_stays_in_eval_mode():
    model = trunk_model(1).train()
    trained = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    assert trained == {
        name for name, _ in model.named_parameters() if name.startswith(("variance_layers.", "logvar_head."))
    }
    assert not model.encoder.training and all(not module.training for module in model.encoder.modules())
    assert model.variance_layers.training and model.mean_encoder is None
    encoder = sum(parameter.numel() for parameter in model.encoder.parameters())
    layer = sum(parameter.numel() for parameter in encoder_layers(model.encoder)[-1].parameters())
    heads = sum(
        parameter.numel()
        for name, parameter in model.named_parameters()
        if name.endswith("_head.weight") or name.endswith("_head.bias")
    )
    assert sum(parameter.numel() for parameter in model.parameters()) == encoder + layer + heads  # no second encoder
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    output = model(**tiny_inputs())
    assert output.mu.grad_fn is None
    output.logvar.sum().backward()
    torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1).step()
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter, before[name]) == (name not in trained), name


def test_the_copies_start_as_the_backbones_top_layers():
    encoder_config = GaussCSEConfig(encoder_config=tiny_encoder_config()).encoder_config
    from transformers import BertModel

    torch.manual_seed(3)
    encoder = BertModel(encoder_config, add_pooling_layer=False)
    fields = {
        "frozen_mean": True,
        "variance_layers": 2,
        "head_init": "identity",
        "pooling": "mean",
        "mean_activation": "none",
    }
    model = GaussCSEModel(GaussCSEConfig(encoder_config=encoder_config, **fields), encoder=encoder).eval()
    for copied, original in zip(model.variance_layers, encoder_layers(encoder), strict=True):
        for (name, a), (_, b) in zip(copied.state_dict().items(), original.state_dict().items(), strict=True):
            assert torch.equal(a, b) and a.data_ptr() != b.data_ptr(), name
    output = model(**tiny_inputs())
    torch.testing.assert_close(output.pooled_output, output.mu, rtol=0, atol=1e-6)  # identity heads: σ path = μ path


def test_a_trunk_model_round_trips_through_a_fresh_process(tmp_path, fresh_python, minilm_tokenizer):
    model = trunk_model(1)
    model.get_tokenizer(minilm_tokenizer)
    sentences = ["A man plays a guitar.", "Two dogs run through a field."]
    expected = model.encode(sentences)
    model.save_pretrained(tmp_path / "saved")
    printed = fresh_python(
        f"""
import torch
from transformers import AutoModel
model = AutoModel.from_pretrained({str(tmp_path / "saved")!r}, trust_remote_code=True)
encoded = model.encode({sentences!r})
torch.save({{"mu": encoded.mu, "logvar": encoded.logvar}}, "out.pt")
print(model.config.variance_layers, model.mean_encoder is None, model.train().encoder.training)
""",
        cwd=tmp_path,
    )
    assert printed.split() == ["1", "True", "False"]
    loaded = torch.load(tmp_path / "out.pt")
    torch.testing.assert_close(loaded["mu"], expected.mu, **ACROSS_PROCESSES)
    torch.testing.assert_close(loaded["logvar"], expected.logvar, **ACROSS_PROCESSES)


def test_bad_settings_are_named(backbone, tmp_path):
    config = tiny_encoder_config()
    with pytest.raises(ValueError, match=r"variance_layers must be at most the encoder's layers \(2\), got "):
        GaussCSEConfig(encoder_config=config, frozen_mean=True, variance_layers=3)
    with pytest.raises(ValueError, match=r"variance_layers must be a whole number >= 0, got -1"):
        GaussCSEConfig(encoder_config=config, frozen_mean=True, variance_layers=-1)
    model_args, _, _ = parse_arguments(
        [
            "--model_name_or_path",
            str(backbone),
            "--output_dir",
            str(tmp_path),
            "--start",
            "backbone",
            "--variance_layers",
            "1",
            "--lora_r",
            "4",
        ]
    )
    with pytest.raises(ValueError, match=r"--lora_r with --variance_layers"):
        build_model(model_args)
