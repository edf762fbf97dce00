"""The release flow: scripts/release.sh's arguments, configs/release.yaml and its SimCSE twin as the
training parser reads them, and scripts/release_card.py on an evaluation's results (targets, sections, the curve)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

from gausscse.cli.train import parse_arguments
from gausscse.training.save import FINAL_FILES_LIST

REPO = Path(__file__).resolve().parent.parent


def load_release_card():
    spec = importlib.util.spec_from_file_location("release_card", REPO / "scripts" / "release_card.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


release_card = load_release_card()


@pytest.mark.parametrize("arguments", [[], [""], ["--max_steps", "2"]])
def test_release_sh_needs_an_output_folder_first(arguments):
    done = subprocess.run(["bash", str(REPO / "scripts/release.sh"), *arguments], capture_output=True, text=True)
    assert done.returncode == 2 and "usage: bash scripts/release.sh OUT" in done.stderr


def test_the_release_config_and_its_twin_parse_as_release_sh_passes_them():
    config = str(REPO / "configs/release.yaml")
    _, data_args, training_args = parse_arguments([config, "--output_dir", "out"])
    assert set(data_args.train_datasets) == {"snli", "mnli", "lingnli"}  # all the offline NLI training data
    assert data_args.max_train_examples is None and training_args.max_steps > 0
    assert training_args.loss == "ent+con+rev" and training_args.eval_strategy == "steps"
    twin = parse_arguments([config, "--output_dir", "twin", "--loss", "simcse", "--frozen_mean", "false"])
    assert twin[2].loss == "simcse" and twin[0].frozen_mean is False
    for name in ("max_steps", "per_device_train_batch_size", "learning_rate", "seed", "eval_steps"):
        assert getattr(twin[2], name) == getattr(training_args, name), name
    assert twin[1].max_seq_length == data_args.max_seq_length and twin[1].train_datasets == data_args.train_datasets


def model_results(nli: float, direction: float, sts: float, retrieval: float, gaussian: bool = True) -> dict:
    sets = ("snli", "mnli_mismatched", "mnli_matched", "sick")
    results = {
        "nli": {name: {"accuracy": nli + i, "auprc": nli - 5 + i} for i, name in enumerate(sets)},
        "sts": {"avg": {"cosine": sts}},
        "retrieval": {"snli": {"cosine": {"ndcg@10": retrieval}}},
    }
    if gaussian:
        rules = ("similarity_rule", "variance_rule", "length_baseline")
        results["direction"] = {name: {rule: direction - j for j, rule in enumerate(rules)} for name in sets}
        results["retrieval"]["snli"]["similarity"] = {"ndcg@10": retrieval - 1}
    return results


@pytest.fixture
def release_folders(tmp_path):
    out, twin = tmp_path / "release", tmp_path / "release-simcse-twin"
    (out / "eval").mkdir(parents=True)
    twin.mkdir()
    payload = {
        "meta": {"command": ["gausscse-evaluate"]},
        "models": {"GaussCSE": model_results(75.0, 97.5, 78.9, 68.9)},
        "baselines": {
            "SimCSE twin": model_results(74.0, 0, 80.0, 70.0, gaussian=False),
            "all-MiniLM-L6-v2": model_results(74.2, 0, 78.88, 68.79, gaussian=False),
        },
        "significance": {
            "GaussCSE vs. SimCSE twin": {"nli/snli": {"only_a_correct": 30, "only_b_correct": 20, "p_value": 0.2}}
        },
    }
    payload["baselines"]["SimCSE twin"]["nli"]["sick"]["accuracy"] = 90.0  # the twin wins SICK accuracy
    payload["baselines"]["SimCSE twin"]["nli"]["mnli_mismatched"]["auprc"] = 80.0  # and MNLI-mm AUPRC
    (out / "eval" / "results.json").write_text(json.dumps(payload))
    (out / "eval" / "report.md").write_text("# GaussCSE evaluation\n\ntables\n")
    data = {"examples": 40013, "rows": 119890, "per_source": {"/d/snli/train_100k.jsonl.gz": 99890}}
    curve = [{"step": 100, "elapsed_seconds": 60.0, "snli_dev_auprc": 60.0, "snli_dev_accuracy": 70.0}]
    curve.append({"step": 200, "elapsed_seconds": 150.0, "snli_dev_auprc": 62.0, "snli_dev_accuracy": 71.0})
    (out / "train_results.json").write_text(json.dumps({"train_runtime": 3000.0, "data": data, "dev_curve": curve}))
    (twin / "train_results.json").write_text(json.dumps({"train_runtime": 2400.0, "data": data, "dev_curve": curve}))
    card = "---\ntags:\n- gausscse\n---\n\n# release\n\n## Evaluation\n\nthe tables\n"
    (out / "README.md").write_text(card)
    (out / FINAL_FILES_LIST).write_text(json.dumps(["README.md", "model.safetensors"]))
    timing = tmp_path / "timing"
    timing.write_text("GaussCSE wall 3100\nSimCSE twin wall 2500\nevaluation 600\n")  # as release.sh writes it
    return out, twin, timing


def test_release_card_checks_each_target_and_writes_one_summary(release_folders, tmp_path):
    out, twin, timing = release_folders
    arguments = [str(out), str(twin), "--config", str(REPO / "configs/release.yaml"), "--precision", "bf16"]
    release = release_card.main([*arguments, "--timing", str(timing)])
    met = {row["target"]: row["met"] for row in release["targets"]}
    # GaussCSE: direction 97.5 on every set (≥ 96.5, 89.0, 87.0), NLI accuracy and AUPRC 1 point above the twin on
    # each set but SICK accuracy and MNLI-mm AUPRC (two of three accuracies: met), STS 78.9 ≥ the backbone's 78.88,
    # retrieval own 67.9 < 68.79 (the backbone's cosine), cos μ 68.9 ≥ 68.79
    assert met == {
        "direction SNLI ≥ 96.5": True,
        "direction MNLI (mm) ≥ 89.0": True,
        "direction SICK ≥ 87.0": True,
        "NLI accuracy SNLI ≥ SimCSE twin": True,
        "NLI accuracy MNLI (mm) ≥ SimCSE twin": True,
        "NLI accuracy SICK ≥ SimCSE twin": False,
        "AUPRC SNLI ≥ SimCSE twin": True,
        "AUPRC MNLI (mm) ≥ SimCSE twin": False,
        "AUPRC SICK ≥ SimCSE twin": True,
        "NLI accuracy ≥ SimCSE twin on at least 2 of 3 sets": True,
        "STS avg (cos μ) ≥ the backbone's": True,
        "SNLI-test retrieval nDCG@10 (own similarity) ≥ the backbone's cosine": False,
        "SNLI-test retrieval nDCG@10 (cos μ) ≥ the backbone's cosine": True,
    }
    bars = {row["target"]: row["bar"] for row in release["targets"]}
    assert bars["NLI accuracy MNLI (mm) ≥ SimCSE twin"] == pytest.approx(74.0 + 1)
    assert bars["AUPRC MNLI (mm) ≥ SimCSE twin"] == 80.0
    assert release["minutes"] == {
        "GaussCSE training": 50.0,
        "SimCSE twin training": 40.0,
        "GaussCSE wall": pytest.approx(3100 / 60),
        "SimCSE twin wall": pytest.approx(2500 / 60),
        "evaluation": 10.0,
    }
    assert [point["minutes"] for point in release["dev_curves"]["GaussCSE"]] == [1.0, 2.5]

    payload = json.loads((out / "eval" / "results.json").read_text())
    assert payload["release"]["targets"] == release["targets"] and "GaussCSE" in payload["models"]  # one results.json
    assert (out / release_card.CURVE_FILE).stat().st_size > 0
    assert release_card.CURVE_FILE in json.loads((out / FINAL_FILES_LIST).read_text())  # uploaded with the model
    # a second run (the same inputs) replaces its sections instead of adding to them
    first_report, first_card = (out / "eval" / "report.md").read_text(), (out / "README.md").read_text()
    release_card.main([*arguments, "--timing", str(timing)])
    report = (out / "eval" / "report.md").read_text()
    assert report == first_report and (out / "README.md").read_text() == first_card
    assert report.startswith("## Release") and report.endswith("# GaussCSE evaluation\n\ntables\n")
    card = (out / "README.md").read_text()
    assert card.count("## Release") == 1 and "## Evaluation\n\nthe tables" in card
    assert "gausscse" in ModelCard(card).data.tags and "| SNLI-test retrieval nDCG@10 (own similarity)" in card


def test_release_card_names_what_is_missing(release_folders):
    out, twin, _ = release_folders
    payload = json.loads((out / "eval" / "results.json").read_text())
    del payload["baselines"]["SimCSE twin"]
    (out / "eval" / "results.json").write_text(json.dumps(payload))
    script = [sys.executable, str(REPO / "scripts/release_card.py"), str(out), str(twin), "--precision", "bf16"]
    done = subprocess.run([*script, "--config", str(REPO / "configs/release.yaml")], capture_output=True, text=True)
    assert done.returncode == 2 and "no results for SimCSE twin" in done.stderr
    done = subprocess.run([*script, "--config", str(out / "nothing.yaml")], capture_output=True, text=True)
    assert done.returncode == 2 and "nothing.yaml: no such file" in done.stderr


def test_release_md_takes_the_release_section_release_card_wrote(release_folders, tmp_path):
    from studies.report import Report, copy_release
    from studies.study import Study

    out, twin, timing = release_folders
    release = Study.load(REPO / "studies/release.yaml")
    study = Study(release.file, {**release.spec, "results": str(tmp_path / "release_study"),
                                 "output": str(tmp_path / "RELEASE.md")})  # fmt: skip
    with pytest.raises(SystemExit, match="no release section"):  # before release_card has run
        copy_release(study, out)
    config = str(REPO / "configs/release.yaml")
    release_card.main([str(out), str(twin), "--config", config, "--precision", "bf16", "--timing", str(timing)])
    copy_release(study, out)
    assert {path.name for path in (tmp_path / "release_study" / "release").iterdir()} == {
        "results.json", "report.md", release_card.CURVE_FILE
    }  # fmt: skip
    section = "\n".join(Report(study).release(None))
    assert section.startswith("## The release run") and "# GaussCSE evaluation" not in section
    assert "| direction SNLI ≥ 96.5 | 97.50 | 96.50 | ✓ |" in section
    assert f"](release_study/release/{release_card.CURVE_FILE})" in section
