"""The entailment score 1 / (1/sim(hyp‖pre) + α·(1 − cos)) binary NLI decides by, and the choice of α and the
threshold on dev data (gausscse.evaluation.entailment_weight): the score against torch.distributions and scikit-learn,
its ranking against the search score, the choice against a by-hand objective on sets built so that the KL or the
cosine separates the classes, the model's ``entailment_score``/``entails``, the evaluation, the command."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from sklearn.metrics import accuracy_score
from sklearn.metrics.pairwise import paired_cosine_distances

from gausscse import GaussCSEConfig
from gausscse.evaluation.encoders import GaussianEncoder
from gausscse.evaluation.entailment_weight import (
    COSINE_WEIGHT_GRID,
    choose_cosine_weight,
    dev_pairs,
    main,
)
from gausscse.evaluation.metrics import load_metric
from gausscse.evaluation.suite import run_encoder
from gausscse.evaluation.tasks import NLIPairs, TaskData
from gausscse.model.gaussian import GaussianEmbeddings, entailment_score_from, paired_entailment_score

from ..helpers import nli_rows, reference_similarity, write_jsonl_gz


def random_pairs(count: int, dim: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(count, dim, generator=generator) for _ in range(4)]  # mu_h, logvar_h, mu_p, logvar_p


@pytest.mark.parametrize("reduction", ["sum", "mean_kl", "mean_dim"])
def test_the_entailment_score_adds_the_weighted_cosine_distance_to_the_models_own(reduction):
    mu_h, logvar_h, mu_p, logvar_p = random_pairs(9, 8, seed=0)
    sim = torch.diagonal(reference_similarity(mu_h, logvar_h, mu_p, logvar_p, reduction))  # torch.distributions
    cosine = torch.from_numpy(1.0 - paired_cosine_distances(mu_h.double().numpy(), mu_p.double().numpy()))
    for weight in (None, 0.0, 0.5, 30.0):
        score = paired_entailment_score(mu_h, logvar_h, mu_p, logvar_p, reduction, weight)
        expected = sim if not weight else 1.0 / (1.0 / sim + weight * (1.0 - cosine))
        assert score.dtype == torch.float32 and score.shape == (9,) and bool(((score >= 0) & (score <= 1)).all())
        torch.testing.assert_close(score.double(), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"cosine_weight must be a finite number >= 0, got -1"):
        entailment_score_from(sim, cosine, -1.0)


def test_with_mean_kl_it_ranks_as_the_search_score_of_lambda_one_over_alpha():
    mu_h, logvar_h, mu_p, logvar_p = random_pairs(40, 8, seed=1)
    sim = torch.diagonal(reference_similarity(mu_h, logvar_h, mu_p, logvar_p, "mean_kl"))
    cosine = torch.nn.functional.cosine_similarity(mu_h.double(), mu_p.double(), dim=-1)
    kl_per_dim = 1.0 / sim - 1.0
    for weight in (0.1, 2.0, 50.0):
        score = paired_entailment_score(mu_h, logvar_h, mu_p, logvar_p, "mean_kl", weight)
        assert spearmanr(score.numpy(), (cosine - kl_per_dim / weight).numpy()).statistic == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("entailment_cosine_weight", -0.1),
        ("entailment_cosine_weight", float("inf")),
        ("entailment_cosine_weight", True),
        ("entailment_threshold", 1.5),
        ("entailment_threshold", -0.01),
        ("entailment_threshold", False),
    ],
)
def test_the_config_refuses_a_weight_or_threshold_out_of_range(field, bad):
    with pytest.raises(ValueError, match=rf"{field} must be a number in \[0, "):
        GaussCSEConfig(**{field: bad})


def separable_dev_set(cosine_separates: bool, count: int = 40, dim: int = 16, seed: int = 2):
    """Gaussians of ``count`` pairs, half entailment: either the cosine separates the classes and the KL is noise, or
    the other way round."""
    generator = torch.Generator().manual_seed(seed)
    labels = np.arange(count) % 2 == 0
    mu_p = torch.randn(count, dim, generator=generator)
    close = mu_p + 0.1 * torch.randn(count, dim, generator=generator)
    far = torch.randn(count, dim, generator=generator)
    logvar_p, logvar_h = torch.zeros(count, dim), torch.zeros(count, dim)
    if cosine_separates:
        mu_h = torch.where(torch.from_numpy(labels)[:, None], close, far)
        logvar_p = 2 * torch.randn(count, dim, generator=generator)  # the KL is large and random
    else:  # the same directions; entailment = a narrower hypothesis inside a broad premise
        mu_h = close
        logvar_p = torch.where(torch.from_numpy(labels)[:, None], torch.full_like(logvar_p, 1.0), -3.0)
    hypotheses = [f"h{k}" for k in range(count)]
    premises = [f"p{k}" for k in range(count)]
    pairs = NLIPairs("dev", premises, hypotheses, labels, np.zeros(count, dtype=bool))
    table = dict(
        zip(
            hypotheses + premises,
            zip(torch.cat([mu_h, mu_p]), torch.cat([logvar_h, logvar_p]), strict=True),
            strict=True,
        )
    )
    return pairs, table


class TableModel:
    """A stand-in model whose ``encode`` looks the Gaussians up by sentence."""

    def __init__(self, table: dict, reduction: str = "mean_kl"):
        self.table, self.config = table, SimpleNamespace(similarity_reduction=reduction)

    def encode(self, sentences, **_):
        return GaussianEmbeddings(
            torch.stack([self.table[s][0] for s in sentences]), torch.stack([self.table[s][1] for s in sentences])
        )


def by_hand_objective(model, pairs: list[NLIPairs], weight: float) -> tuple[float, float]:
    """The module's objective computed here: each set's AUPRC (the binary_nli metric, tested against sklearn
    elsewhere), SNLI dev's best accuracy and the others' accuracy at that threshold (sklearn); and the threshold."""
    auprcs, accuracies, threshold = [], [], None
    for split in pairs:
        hyp, pre = model.encode(split.hypotheses), model.encode(split.premises)
        score = paired_entailment_score(hyp.mu, hyp.logvar, pre.mu, pre.logvar, "mean_kl", weight).double().numpy()
        measured = load_metric("binary_nli").compute(predictions=score, references=split.is_entailment)
        threshold = measured["best_threshold"] if threshold is None else threshold
        auprcs.append(100 * measured["auprc"])
        accuracies.append(100 * accuracy_score(split.is_entailment, score >= threshold))
    return float(np.mean(auprcs + accuracies)), threshold


@pytest.mark.parametrize("cosine_separates", [True, False])
def test_alpha_follows_what_separates_the_classes_and_the_objective_is_by_hand(cosine_separates, caplog):
    pairs, table = separable_dev_set(cosine_separates)
    other, other_table = separable_dev_set(cosine_separates, seed=3)
    other.name = "other"
    model = TableModel(table | {f"{k}'": v for k, v in other_table.items()})
    other = NLIPairs(
        "other",
        [f"{p}'" for p in other.premises],
        [f"{h}'" for h in other.hypotheses],
        other.is_entailment,
        other.entails_both_ways,
    )
    with caplog.at_level(logging.WARNING):
        weight, threshold, curve = choose_cosine_weight(model, [pairs, other])
    assert tuple(curve) == COSINE_WEIGHT_GRID and weight in COSINE_WEIGHT_GRID
    for probe in (0.0, weight):
        assert curve[probe] == pytest.approx(by_hand_objective(model, [pairs, other], probe)[0])
    assert threshold == by_hand_objective(model, [pairs, other], weight)[1]
    assert curve[weight] == max(curve.values())
    if cosine_separates:  # the KL is noise: α leaves sim alone behind
        assert weight > 0 and curve[0.0] < curve[weight] - 1
    else:  # the KL separates: sim alone, the smallest α of the best
        assert weight == 0.0 and curve[0.0] > 99
    at_edge = weight == COSINE_WEIGHT_GRID[-1]
    assert ("the grid's top" in caplog.text) == at_edge


def test_the_model_decides_by_its_configs_score_and_threshold(make_tiny_model, minilm_tokenizer):
    model = make_tiny_model(similarity_reduction="mean_kl", initializer_range=0.2)
    model.get_tokenizer(minilm_tokenizer)
    premises, hypotheses = ["a dog runs in a park", "two men cook"], ["an animal is outside", "nobody cooks"]
    sim = model.similarity_pairwise(hypotheses, premises)
    torch.testing.assert_close(model.entailment_score(premises, hypotheses), sim)
    with pytest.raises(ValueError, match=r"entails\(\) needs a model whose config states entailment_threshold"):
        model.entails(premises, hypotheses)
    model.config.entailment_cosine_weight, model.config.entailment_threshold = 3.0, 0.5
    hyp, pre = model.encode(hypotheses), model.encode(premises)
    cosine = torch.nn.functional.cosine_similarity(hyp.mu, pre.mu, dim=-1)
    expected = 1.0 / (1.0 / sim + 3.0 * (1.0 - cosine))
    torch.testing.assert_close(model.entailment_score(premises, hypotheses), expected, rtol=1e-5, atol=1e-6)
    assert model.entails(premises, hypotheses).tolist() == (expected >= 0.5).tolist()
    encoded = GaussianEncoder(model, minilm_tokenizer).encode_unique(premises + hypotheses)
    assert encoded.entailment_cosine_weight == 3.0
    torch.testing.assert_close(encoded.entailment_score(premises, hypotheses), expected, rtol=1e-5, atol=1e-6)


def test_evaluation_reports_lingnli_dev_at_the_snli_dev_threshold(make_tiny_model, minilm_tokenizer, tmp_path):
    write_jsonl_gz(tmp_path / "snli/validation.jsonl.gz", nli_rows(12, offset=500))
    write_jsonl_gz(tmp_path / "lingnli/validation.jsonl.gz", nli_rows(10, offset=900))
    model = make_tiny_model(similarity_reduction="mean_kl", initializer_range=0.2)
    model.config.entailment_cosine_weight = 0.7
    encoder = GaussianEncoder(model, minilm_tokenizer)
    run = run_encoder(
        encoder, TaskData(("nli",), nli_dev=dev_pairs(str(tmp_path))[0], lingnli_dev=dev_pairs(str(tmp_path))[1])
    )
    lingnli = run.results["lingnli_dev"]
    assert run.results["entailment_cosine_weight"] == 0.7
    assert lingnli["threshold"] == run.results["snli_dev"]["threshold"]
    pairs = dev_pairs(str(tmp_path))[1]
    encoded = encoder.encode_unique(pairs.sentences)
    scores = encoded.entailment_score(pairs.premises, pairs.hypotheses).numpy()
    assert lingnli["accuracy"] == pytest.approx(
        100 * accuracy_score(pairs.is_entailment, scores >= lingnli["threshold"])
    )
    assert 0 <= lingnli["direction_accuracy"] <= 100


def test_without_lingnli_the_choice_is_on_snli_dev_alone(tmp_path, caplog):
    write_jsonl_gz(tmp_path / "snli/validation.jsonl.gz", nli_rows(12, offset=500))
    with caplog.at_level(logging.WARNING):
        pairs = dev_pairs(str(tmp_path))
    assert [split.name for split in pairs] == ["snli_dev"] and "lingnli/validation" in caplog.text


def test_the_command_writes_alpha_and_threshold_into_a_saved_folder(spread_model_folder, data_dir, capsys):
    folder = spread_model_folder
    result = main(["--model", str(folder), "--data_dir", str(data_dir)])
    written = json.loads((folder / "config.json").read_text())
    assert written["entailment_cosine_weight"] == result["entailment_cosine_weight"] in COSINE_WEIGHT_GRID
    assert written["entailment_threshold"] == result["entailment_threshold"]
    assert json.loads(capsys.readouterr().out)["entailment_dev_sets"] == result["entailment_dev_sets"]
    assert not list(folder.glob(".*.tmp"))  # written whole
