"""The frozen-state cache: a batch's Gaussians and gradients from cached states equal the full forward's (padded and
packed, a frozen μ and a learning one, a sentence twice in a batch), sentences are computed once, a full cache computes
without keeping, and a training run with the cache ends with the weights of one without it (same seed, dropout on)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from gausscse import GaussCSEConfig, GaussCSEModel
from gausscse.cli import train as train_gausscse
from gausscse.training.batch import pack_sentences
from gausscse.training.frozen_cache import FrozenStateCache, sentence_tokens
from gausscse.training.trainer import frozen_state_cache

from ..helpers import MINILM_PATH, tiny_encoder_config, train_args

DESIGNS = {
    "frozen μ, copies of the top layer": {"frozen_mean": True, "variance_layers": 1},
    "frozen μ, copies of the top 2": {"frozen_mean": True, "variance_layers": 2},
    "μ learns in the top layer": {"frozen_mean": False, "variance_layers": 1, "mean_layers": 1},
    "μ learns in the top 2, copies of the top 1": {"frozen_mean": False, "variance_layers": 1, "mean_layers": 2},
    "μ learns in the top 1, copies of the top 2": {"frozen_mean": False, "variance_layers": 2, "mean_layers": 1},
}
SENTENCES = [
    "A man is playing a red guitar on a stage.",
    "Dogs run.",
    "A woman cooks pasta in a small kitchen while it rains.",
    "Dogs run.",  # twice in one batch
    "Someone sleeps.",
]


def model_of(design: dict, seed: int = 0) -> GaussCSEModel:
    torch.manual_seed(seed)
    encoder = tiny_encoder_config(num_hidden_layers=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return GaussCSEModel(GaussCSEConfig(encoder_config=encoder, pooling="mean", **design)).train()


def batch(packed: bool, sentences=SENTENCES) -> dict[str, torch.Tensor]:
    tokenizer = AutoTokenizer.from_pretrained(MINILM_PATH)
    if packed:
        return pack_sentences([tokenizer(sentence)["input_ids"] for sentence in sentences], 32, 0)
    return dict(tokenizer(sentences, padding=True, return_tensors="pt"))


def outputs_and_gradients(model: GaussCSEModel, inputs: dict, extra: dict) -> tuple[torch.Tensor, ...]:
    weights = torch.randn(5, 32, generator=torch.Generator().manual_seed(3))
    model.zero_grad()
    output = model(**inputs, **extra)
    ((output.mu * weights).sum() + (output.logvar * weights).square().sum()).backward()
    grads = [parameter.grad for parameter in model.parameters() if parameter.requires_grad]
    return output.mu.detach(), output.logvar.detach(), *grads


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("design", DESIGNS.values(), ids=DESIGNS.keys())
def test_cached_states_give_the_full_forwards_gaussians_and_gradients(design, packed):
    model = model_of(design)
    inputs = batch(packed)
    expected = outputs_and_gradients(model, inputs, {})
    cache = FrozenStateCache(max_bytes=2**30)
    got = outputs_and_gradients(model, inputs, cache.inputs_for(model, inputs))
    assert (len(cache), cache.computed, cache.hits) == (4, 4, 1)  # "Dogs run." computed once
    for value, reference in zip(got, expected, strict=True):
        torch.testing.assert_close(value, reference, rtol=1e-5, atol=1e-6)
    again = cache.inputs_for(model, batch(not packed))  # the other layout: every sentence from the cache
    assert (cache.computed, cache.hits) == (4, 6)
    got = outputs_and_gradients(model, batch(not packed), again)
    for value, reference in zip(got[:2], expected[:2], strict=True):
        torch.testing.assert_close(value, reference, rtol=1e-5, atol=1e-6)


def test_a_full_cache_computes_what_it_cannot_keep():
    model = model_of(DESIGNS["μ learns in the top layer"])
    inputs = batch(packed=True)
    cache = FrozenStateCache(max_bytes=1)
    for _ in range(2):
        got = model(**inputs, **cache.inputs_for(model, inputs))
        torch.testing.assert_close(got.mu, model(**inputs).mu, rtol=1e-5, atol=1e-6)
    assert (len(cache), cache.stored_bytes, cache.computed) == (0, 0, 8)
    with pytest.raises(ValueError, match="max_bytes must be positive, got 0"):
        FrozenStateCache(0)


def test_sentence_tokens_finds_each_sentences_ids_in_both_layouts():
    tokenizer = AutoTokenizer.from_pretrained(MINILM_PATH)
    ids = [tokenizer(sentence)["input_ids"] for sentence in SENTENCES]
    for inputs in (batch(packed=True), batch(packed=False)):
        _, counts, token_ids = sentence_tokens(inputs)
        assert [part.tolist() for part in token_ids.split(counts.tolist())] == ids


def test_only_models_with_a_frozen_part_below_a_trained_layer_get_a_cache():
    assert frozen_state_cache(model_of(DESIGNS["frozen μ, copies of the top layer"]), None) is not None
    assert frozen_state_cache(model_of(DESIGNS["μ learns in the top layer"]), 0.5).max_bytes == 2**29
    assert frozen_state_cache(model_of(DESIGNS["μ learns in the top layer"]), 0) is None  # --frozen_cache_gb 0
    assert frozen_state_cache(model_of({"frozen_mean": False, "variance_layers": 1}), None) is None  # all learns
    assert frozen_state_cache(model_of({}), None) is None  # one encoder, the paper's
    assert frozen_state_cache(model_of({"frozen_mean": True}), None) is None  # two paths
    with pytest.raises(ValueError, match="no frozen part below a trained layer"):
        model_of({}).frozen_part(**batch(packed=False))


@pytest.mark.parametrize("flags", [[], ["--frozen_mean", "false", "--mean_layers", "1"]], ids=["frozen μ", "μ learns"])
def test_a_run_with_the_cache_ends_with_the_weights_of_a_run_without_it(flags, backbone, data_dir, tmp_path, caplog):
    """Same seed, dropout on in the trained layers, 10 steps over 40 examples (each sentence back in the second
    epoch), packed: the same weights to float32 rounding; the log says how many sentences came from the cache."""
    weights = {}
    for gib in ("0", "1"):
        output = tmp_path / f"cache_{gib}"
        argv = train_args(backbone, data_dir, output, "--start", "backbone", *flags, "--max_steps", "10")
        extra = ["--eval_strategy", "no", "--save_strategy", "no", "--pack_sequences", "true"]
        with caplog.at_level("INFO", logger="gausscse.training.trainer"):
            train_gausscse.main([*argv, *extra, "--frozen_cache_gb", gib])
        weights[gib] = load_file(output / "model.safetensors")
    assert "frozen-state cache:" in caplog.text and " reused (" in caplog.text
    started = GaussCSEModel.from_backbone(str(backbone), start="backbone").state_dict()
    moved = [name for name, value in weights["0"].items() if not torch.equal(value, started[name])]
    assert any(name.startswith("variance_layers.") for name in moved)  # it trained
    assert any(name.startswith("encoder.") for name in moved) == bool(flags)  # μ learned where it may
    for name, value in weights["0"].items():
        torch.testing.assert_close(weights["1"][name], value, rtol=1e-4, atol=1e-5, msg=name)
