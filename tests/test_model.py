"""GaussCSEModel: Hub custom-code round trip, from_backbone, the encode/similarity API and its errors."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel

from gausscse import GaussCSEConfig, GaussCSEModel, GaussianEmbeddings
from gausscse.model.gaussian import similarity, similarity_matrix

from .helpers import MINILM_PATH, tiny_encoder_config

SENTENCES = [
    "A man is playing a guitar on a stage in front of a large crowd.",
    "A man plays music.",
    "Two dogs run through a field.",
    "Animals are outside.",
    "A woman is slicing an onion in the kitchen while talking on the phone.",
]


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_save_and_load_in_a_fresh_process_with_trust_remote_code(model_type, make_tiny_model, fresh_python, tmp_path):
    model = make_tiny_model(model_type, pooling="mean", similarity_reduction="mean_dim")
    input_ids = torch.randint(3, 1000, (3, 9))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 5:] = 0
    expected = model(input_ids=input_ids, attention_mask=attention_mask)
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    torch.save({"input_ids": input_ids, "attention_mask": attention_mask}, tmp_path / "inputs.pt")

    files = sorted(path.name for path in folder.iterdir())
    assert {"config.json", "model.safetensors", "modeling_gausscse.py", "configuration_gausscse.py", "gaussian.py"} <= (
        set(files)
    )
    assert not [name for name in files if name.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_gausscse.GaussCSEConfig",
        "AutoModel": "modeling_gausscse.GaussCSEModel",
    }
    assert config["encoder_config"]["model_type"] == model_type

    output = fresh_python(
        f"""
import importlib.util, torch
from transformers import AutoModel
assert importlib.util.find_spec("gausscse") is None, "the project must not be importable here"
model = AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True)
inputs = torch.load({str(tmp_path / "inputs.pt")!r})
with torch.no_grad():
    output = model(**inputs)
torch.save({{"mu": output.mu, "logvar": output.logvar}}, {str(tmp_path / "outputs.pt")!r})
print(type(model).__name__, type(model.encoder).__name__, model.config.pooling, model.config.similarity_reduction)
""",
        cwd=tmp_path,
    )
    encoder_name = {"bert": "BertModel", "roberta": "RobertaModel"}[model_type]
    assert output.split() == ["GaussCSEModel", encoder_name, "mean", "mean_dim"]
    reloaded = torch.load(tmp_path / "outputs.pt")
    torch.testing.assert_close(reloaded["mu"], expected.mu, rtol=0, atol=1e-6)
    torch.testing.assert_close(reloaded["logvar"], expected.logvar, rtol=0, atol=1e-6)


def test_from_backbone_loads_minilm_offline_and_encodes():
    model = GaussCSEModel.from_backbone(MINILM_PATH)
    reference = AutoModel.from_pretrained(MINILM_PATH)
    torch.testing.assert_close(
        model.encoder.embeddings.word_embeddings.weight, reference.embeddings.word_embeddings.weight
    )
    torch.testing.assert_close(
        model.encoder.encoder.layer[5].output.dense.weight, reference.encoder.layer[5].output.dense.weight
    )
    assert model.config.embedding_size == 384 and model.config.encoder_config.model_type == "bert"
    assert model.encoder.config._attn_implementation == "sdpa"
    assert not hasattr(model.encoder, "pooler") or model.encoder.pooler is None

    embeddings = model.encode(SENTENCES[:3])  # tokenizer found in the backbone's folder
    assert embeddings.mu.shape == embeddings.logvar.shape == (3, 384)
    assert embeddings.mu.abs().max() < 1  # tanh
    tokens = model.get_tokenizer()(SENTENCES[:1], return_tensors="pt")
    with torch.no_grad():
        cls_vector = reference(**tokens).last_hidden_state[:, 0]
    torch.testing.assert_close(embeddings.mu[:1], torch.tanh(model.mean_head(cls_vector)).detach(), atol=1e-5, rtol=0)


def test_encode_keeps_input_order_and_finds_the_saved_tokenizer(make_tiny_model, minilm_tokenizer, tmp_path):
    model = make_tiny_model()
    model.save_pretrained(tmp_path)
    minilm_tokenizer.save_pretrained(tmp_path)
    model = GaussCSEModel.from_pretrained(tmp_path)
    batched = model.encode(SENTENCES, batch_size=2)
    one_by_one = [model.encode(sentence) for sentence in SENTENCES]
    for index, single in enumerate(one_by_one):
        assert single.mu.shape == (32,)
        torch.testing.assert_close(batched.mu[index], single.mu, atol=1e-5, rtol=0)
        torch.testing.assert_close(batched.logvar[index], single.logvar, atol=1e-5, rtol=0)
    reversed_order = model.encode(SENTENCES[::-1], batch_size=3)
    torch.testing.assert_close(reversed_order.mu.flip(0), batched.mu, atol=1e-5, rtol=0)


def test_mean_pooling_is_the_masked_mean(make_tiny_model):
    model = make_tiny_model(pooling="mean")
    hidden = torch.randn(2, 4, 32)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    pooled = model.pool(hidden, mask)
    torch.testing.assert_close(pooled[0], hidden[0, :2].mean(0))
    torch.testing.assert_close(pooled[1], hidden[1].mean(0))
    assert torch.equal(make_tiny_model(pooling="cls").pool(hidden, mask), hidden[:, 0])


@pytest.mark.parametrize("reduction", ["sum", "mean_dim"])
def test_similarity_api_follows_the_documented_orientation(reduction, make_tiny_model, minilm_tokenizer):
    model = make_tiny_model(similarity_reduction=reduction)
    with torch.no_grad():  # spread the random Gaussians apart so the comparisons below are not float noise
        model.mean_head.weight.mul_(30)
        model.logvar_head.weight.mul_(30)
    model.get_tokenizer(minilm_tokenizer)
    premises, hypotheses = SENTENCES[0::2], [*SENTENCES[1::2], "Someone cooks."]
    pre, hyp = model.encode(premises), model.encode(hypotheses)
    matrix = model.similarity(hyp, pre)
    torch.testing.assert_close(matrix, similarity_matrix(hyp.mu, hyp.logvar, pre.mu, pre.logvar, reduction))
    # the matrix form expands the square, so in float32 it agrees with the row-wise form to ~1e-5 relative
    torch.testing.assert_close(model.similarity_pairwise(hyp, pre), matrix.diagonal(), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(model.entailment_score(premises, hypotheses), matrix.diagonal(), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(
        model.entailment_score(pre, hyp), similarity(hyp.mu, hyp.logvar, pre.mu, pre.logvar, reduction)
    )
    direction = model.entailment_direction(pre, hyp)
    expected_by_similarity = similarity(hyp.mu, hyp.logvar, pre.mu, pre.logvar, reduction) > similarity(
        pre.mu, pre.logvar, hyp.mu, hyp.logvar, reduction
    )
    assert torch.equal(direction.by_similarity, expected_by_similarity)
    assert torch.equal(direction.by_variance, pre.generality > hyp.generality)


def test_entailment_direction_prefers_the_broader_gaussian(make_tiny_model):
    model = make_tiny_model()
    mu = torch.zeros(2, 32)
    broad = GaussianEmbeddings(mu, torch.full((2, 32), 1.0))
    narrow = GaussianEmbeddings(mu + 0.05, torch.full((2, 32), -1.0))
    forward, backward = model.entailment_direction(broad, narrow), model.entailment_direction(narrow, broad)
    assert forward.by_similarity.all() and forward.by_variance.all()
    assert not backward.by_similarity.any() and not backward.by_variance.any()


def test_bf16_autocast_with_extreme_inputs_stays_finite(make_tiny_model, minilm_tokenizer):
    model = make_tiny_model()
    with torch.no_grad():
        model.logvar_head.bias[::2] = 1e4  # far beyond the clamp range
        model.logvar_head.bias[1::2] = -1e4
        model.mean_head.bias.fill_(1e4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        embeddings = model.encode(SENTENCES, tokenizer=minilm_tokenizer)
        matrix = model.similarity(embeddings, embeddings)
    assert embeddings.logvar.max() <= model.config.logvar_max and embeddings.logvar.min() >= model.config.logvar_min
    assert torch.isfinite(matrix).all() and matrix.dtype == torch.float32


def test_gradient_checkpointing_trains(make_tiny_model):
    model = make_tiny_model().train()
    model.gradient_checkpointing_enable()
    input_ids = torch.randint(3, 1000, (4, 6))
    output = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    (output.mu.sum() + output.logvar.sum()).backward()
    assert model.encoder.embeddings.word_embeddings.weight.grad is not None
    assert model.logvar_head.weight.grad is not None


def test_empty_list_gives_empty_results(make_tiny_model, minilm_tokenizer):
    model = make_tiny_model()
    model.get_tokenizer(minilm_tokenizer)
    empty = model.encode([])
    assert empty.mu.shape == (0, 32)
    assert model.similarity([], SENTENCES[:2]).shape == (0, 2)
    assert model.entailment_score([], []).shape == (0,)
    assert model.entailment_direction([], []).by_similarity.shape == (0,)


def test_bad_input_errors_name_the_argument(make_tiny_model, minilm_tokenizer):
    model = make_tiny_model()
    model.get_tokenizer(minilm_tokenizer)
    with pytest.raises(TypeError, match=r"sentences\[1\] must be a string, got int"):
        model.encode(["fine", 3])
    with pytest.raises(TypeError, match=r"sentences\[0\] must be a string, got NoneType"):
        model.encode([None])
    with pytest.raises(TypeError, match="sentences must be a list of strings, got NoneType"):
        model.encode(None)
    with pytest.raises(TypeError, match=r"hypotheses\[1\] must be a string"):
        model.entailment_score(["a", "b"], ["c", 7])
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        model.encode(["x"], batch_size=0)
    with pytest.raises(ValueError, match="premises and hypotheses must have the same length, got 2 and 1"):
        model.entailment_score(["a", "b"], ["c"])
    with pytest.raises(ValueError, match="a and b must have the same length for row-wise similarity, got 2 and 3"):
        model.similarity_pairwise(["a", "b"], ["c", "d", "e"])
    good = model.encode(["a", "b"])
    with pytest.raises(ValueError, match="a and b have different dimensions: 32 and 8"):
        model.similarity(good, GaussianEmbeddings(torch.zeros(2, 8), torch.zeros(2, 8)))
    bad = GaussianEmbeddings(good.mu.clone(), good.logvar.clone())
    bad.mu[1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"b\.mu\[1\] holds NaN or inf"):
        model.similarity(good, bad)
    with pytest.raises(ValueError, match=r"pass tokenizer=\.\.\. to encode\(\)"):
        make_tiny_model().encode(["x"])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("pooling", "max", r"pooling must be one of \('cls', 'mean'\), got 'max'"),
        ("similarity_reduction", "prod", r"similarity_reduction must be one of \('sum', 'mean_dim'\), got 'prod'"),
        ("mean_activation", "relu", r"mean_activation must be one of \('tanh', 'none'\), got 'relu'"),
        ("logvar_min", 20.0, "logvar_min must be below logvar_max"),
    ],
)
def test_config_rejects_unknown_names(field, value, message):
    with pytest.raises(ValueError, match=message):
        GaussCSEConfig(encoder_config=tiny_encoder_config(), **{field: value})


def test_safetensors_hold_encoder_and_both_heads(make_tiny_model, tmp_path):
    model = make_tiny_model(embedding_size=16)
    model.save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    assert state["mean_head.weight"].shape == state["logvar_head.weight"].shape == (16, 32)
    assert any(key.startswith("encoder.encoder.layer.1.") for key in state)
