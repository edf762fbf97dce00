"""train_gausscse.py end to end on a tiny random BERT: data, arguments, Trainer, output folder, resume, LoRA."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
from huggingface_hub import ModelCard
from PIL import Image
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

from gausscse import GaussCSEModel
from gausscse.cli import train as train_gausscse
from gausscse.data.sources import BadRowError, build_examples, load_source
from gausscse.data.tokenize import tokenize_examples
from gausscse.evaluation.encoders import GaussianEncoder, load_encoder
from gausscse.evaluation.entailment_weight import choose_cosine_weight
from gausscse.evaluation.search_weight import choose_kl_weight
from gausscse.evaluation.tasks import NLI_DEV, load_nli, retrieval_set
from gausscse.loading import CHECKPOINT_COMPLETE, load_model
from gausscse.training.arguments import parse_arguments
from gausscse.training.batch import TripletCollator, split_batch_embeddings
from gausscse.training.lora import apply_lora, merge_lora, save_adapter_folder, save_base
from gausscse.training.losses import GaussCSELoss
from gausscse.training.trainer import GaussCSETrainer, NonFiniteError, first_non_finite, is_head_parameter

from ..helpers import final_save, nli_rows, train_args, write_jsonl_gz

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_FILE = "model.safetensors"


# ----------------------------------------------------------------------------------------------------- arguments


def test_head_learning_rate_default_and_the_papers_single_rate(tmp_path):
    _, _, defaults = parse_arguments(["--output_dir", str(tmp_path)])
    assert defaults.head_learning_rate == 1e-3 and defaults.learning_rate == 3e-5
    paper_config = Path(__file__).resolve().parents[2] / "configs" / "paper.yaml"
    _, _, paper = parse_arguments([str(paper_config), "--output_dir", str(tmp_path), "--bf16", "false"])
    assert paper.head_learning_rate == paper.learning_rate


def test_config_file_yaml_and_json_with_command_line_overrides(tmp_path):
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("loss: ent+rev\ntemperature: 0.1\ntrain_datasets: [snli]\nlora_r: 4\nnum_train_epochs: 1\n")
    model_args, data_args, training_args = parse_arguments([str(yaml_file), "--temperature", "0.07"])
    assert (training_args.loss, training_args.temperature, training_args.num_train_epochs) == ("ent+rev", 0.07, 1)
    assert data_args.train_datasets == ["snli"] and model_args.lora_r == 4
    json_file = tmp_path / "run.json"
    json_file.write_text(json.dumps({"head_learning_rate": 0.001, "output_dir": str(tmp_path / "out")}))
    _, _, training_args = parse_arguments([str(json_file)])
    assert training_args.head_learning_rate == 0.001
    # paper defaults
    assert (training_args.loss, training_args.temperature, training_args.per_device_train_batch_size) == (
        "ent+con+rev",
        0.05,
        64,
    )
    assert training_args.eval_steps == 100 and training_args.metric_for_best_model == "snli_dev_auprc"
    assert training_args.load_best_model_at_end and training_args.lr_scheduler_type == "linear"


def test_argument_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match=r"valid losses: ent, ent\+con, ent\+rev, ent\+con\+rev, simcse"):
        parse_arguments(["--loss", "pos+neg"])
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text("loss: ent\nlearning_rat: 0.1\n")
    with pytest.raises(ValueError, match=r"unknown argument.*learning_rat"):
        parse_arguments([str(bad_file)])
    with pytest.raises(ValueError, match="Unknown argument"):
        parse_arguments(["--no_such_flag", "1"])
    with pytest.raises(ValueError, match="valid: snli, mnli, lingnli, sick"):
        parse_arguments(["--train_datasets", "snli", "quora"])


# -------------------------------------------------------------------------------------------------------- trainer


def test_heads_get_their_own_learning_rate(backbone, data_dir, tmp_path):
    _, _, training_args = parse_arguments(train_args(backbone, data_dir, tmp_path, "--eval_strategy", "no"))
    model = GaussCSEModel.from_backbone(str(backbone))
    trainer = GaussCSETrainer(model=model, args=training_args, train_dataset=[{}])
    optimizer = trainer.create_optimizer()
    by_lr = {}
    for group in optimizer.param_groups:
        by_lr.setdefault(group["lr"], set()).update(id(p) for p in group["params"])
    heads = {id(p) for name, p in model.named_parameters() if is_head_parameter(name)}
    assert by_lr[1e-2] == heads and len(by_lr[1e-3]) == len(list(model.parameters())) - len(heads)

    lora = apply_lora(GaussCSEModel.from_backbone(str(backbone), start="paper"), r=4, alpha=8.0, dropout=0.0)
    optimizer = GaussCSETrainer(model=lora, args=training_args, train_dataset=[{}]).create_optimizer()
    by_lr = {}
    for group in optimizer.param_groups:
        by_lr.setdefault(group["lr"], set()).update(id(p) for p in group["params"])
    trained = {name: id(p) for name, p in lora.named_parameters() if p.requires_grad}
    assert by_lr[1e-2] == {id_ for name, id_ in trained.items() if ".modules_to_save." in name} != set()  # peft's names
    assert by_lr[1e-3] == {id_ for name, id_ in trained.items() if "lora_" in name} != set()


def test_a_checkpoint_of_non_finite_weights_is_refused_before_it_is_written(backbone, data_dir, tmp_path):
    """At a step whose checkpoint Trainer is about to save, weights holding NaN stop the run first (nothing with NaN
    is written); at other steps the check costs nothing."""
    from transformers import TrainerControl

    from gausscse.training.trainer import CheckpointCallback

    _, _, training_args = parse_arguments(train_args(backbone, data_dir, tmp_path, "--eval_strategy", "no"))
    model = GaussCSEModel.from_backbone(str(backbone))
    trainer = GaussCSETrainer(model=model, args=training_args, train_dataset=[{}])
    (callback,) = [item for item in trainer.callback_handler.callbacks if isinstance(item, CheckpointCallback)]
    with torch.no_grad():
        model.logvar_head.bias[0] = float("nan")
    trainer.state.global_step = 3
    assert callback.on_step_end(training_args, trainer.state, TrainerControl(should_save=False)) is not None
    with pytest.raises(NonFiniteError, match=r"checkpoint at step 3: parameter logvar_head.bias holds NaN"):
        callback.on_step_end(training_args, trainer.state, TrainerControl(should_save=True))


@torch.no_grad()
def training_loss(model: GaussCSEModel, backbone: Path, data_dir: Path) -> float:
    """The ent+con+rev loss of the whole tiny training set as one batch, dropout off."""
    dataset, _ = build_examples([load_source("snli", data_dir), load_source("mnli", data_dir)])
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    features = TripletCollator.for_tokenizer(tokenizer)(list(tokenize_examples(dataset, tokenizer, 32)))
    contradiction_index, text_ids = features.pop("contradiction_index"), features.pop("text_ids")
    output = model.eval()(**features)
    batch = split_batch_embeddings(output.mu, output.logvar, contradiction_index, text_ids)
    return float(GaussCSELoss("ent+con+rev", 0.05, model.config.similarity_reduction)(batch))


def test_training_lowers_loss_and_saves_a_folder_that_reloads_in_a_fresh_process(backbone, data_dir, tmp_path):
    output = tmp_path / "run"
    argv = train_args(backbone, data_dir, output, "--max_steps", "12", "--eval_steps", "6", "--save_steps", "6")
    with (
        mock.patch("gausscse.training.save.HfApi") as hf_api,
        mock.patch("huggingface_hub.constants.HF_HUB_OFFLINE", False),  # the suite runs offline; this is a push
    ):
        hf_api.return_value.whoami.return_value = {"name": "me", "orgs": []}  # the check before training
        push = ["--push_to_hub", "--hub_model_id", "me/tiny-gausscse", "--hub_token", "hf_x"]
        model_dir = train_gausscse.main([*argv, *push])
    assert model_dir == output and {"checkpoint-6", "checkpoint-12"} <= {path.name for path in output.iterdir()}
    hf_api.return_value.upload_folder.assert_called_once()
    upload = hf_api.return_value.upload_folder.call_args.kwargs
    assert upload["folder_path"] == str(model_dir)
    assert "model.safetensors" in upload["allow_patterns"]  # the final model's files, not the checkpoints
    assert not [name for name in upload["allow_patterns"] if "checkpoint" in name or "/" in name]
    assert not list(output.glob("checkpoint-*/README.md"))

    files = {path.name for path in model_dir.iterdir()}
    expected = {"config.json", "model.safetensors", "modeling_gausscse.py", "configuration_gausscse.py"}
    assert expected | {"gaussian.py", "tokenizer.json", "README.md", "train_results.json"} <= files
    assert {"modules.json", "config_sentence_transformers.json", "sentence_transformer_gausscse.py"} <= files
    card = (model_dir / "README.md").read_text()
    assert "model-index" in card and "trust_remote_code" in card
    assert "| sequence packing | yes |" in card  # --pack_sequences unset: packed, as on the CPU it is
    results = json.loads((model_dir / "train_results.json").read_text())
    # the card's model-index, as huggingface_hub reads it, is the final evaluation; its figure is in the folder
    card_data = ModelCard(card).data
    assert card_data.library_name == "sentence-transformers" and card_data.pipeline_tag == "sentence-similarity"
    assert {(r.metric_type, r.metric_value) for r in card_data.eval_results} == {
        ("auprc", round(results["eval_snli_dev_auprc"], 4)),
        ("accuracy", round(results["eval_snli_dev_accuracy"], 4)),
        ("threshold", round(results["eval_snli_dev_threshold"], 4)),
        ("similarity_rule", round(results["eval_snli_dev_direction_accuracy"], 4)),
    }
    assert "](evaluation.png)" in card and "evaluation.png" in upload["allow_patterns"]
    with Image.open(model_dir / "evaluation.png") as figure:
        assert figure.format == "PNG" and figure.width > 500
    assert results["data"]["complete_triplets"] == 24 and "eval_snli_dev_auprc" in results
    # the search score's λ, chosen on all of SNLI dev's entailment retrieval at the end and stored in the config
    dev = retrieval_set(load_nli("snli_dev", *NLI_DEV, data_dir=str(data_dir)))
    chosen, curve = choose_kl_weight(GaussCSEModel.from_pretrained(model_dir), dev)
    assert (
        results["search_kl_weight"] == chosen == json.loads((model_dir / "config.json").read_text())["search_kl_weight"]
    )
    assert results["snli_dev_search_ndcg@10"] == pytest.approx(curve[chosen])

    torch.manual_seed(7)  # main() seeds the fresh heads with --seed 7
    initial = GaussCSEModel.from_backbone(str(backbone))
    trained = GaussCSEModel.from_pretrained(model_dir)
    assert training_loss(trained, backbone, data_dir) < training_loss(initial, backbone, data_dir) - 0.05

    sentences = ["a man is playing a red guitar", "a man is outside"]
    local = GaussCSEModel.from_pretrained(model_dir).encode(sentences)
    script = (
        "import sys, torch\nfrom transformers import AutoModel\nfrom sentence_transformers import SentenceTransformer\n"
        "model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "print(type(model).__module__.startswith('transformers_modules'))\n"
        "torch.save(model.encode(sys.argv[2:]).mu, sys.argv[1] + '/../mu.pt')\n"
        "st = SentenceTransformer(sys.argv[1], trust_remote_code=True)\n"
        "torch.save(st.encode(sys.argv[2:], convert_to_tensor=True), sys.argv[1] + '/../st_mu.pt')\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(model_dir), *sentences], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("True")
    torch.testing.assert_close(torch.load(model_dir.parent / "mu.pt"), local.mu)
    torch.testing.assert_close(torch.load(model_dir.parent / "st_mu.pt"), local.mu)  # and as a SentenceTransformer


def fresh_process_mu(model_dir: Path, sentences: list[str]) -> torch.Tensor:
    """μ of ``sentences`` from ``AutoModel.from_pretrained(model_dir, trust_remote_code=True)`` in a new interpreter."""
    script = (
        "import sys, torch\nfrom transformers import AutoModel\n"
        "model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "assert type(model).__module__.startswith('transformers_modules'), type(model)\n"
        "torch.save(model.encode(sys.argv[3:]).mu, sys.argv[2])\n"
    )
    target = model_dir.parent / f"{model_dir.name}-mu.pt"
    done = subprocess.run(
        [sys.executable, "-c", script, str(model_dir), str(target), *sentences], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return torch.load(target)


@pytest.mark.parametrize("shape", ["triplets.csv", "nli.jsonl"])
def test_training_on_a_users_file_leaves_a_loadable_model_in_output_dir(shape, backbone, tmp_path, monkeypatch):
    """The issue's acceptance runs: --train_file triplets.csv (anchor, positive, negative) and --train_file
    nli.jsonl (premise, hypothesis, integer label), evaluated on a --validation_file; bf16 autocast on the CPU. With
    no data folder to be found, the user's files are enough: λ, α and the threshold are chosen on the validation
    file."""
    monkeypatch.setenv("GAUSSCSE_DATA_DIR", str(tmp_path / "no-data-here"))
    rows = nli_rows(12)
    if shape == "triplets.csv":
        by_premise: dict[str, dict] = {}
        for row in rows:
            role = {"entailment": "positive", "contradiction": "negative"}.get(row["label"])
            if role:
                by_premise.setdefault(row["premise"], {"anchor": row["premise"]})[role] = row["hypothesis"]
        with (tmp_path / shape).open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=["anchor", "positive", "negative"])
            writer.writeheader()
            writer.writerows(by_premise.values())
    else:
        ids = {"entailment": 0, "neutral": 1, "contradiction": 2}
        (tmp_path / shape).write_text("".join(json.dumps({**row, "label": ids[row["label"]]}) + "\n" for row in rows))
    write_jsonl_gz(tmp_path / "dev.jsonl.gz", nli_rows(6, offset=300))
    output = tmp_path / "out"
    argv = [
        "--model_name_or_path", str(backbone), "--train_file", str(tmp_path / shape),
        "--validation_file", str(tmp_path / "dev.jsonl.gz"), "--output_dir", str(output),
        "--data_cache_dir", str(tmp_path / "cache"), "--per_device_train_batch_size", "4", "--max_steps", "4",
        "--eval_steps", "2", "--save_steps", "2", "--bf16", "true", "--dataloader_num_workers", "2",
    ]  # fmt: skip
    model_dir = train_gausscse.main(argv)
    assert model_dir == output and (output / "checkpoint-4").is_dir()
    results = json.loads((output / "train_results.json").read_text())
    assert results["data"]["examples"] == 12 and results["data"]["complete_triplets"] == 12
    assert "eval_validation_auprc" in results and results["best_model_checkpoint"].startswith(str(output))
    assert results["entailment_dev_sets"] == ["validation"] and "validation_search_ndcg@10" in results
    config = json.loads((output / "config.json").read_text())
    assert config["entailment_threshold"] is not None and config["search_kl_weight"] is not None
    # the dev evaluations during training, against the seconds since training began (not the final re-evaluation)
    curve = results["dev_curve"]
    assert [point["step"] for point in curve] == [2, 4] and all("validation_auprc" in point for point in curve)
    assert 0 < curve[0]["elapsed_seconds"] < curve[1]["elapsed_seconds"]
    sentences = ["a man is playing a red guitar", "a man is outside"]
    expected = GaussCSEModel.from_pretrained(output).encode(sentences).mu
    torch.testing.assert_close(fresh_process_mu(output, sentences), expected)
    encoded = load_encoder(str(output)).encode_unique(sentences)  # what `gausscse-evaluate --model out` loads
    assert encoded.is_gaussian
    torch.testing.assert_close(encoded.mu, expected)


def test_a_choice_that_fails_after_training_saves_the_trained_model_first(backbone, data_dir, tmp_path, monkeypatch,
                                                                          capsys):  # fmt: skip
    """The end-of-training choice of α failing (its dev data gone): the trained model is saved and loads, and the run
    ends in one line saying so and why, exit status 2."""

    def gone(*args, **kwargs):
        raise FileNotFoundError("snli/validation: no such file")

    monkeypatch.setattr(train_gausscse, "choose_entailment_score", gone)
    argv = train_args(backbone, data_dir, tmp_path / "out", "--max_steps", "2", "--save_strategy", "no")
    argv += ["--load_best_model_at_end", "false"]
    monkeypatch.setattr(sys, "argv", ["gausscse-train", *argv, "--eval_strategy", "steps", "--eval_steps", "2"])
    with pytest.raises(SystemExit) as stopped:
        train_gausscse.run()
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("gausscse-train: error:")]
    assert stopped.value.code == 2 and len(errors) == 1
    error = errors[0]
    assert error.startswith(f"gausscse-train: error: the trained model is saved in {tmp_path / 'out'}, but"), error
    assert error.endswith("snli/validation: no such file")
    model = load_model(tmp_path / "out")
    assert model.config.entailment_threshold is None and model.encode(["a dog runs"]).mu.shape[0] == 1


def test_a_simcse_run_is_evaluated_as_a_point_model(backbone, data_dir, tmp_path):
    extra = ("--loss", "simcse", "--max_steps", "2", "--eval_strategy", "steps", "--eval_steps", "2")
    output = train_gausscse.main(train_args(backbone, data_dir, tmp_path / "simcse", *extra))
    results = json.loads((output / "train_results.json").read_text())
    assert results["loss"] == "simcse" and "eval_snli_dev_direction_accuracy" not in results  # cosine: no direction
    (output / "train_results.json").unlink()  # the kind is the model's own: its config says it
    assert json.loads((output / "config.json").read_text())["point_embeddings"] is True
    assert not load_encoder(str(output)).encode_unique(["a dog runs"]).is_gaussian


def test_simcse_on_a_frozen_mean_is_refused(backbone, data_dir, tmp_path):
    extra = ("--loss", "simcse", "--start", "backbone", "--max_steps", "2")
    with pytest.raises(ValueError, match="nothing would train; pass --frozen_mean false"):
        train_gausscse.main(train_args(backbone, data_dir, tmp_path / "simcse", *extra))
    extra = (*extra, "--frozen_mean", "false")  # the twin of a frozen-μ model: one encoder, trained with the cosine
    output = train_gausscse.main(train_args(backbone, data_dir, tmp_path / "simcse", *extra))
    assert not load_encoder(str(output)).encode_unique(["a dog runs"]).is_gaussian


def test_a_bad_training_file_stops_before_any_training_step(backbone, tmp_path):
    bad = tmp_path / "train.csv"
    bad.write_text("anchor,positive\nonly one column filled,\n")
    with (
        mock.patch.object(GaussCSETrainer, "train") as train,
        pytest.raises(BadRowError, match=rf"{bad}: row 0: missing positive"),
    ):
        train_gausscse.main(["--model_name_or_path", str(backbone), "--train_file", str(bad), "--output_dir",
                             str(tmp_path / "out")])  # fmt: skip
    train.assert_not_called()
    assert not (tmp_path / "out").exists()


def test_bf16_on_a_cpu_turns_on_use_cpu(tmp_path):
    _, _, training_args = parse_arguments(["--output_dir", str(tmp_path), "--bf16", "true"])
    assert training_args.bf16 and training_args.use_cpu == (not torch.cuda.is_available())


def count_training_steps(monkeypatch) -> list[int]:
    """Spy on GaussCSETrainer.training_step: the returned list grows by one per step this process runs."""
    calls: list[int] = []
    original = GaussCSETrainer.training_step

    def counting(self, *args, **kwargs):
        calls.append(self.state.global_step)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(GaussCSETrainer, "training_step", counting)
    return calls


def test_a_run_killed_mid_way_resumes_from_its_latest_complete_checkpoint(backbone, data_dir, tmp_path, monkeypatch):
    steps = 40
    extra = ("--max_steps", str(steps), "--save_steps", "4", "--save_total_limit", "3", "--eval_strategy", "no")
    uninterrupted = load_file(train_gausscse.main(train_args(backbone, data_dir, tmp_path / "a", *extra)) / MODEL_FILE)

    killed = tmp_path / "killed"
    command = [sys.executable, "train_gausscse.py", *train_args(backbone, data_dir, killed, *extra)]
    same_threads = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}  # as in this process: same sums
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=same_threads, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 240
        while not (killed / "checkpoint-8" / CHECKPOINT_COMPLETE).exists():
            assert process.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    assert process.returncode == -signal.SIGKILL and not (killed / MODEL_FILE).exists()
    # a checkpoint whose save was cut short, as a kill inside the save leaves it: never resumed from
    half_written = killed / f"checkpoint-{steps - 1}"
    half_written.mkdir()
    (half_written / "configuration_gausscse.py").write_text("")
    complete = [int(path.parent.name.split("-")[1]) for path in killed.glob(f"checkpoint-*/{CHECKPOINT_COMPLETE}")]
    with pytest.raises(ValueError, match="the checkpoint is incomplete"):
        train_gausscse.main(
            train_args(
                backbone, data_dir, killed, *extra, "--resume_from_checkpoint", str(killed / f"checkpoint-{steps - 1}")
            )
        )
    calls = count_training_steps(monkeypatch)
    resumed = train_gausscse.main(train_args(backbone, data_dir, killed, *extra, "--resume_from_checkpoint", "true"))
    assert len(calls) == steps - max(complete)  # it went on from the latest complete checkpoint, not from scratch
    final = load_file(resumed / MODEL_FILE)
    assert final.keys() == uninterrupted.keys()
    for name, value in uninterrupted.items():
        torch.testing.assert_close(final[name], value, rtol=0, atol=1e-6, msg=name)


def test_a_non_empty_output_dir_is_refused_unless_overwrite_or_resume(backbone, data_dir, tmp_path):
    extra = ("--max_steps", "2", "--save_steps", "2", "--eval_strategy", "no")
    first = train_gausscse.main(train_args(backbone, data_dir, tmp_path / "run", *extra))
    weights = (first / MODEL_FILE).read_bytes()
    with pytest.raises(ValueError, match=r"--output_dir .*run is not empty .*--overwrite_output_dir.*--resume_from"):
        train_gausscse.main(train_args(backbone, data_dir, tmp_path / "run", *extra, "--loss", "ent", "--seed", "99"))
    assert (first / MODEL_FILE).read_bytes() == weights and (first / "checkpoint-2").is_dir()
    second = train_gausscse.main(
        train_args(backbone, data_dir, tmp_path / "run", *extra, "--seed", "99", "--overwrite_output_dir")
    )
    assert (second / MODEL_FILE).read_bytes() != weights
    with pytest.raises(ValueError, match="no complete checkpoint-N"):
        train_gausscse.main(train_args(backbone, data_dir, tmp_path / "empty", "--resume_from_checkpoint", "true"))


def test_output_dirs_that_cannot_hold_the_model_are_refused_before_training(backbone, data_dir, tmp_path, monkeypatch):
    """--output_dir that is a file (was a bare "[Errno 17] File exists"), lies under a file, cannot be written
    (PermissionError after the whole run), or is the working directory (trained fully, then the final swap failed
    with "Device or resource busy" and the model was lost): one line naming --output_dir, before any data is read."""

    def no_training(*args, **kwargs):
        raise AssertionError("the run started before --output_dir was checked")

    monkeypatch.setattr(train_gausscse, "load_training_examples", no_training)
    (tmp_path / "a-file").write_text("x")
    monkeypatch.chdir(tmp_path)
    cases = {
        "a-file": r"--output_dir a-file is a file, not a folder",
        "a-file/run": r"--output_dir a-file/run: .*a-file is a file, not a folder",
        "/proc/gausscse-run": r"--output_dir /proc/gausscse-run: cannot write in /proc",
        ".": r"--output_dir \. is the working directory or holds it",
        str(tmp_path.parent): r"is the working directory or holds it",
    }
    for output, message in cases.items():
        with pytest.raises(ValueError, match=message):
            train_gausscse.main(
                train_args(backbone, data_dir, Path(output), "--max_steps", "1", "--overwrite_output_dir")
            )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a-file"]  # no lock, staging or folder left behind


def test_the_first_non_finite_tensor_is_named_in_order():
    nan, inf = torch.tensor([1.0, float("nan")]), torch.tensor([float("-inf")])
    named = [("ok", torch.ones(2)), ("no_grad", None), ("int", torch.tensor([3])), ("nan", nan), ("inf", inf)]
    assert first_non_finite(named) == "nan" and first_non_finite(named[::-1]) == "inf"
    assert first_non_finite(named[:3]) is None and first_non_finite([]) is None


def test_a_diverging_run_stops_at_the_first_non_finite_step_and_saves_nothing(backbone, data_dir, tmp_path):
    output = tmp_path / "diverging"
    extra = ("--learning_rate", "1e4", "--head_learning_rate", "1e4", "--max_steps", "6", "--eval_strategy", "no",
             "--save_steps", "1", "--max_grad_norm", "0")  # fmt: skip
    with pytest.raises(NonFiniteError, match=r"step \d+: the (loss is|gradient of .* holds)|parameter .* holds NaN"):
        train_gausscse.main(train_args(backbone, data_dir, output, *extra))
    assert not (output / MODEL_FILE).exists()
    for checkpoint in output.glob("checkpoint-*"):  # whatever was saved before the divergence is finite
        assert all(torch.isfinite(tensor).all() for tensor in load_file(checkpoint / MODEL_FILE).values())


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--temperature", "nan"), "--temperature must be a finite number > 0, got nan"),
        (("--temperature", "inf"), "--temperature must be a finite number"),
        (("--head_learning_rate", "nan"), "--head_learning_rate must be a finite number >= 0"),
        (("--learning_rate=-1e-5",), "--learning_rate must be a finite number > 0"),
        (("--max_steps", "0"), "--max_steps must be a positive number of steps"),
        (("--num_train_epochs", "0"), "--num_train_epochs must be a finite number > 0"),
        (("--loss", "ent", "--per_device_train_batch_size", "1"), "--loss ent needs at least 2 examples"),
    ],
)
def test_numeric_flags_are_checked(flags, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        parse_arguments(["--output_dir", str(tmp_path), *flags])


def test_a_final_save_that_fails_leaves_the_old_model_and_a_finished_one_the_new(backbone, tmp_path, monkeypatch):
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    folder = tmp_path / "out"
    (folder / "checkpoint-2").mkdir(parents=True)
    (folder / "checkpoint-2" / "trainer_state.json").write_text("{}")
    card = {"model_name": "m", "base_model": "b", "datasets": [], "metrics": {}, "training_arguments": {},
            "data_stats": {}}  # fmt: skip
    torch.manual_seed(0)
    old = GaussCSEModel.from_backbone(str(backbone))
    final_save(old, tokenizer, folder, card, {"run": "old"})
    before = {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}
    torch.manual_seed(1)
    new = GaussCSEModel.from_backbone(str(backbone))

    def dies(*args, **kwargs):
        raise KeyboardInterrupt("killed before the files move in")

    monkeypatch.setattr("gausscse.training.save.move_in", dies)
    with pytest.raises(KeyboardInterrupt):
        final_save(new, tokenizer, folder, card, {"run": "new"})
    assert {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()} == before  # the old, whole
    monkeypatch.undo()
    final_save(new, tokenizer, folder, card, {"run": "new"})
    loaded = GaussCSEModel.from_pretrained(folder)
    for name, value in new.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], value, msg=name)
    assert json.loads((folder / "train_results.json").read_text()) == {"run": "new"}
    assert (folder / "checkpoint-2" / "trainer_state.json").read_text() == "{}"
    assert not list(tmp_path.glob(".out*"))  # no staging folder left behind


def test_lora_adapter_and_merged_folders_reload(backbone, tmp_path):
    """LoRA on the whole model: adapters in the encoder, the heads trained whole (peft's modules_to_save); saved as a
    standard PEFT adapter folder on a saved GaussCSE base, or merged into plain weights."""
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    base = GaussCSEModel.from_backbone(str(backbone))
    base.get_tokenizer(tokenizer)
    save_base(base, tmp_path / "base")
    model = apply_lora(base, r=4, alpha=8, dropout=0.0, target_modules=None)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert any("lora_" in name for name in trainable) and all("lora_" in name or is_head_parameter(name)
                                                              for name in trainable)  # fmt: skip
    assert {"base_model.model.mean_head.modules_to_save.default.weight",
            "base_model.model.logvar_head.modules_to_save.default.bias"} <= trainable  # fmt: skip
    with torch.no_grad():  # adapters as after training (B starts at zero)
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5)
    sentences = ["a dog sleeps on the sofa", "two children run"]
    model.eval()
    expected = model.encode(sentences)

    save_adapter_folder(model, tmp_path / "adapter")  # not merged: peft's adapter folder, no config.json
    files = {path.name for path in (tmp_path / "adapter").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "modules.json"} <= files
    assert not {"config.json", "model.safetensors"} & files
    reloaded = load_model(tmp_path / "adapter").encode(sentences)
    torch.testing.assert_close(reloaded.mu, expected.mu, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(reloaded.logvar, expected.logvar, rtol=1e-5, atol=1e-6)

    merge_lora(model).save_pretrained(tmp_path / "merged")
    merged = GaussCSEModel.from_pretrained(tmp_path / "merged").eval()
    assert not any("lora" in name or "modules_to_save" in name for name in merged.state_dict())
    torch.testing.assert_close(merged.encode(sentences, tokenizer=tokenizer).mu, expected.mu, rtol=1e-5, atol=1e-6)


def test_lora_on_a_sentence_transformers_start_needs_no_further_flag(backbone, data_dir, tmp_path):
    """--lora_r on the "backbone" start (the packaged MiniLM's, under --start auto) adapts a whole σ² encoder (no
    copied top layer unless --variance_layers says so, which is refused with --lora_r)."""
    extra = ("--start", "backbone", "--max_steps", "1", "--eval_strategy", "no", "--lora_r", "4", "--merge_lora")
    model = load_model(train_gausscse.main(train_args(backbone, data_dir, tmp_path / "lora", *extra)))
    assert model.config.frozen_mean and model.variance_layers is None
    with pytest.raises(ValueError, match="--lora_r with --variance_layers"):
        train_gausscse.main(train_args(backbone, data_dir, tmp_path / "k1", *extra, "--variance_layers", "1"))


def test_lora_training_run_merges_into_a_plain_folder(backbone, data_dir, tmp_path):
    extra = ("--max_steps", "4", "--eval_steps", "2", "--save_steps", "2", "--lora_r", "4", "--merge_lora")
    model_dir = train_gausscse.main(train_args(backbone, data_dir, tmp_path / "lora", *extra))
    state = load_file(model_dir / "model.safetensors")
    assert not any("lora" in name for name in state) and "encoder.embeddings.word_embeddings.weight" in state
    base = load_file(backbone / "model.safetensors")
    changed = [name for name in base if not torch.equal(base[name], state.get(f"encoder.{name}", base[name]))]
    assert changed  # the merged adapters changed the backbone's weights


def test_an_unmerged_lora_run_loads_as_its_card_says_and_evaluates(backbone, data_dir, tmp_path):
    """An adapter folder keeps the λ, α and threshold chosen at the end of its training: AutoModel (the card's
    route, also in a fresh process without gausscse), load_model, SentenceTransformer and PeftModel (with
    apply_adapter_settings) all load them over its base's unset ones."""
    extra = ("--max_steps", "2", "--eval_strategy", "steps", "--eval_steps", "2", "--save_strategy", "no")
    extra += ("--load_best_model_at_end", "false")
    model_dir = train_gausscse.main(train_args(backbone, data_dir, tmp_path / "adapter", *extra, "--lora_r", "4"))
    results = json.loads((model_dir / "train_results.json").read_text())
    chosen = {name: results[name] for name in ("search_kl_weight", "entailment_cosine_weight")}
    chosen["entailment_threshold"] = results["entailment_threshold"]
    assert (
        None not in chosen.values()
        and GaussCSEModel.from_pretrained(model_dir / "base-model").config.entailment_threshold is None
    )
    from peft import PeftModel
    from sentence_transformers import SentenceTransformer

    peft_route = PeftModel.from_pretrained(GaussCSEModel.from_pretrained(model_dir / "base-model"), str(model_dir))
    peft_route.get_base_model().apply_adapter_settings(model_dir)
    other_base = GaussCSEModel.from_pretrained(model_dir / "base-model")
    other_base.logvar_head.bias.data += 1.0
    other_base.save_pretrained(tmp_path / "other-base")
    on_other = PeftModel.from_pretrained(GaussCSEModel.from_pretrained(tmp_path / "other-base"), str(model_dir))
    with pytest.raises(ValueError, match="its adapter was trained on the base model"):  # peft's route, checked
        on_other.get_base_model().apply_adapter_settings(model_dir)
    configs_model = AutoModel.from_pretrained(model_dir, trust_remote_code=True).eval()
    configs = [
        configs_model.config,
        load_model(model_dir).config,
        SentenceTransformer(str(model_dir), trust_remote_code=True)[0].model.config,
        peft_route.get_base_model().config,
    ]
    for config in configs:
        assert {name: getattr(config, name) for name in chosen} == chosen
    fresh = subprocess.run(
        [sys.executable, "-c", "import sys, json\nsys.modules['gausscse'] = None\nfrom transformers import AutoModel\n"
         f"c = AutoModel.from_pretrained({str(model_dir)!r}, trust_remote_code=True).config\n"
         f"print(json.dumps({{n: getattr(c, n) for n in {list(chosen)!r}}}))"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert json.loads(fresh.stdout.strip().splitlines()[-1]) == chosen
    assert (model_dir / "adapter_config.json").is_file() and not (model_dir / "config.json").exists()  # an adapter
    assert "auto_map" in json.loads((model_dir / "base-model" / "config.json").read_text())  # on its saved base
    card = (model_dir / "README.md").read_text()
    snippet = card.split("```python\n", 1)[1].split("```", 1)[0]  # as written: it loads the run's --output_dir
    assert "| start | paper (auto) |" in card and f'AutoModel.from_pretrained("{model_dir}"' in snippet
    namespace: dict = {}
    exec(snippet.split("premises =")[0], namespace)  # the card's own loading lines: AutoModel, trust_remote_code
    sentences = ["a man is playing a red guitar"]
    loaded = namespace["model"].eval().encode(sentences)  # its tokenizer came with it
    encoder = load_encoder(str(model_dir))  # what gausscse-evaluate --model loads
    torch.testing.assert_close(encoder.encode_unique(sentences).mu, loaded.mu)
    expected = configs_model.encode(["a dog runs"]).mu
    moved = shutil.move(model_dir, tmp_path / "moved")  # the base it names is gone; its own copy moved with it
    reloaded = load_model(moved)
    assert {name: getattr(reloaded.config, name) for name in chosen} == chosen
    torch.testing.assert_close(reloaded.encode(["a dog runs"]).mu, expected)


@pytest.mark.parametrize(
    ("output_dir", "relation"),
    [
        ("models/bb2", "is the folder of"),
        ("link-to-bb2", "is the folder of"),  # a symbolic link to it
        ("models", "holds the folder of"),
        ("models/bb2/run", "lies inside the folder of"),
    ],
)
def test_training_refuses_an_output_dir_that_is_its_backbone(
    output_dir, relation, backbone, data_dir, tmp_path, monkeypatch, capsys
):
    """A LoRA run saved into its own backbone named itself as the adapter's backbone (loading it recursed without
    end) over the backbone's config.json: an --output_dir that is, holds or lies inside the --model_name_or_path folder
    is refused before anything is read or written, in one line with exit status 2."""

    def no_training(*args, **kwargs):
        raise AssertionError("the run started before --output_dir was checked against --model_name_or_path")

    monkeypatch.setattr(train_gausscse, "load_training_examples", no_training)
    shutil.copytree(backbone, tmp_path / "models" / "bb2")
    (tmp_path / "link-to-bb2").symlink_to(tmp_path / "models" / "bb2")
    before = {path.name: path.read_bytes() for path in (tmp_path / "models" / "bb2").iterdir()}
    monkeypatch.chdir(tmp_path)
    argv = train_args(Path("models/bb2"), data_dir, Path(output_dir), "--max_steps", "1", "--overwrite_output_dir")
    monkeypatch.setattr(sys, "argv", ["gausscse-train", *argv, "--lora_r", "4"])
    with pytest.raises(SystemExit) as stopped:
        train_gausscse.run()
    error = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and error.splitlines() == [error]
    expected = f"gausscse-train: error: --output_dir {output_dir} {relation} --model_name_or_path models/bb2: "
    assert error.startswith(expected)
    assert {path.name: path.read_bytes() for path in (tmp_path / "models" / "bb2").iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link-to-bb2", "models"]  # no lock or folder left


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("{tmp}/no/such/folder", "--model_name_or_path {tmp}/no/such/folder: no such folder, and not a Hub repo id"),
        ("{tmp}", "--model_name_or_path {tmp}: no config.json in this folder, so no model"),
        (
            "gausscse-tests/not-in-any-cache",
            "--model_name_or_path gausscse-tests/not-in-any-cache: no such folder, and the Hub is offline "
            "(HF_HUB_OFFLINE=1) with no copy of that repo in the Hugging Face cache",
        ),
    ],
)
def test_a_backbone_that_cannot_load_ends_training_in_one_line(model, message, data_dir, tmp_path, monkeypatch, capsys):
    """A missing local folder, a folder without a model, or (offline) a Hub id with no cached copy: one line naming
    --model_name_or_path, exit status 2, before any data is read (not transformers' traceback after it)."""

    def no_training(*args, **kwargs):
        raise AssertionError("the data was read before --model_name_or_path was checked")

    monkeypatch.setattr(train_gausscse, "load_training_examples", no_training)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    (tmp_path / "empty").mkdir()
    model = model.format(tmp=tmp_path / "empty")
    argv = train_args(Path(model), data_dir, tmp_path / "out", "--max_steps", "1")
    monkeypatch.setattr(sys, "argv", ["gausscse-train", *argv])
    with pytest.raises(SystemExit) as stopped:
        train_gausscse.run()
    error = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and error.splitlines() == [error]
    assert error.startswith(f"gausscse-train: error: {message.format(tmp=tmp_path / 'empty')}"), error
    assert not (tmp_path / "out").exists()


def test_training_refuses_an_output_dir_that_is_the_base_of_its_adapter_folder(backbone, data_dir, tmp_path,
                                                                                monkeypatch):  # fmt: skip
    """Continuing an adapter folder into its base model's folder would replace the base's weights and leave both
    folders unloadable: the base an adapter folder names is refused as --output_dir (and what holds it) too."""

    def no_training(*args, **kwargs):
        raise AssertionError("the run started before --output_dir was checked against the adapter's base")

    monkeypatch.setattr(train_gausscse, "load_training_examples", no_training)
    model = GaussCSEModel.from_backbone(str(backbone))
    model.get_tokenizer(AutoTokenizer.from_pretrained(backbone))
    save_base(model, tmp_path / "models" / "bb")
    save_adapter_folder(apply_lora(model, 4, 8.0, 0.0, None), tmp_path / "ad")
    before = {path.name: path.read_bytes() for path in (tmp_path / "models" / "bb").iterdir() if path.is_file()}
    for output in (tmp_path / "models" / "bb", tmp_path / "models"):
        with pytest.raises(ValueError, match=r"the folder of the base model of --model_name_or_path .*ad, .*bb: the f"):
            train_gausscse.main(
                train_args(tmp_path / "ad", data_dir, output, "--max_steps", "1", "--overwrite_output_dir")
            )
    assert {path.name: path.read_bytes() for path in (tmp_path / "models" / "bb").iterdir() if path.is_file()} == before


# --------------------------------------------------------------------------------------- model config: one source


def test_a_new_model_takes_gausscse_configs_defaults(backbone):
    from gausscse import GaussCSEConfig
    from gausscse.training.arguments import ModelArguments

    model = train_gausscse.build_model(ModelArguments(model_name_or_path=str(backbone)))
    defaults = GaussCSEConfig()
    assert (model.config.pooling, model.config.mean_activation, model.config.similarity_reduction) == (
        defaults.pooling,
        defaults.mean_activation,
        defaults.similarity_reduction,
    )
    assert defaults.similarity_reduction == "mean_kl"  # chosen in results/REDUCTION.md


def test_continuing_a_gausscse_folder_keeps_its_config_and_rejects_contradicting_flags(backbone, data_dir, tmp_path):
    from gausscse.training.arguments import ModelArguments

    first = train_gausscse.main(
        train_args(backbone, data_dir, tmp_path / "first", "--max_steps", "2", "--eval_strategy", "no",
                   "--save_strategy", "no", "--pooling", "mean", "--similarity_reduction", "sum")
    )  # fmt: skip
    continued = train_gausscse.build_model(ModelArguments(model_name_or_path=str(first)))
    assert (continued.config.pooling, continued.config.similarity_reduction) == ("mean", "sum")
    saved = load_file(first / "model.safetensors")
    assert all(torch.equal(continued.state_dict()[name], tensor) for name, tensor in saved.items())
    # a flag that repeats the folder's value is fine; one that contradicts it names the flag and the folder's value
    train_gausscse.build_model(ModelArguments(model_name_or_path=str(first), similarity_reduction="sum"))
    with pytest.raises(ValueError, match=r"--similarity_reduction mean_dim \(the model has 'sum'\)"):
        train_gausscse.build_model(ModelArguments(model_name_or_path=str(first), similarity_reduction="mean_dim"))
    with pytest.raises(ValueError, match=r"--pooling cls \(the model has 'mean'\)"):
        train_gausscse.main(train_args(first, data_dir, tmp_path / "second", "--max_steps", "2", "--pooling", "cls"))
    assert not (tmp_path / "second").exists()


def test_the_scores_are_chosen_on_the_first_selection_max_examples_dev_pairs(
    make_tiny_model, minilm_tokenizer, tmp_path, monkeypatch
):
    """--selection_max_examples N: λ (search score) and α (entailment score) are chosen on the first N pairs of each
    dev set, exactly as on those pairs directly; without it on all of them."""
    write_jsonl_gz(tmp_path / "snli/validation.jsonl.gz", nli_rows(15, offset=500))
    write_jsonl_gz(tmp_path / "lingnli/validation.jsonl.gz", nli_rows(10, offset=900))
    model = make_tiny_model(similarity_reduction="mean_kl", initializer_range=0.2)
    model.get_tokenizer(minilm_tokenizer)
    trainer = SimpleNamespace(model=model, evaluator=SimpleNamespace(name="snli_dev", pairs=None))
    arguments = ["--output_dir", str(tmp_path / "out"), "--data_dir", str(tmp_path), "--selection_max_examples", "12"]
    _, data_args, _ = parse_arguments(arguments)
    encodes = []
    original = GaussianEncoder.encode_unique
    monkeypatch.setattr(
        GaussianEncoder, "encode_unique", lambda self, *a, **k: encodes.append(1) or original(self, *a, **k)
    )
    chosen_both = train_gausscse.choose_scores(trainer, data_args)
    assert len(encodes) == 1  # every dev sentence of both choices encoded in one pass
    assert chosen_both["search_dev_pairs"] == 12 and chosen_both["entailment_dev_pairs"] == [12, 12]
    first = load_nli("snli_dev", *NLI_DEV, data_dir=str(tmp_path), max_examples=12)
    chosen, curve = choose_kl_weight(model, retrieval_set(first), max_length=data_args.eval_max_seq_length)
    assert chosen_both["search_kl_weight"] == chosen
    assert chosen_both["snli_dev_search_ndcg@10"] == pytest.approx(curve[chosen])
    lingnli = load_nli("lingnli_dev", "lingnli", "validation", data_dir=str(tmp_path), max_examples=12)
    weight, threshold, objective = choose_cosine_weight(model, [first, lingnli])  # encoded on their own
    assert chosen_both["entailment_cosine_weight"] == weight
    assert chosen_both["entailment_threshold"] == pytest.approx(threshold, abs=1e-6)
    assert chosen_both["entailment_dev_objective"] == pytest.approx(objective[weight], abs=1e-4)
    _, all_pairs, _ = parse_arguments(arguments[:4])
    chosen_all = train_gausscse.choose_scores(trainer, all_pairs)
    assert chosen_all["search_dev_pairs"] == 45  # 15 premises × 3 rows
    assert chosen_all["entailment_dev_pairs"] == [45, 30]
    with pytest.raises(ValueError, match="--selection_max_examples must be a positive number of examples, got 0"):
        parse_arguments([*arguments[:4], "--selection_max_examples", "0"])
