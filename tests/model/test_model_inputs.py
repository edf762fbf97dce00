"""The model and its math under hostile inputs: exact fp32 similarity at tiny variances, user-given embeddings of the
wrong shape or type, out-of-range log σ², each saved folder running its own code, encode() errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gausscse import GaussCSEConfig, GaussianEmbeddings, similarity, similarity_matrix

from ..helpers import reference_similarity, tiny_encoder_config

D = 768
TINY_BERT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}


@pytest.mark.parametrize("reduction", ["sum", "mean_kl"])
@pytest.mark.parametrize("logvar_level", [-10.0, -5.0, 0.0, 5.0, 10.0])
def test_kl_similarity_matrix_is_exact_in_float32_over_the_clamp_range(logvar_level, reduction):
    """The matrix-product path of the KL reductions, float32 in, against torch.distributions in float64."""
    generator = torch.Generator().manual_seed(0)
    signs = torch.randint(0, 2, (6, D), generator=generator).float() * 2 - 1  # μ = ±1
    mu = torch.cat([signs, signs[:2] + 1e-3 * torch.randn(2, D, generator=generator)])  # near-duplicates too
    logvar = logvar_level + 0.01 * torch.randn(mu.shape, generator=generator)
    logvar[:4] = logvar_level  # identical variances as well
    matrix = similarity_matrix(mu, logvar, mu, logvar, reduction)  # float32 in, float32 out
    assert matrix.dtype == torch.float32
    expected = reference_similarity(mu, logvar, mu, logvar, reduction)
    relative = ((matrix.double() - expected).abs() / expected).max()
    assert relative <= 1e-4, f"relative error {relative:.2e} at log σ² = {logvar_level}"
    torch.testing.assert_close(matrix.diag(), torch.ones(len(mu)), atol=1e-4, rtol=0)
    row_wise = similarity(mu, logvar, mu, logvar, reduction)
    torch.testing.assert_close(matrix.diag(), row_wise, atol=1e-4, rtol=0)


def test_user_given_embeddings_are_checked_or_converted():
    mu, logvar = np.random.default_rng(0).normal(size=(2, 3, 8)), np.zeros((2, 3, 8))
    with pytest.raises(ValueError, match=r"must be \(d,\) or \(N, d\), got shape \(2, 3, 8\)"):
        GaussianEmbeddings(torch.as_tensor(mu), torch.as_tensor(logvar))
    from_numpy = GaussianEmbeddings(mu[0], logvar[0])  # numpy arrays become float32 tensors
    assert from_numpy.mu.dtype == torch.float32 and from_numpy.mu.shape == (3, 8)
    torch.testing.assert_close(from_numpy.mu, torch.as_tensor(mu[0], dtype=torch.float32))
    with pytest.raises(TypeError, match="mu must be a tensor or an array of numbers, got str"):
        GaussianEmbeddings("not numbers", logvar[0])
    too_broad = GaussianEmbeddings(torch.zeros(2, 8), torch.full((2, 8), 90.0))
    with pytest.raises(ValueError, match=r"b\.logvar holds values beyond ±30"):
        too_broad.check("b")


@pytest.mark.parametrize("bounds", [(-1000.0, 10.0), (-10.0, 1000.0), (5.0, 5.0)])
def test_the_logvar_clamp_is_bounded(bounds):
    with pytest.raises(ValueError, match=r"-30 <= logvar_min < logvar_max <= 30"):
        GaussCSEConfig(encoder_config=tiny_encoder_config("bert"), logvar_min=bounds[0], logvar_max=bounds[1])


def test_model_similarity_takes_numpy_and_refuses_3d(make_tiny_model):
    model = make_tiny_model("bert")
    rng = np.random.default_rng(1)
    a = GaussianEmbeddings(
        rng.normal(size=(2, model.config.embedding_size)), np.zeros((2, model.config.embedding_size))
    )
    assert model.similarity(a, a).shape == (2, 2)
    with pytest.raises(ValueError, match=r"\(d,\) or \(N, d\)"):
        model.similarity(GaussianEmbeddings(torch.zeros(2, 3, 32), torch.zeros(2, 3, 32)), a)


def test_each_saved_folder_runs_its_own_code(make_tiny_model, fresh_python, tmp_path):
    for name in ("first", "second"):
        folder = tmp_path / name
        make_tiny_model("bert").save_pretrained(folder)
        with (folder / "modeling_gausscse.py").open("a") as code:
            code.write(f"\nGaussCSEModel.SHIPPED_WITH = {name!r}\n")
    output = fresh_python(
        "from transformers import AutoModel\n"
        + "".join(
            f"print(type(AutoModel.from_pretrained({str(tmp_path / name)!r}, trust_remote_code=True)).SHIPPED_WITH)\n"
            for name in ("first", "second")
        ),
        tmp_path,
    )
    assert output.split() == ["first", "second"]


def test_encode_restores_training_mode_on_error_and_checks_max_length(make_tiny_model, minilm_tokenizer):
    model = make_tiny_model("bert").train()
    with pytest.raises(ValueError, match="max_length must be a positive integer, got 0"):
        model.encode(["a sentence"], tokenizer=minilm_tokenizer, max_length=0)
    with pytest.raises(ValueError, match="got -5"):
        model.encode(["a sentence"], tokenizer=minilm_tokenizer, max_length=-5)
    assert model.training
    long_sentence = " ".join(["word"] * 400)  # more tokens than the tiny encoder's 128 positions
    embeddings = model.encode([long_sentence], tokenizer=minilm_tokenizer, max_length=10_000)  # capped, no crash
    assert embeddings.mu.shape == (1, model.config.embedding_size) and model.training

    def broken_forward(*args, **kwargs):
        raise RuntimeError("out of memory")

    model.forward = broken_forward
    with pytest.raises(RuntimeError, match="out of memory"):
        model.encode(["a sentence"], tokenizer=minilm_tokenizer)
    assert model.training  # restored by the finally


class CallCountingTokenizer:
    """A tokenizer that counts how often each text is tokenised (and otherwise behaves as the wrapped one)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.counts: dict[str, int] = {}

    def __call__(self, texts, *args, **kwargs):
        for text in [texts] if isinstance(texts, str) else texts:
            self.counts[text] = self.counts.get(text, 0) + 1
        return self.tokenizer(texts, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_encode_tokenises_each_sentence_once_and_keeps_input_order(batch_size, make_tiny_model, minilm_tokenizer):
    model = make_tiny_model("roberta", pooling="mean")  # padding id 1, no token types: the padding must follow it
    sentences = ["a dog", "a man is playing a red guitar on a stage", "two kids", "a woman slices an onion", "a dog"]
    counting = CallCountingTokenizer(minilm_tokenizer)
    encoded = model.encode(sentences, batch_size=batch_size, tokenizer=counting)
    assert counting.counts == {"a dog": 2, **dict.fromkeys(sentences[1:4], 1)}  # once per input, in one call
    for row, sentence in enumerate(sentences):  # independent: one sentence at a time, no padding at all
        with torch.no_grad():
            alone = model(**minilm_tokenizer([sentence], return_tensors="pt"))
        torch.testing.assert_close(encoded.mu[row], alone.mu[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(encoded.logvar[row], alone.logvar[0], atol=1e-5, rtol=1e-4)
    assert encoded.mu.device == torch.device("cpu")
    on_model_device = model.encode(sentences, tokenizer=minilm_tokenizer, output_device=None)
    assert on_model_device.mu.device == model.device


def test_backbone_encoding_tokenises_once_and_matches_one_sentence_at_a_time(minilm_tokenizer):
    from transformers import BertConfig, BertModel

    from gausscse.evaluation.encoders import encode_hidden

    torch.manual_seed(0)
    backbone = BertModel(BertConfig(vocab_size=minilm_tokenizer.vocab_size, **TINY_BERT)).eval()
    sentences = ["a dog", "a man is playing a red guitar on a stage", "two kids", "a dog"]
    counting = CallCountingTokenizer(minilm_tokenizer)
    pooled = encode_hidden(backbone, counting, sentences, poolings=("cls", "mean"), batch_size=2)
    assert counting.counts == {"a dog": 2, sentences[1]: 1, "two kids": 1}
    for row, sentence in enumerate(sentences):
        with torch.no_grad():
            hidden = backbone(**minilm_tokenizer([sentence], return_tensors="pt")).last_hidden_state[0]
        torch.testing.assert_close(pooled["cls"][row], hidden[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(pooled["mean"][row], hidden.mean(dim=0), atol=1e-5, rtol=1e-4)
