"""The study's heads-only training on cached backbone features (``studies.heads_only``), the encoders that read the
cache (``studies.frozen_features``), and the study script and its report writer end to end on a tiny backbone with
the real evaluation data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch

from gausscse import GaussCSEModel
from gausscse.data.registry import default_data_dir
from gausscse.data.sources import load_training_examples
from gausscse.data.tokenize import tokenize_examples
from gausscse.evaluation.dev_evaluator import dev_metrics
from gausscse.evaluation.encoders import EncodedSentences, GaussianEncoder, PointEncoder
from gausscse.evaluation.tasks import NLI_DEV, load_nli
from gausscse.training.arguments import GaussCSETrainingArguments
from gausscse.training.batch import TripletCollator, split_batch_embeddings
from gausscse.training.losses import GaussCSELoss
from studies.frozen_features import BackboneFeatures, FeaturePointEncoder, FrozenBackboneEncoder
from studies.heads_only import HeadsOnlyArguments, batch_embeddings, sentences_of, shuffled_batches, train_heads

from .evaluation.test_evaluation_metrics import brute_force_best_threshold, brute_force_sweep_auprc
from .helpers import heads_by_hand, reference_similarity

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def examples(data_dir: Path) -> list[dict]:
    dataset, _ = load_training_examples(["snli", "mnli"], data_dir=data_dir)
    return dataset.to_list()


@pytest.fixture
def model(backbone: Path) -> GaussCSEModel:
    return GaussCSEModel.from_backbone(str(backbone)).eval()


@pytest.fixture
def features(model: GaussCSEModel, examples: list[dict]) -> BackboneFeatures:
    return BackboneFeatures.compute(model.encoder, model.get_tokenizer(), sentences_of(examples), max_length=32)


def test_frozen_backbone_encoder_equals_the_full_model(model, features, examples) -> None:
    sentences = sentences_of(examples)[:20]
    cached = FrozenBackboneEncoder(model, features).encode_unique(sentences)
    full = GaussianEncoder(model, max_length=32).encode_unique(sentences)
    order = full.rows(sentences)
    torch.testing.assert_close(cached.mu[cached.rows(sentences)], full.mu[order], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cached.logvar[cached.rows(sentences)], full.logvar[order], atol=1e-5, rtol=1e-5)
    assert cached.reduction == model.config.similarity_reduction
    point = FrozenBackboneEncoder(model, features, as_point=True).encode_unique(sentences)
    assert not point.is_gaussian and point.reduction is None


def test_feature_point_encoder_equals_point_encoder(backbone: Path, features, examples) -> None:
    sentences = sentences_of(examples)[:20]
    reference = PointEncoder(str(backbone), max_length=32, pooling="mean", normalize=True).encode_unique(sentences)
    cached = FeaturePointEncoder(features, pooling="mean", normalize=True).encode_unique(sentences)
    torch.testing.assert_close(
        cached.mu[cached.rows(sentences)], reference.mu[reference.rows(sentences)], atol=1e-5, rtol=1e-5
    )


def test_missing_sentence_or_pooling_is_named(model, features) -> None:
    with pytest.raises(KeyError, match="was not encoded"):
        FrozenBackboneEncoder(model, features).encode_unique(["a sentence nobody encoded"])
    with pytest.raises(KeyError, match="pooling 'max' was not computed"):
        features.vectors(["x"], "max")


def test_cached_batch_and_loss_equal_the_trainer_path(model, features, examples) -> None:
    """The same 2N + K rows, and the same loss, as TripletCollator + one forward + split_batch_embeddings."""
    batch = examples[:6] + examples[-6:]  # SNLI rows with, MNLI rows without a contradiction
    cached = batch_embeddings(model, features, batch, with_contradictions=True)
    tokenizer = model.get_tokenizer()
    tokenized = list(tokenize_examples(datasets.Dataset.from_list(batch), tokenizer, 32))
    inputs = TripletCollator.for_tokenizer(tokenizer)(tokenized)
    contradiction_index, text_ids = inputs.pop("contradiction_index"), inputs.pop("text_ids")
    with torch.no_grad():
        output = model(**inputs)
        loss_fn = GaussCSELoss("ent+con+rev", temperature=0.05, reduction=model.config.similarity_reduction)
        cached_loss = loss_fn(cached)
    reference = split_batch_embeddings(output.mu, output.logvar, contradiction_index, text_ids)
    for role in ("premise", "entailment", "contradiction"):
        torch.testing.assert_close(getattr(cached, role).mu, getattr(reference, role).mu, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cached.contradiction_mask, reference.contradiction_mask)
    torch.testing.assert_close(cached.text_ids, reference.text_ids)
    torch.testing.assert_close(cached_loss, loss_fn(reference), atol=1e-5, rtol=1e-5)


def test_shuffled_batches_cover_every_example_each_epoch() -> None:
    batches = list(shuffled_batches(10, 4, num_steps=6, seed=3))
    assert [len(rows) for rows in batches] == [4, 4, 2, 4, 4, 2]
    first_epoch = [row for rows in batches[:3] for row in rows]
    second_epoch = [row for rows in batches[3:] for row in rows]
    assert sorted(first_epoch) == list(range(10)) == sorted(second_epoch)
    assert batches[:3] != batches[3:]  # a fresh permutation per epoch
    assert batches == list(shuffled_batches(10, 4, num_steps=6, seed=3))


def test_train_heads_learns_keeps_the_backbone_and_restores_the_best_step(model, features, examples) -> None:
    backbone_before = {name: value.clone() for name, value in model.encoder.state_dict().items()}
    loss_fn = GaussCSELoss("ent+con+rev", temperature=0.05, reduction=model.config.similarity_reduction)

    def whole_set_loss() -> float:
        with torch.no_grad():
            return loss_fn(batch_embeddings(model, features, examples, with_contradictions=True)).item()

    arguments = HeadsOnlyArguments(batch_size=8, learning_rate=1e-2, num_train_epochs=4, eval_steps=3, seed=5)
    model._init_weights(model.mean_head)
    model._init_weights(model.logvar_head)
    initial = whole_set_loss()
    scores = iter(range(100, 0, -1))  # a decreasing "metric": the first evaluation is the best one

    def evaluate(trained) -> dict[str, float]:
        return {"snli_dev_auprc": float(next(scores)), "mean_norm": trained.mean_head.weight.norm().item()}

    log = train_heads(model, examples, features, arguments, evaluate=evaluate)
    assert log["steps"] == 4 * -(-len(examples) // 8)
    assert log["best"]["step"] == 3
    assert model.mean_head.weight.norm().item() == pytest.approx(log["best"]["mean_norm"])
    for name, value in model.encoder.state_dict().items():
        torch.testing.assert_close(value, backbone_before[name])
    last = train_heads(model, examples, features, arguments)  # no evaluator: the last step's heads
    assert last["best"] is None and whole_set_loss() < initial
    again = GaussCSEModel.from_backbone(str(model.name_or_path)).eval()
    train_heads(again, examples, features, arguments)
    torch.testing.assert_close(again.logvar_head.weight, model.logvar_head.weight)  # seeded: reproducible
    train_heads(again, examples, features, HeadsOnlyArguments(batch_size=8, num_train_epochs=1, seed=6))
    assert not torch.equal(again.logvar_head.weight, model.logvar_head.weight)


def test_heads_only_arguments_default_to_the_training_flags_they_mirror(tmp_path) -> None:
    """One place for the recipe's defaults: ``train_gausscse.py``'s (``GaussCSETrainingArguments``)."""
    training = GaussCSETrainingArguments(output_dir=str(tmp_path))
    heads = HeadsOnlyArguments()
    mirrored = {
        "loss": "loss",
        "temperature": "temperature",
        "batch_size": "per_device_train_batch_size",
        "learning_rate": "head_learning_rate",
        "weight_decay": "weight_decay",
        "num_train_epochs": "num_train_epochs",
        "warmup_ratio": "warmup_steps",  # a ratio of the steps there too (< 1)
        "eval_steps": "eval_steps",
        "seed": "seed",
    }
    assert {name: getattr(heads, name) for name in mirrored} == {
        name: getattr(training, flag) for name, flag in mirrored.items()
    }
    assert train_heads.__defaults__[-1] == training.metric_for_best_model


def test_heads_only_arguments_and_metric_errors(model, features, examples) -> None:
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        HeadsOnlyArguments(batch_size=0)
    with pytest.raises(ValueError, match="warmup_ratio"):
        HeadsOnlyArguments(warmup_ratio=1.5)
    with pytest.raises(ValueError, match="Unknown loss 'ent\\+foo'"):
        train_heads(model, examples, features, HeadsOnlyArguments(loss="ent+foo"))
    with pytest.raises(KeyError, match="metric_for_best_model 'snli_dev_auprc'"):
        train_heads(model, examples, features, HeadsOnlyArguments(eval_steps=1), evaluate=lambda trained: {"x": 1.0})
    with pytest.raises(ValueError, match="examples is empty"):
        train_heads(model, [], features, HeadsOnlyArguments())


def test_dev_metrics_equal_a_recomputation_by_hand(model) -> None:
    """dev_metrics of the frozen-backbone Gaussian encoder and of the point encoder against scores recomputed from
    the encoder one sentence at a time (heads by hand, KL from torch.distributions; cosine of mean-pooled vectors)
    and metrics from the brute-force loops over the threshold grid of test_evaluation_metrics."""
    pairs = load_nli("snli_dev", *NLI_DEV, data_dir=default_data_dir(), max_examples=40)
    features = BackboneFeatures.compute(model.encoder, model.get_tokenizer(), pairs.sentences, max_length=32)
    gaussian = dev_metrics(FrozenBackboneEncoder(model, features).encode_unique(pairs.sentences), pairs)
    point = dev_metrics(FeaturePointEncoder(features).encode_unique(pairs.sentences), pairs)
    assert set(gaussian) - set(point) == {"snli_dev_direction_accuracy"}

    tokenizer, labels = model.get_tokenizer(), pairs.is_entailment
    assert 0 < labels.sum() < len(labels)
    raw_mu, logvar = heads_by_hand(model, tokenizer, pairs.sentences, max_length=32)
    mu, pre, hyp = torch.tanh(raw_mu), slice(0, len(pairs)), slice(len(pairs), None)
    reduction = model.config.similarity_reduction
    hyp_given_pre = reference_similarity(mu[hyp], logvar[hyp], mu[pre], logvar[pre], reduction).diagonal().numpy()
    pre_given_hyp = reference_similarity(mu[pre], logvar[pre], mu[hyp], logvar[hyp], reduction).diagonal().numpy()
    with torch.no_grad():
        mean_pooled = torch.stack(
            [
                model.encoder(**tokenizer(sentence, truncation=True, max_length=32, return_tensors="pt"))
                .last_hidden_state[0]
                .mean(0)
                for sentence in pairs.sentences
            ]
        )
    cosine = (torch.nn.functional.cosine_similarity(mean_pooled[hyp], mean_pooled[pre], dim=-1).numpy() + 1) / 2

    for metrics, scores in ((gaussian, hyp_given_pre), (point, cosine)):
        accuracy, threshold = brute_force_best_threshold(scores, labels)
        assert metrics["snli_dev_auprc"] == pytest.approx(100 * brute_force_sweep_auprc(scores, labels), abs=1e-9)
        assert metrics["snli_dev_accuracy"] == pytest.approx(100 * accuracy, abs=1e-9)
        assert metrics["snli_dev_threshold"] == pytest.approx(threshold, abs=1e-9)
    direction = pairs.direction_mask
    by_hand = 100 * float((hyp_given_pre[direction] > pre_given_hyp[direction]).mean())
    assert gaussian["snli_dev_direction_accuracy"] == pytest.approx(by_hand, abs=1e-9)


@pytest.mark.parametrize("entailed_shift", [0.0, 0.1])
def test_dev_metrics_of_a_known_perfect_ranking(entailed_shift: float) -> None:
    """Each entailed hypothesis gets its premise's Gaussian, shifted by ``entailed_shift`` in one dimension (sim
    exactly 1, or 1/1.005: both conventions at the top of the sweep matter), every other hypothesis a far-away one
    (sim = 1/19): AUPRC and accuracy are 100, at the first grid threshold above 1/19."""
    pairs = load_nli("snli_dev", *NLI_DEV, data_dir=default_data_dir(), max_examples=40)
    assert len(set(pairs.hypotheses)) == len(pairs) and not set(pairs.hypotheses) & set(pairs.premises)
    premises = list(dict.fromkeys(pairs.premises))
    mu = {premise: torch.randn(4, generator=torch.Generator().manual_seed(row)) for row, premise in enumerate(premises)}
    shift = torch.tensor([entailed_shift, 0.0, 0.0, 0.0])
    for premise, hypothesis, entailed in zip(pairs.premises, pairs.hypotheses, pairs.is_entailment, strict=True):
        mu[hypothesis] = mu[premise] + (shift if entailed else 3.0)  # KL = ½ Σ Δμ²: ½ · 0.1² or ½ · 4 · 3² = 18
    encoded = EncodedSentences(
        index={sentence: row for row, sentence in enumerate(mu)},
        mu=torch.stack(list(mu.values())),
        logvar=torch.zeros(len(mu), 4),
        reduction="sum",
    )
    metrics = dev_metrics(encoded, pairs)
    assert metrics["snli_dev_auprc"] == pytest.approx(100.0, abs=1e-9)
    assert metrics["snli_dev_accuracy"] == pytest.approx(100.0, abs=1e-9)
    assert metrics["snli_dev_threshold"] == pytest.approx(0.053, abs=1e-9)  # the grid value right above 1/19


def test_study_and_reports_end_to_end(backbone: Path, tmp_path: Path) -> None:
    """The study script on a tiny backbone and the first rows of the real data, then the report writer."""
    study = tmp_path / "study"
    command = [sys.executable, "-m", "studies.study", "--output", str(study), "--cache_dir", str(tmp_path / "cache")]
    command += ["--model_name_or_path", str(backbone), "--max_examples", "60", "--seeds", "1", "2"]
    command += ["--eval_max_length", "64"]
    command += ["--batch_sizes", "16", "--learning_rates", "1e-2", "3e-2", "--num_train_epochs", "1"]
    subprocess.run(command, cwd=REPO_ROOT, check=True, capture_output=True, text=True, timeout=600)
    payload = json.loads((study / "study.json").read_text())
    assert set(payload["runs"]) == {
        *(
            f"{variant} / {reduction}"
            for variant in ("ent", "ent+con", "ent+rev", "ent+con+rev")
            for reduction in ("sum", "mean_dim")
        ),
        "SimCSE sup. (cosine on μ)",
        "all-MiniLM-L6-v2 (cosine, untouched)",
    }
    assert all(len(runs) == 2 for label, runs in payload["runs"].items() if "untouched" not in label)
    for label, grid in payload["tuning"].items():
        best = max(grid, key=lambda row: row["snli_dev_auprc"])
        assert payload["chosen"][label] == {"batch_size": best["batch_size"], "learning_rate": best["learning_rate"]}
    assert payload["meta"]["training_data"]["examples_used"] == 60
    assert "direction/snli" in payload["significance"]["ent+con+rev / sum vs. ent / sum"]
    assert all((study / name).is_file() for name in payload["plots"])
    reports = tmp_path / "reports"
    subprocess.run(
        [sys.executable, "-m", "studies.heads_only_report", "--study", str(study), "--output", str(reports)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    reproduction = (reports / "HEADS_ONLY.md").read_text()
    assert "76.64" in reproduction and "ent+rev / mean_dim" in reproduction  # the paper beside ours
    seeds_mean = payload["aggregate"]["ent+con+rev / sum"]["direction/snli/similarity_rule"]["mean"]
    assert f"{seeds_mean:.2f}" in reproduction
