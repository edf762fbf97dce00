"""What the commands do with mistakes and failures: a resume of another run, a failed or symlinked final save, a
one-class validation file, a folder that is no index, bad evaluate and search arguments, demo input that says nothing,
a resume that would change the run — each answered with one line, nothing lost."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch
from transformers import AutoTokenizer

import train_gausscse
from gausscse import GaussCSEModel
from gausscse.cli.search import main as search_main
from gausscse.data.sources import DataError
from gausscse.demo.core import DemoError, check_sentence, direction

from ..helpers import final_save, nli_rows, train_args, write_jsonl_gz

CARD = {"model_name": "m", "base_model": "b", "datasets": [], "metrics": {}, "training_arguments": {}, "data_stats": {}}


def test_a_resume_from_another_runs_checkpoint_does_not_replace_a_full_output_dir(backbone, data_dir, tmp_path):
    flags = ("--max_steps", "2", "--save_steps", "2", "--eval_strategy", "no")
    other = train_gausscse.main(train_args(backbone, data_dir, tmp_path / "other", *flags))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "model.safetensors").write_bytes(b"someone's model")
    argv = [*train_args(backbone, data_dir, victim, *flags), "--resume_from_checkpoint", str(other / "checkpoint-2")]
    with pytest.raises(ValueError, match=r"is not empty .*checkpoint-2 is not one of .*or choose another --output_dir"):
        train_gausscse.main(argv)
    assert (victim / "model.safetensors").read_bytes() == b"someone's model"


def test_a_failed_final_save_leaves_the_old_model_and_no_staging_folder(backbone, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    folder = tmp_path / "out"
    torch.manual_seed(0)
    final_save(GaussCSEModel.from_backbone(str(backbone), start="paper"), tokenizer, folder, CARD, {})
    before = {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}
    disk_full = OSError(errno.ENOSPC, "No space left on device")
    with (
        mock.patch("gausscse.training.save.write_model_card", side_effect=disk_full),
        pytest.raises(OSError, match="No space left"),
    ):
        final_save(GaussCSEModel.from_backbone(str(backbone), start="paper"), tokenizer, folder, CARD, {})
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]  # no .out.saving left behind
    assert {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()} == before


def test_the_final_model_saved_through_a_symlinked_output_dir_keeps_the_link(backbone, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    target = tmp_path / "disk" / "run"
    target.mkdir(parents=True)
    link = tmp_path / "out"
    link.symlink_to(target, target_is_directory=True)
    for _ in range(2):  # into the empty folder, then over the model saved there
        final_save(GaussCSEModel.from_backbone(str(backbone), start="paper"), tokenizer, link, CARD, {})
        assert link.is_symlink() and link.resolve() == target.resolve()
        assert (target / "config.json").is_file() and (target / "model.safetensors").is_file()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["disk", "out"]
    assert sorted(path.name for path in target.parent.iterdir()) == ["run"]  # no staging left


@pytest.mark.parametrize("label", ["entailment", "contradiction"])
def test_a_validation_file_with_one_class_is_refused_before_training(backbone, data_dir, tmp_path, label):
    validation = tmp_path / "validation.jsonl.gz"
    write_jsonl_gz(validation, [{**row, "label": label} for row in nli_rows(6, offset=900)])
    argv = train_args(backbone, data_dir, tmp_path / "run", "--max_steps", "2", "--eval_steps", "1")
    expected = r"--validation_file .*validation.jsonl.gz: all \d+ labelled rows are .*\(or pass --eval_strategy no\)"
    with pytest.raises(DataError, match=expected):
        train_gausscse.main([*argv, "--validation_file", str(validation)])
    assert not (tmp_path / "run").exists()


def test_search_build_refuses_a_folder_that_is_no_index_before_encoding(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a man plays\na woman sings\n")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with (
        mock.patch("gausscse.cli.search.load_search_model", side_effect=AssertionError("encoded first")),
        pytest.raises(FileExistsError, match=r"--index .*notes exists and has no index_config.json"),
    ):
        search_main(["build", "--model", "m", "--corpus", str(corpus), "--index", str(tmp_path / "notes")])
    assert (tmp_path / "notes" / "todo.txt").read_text() == "mine"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--model", "no/such/folder/here", "--tasks", "nli"], "no such folder, and not a Hub repo id"),
        (["--model", ".", "--tasks", "nli,telepathy"], "telepathy"),
    ],
)
def test_gausscse_evaluate_answers_mistakes_with_one_line(tmp_path, arguments, message):
    command = [str(Path(sys.executable).parent / "gausscse-evaluate"), *arguments, "--output", str(tmp_path / "out")]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and message in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("gausscse-evaluate: error: ")


def test_an_empty_search_query_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--entailing: query 2 is empty"):
        search_main(["query", "--index", str(tmp_path / "missing"), "--entailing", "a man plays", "  "])


@pytest.mark.parametrize("invisible", ["\u200b", "\u200b\u200d \ufeff"])
def test_the_demo_refuses_input_of_invisible_characters_only(invisible):
    with pytest.raises(DemoError, match="sentence A is empty"):
        check_sentence("sentence A", invisible)
    assert check_sentence("sentence A", "\u200ba dog") == "\u200ba dog"  # visible text keeps what was typed


def test_the_demo_says_no_direction_for_the_same_sentence_twice(make_tiny_model, minilm_tokenizer):
    model = make_tiny_model()
    model.get_tokenizer(minilm_tokenizer)
    verdict = direction(model, "A man plays a guitar.", "A man plays a guitar.").verdict()
    assert verdict.startswith("**No direction**") and "entails" not in verdict.split("(")[0]
    assert "B entails A" in direction(model, "A man plays a guitar.", "Someone is outside.").verdict() or (
        "A entails B" in direction(model, "A man plays a guitar.", "Someone is outside.").verdict()
    )


def test_a_resume_that_would_change_the_run_is_refused_naming_each_flag(backbone, data_dir, tmp_path):
    flags = ("--max_steps", "4", "--save_steps", "2", "--eval_strategy", "no")
    first = train_gausscse.main(train_args(backbone, data_dir, tmp_path / "first", *flags))
    recorded = json.loads((first / "checkpoint-2" / "run_arguments.json").read_text())
    assert recorded["loss"] == "ent+con+rev" and recorded["similarity_reduction"] is None
    resumed = [*train_args(backbone, data_dir, first, *flags), "--resume_from_checkpoint", str(first / "checkpoint-2")]
    changed = ["--similarity_reduction", "sum", "--temperature", "0.1"]
    with pytest.raises(ValueError, match=r"--similarity_reduction 'sum' \(the checkpoint's run: None\); --temperature"):
        train_gausscse.main([*resumed, *changed])
    train_gausscse.main([*resumed, "--max_steps", "4"])  # the same run, resumed: accepted
