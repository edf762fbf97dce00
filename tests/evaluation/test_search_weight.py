"""The search score cos(μ_q, μ_x) − λ·KL(q‖x)/d and the choice of λ on dev data (gausscse.evaluation.search_weight):
the score against torch.distributions and F.cosine_similarity, the nDCG curve against a by-hand nDCG, the choice on
sets built so that the KL or the cosine finds the relevant item, the command that writes λ into a saved folder."""

from __future__ import annotations

import json
import logging
import math

import pytest
import torch
import torch.nn.functional as F

from gausscse import GaussCSEConfig
from gausscse.evaluation.search_weight import KL_WEIGHT_GRID, best_kl_weight, kl_weight_curve, main
from gausscse.model.gaussian import search_score_matrix

from ..helpers import reference_similarity


def test_the_search_score_is_the_cosine_minus_the_weighted_kl_per_dimension():
    generator = torch.Generator().manual_seed(0)
    mu_a, mu_b = torch.randn(5, 8, generator=generator), torch.randn(7, 8, generator=generator)
    logvar_a, logvar_b = torch.randn(5, 8, generator=generator), torch.randn(7, 8, generator=generator)
    cosine = F.cosine_similarity(mu_a.double()[:, None], mu_b.double()[None], dim=-1)
    kl = 1 / reference_similarity(mu_a, logvar_a, mu_b, logvar_b, "sum") - 1  # torch.distributions, float64
    for weight in (0.0, 0.3, 5.0):
        score = search_score_matrix(mu_a, logvar_a, mu_b, logvar_b, weight)
        assert score.dtype == torch.float32 and score.shape == (5, 7)
        torch.testing.assert_close(score.double(), cosine - weight * kl / 8, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"kl_weight must be a number >= 0, got -1"):
        search_score_matrix(mu_a, logvar_a, mu_b, logvar_b, -1.0)


def retrieval_problem(kl_finds_it: bool):
    """One query per corpus item; its relevant item either has the query's direction (a broad Gaussian covering it,
    found by the KL) while a decoy has the higher cosine, or the other way round."""
    generator = torch.Generator().manual_seed(1)
    queries, dim = 6, 16
    mu_q = torch.randn(queries, dim, generator=generator)
    logvar_q = torch.full((queries, dim), -2.0)
    decoy = mu_q + 0.05 * torch.randn(queries, dim, generator=generator)  # cosine ≈ 1
    relevant = mu_q + 0.4 * torch.randn(queries, dim, generator=generator)  # cosine lower
    if not kl_finds_it:
        decoy, relevant = relevant, decoy
    covering, narrow = torch.full((queries, dim), 1.0), torch.full((queries, dim), -6.0)
    mu_x = torch.cat([relevant, decoy])
    logvar_x = torch.cat([covering if kl_finds_it else narrow, narrow if kl_finds_it else covering])
    return mu_q, logvar_q, mu_x, logvar_x, [[row] for row in range(queries)]


def test_the_curve_is_ndcg_at_10_and_lambda_follows_what_finds_the_relevant_item():
    mu_q, logvar_q, mu_x, logvar_x, relevant = retrieval_problem(kl_finds_it=True)
    curve = kl_weight_curve(mu_q, logvar_q, mu_x, logvar_x, relevant)
    assert tuple(curve) == KL_WEIGHT_GRID and KL_WEIGHT_GRID[0] == 0.0
    for weight in (0.0, best_kl_weight(curve)):  # by hand: one relevant item, nDCG@10 = 1 / log2(1 + rank)
        scores = search_score_matrix(mu_q, logvar_q, mu_x, logvar_x, weight)
        ranks = [int((row > row[item[0]]).sum()) + 1 for row, item in zip(scores, relevant, strict=True)]
        by_hand = 100 * sum(1 / math.log2(1 + rank) if rank <= 10 else 0.0 for rank in ranks) / len(ranks)
        assert curve[weight] == pytest.approx(by_hand)
    assert curve[0.0] < 100 and best_kl_weight(curve) > 0 and curve[best_kl_weight(curve)] == pytest.approx(100)
    cosine_case = kl_weight_curve(*retrieval_problem(kl_finds_it=False))
    assert best_kl_weight(cosine_case) == 0.0 and cosine_case[0.0] == pytest.approx(100)


def test_equal_ndcg_picks_the_smallest_weight_and_the_grids_top_is_logged(caplog):
    assert best_kl_weight({0.0: 50.0, 0.1: 70.0, 1.0: 70.0, 10.0: 60.0}) == 0.1
    assert KL_WEIGHT_GRID[-1] >= 1000 and "the grid's top" not in caplog.text
    with caplog.at_level(logging.WARNING):
        assert best_kl_weight({0.0: 50.0, 1.0: 60.0, 1000.0: 61.0}) == 1000.0
    assert "λ = 1000, the grid's top" in caplog.text


@pytest.mark.parametrize("bad", [-0.5, 1e300, float("inf"), float("nan"), "0.5", True, [0.5]])
def test_the_config_refuses_a_weight_that_is_no_number_or_breaks_the_scores(bad):
    with pytest.raises(ValueError, match=r"search_kl_weight must be a number in \[0, 1e\+06\]"):
        GaussCSEConfig(search_kl_weight=bad)


def test_a_hand_edited_config_json_is_refused_on_every_route(spread_model_folder):
    """λ written into config.json by hand: the largest allowed still ranks with finite scores, anything else is
    refused where the folder is loaded (AutoModel and sentence-transformers), naming the field."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    folder = spread_model_folder
    config = json.loads((folder / "config.json").read_text())
    for bad in (1e300, "0.5", True):
        (folder / "config.json").write_text(json.dumps({**config, "search_kl_weight": bad}))
        for load in (lambda: AutoModel.from_pretrained(folder, trust_remote_code=True),
                     lambda: SentenceTransformer(str(folder), trust_remote_code=True)):  # fmt: skip
            with pytest.raises(ValueError, match=r"search_kl_weight must be a number"):
                load()
    (folder / "config.json").write_text(json.dumps({**config, "search_kl_weight": 1e6}))
    loaded = AutoModel.from_pretrained(folder, trust_remote_code=True)
    embeddings = loaded.encode(["a dog runs", "an animal moves", "two men cook"])
    scores = search_score_matrix(embeddings.mu, embeddings.logvar, embeddings.mu, embeddings.logvar, 1e6)
    assert torch.isfinite(scores).all()


def test_the_command_writes_lambda_into_a_saved_folder(spread_model_folder, data_dir, capsys):
    folder = spread_model_folder
    result = main(["--model", str(folder), "--data_dir", str(data_dir)])
    written = json.loads((folder / "config.json").read_text())
    assert written["search_kl_weight"] == result["search_kl_weight"] in KL_WEIGHT_GRID
    assert json.loads(capsys.readouterr().out)["search_kl_weight"] == written["search_kl_weight"]
    assert not list(folder.glob(".*.tmp"))  # written whole
