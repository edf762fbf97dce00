"""The sentence-transformers face: a saved GaussCSE folder loads as a SentenceTransformer (trust_remote_code), plain
encode gives μ, encode_query / encode_document give float32 vectors whose dot product is −KL (checked against
torch.distributions), the ranking equals the model's own ``sum`` / ``mean_kl`` similarity row by row, the options that
would break dot = −KL on those routes (normalize_embeddings, quantised precision, truncate_dim) are refused, the
route dimension is reported, and folders round-trip between sentence-transformers and transformers."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pytest
import scipy.stats
import torch
from sentence_transformers import SentenceTransformer
from transformers.utils import logging as transformers_logging

from gausscse import GaussCSEConfig, GaussCSEModel
from gausscse.model.configuration_gausscse import SENTENCE_TRANSFORMERS_FILES
from gausscse.model.encoding_gausscse import resolve_max_length
from gausscse.model.sentence_transformer_gausscse import (
    GaussCSESentenceTransformer,
    GaussCSETransformer,
    loaded_hub_id,
)
from studies import retrieval

from ..helpers import ACROSS_PROCESSES, nli_rows, tiny_encoder_config, write_jsonl_gz

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


def assert_dot_is_minus_kl(query: torch.Tensor, document: torch.Tensor, kl: torch.Tensor) -> None:
    """The route vectors are float32 and query · document = −KL to float32 rounding: within (n + 2)·ε·Σ_k |q_k d_k|,
    the error bound of an n-term float32 inner product plus the rounding of the vectors themselves to float32."""
    assert query.dtype == document.dtype == torch.float32, (query.dtype, document.dtype)
    error = ((query @ document.T).double() + kl).abs()
    epsilon = torch.finfo(torch.float32).eps
    bound = (query.shape[1] + 2) * epsilon * (query.double().abs() @ document.double().abs().T)
    assert (error <= bound).all(), (error / bound).max()


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
from transformers.dynamic_module_utils import get_class_from_dynamic_module
st = SentenceTransformer({str(saved_folder)!r}, trust_remote_code=True)
claims, passages = {CLAIMS!r}, {PASSAGES!r}
details = st.encode(claims, output_value=None)
plain_query = st.encode_query(claims, normalize_embeddings=True, convert_to_tensor=True)  # not refused: plain
# the class that checks the routes, from the folder's own code (what the plain model's warning names)
checked_class = get_class_from_dynamic_module(
    "sentence_transformer_gausscse.GaussCSESentenceTransformer", {str(saved_folder)!r}
)
checked = checked_class({str(saved_folder)!r}, trust_remote_code=True)
refusals = []
for options in ({{"normalize_embeddings": True}}, {{"precision": "int8"}}):
    try:
        checked.encode_query(claims, **options)
    except ValueError as error:
        refusals.append(str(error))
same = checked.encode_query(claims, convert_to_tensor=True), st.encode_query(claims, convert_to_tensor=True)
assert torch.equal(*same)
assert torch.allclose(plain_query.norm(dim=-1), torch.ones(len(claims)))
torch.save({{
    "mu": st.encode(claims, convert_to_tensor=True),
    "query": st.encode_query(claims, convert_to_tensor=True),
    "document": st.encode_document(passages, convert_to_tensor=True),
    "scores": st.similarity(st.encode_query(claims), st.encode_document(passages)),
    "details_mu": torch.stack([row["mu"] for row in details]),
    "details_logvar": torch.stack([row["logvar"] for row in details]),
    "refusals": refusals,
}}, {str(tmp_path / "st.pt")!r})
print(type(st[0]).__module__.split(".")[0], st.similarity_fn_name, st.get_embedding_dimension())
print(type(st).__name__, type(checked).__name__, checked.get_embedding_dimension(task="query"))
print(st.encode_document(passages).dtype)
""",
        cwd=tmp_path,
    )
    # the plain SentenceTransformer a Hub user holds stays plain (the warning names the class that checks); the
    # folder's GaussCSESentenceTransformer refuses what breaks the routes and reports both dimensions
    assert output.split() == [
        "transformers_modules", "dot", "32", "SentenceTransformer", "GaussCSESentenceTransformer", "66", "float32"
    ]  # fmt: skip
    got = torch.load(tmp_path / "st.pt")
    model = GaussCSEModel.from_pretrained(saved_folder)
    claims, passages = model.encode(CLAIMS), model.encode(PASSAGES)
    torch.testing.assert_close(got["mu"], claims.mu, **ACROSS_PROCESSES)  # plain encode: μ
    torch.testing.assert_close(got["details_mu"], claims.mu, **ACROSS_PROCESSES)  # output_value=None: μ, log σ²
    torch.testing.assert_close(got["details_logvar"], claims.logvar, **ACROSS_PROCESSES)
    kl = reference_kl(claims.mu, claims.logvar, passages.mu, passages.logvar)  # KL(claim_i‖passage_j)
    assert kl.min() > 0.1 and kl.std() > 0.1  # the Gaussians differ
    assert got["query"].shape == (4, 66) and got["document"].shape == (7, 66)  # 2d + 2
    assert_dot_is_minus_kl(got["query"], got["document"], kl)
    torch.testing.assert_close(got["scores"], got["query"] @ got["document"].T, rtol=1e-6, atol=1e-6)
    assert [message.split(":")[0] for message in got["refusals"]] == [
        "encode_query(normalize_embeddings=True) is refused",
        "encode_query(precision='int8') is refused",
    ]


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
    assert scores.dtype == torch.float32  # float32 route vectors: sim to float32 rounding of the KL's terms
    torch.testing.assert_close(1.0 / (1.0 - scores / scale), expected, rtol=1e-4, atol=0)
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
        torch.testing.assert_close(mu, expected.mu, **ACROSS_PROCESSES, msg=name)
        torch.testing.assert_close(logvar, expected.logvar, **ACROSS_PROCESSES, msg=name)


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
    for name in SENTENCE_TRANSFORMERS_FILES:  # as a folder written before the module had its own code file
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


@pytest.mark.parametrize("route", ["query", "document"])
def test_the_routes_refuse_normalize_embeddings(route, minilm_tokenizer):
    """A unit-length route vector no longer has dot = −KL (top-5 agreement with the exact ranking fell to 0.77):
    refused with why and what to do; μ (plain encode) and direction="none" routes still normalise."""
    st = spread_model().as_sentence_transformer(minilm_tokenizer)
    with pytest.raises(ValueError, match=rf"^encode_{route}\(normalize_embeddings=True\) is refused") as refused:
        getattr(st, f"encode_{route}")(CLAIMS, normalize_embeddings=True)
    message = str(refused.value)
    assert "query · document = −KL" in message and "st.similarity" in message
    assert "st.encode(texts, normalize_embeddings=True)" in message  # the cosine alternative: μ
    with pytest.raises(ValueError, match=rf"^encode_{route}\(normalize_embeddings=True\) is refused"):
        st.encode(CLAIMS, task=route, normalize_embeddings=True)  # the route, by task
    mu = st.encode(CLAIMS, normalize_embeddings=True, convert_to_tensor=True)
    torch.testing.assert_close(mu.norm(dim=1), torch.ones(len(CLAIMS)))
    points = spread_model().as_sentence_transformer(minilm_tokenizer, direction="none")
    normalised = getattr(points, f"encode_{route}")(CLAIMS, normalize_embeddings=True, convert_to_tensor=True)
    torch.testing.assert_close(normalised, mu)


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_the_routes_refuse_quantised_precision(precision, minilm_tokenizer):
    """Quantising the route vectors destroys the −KL ranking (int8 top-5 agreement fell to 0.27): refused on both
    routes; μ (plain encode) still quantises."""
    st = spread_model().as_sentence_transformer(minilm_tokenizer)
    for route in ("query", "document"):
        with pytest.raises(ValueError, match=rf"^encode_{route}\(precision='{precision}'\) is refused") as refused:
            getattr(st, f"encode_{route}")(CLAIMS, precision=precision)
        assert "query · document = −KL" in str(refused.value) and "st.encode(texts, precision=" in str(refused.value)
        assert "keep precision='float32'" in str(refused.value)  # what the routes accept
    expected = {"int8": np.int8, "uint8": np.uint8, "binary": np.int8, "ubinary": np.uint8}[precision]
    assert st.encode(CLAIMS, precision=precision).dtype == expected


def test_the_routes_refuse_truncate_dim(minilm_tokenizer):
    """A truncated route vector is a part of the −KL sum: refused whether truncate_dim is passed or set on the
    model; μ truncates as for any model."""
    st = spread_model().as_sentence_transformer(minilm_tokenizer)
    with pytest.raises(ValueError, match=r"^encode_query\(truncate_dim=8\) is refused"):
        st.encode_query(CLAIMS, truncate_dim=8)
    st.truncate_dim = 8
    with pytest.raises(ValueError, match=r"^encode_document\(truncate_dim=8\) is refused.*truncate_embeddings\(None"):
        st.encode_document(PASSAGES)
    assert st.encode(CLAIMS).shape == (len(CLAIMS), 8)
    with st.truncate_embeddings(None):
        assert st.encode_query(CLAIMS).shape == (len(CLAIMS), 66)


def test_the_route_vectors_are_float32_and_their_dot_is_minus_kl(minilm_tokenizer):
    """precision="float32" (the default) gives float32 on the routes, as numpy and as tensors; the dot product is −KL
    (torch.distributions) to float32 rounding, on the model's sentences and on Gaussians over the whole log σ² clamp
    range, identical pairs (KL = 0, where the expanded square cancels most) included."""
    model = spread_model()
    st = model.as_sentence_transformer(minilm_tokenizer)
    assert st.encode_query(CLAIMS, precision="float32").dtype == np.float32
    assert st.encode_document(PASSAGES).dtype == np.float32
    query = st.encode_query(CLAIMS, convert_to_tensor=True)
    document = st.encode_document(PASSAGES, convert_to_tensor=True)
    claims, passages = (
        model.encode(CLAIMS, tokenizer=minilm_tokenizer),
        model.encode(PASSAGES, tokenizer=minilm_tokenizer),
    )
    kl = reference_kl(claims.mu, claims.logvar, passages.mu, passages.logvar)
    assert_dot_is_minus_kl(query, document, kl)
    assert torch.equal((query @ document.T).argsort(dim=1), (-kl).argsort(dim=1))  # the same ranking
    torch.manual_seed(1)
    mu, logvar = torch.tanh(2 * torch.randn(12, 32)), torch.empty(12, 32).uniform_(-10.0, 10.0)
    mu[6:], logvar[6:] = mu[:6] + 1e-3 * torch.randn(6, 32), logvar[:6]  # documents: the 6 queries, 6 near-copies
    for direction, (first, second) in {
        "entailing": (slice(0, 6), slice(None)),
        "entailed_by": (slice(None), slice(0, 6)),
    }.items():
        module = GaussCSETransformer(model, minilm_tokenizer, direction=direction)
        query, document = module.route(mu[:6], logvar[:6], "query"), module.route(mu, logvar, "document")
        kl = reference_kl(mu[first], logvar[first], mu[second], logvar[second])
        assert_dot_is_minus_kl(query, document, kl if direction == "entailing" else kl.T)


def test_a_model_with_a_search_score_routes_to_it_through_a_saved_folder(minilm_tokenizer, tmp_path):
    """A model whose config states λ (search_kl_weight): a folder loaded by sentence-transformers gives routes of
    3d + 2 values whose dot is cos(μ_q, μ_x) − λ·KL(q‖x)/d (scikit-learn, torch.distributions) and ranks as the
    model's GaussianIndex; score="similarity" keeps −KL; score="search" on a model without λ is refused."""
    from gausscse.search import GaussianIndex

    from ..helpers import reference_search_score

    model = spread_model("mean_kl")
    model.config.search_kl_weight = 0.7
    model.save_pretrained(tmp_path / "searching")
    minilm_tokenizer.save_pretrained(tmp_path / "searching")
    st = SentenceTransformer(str(tmp_path / "searching"), trust_remote_code=True)
    query = st.encode_query(CLAIMS, convert_to_tensor=True)
    document = st.encode_document(PASSAGES, convert_to_tensor=True)
    assert query.shape == (4, 98) and st[0].get_embedding_dimension(task="document") == 98  # 3d + 2
    claims, passages = (model.encode(text, tokenizer=minilm_tokenizer) for text in (CLAIMS, PASSAGES))
    expected = reference_search_score(claims, passages, 0.7, "entailing")
    torch.testing.assert_close((query @ document.T).double(), expected, rtol=1e-4, atol=1e-5)
    index = GaussianIndex(32, "mean_kl", kl_weight=0.7)
    index.add(passages)
    scores, ids = index.entailing(claims, len(PASSAGES))
    assert torch.equal(ids, (query @ document.T).argsort(dim=1, descending=True))
    torch.testing.assert_close(scores.double(), expected.gather(1, ids), rtol=1e-5, atol=1e-6)
    by_kl = model.as_sentence_transformer(minilm_tokenizer, score="similarity")
    kl = reference_kl(claims.mu, claims.logvar, passages.mu, passages.logvar)
    assert_dot_is_minus_kl(
        by_kl.encode_query(CLAIMS, convert_to_tensor=True), by_kl.encode_document(PASSAGES, convert_to_tensor=True), kl
    )
    with pytest.raises(ValueError, match="score='search' needs a model whose config states search_kl_weight"):
        spread_model().as_sentence_transformer(minilm_tokenizer, score="search")


def test_the_route_dimension_is_reported(minilm_tokenizer):
    """get_embedding_dimension() is what encode returns (μ: d, as sentence-transformers defines it); with task=
    "query" / "document" it is the route's 2d + 2 (d with direction="none"), on the model and on its module."""
    st = spread_model().as_sentence_transformer(minilm_tokenizer)
    assert st.get_embedding_dimension() == st.encode(CLAIMS).shape[1] == 32
    assert st.get_embedding_dimension(task="query") == st.encode_query(CLAIMS).shape[1] == 66
    assert st.get_embedding_dimension(task="document") == st.encode_document(PASSAGES).shape[1] == 66
    assert st[0].get_embedding_dimension() == 32 and st[0].get_embedding_dimension(task="document") == 66
    points = spread_model().as_sentence_transformer(minilm_tokenizer, direction="none")
    assert points.get_embedding_dimension(task="query") == points.encode_query(CLAIMS).shape[1] == 32
    with pytest.raises(ValueError, match="task must be 'query', 'document' or None, got 'passage'"):
        st.get_embedding_dimension(task="passage")


def test_a_similarity_function_other_than_dot_is_warned_of_and_max_seq_length_is_stated(minilm_tokenizer, caplog):
    """The routes' vectors rank by their dot product: setting cosine (or any other) on the model says so; μ-only
    (direction="none") takes any without a word. max_seq_length is the tokens taken, the encoder's limit if unset."""
    st = spread_model().as_sentence_transformer(minilm_tokenizer)
    assert st.similarity_fn_name == "dot" and st.max_seq_length == resolve_max_length(
        minilm_tokenizer, st[0].model.config.encoder_config
    )
    transformers_logging.enable_propagation()
    try:
        st.similarity_fn_name = "dot"
        assert "similarity_fn_name" not in caplog.text
        st.similarity_fn_name = "cosine"
        warned = "similarity_fn_name='cosine': the vectors of encode_query/encode_document rank by their dot product"
        assert warned in caplog.text
        caplog.clear()
        spread_model().as_sentence_transformer(minilm_tokenizer, direction="none").similarity_fn_name = "cosine"
        assert "similarity_fn_name" not in caplog.text
    finally:
        transformers_logging.disable_propagation()


def test_a_plain_sentence_transformer_of_the_module_stays_plain_and_is_told_what_checks(minilm_tokenizer, caplog):
    """SentenceTransformer(modules=[GaussCSETransformer(...)]), as a folder loads: the same vectors as a
    GaussCSESentenceTransformer, no class swapped in, and a warning (once) naming the class that refuses the route
    options, which gausscse exports."""
    import gausscse

    model = spread_model()
    transformers_logging.warning_once.cache_clear()  # once per process: forget earlier tests' warnings
    transformers_logging.enable_propagation()
    try:
        with caplog.at_level("WARNING"):
            plain = SentenceTransformer(
                modules=[GaussCSETransformer(model, minilm_tokenizer)], similarity_fn_name="dot"
            )
            SentenceTransformer(modules=[GaussCSETransformer(model, minilm_tokenizer)], similarity_fn_name="dot")
    finally:
        transformers_logging.disable_propagation()
    assert type(plain) is SentenceTransformer
    assert caplog.text.count("does not refuse the encode_query/encode_document options") == 1
    checked = gausscse.GaussCSESentenceTransformer(modules=[GaussCSETransformer(model, minilm_tokenizer)])
    torch.testing.assert_close(
        plain.encode_query(CLAIMS, convert_to_tensor=True), checked.encode_query(CLAIMS, convert_to_tensor=True)
    )
    with pytest.raises(ValueError, match=r"^encode_query\(normalize_embeddings=True\) is refused"):
        checked.encode_query(CLAIMS, normalize_embeddings=True)
    assert checked.get_embedding_dimension(task="query") == 66


def test_the_package_class_checks_a_folder_loaded_with_its_own_code(saved_folder):
    """gausscse.GaussCSESentenceTransformer(folder, trust_remote_code=True): the module comes from the folder's code,
    the model class from the package, and the checks still find the module."""
    import gausscse

    st = gausscse.GaussCSESentenceTransformer(str(saved_folder), trust_remote_code=True)
    assert type(st[0]).__module__.startswith("transformers_modules")
    with pytest.raises(ValueError, match=r"^encode_query\(truncate_dim=8\) is refused"):
        st.encode_query(CLAIMS, truncate_dim=8)
    assert st.get_embedding_dimension(task="query") == 66


def test_a_model_with_modules_after_the_gaussian_one_keeps_them(minilm_tokenizer, tmp_path):
    """Modules after GaussCSETransformer (here Normalize) change its vectors: a plain SentenceTransformer of them stays
    plain (warned, not switched), and a GaussCSESentenceTransformer's save keeps every module in modules.json."""
    from sentence_transformers.models import Normalize

    plain = SentenceTransformer(modules=[GaussCSETransformer(spread_model(), minilm_tokenizer), Normalize()])
    assert type(plain) is SentenceTransformer
    composed = GaussCSESentenceTransformer(modules=[GaussCSETransformer(spread_model(), minilm_tokenizer), Normalize()])
    composed.save(str(tmp_path / "st"))
    modules = json.loads((tmp_path / "st" / "modules.json").read_text())
    assert modules[0]["type"] == SENTENCE_TRANSFORMERS_FILES["modules.json"][0]["type"]
    assert len(modules) == 2 and modules[1]["type"].endswith("Normalize")
    expected = composed.encode(CLAIMS, convert_to_tensor=True)
    reloaded = SentenceTransformer(str(tmp_path / "st"), trust_remote_code=True)
    torch.testing.assert_close(reloaded.encode(CLAIMS, convert_to_tensor=True), expected)
    torch.testing.assert_close(expected.norm(dim=-1), torch.ones(len(CLAIMS)))  # Normalize ran after reloading


def test_encode_takes_the_deprecated_sentences_keyword(minilm_tokenizer):
    st = SentenceTransformer(modules=[GaussCSETransformer(spread_model(), minilm_tokenizer)])
    torch.testing.assert_close(
        st.encode(sentences=CLAIMS, convert_to_tensor=True), st.encode(CLAIMS, convert_to_tensor=True)
    )


def test_model_card_data_states_what_the_models_card_does(saved_folder, tmp_path):
    """model_card_data after loading a folder: base_model the Hub model its card says it was trained from (offline, a
    local folder has no Hub id of its own), language, license and tags as the card states them; a folder without a
    card keeps sentence-transformers' defaults."""
    folder = tmp_path / "with-card"
    shutil.copytree(saved_folder, folder)
    header = "base_model: sentence-transformers/all-MiniLM-L6-v2\nlanguage: [en]\nlicense: apache-2.0\ntags: [gausscse]"
    (folder / "README.md").write_text(f"---\n{header}\n---\n\n# a GaussCSE model\n")
    data = SentenceTransformer(str(folder), trust_remote_code=True).model_card_data
    assert data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert data.language == ["en"] and data.license == "apache-2.0" and "gausscse" in data.tags
    assert data.get_default_model_name() == "SentenceTransformer based on sentence-transformers/all-MiniLM-L6-v2"
    plain = SentenceTransformer(str(saved_folder), trust_remote_code=True).model_card_data
    assert plain.base_model is None and plain.license is None and "gausscse" not in plain.tags


def test_the_hub_id_a_model_was_loaded_by(tmp_path):
    snapshot = tmp_path / "hub" / "models--someone--gausscse-minilm" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    assert loaded_hub_id(str(snapshot)) == "someone/gausscse-minilm"  # a Hub-cache snapshot folder
    assert loaded_hub_id("someone/gausscse-minilm") == "someone/gausscse-minilm"  # a Hub id, as given
    assert loaded_hub_id(str(tmp_path)) is None  # any other local folder
