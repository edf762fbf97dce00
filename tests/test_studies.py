"""The study harness (``studies/study.py``, ``report.py``, ``run.py``): each rule as its YAML states it, every committed
study report regenerated from its results, the configs that carry the selections, and the runner's commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gausscse import GaussCSEConfig
from gausscse.model.backbone_gausscse import BACKBONE_VARIANCE_LAYERS
from studies import run
from studies.report import Report
from studies.study import Study

REPO_ROOT = Path(__file__).resolve().parent.parent
STUDIES = sorted((REPO_ROOT / "studies").glob("*.yaml"))


def config(name: str) -> dict:
    return yaml.safe_load((REPO_ROOT / "configs" / f"{name}.yaml").read_text())


def selected(name: str) -> str:
    """The candidate the committed report of study ``name`` selects."""
    return Study.load(REPO_ROOT / "studies" / f"{name}.yaml").output.read_text().split("**Selected: `")[1].split("`")[0]


@pytest.mark.parametrize("file", STUDIES, ids=lambda file: file.stem)
def test_every_committed_study_report_is_what_the_harness_makes_of_its_results(file):
    study = Study.load(file)
    assert Report(study).render() == study.output.read_text()


def with_runs(name: str, runs: dict[str, dict[str, dict]], backbone: dict | None = None) -> Study:
    """Study ``name`` (its YAML and rule) over made-up ``runs`` and ``backbone`` results."""
    study = Study.load(REPO_ROOT / "studies" / f"{name}.yaml")
    study.__dict__.update(runs=runs, backbone=backbone or {})
    return study


def keep_run(sts_dev: float, retrieval_dev: float, direction_dev: float, auprc_dev: float = 60.0) -> dict:
    return {
        "sts_dev": {"stsb_dev": {"cosine": sts_dev}},
        "retrieval": {"snli_dev": {"similarity": {"ndcg@10": retrieval_dev}}},
        "snli_dev": {"direction_accuracy": direction_dev, "auprc": auprc_dev},
    }


def test_the_keep_rule_drops_direction_losers_then_ranks_by_keep_then_direction():
    study = with_runs(
        "keep",
        {
            "paper": {"paper_seed42": keep_run(78.0, 54.0, 96.0)},
            "forgets": {"forgets_seed42": keep_run(90.0, 80.0, 95.4)},  # below paper's 96.0 − 0.5: out
            "keeps_more": {"keeps_more_seed42": keep_run(86.0, 67.0, 96.6)},
            "tied": {"tied_seed42": keep_run(86.0, 66.6, 97.5)},  # keep within 0.5 of the best: direction decides
        },
    )
    assert study.rank(study.runs) == ["tied", "keeps_more", "paper"]


def test_the_finalists_are_ranked_again_on_all_their_seeds():
    study = with_runs(
        "keep",
        {
            "paper": {"paper_seed42": keep_run(78.0, 54.0, 96.0)},
            "a": {"a_seed42": keep_run(86.0, 68.0, 97.0), "a_seed1": keep_run(86.0, 64.0, 97.0)},
            "b": {"b_seed42": keep_run(86.0, 67.0, 97.0), "b_seed1": keep_run(86.0, 67.0, 97.0)},
        },
    )
    selection = study.selection
    assert selection["first"] == ["a", "b", "paper"] and selection["finalists"] == ["a", "b"]
    assert selection["final"] == ["b", "a"] and selection["selected"] == "b"


def release_run(direction_dev: float, auprc_dev: float, retrieval_dev: float) -> dict:
    return {
        "snli_dev": {"direction_accuracy": direction_dev, "auprc": auprc_dev},
        "retrieval": {"snli_dev": {"similarity": {"ndcg@10": retrieval_dev}}},
    }


def test_the_release_rule_drops_retrieval_losers_then_ranks_by_direction_plus_auprc_then_retrieval():
    backbone = {"retrieval": {"snli_dev": {"cosine": {"ndcg@10": 68.5}}}}  # eligible from 67.0 on
    runs = {
        "forgets": {"forgets_seed42": release_run(99.0, 70.0, 66.9)},  # the best score, 1.6 below the backbone: out
        "lower": {"lower_seed42": release_run(96.0, 63.0, 68.0)},  # 159.0
        "best": {"best_seed42": release_run(97.0, 64.0, 67.0)},  # 161.0
        "tied": {"tied_seed42": release_run(96.6, 64.0, 67.5)},  # 160.6: within 0.5, the better retrieval first
    }
    study = with_runs("release", runs, backbone)
    assert study.rank(study.runs) == ["tied", "best", "lower"]
    assert study.rank({"forgets": runs["forgets"]}) == []


def mean_run(stsb: float, search: float, auprc: tuple[float, float], direction: tuple[float, float]) -> dict:
    return {
        "sts_dev": {"stsb_dev": {"cosine": stsb}},
        "retrieval": {"snli_dev": {"search": {"ndcg@10": search}}},
        "snli_dev": {"auprc": auprc[0], "direction_accuracy": direction[0]},
        "lingnli_dev": {"auprc": auprc[1], "direction_accuracy": direction[1]},
    }


def test_the_mean_rule_keeps_sts_and_search_then_ranks_by_auprc_plus_direction_then_lingnli_auprc():
    backbone = {
        "sts_dev": {"stsb_dev": {"cosine": 87.0}},  # eligible from 86.5 on
        "retrieval": {"snli_dev": {"cosine": {"ndcg@10": 68.5}}},  # eligible from 68.5 on
    }
    runs = {  # the candidates' names (eligibility reads their designs); the figures made up
        "mu1": {"mu1_seed42": mean_run(86.4, 70.0, (80.0, 80.0), (97.0, 90.0))},  # forgets STS: out
        "mu2": {"mu2_seed42": mean_run(88.0, 68.4, (80.0, 80.0), (97.0, 90.0))},  # forgets search: out
        "frozen": {"frozen_seed42": mean_run(87.0, 69.6, (67.0, 70.0), (96.6, 88.0))},  # 68.5 + 92.3 = 160.8
        "mu1_stop": {"mu1_stop_seed42": mean_run(87.5, 69.0, (70.0, 74.0), (96.0, 88.0))},  # 72.0 + 92.0 = 164.0
        "mu1_gauss": {"mu1_gauss_seed42": mean_run(87.5, 69.0, (69.0, 74.6), (96.0, 88.0))},  # 163.8, better LingNLI
    }
    study = with_runs("mean", runs, backbone)
    assert study.rank(study.runs) == ["mu1_gauss", "mu1_stop", "frozen"]


def reductions(**scores: tuple[float, float]) -> Study:
    runs = {
        name: {f"{name}_seed42": {"snli_dev": {"direction_accuracy": direction, "auprc": auprc}}}
        for name, (direction, auprc) in scores.items()
    }
    return with_runs("reduction", runs)


@pytest.mark.parametrize(
    ("scores", "winner", "chosen"),
    [
        ({"sum": (92.0, 62.0), "mean_kl": (96.0, 63.0), "mean_dim": (95.0, 59.0)}, "mean_kl", "mean_kl"),
        # tied on direction (within 0.5): the higher AUPRC wins
        ({"sum": (92.0, 62.0), "mean_kl": (95.7, 63.0), "mean_dim": (96.0, 59.0)}, "mean_kl", "mean_kl"),
        # a clearly better direction wins whatever the AUPRC
        ({"sum": (92.0, 62.0), "mean_kl": (95.0, 63.0), "mean_dim": (96.0, 59.0)}, "mean_dim", "mean_dim"),
        # sum wins the tie on AUPRC; mean_kl within 0.5 of it on both: a tie, mean_kl
        ({"sum": (95.9, 60.4), "mean_kl": (95.8, 60.0), "mean_dim": (96.0, 59.0)}, "sum", "mean_kl"),
        # ... but not when its AUPRC is further off
        ({"sum": (95.9, 60.4), "mean_kl": (95.8, 59.8), "mean_dim": (96.0, 59.0)}, "sum", "sum"),
    ],
)
def test_the_reduction_rule_direction_first_auprc_among_ties_mean_kl_on_a_tie(scores, winner, chosen):
    selection = reductions(**scores).selection
    assert (selection["winner"], selection["selected"]) == (winner, chosen)


def test_the_code_default_reduction_is_the_reduction_study_selection():
    assert GaussCSEConfig().similarity_reduction == selected("reduction") == "mean_kl"
    report = (REPO_ROOT / "results" / "REDUCTION.md").read_text()
    for seed in (42, 1, 2):
        results = json.loads((REPO_ROOT / f"results/reduction_study/seed{seed}/results.json").read_text())
        direction = results["models"][f"mean_kl_seed{seed}"]["direction"]["snli"]["similarity_rule"]
        assert f"| `mean_kl` seed {seed} | {direction:.2f} /" in report


def test_study_base_is_the_keep_selection():
    """configs/study_base.yaml, the recipe the later studies started from, trains the keep study's selection: two
    paths with the retrieval term (--start backbone = auto for MiniLM), 300 steps."""
    flags, base = Study.load(REPO_ROOT / "studies/keep.yaml").flags(selected("keep")), config("study_base")
    assert selected("keep") == "two_paths_retrieval" and flags["start"] == "backbone"
    assert all(base[name] == flags[name] for name in ("max_steps", "retrieval_weight", "variance_layers"))
    assert base.get("start", "auto") in ("auto", "backbone") and "frozen_mean" not in base


def test_the_quickstart_is_the_onepass_selection_on_the_nli_selection_data():
    """configs/quickstart.yaml trains the one-pass study's selection (its flags on the studies' base recipe; --start
    auto gives the same trunk) on the NLI study's selected data."""
    quickstart, base = config("quickstart"), config("study_base")
    onepass = Study.load(REPO_ROOT / "studies/onepass.yaml").flags(selected("onepass"))
    assert selected("onepass") == "trunk1_search" and onepass["variance_layers"] == BACKBONE_VARIANCE_LAYERS
    assert "variance_layers" not in quickstart and quickstart.get("start", "auto") == "auto"
    assert onepass["retrieval_kl_weight"] == quickstart["retrieval_kl_weight"]
    assert onepass["max_steps"] == quickstart["max_steps"] == quickstart["eval_steps"]
    same = ("loss", "retrieval_weight", "similarity_reduction", "max_seq_length", "learning_rate")
    assert all(quickstart[name] == base[name] for name in (*same, "per_device_train_batch_size", "seed"))
    assert base["pack_sequences"] and "pack_sequences" not in quickstart  # the default packs on the CPU, as base did
    nli = Study.load(REPO_ROOT / "studies/nli.yaml").flags(selected("nli"))
    assert quickstart["train_datasets"] == nli["train_datasets"]
    assert quickstart.get("train_dataset_repeats", []) == nli.get("train_dataset_repeats", [])
    assert quickstart.get("variance_layers", BACKBONE_VARIANCE_LAYERS) == nli.get(
        "variance_layers", BACKBONE_VARIANCE_LAYERS
    )
    assert quickstart["max_steps"] == nli.get("max_steps", 1600)


def test_the_quickstart_is_the_mean_full_selection_on_the_frozen_recipe_it_replaced():
    """configs/quickstart.yaml = configs/study_frozen.yaml (the recipe the NLI and μ studies started from) with the
    flags of the candidate results/MEAN_FULL.md selects (mu1_stop: μ learns in the top layer)."""
    study = Study.load(REPO_ROOT / "studies/mean_full.yaml")
    assert selected("mean_full") == "mu1_stop" and study.spec["recipe"] == "configs/study_frozen.yaml"
    assert config("quickstart") == {**config("study_frozen"), **study.flags(selected("mean_full"))}
    for name in ("nli", "mean"):
        assert Study.load(REPO_ROOT / f"studies/{name}.yaml").spec["recipe"] == "configs/study_frozen.yaml"


def test_release_yaml_is_the_selected_candidate_for_the_hour():
    """configs/release.yaml = the studies' base recipe with the change of the candidate results/RELEASE.md selects, for
    3,000 s of that configuration's probed seconds per step (rounded down to a multiple of 100), on the model and
    data of the quickstart (the one-pass and NLI studies' selections)."""
    study = Study.load(REPO_ROOT / "studies/release.yaml")
    release, base, quickstart = config("release"), config("study_base"), config("quickstart")
    expected = {**base, **study.flags(selected("release")), "retrieval_kl_weight": quickstart["retrieval_kl_weight"]}
    assert "variance_layers" not in release and release.get("start", "auto") == "auto"
    assert base["pack_sequences"] and "pack_sequences" not in release  # the default packs on the CPU, as base did
    settings = ("loss", "retrieval_weight", "retrieval_kl_weight", "similarity_reduction", "max_seq_length")
    settings += ("per_device_train_batch_size", "learning_rate", "head_learning_rate", "warmup_steps", "seed")
    for name in settings:
        assert release[name] == expected[name], name
    assert release["max_steps"] == int(3000 / study.seconds_per_step(selected("release"))) // 100 * 100
    assert release["eval_steps"] == release["save_steps"] == release["max_steps"] // 5
    assert "max_train_examples" not in release
    nli_data = ("train_datasets", "train_dataset_repeats")
    assert {name: release[name] for name in nli_data} == {name: quickstart[name] for name in nli_data}


def test_a_study_names_what_it_lacks_and_an_unknown_candidate(tmp_path):
    (tmp_path / "bad.yaml").write_text("title: t\ncandidates: {a: {}}\n")
    with pytest.raises(ValueError, match=r"bad.yaml: a study needs output, results, recipe, sections"):
        Study.load(tmp_path / "bad.yaml")
    with pytest.raises(KeyError, match=r"keep.yaml: no candidate 'nope' .*paper"):
        Study.load(REPO_ROOT / "studies/keep.yaml").flags("nope")
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(ValueError, match=r"empty.yaml: a study is a YAML mapping .*, got NoneType"):
        Study.load(tmp_path / "empty.yaml")
    reduction = yaml.safe_load((REPO_ROOT / "studies/reduction.yaml").read_text())
    reduction["rule"]["prefer"]["candidate"] = "mean-kl"  # a typo for mean_kl: it would have been skipped
    (tmp_path / "prefer.yaml").write_text(yaml.safe_dump(reduction))
    with pytest.raises(ValueError, match=r"prefer.yaml: rule.prefer.candidate 'mean-kl' is no candidate .*mean_kl"):
        Study.load(tmp_path / "prefer.yaml")
    keep = yaml.safe_load((REPO_ROOT / "studies/keep.yaml").read_text())
    bounded = [condition for condition in keep["rule"]["eligible"] if "candidate" in condition.get("at_least", {})]
    bounded[0]["at_least"]["candidate"] = "papr"
    (tmp_path / "eligible.yaml").write_text(yaml.safe_dump(keep))
    with pytest.raises(ValueError, match=r"eligible.yaml: rule.eligible's at_least.candidate 'papr' is no candidate"):
        Study.load(tmp_path / "eligible.yaml")


@pytest.fixture
def fake_study(tmp_path, monkeypatch):
    """A study in ``tmp_path`` whose runner commands are recorded and fake their outputs (``calls``)."""
    calls: list[list[str]] = []

    def fake_python(*arguments) -> str:
        arguments = [str(argument) for argument in arguments]
        calls.append(arguments)
        output = Path(arguments[arguments.index("--output_dir" if "--output_dir" in arguments else "--output") + 1])
        output.mkdir(parents=True, exist_ok=True)
        if arguments[0] == "train_gausscse.py":
            (output / "train_results.json").write_text(json.dumps({"train_runtime": 60.0}))
            (output / "config.json").write_text("{}")
        else:
            names = [Path(argument).name for argument in arguments if "_seed" in argument or argument == "BACKBONE"]
            results = {"snli_dev": {"direction_accuracy": 90.0, "auprc": 60.0}}
            (output / "results.json").write_text(
                json.dumps({"models": {name: results for name in names}, "baselines": {}, "meta": {}})
            )
        return ""

    monkeypatch.setattr(run, "python", fake_python)
    monkeypatch.setattr(run, "precision", lambda: "fp32")
    monkeypatch.setattr(run, "backbone", lambda: "BACKBONE")
    monkeypatch.delenv("RUNS_DIR", raising=False)
    earlier = tmp_path / "earlier/copied_seed42"
    earlier.mkdir(parents=True)
    (earlier / "train_results.json").write_text(json.dumps({"train_runtime": 1.0}))
    spec = {
        "title": "A study",
        "output": str(tmp_path / "REPORT.md"),
        "results": str(tmp_path / "results"),
        "runs": str(tmp_path / "runs"),
        "recipe": "configs/study_base.yaml",
        "budget": {"seconds": 600, "probe_steps": 30},
        "candidates": {
            "base": {},
            "lr": {"flags": {"learning_rate": 3.0e-5, "train_datasets": ["snli", "mnli"]}, "probe": "base"},
            "copied": {"copy_from": str(tmp_path / "earlier/copied_seed{seed}")},
        },
        "evaluate": {"tasks": "nli,direction", "backbone_tasks": "nli"},
        "rule": {"text": ["the rule"], "score": ["snli_dev.auprc"], "tie_margin": 0.5},
        "sections": ["ranking"],
    }
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(spec))
    return Study.load(tmp_path / "study.yaml"), calls


def test_the_runner_trains_each_run_once_copies_earlier_runs_and_sizes_budgets_by_a_probe(fake_study):
    study, calls = fake_study
    run.main([str(study.file), "train", "42", "base", "lr", "copied"])
    trained = [call[call.index("--output_dir") + 1] for call in calls]
    assert [Path(folder).name for folder in trained] == ["probe_base", "base_seed42", "lr_seed42"]  # one probe
    probe, base, lr = calls
    assert probe[-6:] == ["--max_steps", "30", "--eval_strategy", "no", "--logging_steps", "30"]
    assert base[:2] == ["train_gausscse.py", "configs/study_base.yaml"] and "--save_strategy" in base
    assert base[base.index("--bf16") + 1] == "false" and base[base.index("--seed") + 1] == "42"
    assert base[-4:] == ["--max_steps", "300", "--eval_steps", "300"]  # 600 s / (60 s / 30 steps)
    assert lr[-9:-4] == ["--learning_rate", "3e-05", "--train_datasets", "snli", "mnli"]
    assert not (study.results.parent / "runs/probe_base").exists()
    assert sorted(path.name for path in (study.results / "train").iterdir()) == [
        "base_seed42.json", "copied_seed42.json", "lr_seed42.json"
    ]  # fmt: skip
    run.main([str(study.file), "train", "42", "base", "lr", "copied"])
    assert len(calls) == 3  # finished runs are not trained again
    with pytest.raises(KeyError, match="no candidate 'other'"):
        run.main([str(study.file), "train", "1", "base", "other"])
    assert len(calls) == 3  # nothing ran


def test_the_runner_evaluates_each_run_and_the_backbone_once_then_writes_the_report(fake_study):
    study, calls = fake_study
    run.main([str(study.file), "train", "42", "base", "lr"])
    run.main([str(study.file), "train", "1", "base"])
    del calls[:]
    run.main([str(study.file), "evaluate"])
    outputs = [Path(call[call.index("--output") + 1]).name for call in calls]
    assert outputs == ["base_seed1", "base_seed42", "lr_seed42", "backbone"]
    assert all(call[:2] == ["-m", "gausscse.cli.evaluate"] and "--no_plots" in call for call in calls)
    assert calls[-1][calls[-1].index("--tasks") + 1] == "nli"  # the backbone's tasks
    meta = json.loads((study.results / "study.json").read_text())
    assert meta["precision"] == "fp32" and meta["seeds"] == [42, 1] and meta["budget_seconds"] == 600
    assert "**Selected: `base`.**" in study.output.read_text()
    run.main([str(study.file), "evaluate"])
    assert len(calls) == 4  # evaluated runs are not evaluated again


def test_a_joint_evaluation_puts_the_reference_against_the_others_per_seed(fake_study):
    study, calls = fake_study
    spec = {**study.spec, "evaluate": {"tasks": "nli", "joint": "per_seed", "reference": "lr"}}
    study.file.write_text(yaml.safe_dump(spec))
    run.main([str(study.file), "train", "42", "base", "lr"])
    run.main([str(study.file), "train", "1", "base", "lr"])
    del calls[:]
    run.main([str(study.file), "evaluate"])
    assert [Path(call[call.index("--output") + 1]).name for call in calls] == ["seed42", "seed1"]
    first = calls[0]
    models = first[first.index("--model") + 1 : first.index("--baseline")]
    baselines = first[first.index("--baseline") + 1 : first.index("--tasks")]
    assert [Path(model).name for model in models] == ["lr_seed42"] and [Path(b).name for b in baselines] == [
        "base_seed42"
    ]
