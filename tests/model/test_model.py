"""GaussCSEModel: Hub custom-code round trip, from_backbone, the encode/similarity API and its errors."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel

from gausscse import GaussCSEConfig, GaussCSEModel, GaussianEmbeddings

from ..helpers import ACROSS_PROCESSES, MINILM_PATH, entropy, heads_by_hand, reference_similarity, tiny_encoder_config

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
    torch.testing.assert_close(reloaded["mu"], expected.mu, **ACROSS_PROCESSES)
    torch.testing.assert_close(reloaded["logvar"], expected.logvar, **ACROSS_PROCESSES)


def test_from_backbone_loads_minilm_offline_and_encodes():
    """The paper's start ([CLS], tanh, random heads) on MiniLM: the backbone's weights, μ = tanh(W_μ h_[CLS])."""
    model = GaussCSEModel.from_backbone(MINILM_PATH, start="paper")
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


@pytest.mark.parametrize("reduction", ["sum", "mean_kl", "mean_dim"])
def test_similarity_api_matches_the_kl_of_torch_distributions(reduction, make_tiny_model):
    """similarity / similarity_pairwise / entailment_score / entailment_direction against an independent formulation:
    torch.distributions' KL of the diagonal Gaussians, sim = 1/(1 + KL) ("sum"), 1/(1 + KL/d) ("mean_kl") or
    mean_k 1/(1 + KL_k) ("mean_dim")."""
    model = make_tiny_model(similarity_reduction=reduction)
    generator = torch.Generator().manual_seed(1)
    # 8-dimensional Gaussians (the API takes any d); premise_i broader (+) or narrower (−) than hypothesis_i
    broader = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0])[:, None]
    hyp_mu = 0.5 * torch.randn(6, 8, generator=generator)
    hyp_logvar = 0.5 * torch.randn(6, 8, generator=generator)
    pre = GaussianEmbeddings(
        hyp_mu + 0.3 * torch.randn(6, 8, generator=generator),
        hyp_logvar + broader + 0.2 * torch.randn(6, 8, generator=generator),
    )
    hyp = GaussianEmbeddings(hyp_mu, hyp_logvar)
    hyp_given_pre = reference_similarity(hyp.mu, hyp.logvar, pre.mu, pre.logvar, reduction)  # sim(hyp_i‖pre_j)
    pre_given_hyp = reference_similarity(pre.mu, pre.logvar, hyp.mu, hyp.logvar, reduction)  # sim(pre_i‖hyp_j)
    assert 0.01 < hyp_given_pre.min() and hyp_given_pre.max() < 0.99  # not saturated at 0 or 1
    assert (hyp_given_pre.diagonal() - pre_given_hyp.diagonal()).abs().min() > 1e-3  # the orientation shows

    # the matrix form expands the square, so in float32 it agrees with float64 to ~1e-5 relative
    torch.testing.assert_close(model.similarity(hyp, pre).double(), hyp_given_pre, rtol=1e-4, atol=0)
    torch.testing.assert_close(model.similarity(pre, hyp).double(), pre_given_hyp, rtol=1e-4, atol=0)
    torch.testing.assert_close(
        model.similarity_pairwise(hyp, pre).double(), hyp_given_pre.diagonal(), rtol=1e-5, atol=0
    )
    torch.testing.assert_close(model.entailment_score(pre, hyp).double(), hyp_given_pre.diagonal(), rtol=1e-5, atol=0)

    direction = model.entailment_direction(pre, hyp)  # does premise_i entail hypothesis_i?
    torch.testing.assert_close(direction.sim_ba.double(), hyp_given_pre.diagonal(), rtol=1e-5, atol=0)
    torch.testing.assert_close(direction.sim_ab.double(), pre_given_hyp.diagonal(), rtol=1e-5, atol=0)
    assert direction.by_similarity.tolist() == (hyp_given_pre.diagonal() > pre_given_hyp.diagonal()).tolist()
    assert direction.by_variance.tolist() == (entropy(pre.logvar) > entropy(hyp.logvar)).tolist()
    assert direction.by_variance.tolist() == [True, False, True, False, True, False]


def test_entailment_score_of_sentences_is_the_kl_score_of_their_encodings(minilm_gausscse):
    """Sentences go through the encoder's [CLS] vector and both heads, then sim(hyp‖pre): all recomputed by hand."""
    premises, hypotheses = SENTENCES[0::2], [*SENTENCES[1::2], "Someone cooks."]
    tokenizer = minilm_gausscse.get_tokenizer()
    pre_mu, pre_logvar = heads_by_hand(minilm_gausscse, tokenizer, premises)
    hyp_mu, hyp_logvar = heads_by_hand(minilm_gausscse, tokenizer, hypotheses)
    pre_mu, hyp_mu = torch.tanh(pre_mu), torch.tanh(hyp_mu)
    expected = reference_similarity(hyp_mu, hyp_logvar, pre_mu, pre_logvar, "sum").diagonal()
    reverse = reference_similarity(pre_mu, pre_logvar, hyp_mu, hyp_logvar, "sum").diagonal()
    assert expected.max() < 0.9 and (expected - reverse).abs().min() > 1e-4  # far from 1, and the orientation shows
    scores = minilm_gausscse.entailment_score(premises, hypotheses)
    torch.testing.assert_close(scores.double(), expected, rtol=1e-5, atol=0)


def test_mean_activation_none_gives_the_raw_linear_mean(make_tiny_model, minilm_tokenizer):
    """mean_activation="none": μ = W_μ v + b_μ as it is (values beyond ±1 occur); "tanh": tanh of it."""
    raw, squashed = make_tiny_model(mean_activation="none"), make_tiny_model(mean_activation="tanh")  # same seed
    for model in (raw, squashed):
        with torch.no_grad():
            model.mean_head.weight.mul_(100)  # so the linear output leaves [-1, 1]
    assert torch.equal(raw.mean_head.weight, squashed.mean_head.weight)
    linear, logvar = heads_by_hand(raw, minilm_tokenizer, SENTENCES)
    assert linear.abs().max() > 2
    raw_embeddings = raw.encode(SENTENCES, tokenizer=minilm_tokenizer)
    squashed_embeddings = squashed.encode(SENTENCES, tokenizer=minilm_tokenizer)
    torch.testing.assert_close(raw_embeddings.mu, linear, rtol=1e-5, atol=1e-5)
    assert raw_embeddings.mu.abs().max() > 2
    torch.testing.assert_close(squashed_embeddings.mu, torch.tanh(linear), rtol=1e-5, atol=1e-5)
    assert squashed_embeddings.mu.abs().max() <= 1
    for embeddings in (raw_embeddings, squashed_embeddings):  # the activation is on μ only
        torch.testing.assert_close(embeddings.logvar, logvar, rtol=1e-5, atol=1e-5)


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
        (
            "similarity_reduction",
            "prod",
            r"similarity_reduction must be one of \('sum', 'mean_kl', 'mean_dim'\), got 'prod'",
        ),
        ("mean_activation", "relu", r"mean_activation must be one of \('tanh', 'none'\), got 'relu'"),
        ("logvar_min", 20.0, "logvar_min (must be below|<) logvar_max"),
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


@pytest.mark.parametrize("reduction", ["sum", "mean_kl", "mean_dim"])
def test_a_saved_folder_loads_and_scores_with_its_own_reduction(reduction, make_tiny_model, tmp_path, minilm_tokenizer):
    """config.json names the reduction, so a folder saved as sum or mean_dim scores as it did whatever the default;
    its encoded sentences are scored against torch.distributions with that reduction."""
    make_tiny_model(similarity_reduction=reduction).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["similarity_reduction"] == reduction
    loaded = GaussCSEModel.from_pretrained(tmp_path)
    assert loaded.config.similarity_reduction == reduction
    sentences = ["a dog runs in a park", "an animal is outside", "two people eat"]
    encoded = loaded.encode(sentences, tokenizer=minilm_tokenizer)
    expected = reference_similarity(encoded.mu, encoded.logvar, encoded.mu, encoded.logvar, reduction)
    torch.testing.assert_close(loaded.similarity(encoded, encoded).double(), expected, rtol=1e-4, atol=1e-6)


def test_the_atomic_writes_take_a_str_path_too(tmp_path):
    """write_json_atomic (through write_bytes_atomic) takes a str as its hint says, making the folder."""
    from gausscse.model.utils_gausscse import write_json_atomic

    write_json_atomic(str(tmp_path / "new" / "a.json"), {"a": 1})
    assert json.loads((tmp_path / "new" / "a.json").read_text()) == {"a": 1}
