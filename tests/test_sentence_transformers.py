"""The sentence-transformers face: a saved GaussCSE folder loads as a SentenceTransformer (trust_remote_code), plain
encode gives μ, encode_query / encode_document give vectors whose dot product is −KL (checked against
torch.distributions), the ranking equals the model's own ``sum`` / ``mean_kl`` similarity row by row, and folders
round-trip between sentence-transformers and transformers."""

from __future__ import annotations

import copy
import json

import pytest
import scipy.stats
import torch
from transformers.utils import logging as transformers_logging

from gausscse import GaussCSEConfig, GaussCSEModel
from gausscse.model.configuration_gausscse import SENTENCE_TRANSFORMERS_FILES
from studies import retrieval

from .helpers import nli_rows, tiny_encoder_config, write_jsonl_gz

CLAIMS = ["A man is outside.", "Children are playing.", "A person cooks food.", "An animal sleeps."]
PASSAGES = [
    "A man plays a red guitar in a crowded park at noon.",
    "Two children run on the beach near the river.",
    "A chef is cooking pasta inside a small kitchen.",
    "An old dog is sleeping on a sofa.",
    "Three workers repair a busy street at night.",
    "A young girl reads a book.",
    "A woman is slicing an onion.",
]


def spread_model(reduction: str = "sum", seed: int = 0) -> GaussCSEModel:
    """A tiny random model whose heads are initialised wide (std 0.5), so different sentences get clearly different
    Gaussians (the default 0.02 gives sim ≈ 1 everywhere)."""
    torch.manual_seed(seed)
    config = GaussCSEConfig(
        encoder_config=tiny_encoder_config(initializer_range=0.5), similarity_reduction=reduction, pooling="mean"
    )
    return GaussCSEModel(config).eval()


def reference_kl(mu_a: torch.Tensor, logvar_a: torch.Tensor, mu_b: torch.Tensor, logvar_b: torch.Tensor):
    """All-pairs KL(N_{a_i}‖N_{b_j}) of diagonal Gaussians from torch.distributions, float64."""

    def normal(mu: torch.Tensor, logvar: torch.Tensor) -> torch.distributions.Independent:
        return torch.distributions.Independent(
            torch.distributions.Normal(mu.double(), (0.5 * logvar.double()).exp()), 1
        )

    return torch.distributions.kl_divergence(
        normal(mu_a[:, None], logvar_a[:, None]), normal(mu_b[None], logvar_b[None])
    )


@pytest.fixture(scope="module")
def saved_folder(tmp_path_factory, minilm_tokenizer):
    folder = tmp_path_factory.mktemp("st") / "gausscse-tiny"
    spread_model().save_pretrained(folder)
    minilm_tokenizer.save_pretrained(folder)
    return folder


def test_a_saved_folder_loads_as_a_sentence_transformer_in_a_fresh_process(saved_folder, fresh_python, tmp_path):
    assert {"modules.json", "config_sentence_transformers.json", "sentence_transformer_gausscse.py"} <= {
        path.name for path in saved_folder.iterdir()
    }
    output = fresh_python(
        f"""
import importlib.util, torch
from sentence_transformers import SentenceTransformer
assert importlib.util.find_spec("gausscse") is None, "the project must not be importable here"
try:
    SentenceTransformer({str(saved_folder)!r})
except ValueError as error:
    assert "trust_remote_code=True" in str(error), error
else:
    raise AssertionError("custom code ran without trust_remote_code")
st = SentenceTransformer({str(saved_folder)!r}, trust_remote_code=True)
claims, passages = {CLAIMS!r}, {PASSAGES!r}
details = st.encode(claims, output_value=None)
torch.save({{
    "mu": st.encode(claims, convert_to_tensor=True),
    "query": st.encode_query(claims, convert_to_tensor=True),
    "document": st.encode_document(passages, convert_to_tensor=True),
    "scores": st.similarity(st.encode_query(claims), st.encode_document(passages)),
    "details_mu": torch.stack([row["mu"] for row in details]),
    "details_logvar": torch.stack([row["logvar"] for row in details]),
}}, {str(tmp_path / "st.pt")!r})
print(type(st[0]).__module__.split(".")[0], st.similarity_fn_name, st.get_embedding_dimension())
""",
        cwd=tmp_path,
    )
    assert output.split() == ["transformers_modules", "dot", "32"]
    got = torch.load(tmp_path / "st.pt")
    model = GaussCSEModel.from_pretrained(saved_folder)
    claims, passages = model.encode(CLAIMS), model.encode(PASSAGES)
    torch.testing.assert_close(got["mu"], claims.mu, rtol=0, atol=1e-6)  # plain encode: μ
    torch.testing.assert_close(got["details_mu"], claims.mu, rtol=0, atol=1e-6)  # output_value=None: μ, log σ²
    torch.testing.assert_close(got["details_logvar"], claims.logvar, rtol=0, atol=1e-6)
    kl = reference_kl(claims.mu, claims.logvar, passages.mu, passages.logvar)  # KL(claim_i‖passage_j)
    assert kl.min() > 0.1 and kl.std() > 0.1  # the Gaussians differ
    assert got["query"].shape == (4, 66) and got["document"].shape == (7, 66)  # 2d + 2
    torch.testing.assert_close(got["query"] @ got["document"].T, -kl, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got["scores"], -kl, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduction", ["sum", "mean_kl"])
@pytest.mark.parametrize("direction", ["entailing", "entailed_by"])
def test_dot_of_the_routes_ranks_every_row_as_the_models_own_similarity(direction, reduction, minilm_gausscse):
    """encode_query(claims) · encode_document(passages) = −KL; sim = 1/(1 − dot) (``sum``) or 1/(1 − dot/d)
    (``mean_kl``) is the model's own similarity, so each claim's ranking of the passages is the model's (Spearman 1,
    scipy)."""
    model = copy.deepcopy(minilm_gausscse)
    model.config.similarity_reduction = reduction
    st = model.as_sentence_transformer(direction=direction)
    scores = st.similarity(st.encode_query(CLAIMS), st.encode_document(PASSAGES))
    claims, passages = model.encode(CLAIMS), model.encode(PASSAGES)
    if direction == "entailing":  # sim(claim‖passage): the passages that entail the claim first
        expected = model.similarity(claims, passages)
    else:  # sim(passage‖claim): the passages the claim entails first
        expected = model.similarity(passages, claims).T
    scale = 1 if reduction == "sum" else model.config.embedding_size
    torch.testing.assert_close((1.0 / (1.0 - scores / scale)).float(), expected, rtol=1e-5, atol=0)
    for row in range(len(CLAIMS)):
        rho = scipy.stats.spearmanr(scores[row].numpy(), expected[row].numpy()).statistic
        assert rho == pytest.approx(1.0, abs=1e-12), (row, rho)
    assert len(set(expected.argmax(dim=1).tolist())) > 1  # the rankings are not all alike


def test_round_trips_between_sentence_transformers_and_transformers(saved_folder, fresh_python, tmp_path):
    """ST load → st.save → AutoModel load, and AutoModel load → save_pretrained → ST load, all in a process without
    this project: the same μ and log σ² every way."""
    fresh_python(
        f"""
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoModel
claims = {CLAIMS!r}

def st_gaussians(folder):
    rows = SentenceTransformer(folder, trust_remote_code=True).encode(claims, output_value=None)
    return torch.stack([row["mu"] for row in rows]), torch.stack([row["logvar"] for row in rows])

def auto_gaussians(folder):
    embeddings = AutoModel.from_pretrained(folder, trust_remote_code=True).encode(claims)
    return embeddings.mu, embeddings.logvar

SentenceTransformer({str(saved_folder)!r}, trust_remote_code=True).save("by_st")
AutoModel.from_pretrained({str(saved_folder)!r}, trust_remote_code=True).save_pretrained("by_auto")
AutoModel.from_pretrained("by_st", trust_remote_code=True).get_tokenizer().save_pretrained("by_auto")
torch.save({{
    "st_then_auto": auto_gaussians("by_st"),
    "auto_then_st": st_gaussians("by_auto"),
    "st_then_st": st_gaussians("by_st"),
}}, "round_trips.pt")
""",
        cwd=tmp_path,
    )
    expected = GaussCSEModel.from_pretrained(saved_folder).encode(CLAIMS)
    assert (tmp_path / "by_st" / "sentence_transformer_gausscse.py").is_file()
    for name, (mu, logvar) in torch.load(tmp_path / "round_trips.pt").items():
        torch.testing.assert_close(mu, expected.mu, rtol=0, atol=1e-6, msg=name)
        torch.testing.assert_close(logvar, expected.logvar, rtol=0, atol=1e-6, msg=name)


def test_a_mean_dim_model_says_its_routes_rank_by_the_sum_form(minilm_tokenizer, caplog):
    """Only mean_dim, which is no function of the total KL, warns: sum and mean_kl rank exactly on the routes."""
    transformers_logging.enable_propagation()
    try:
        spread_model("mean_dim").as_sentence_transformer(minilm_tokenizer)
        assert "'sum' form" in caplog.text and "'mean_dim'" in caplog.text
        caplog.clear()
        spread_model("sum").as_sentence_transformer(minilm_tokenizer)
        spread_model("mean_kl").as_sentence_transformer(minilm_tokenizer)
        spread_model("mean_dim").as_sentence_transformer(minilm_tokenizer, direction="none")
        assert "'sum' form" not in caplog.text
    finally:
        transformers_logging.disable_propagation()


def test_direction_none_gives_mu_on_every_route(minilm_tokenizer):
    model = spread_model()
    st = model.as_sentence_transformer(minilm_tokenizer, direction="none")
    mu = model.encode(CLAIMS, tokenizer=minilm_tokenizer).mu
    for encode in (st.encode, st.encode_query, st.encode_document):
        torch.testing.assert_close(encode(CLAIMS, convert_to_tensor=True), mu, rtol=0, atol=1e-6)


def test_bad_input_is_named(minilm_tokenizer):
    model = spread_model()
    with pytest.raises(ValueError, match=r"direction must be one of \('entailing', 'entailed_by', 'none'\)"):
        model.as_sentence_transformer(minilm_tokenizer, direction="both")
    st = model.as_sentence_transformer(minilm_tokenizer)
    with pytest.raises(TypeError, match=r"inputs\[1\] must be a string"):
        st.encode(["a sentence", 3])
    with pytest.raises(ValueError, match="task must be 'query', 'document' or None, got 'passage'"):
        st.encode(["a sentence"], task="passage")


@pytest.mark.parametrize("reduction", ["mean_dim", "mean_kl"])
def test_the_retrieval_study_ranks_the_routes_as_the_kl_and_reports(reduction, minilm_tokenizer, tmp_path):
    """studies/retrieval.py on a tiny SNLI test file, with a folder saved before modules.json existed: the
    evaluator's encode_query/encode_document flow gives the same metrics as the model API's −KL ranking, and for a
    mean_kl model the same ranking as the model's own similarity."""
    write_jsonl_gz(tmp_path / "data/snli/test.jsonl.gz", nli_rows(10))
    folder = tmp_path / "old-folder"
    spread_model(reduction).save_pretrained(folder)
    minilm_tokenizer.save_pretrained(folder)
    for name in SENTENCE_TRANSFORMERS_FILES:  # as a folder written before issue 13
        (folder / name).unlink()
    argv = ["--model", str(folder), "--data_dir", str(tmp_path / "data"), "--output", str(tmp_path / "out")]
    results = retrieval.main([*argv, "--max_queries", "8"])
    # 8 subjects: the 10 premises entail 8 distinct claims "<subject> is outside", two of them twice
    assert (results["queries"], results["corpus"], results["relevant_per_query"]) == (8, 10, 10 / 8)
    assert results["resaved_with_sentence_transformers_files"] and not (folder / "modules.json").exists()
    assert results["scores"]["routes_dot"] == pytest.approx(results["scores"]["kl_api"], abs=1e-12)
    assert results["similarity_reduction"] == reduction
    if reduction == "mean_kl":  # monotone in the KL: the routes rank as the model does
        assert results["scores"]["model_api"] == pytest.approx(results["scores"]["kl_api"], abs=1e-12)
        assert results["agreement_kl_vs_model"]["top1_same"] == 1.0
        assert results["agreement_kl_vs_model"]["spearman_min"] == pytest.approx(1.0, abs=1e-9)
    assert json.loads((tmp_path / "out/retrieval.json").read_text())["scores"] == results["scores"]
    report = (tmp_path / "out/RETRIEVAL.md").read_text()
    assert f"{100 * results['scores']['mu_cosine']['MRR@10']:.2f}" in report and "predates `modules.json`" in report
