"""gausscse-evaluate's output folder: checked before any computing, only this run's plots, readable files."""

from __future__ import annotations

import json
import os
import stat

import pytest

from gausscse.cli.evaluate import main


@pytest.fixture
def saved_tiny_model(make_tiny_model, minilm_tokenizer, tmp_path):
    folder = tmp_path / "model"
    make_tiny_model("bert").save_pretrained(folder)
    minilm_tokenizer.save_pretrained(folder)
    return folder


def test_an_unwritable_output_folder_fails_before_any_computing(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.access(locked, os.W_OK):  # root ignores permissions: a file in the way then
            locked = tmp_path / "a_file"
            locked.write_text("in the way")
        # a model that does not exist: had the data or the model been touched first, that would be the error
        with pytest.raises(ValueError, match=rf"--output {locked}: cannot write there"):
            main(["--model", str(tmp_path / "no-such-model"), "--tasks", "direction", "--output", str(locked)])
        with pytest.raises(ValueError, match=r"--max_examples must be a positive integer, got 0"):  # before --output
            main(["--model", "m", "--max_examples", "0", "--output", str(tmp_path / "new")])
        assert not (tmp_path / "new").exists()
    finally:
        (tmp_path / "locked").chmod(stat.S_IRWXU)


def test_results_list_only_this_runs_plots_and_files_are_readable(saved_tiny_model, tmp_path):
    output = tmp_path / "eval"
    output.mkdir()
    (output / "generality_gap_an-earlier-model.png").write_bytes(b"old plot")
    (output / "notes.txt").write_text("the user's own file")
    previous = os.umask(0o022)
    try:
        payload = main(["--model", str(saved_tiny_model), "--tasks", "direction", "--max_examples", "20",
                        "--output", str(output)])  # fmt: skip
    finally:
        os.umask(previous)
    written = sorted(path.name for path in output.iterdir())
    assert "generality_gap_an-earlier-model.png" not in written  # a stale plot of ours is gone...
    assert "notes.txt" in written  # ...other files are not touched
    assert set(payload["plots"]) == {"generality_gap_model.png", "gaussians_2d_model.png"}
    assert json.loads((output / "results.json").read_text())["plots"] == payload["plots"]
    for name in ("results.json", "report.md", *payload["plots"]):
        assert (output / name).stat().st_mode & 0o777 == 0o644, name


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("nli", r"nli on snli_dev: labels has no positive example"),
        ("sts", r"sts on sts12: Spearman needs at least 2 pairs, got 1"),
        ("direction", r"direction on snli: no entailment pairs"),
    ],
)
def test_a_split_too_small_for_its_task_is_named(task, message, saved_tiny_model, tmp_path):
    """--max_examples 1 leaves each split one row: the error says which task and split cannot be computed (it said
    only "labels has no positive example" or "Spearman needs at least 2 pairs")."""
    with pytest.raises(ValueError, match=message):
        main(
            ["--model", str(saved_tiny_model), "--tasks", task, "--max_examples", "1", "--output", str(tmp_path / "e")]
        )
