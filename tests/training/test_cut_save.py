"""A final-model save killed between two of its file moves leaves a mix of two models: every loader refuses it, naming
the cut save, until a save completes; a reader during a save waits for it and gets one model whole."""

from __future__ import annotations

import json
import threading
import time

import pytest
from sentence_transformers import SentenceTransformer
from transformers import AutoModel

from gausscse.cli import train as train_gausscse
from gausscse.evaluation.encoders import load_encoder
from gausscse.loading import ModelLoadError, load_model
from gausscse.model.utils_gausscse import SAVE_STATE_FILE, load_whole
from gausscse.training import save as save_module

from ..helpers import train_args

FLAGS = ("--max_steps", "2", "--save_strategy", "no", "--eval_strategy", "no", "--overwrite_output_dir")


def test_a_save_killed_between_its_moves_is_refused_by_every_loader(backbone, data_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    train_gausscse.main(train_args(backbone, data_dir, out, *FLAGS, "--similarity_reduction", "mean_kl"))
    assert json.loads((out / SAVE_STATE_FILE).read_text())["state"] == "done"
    moved = save_module.move_in

    def killed_after_two(staging, folder, names, before_first=None):  # dies after two files, config.json new
        names = list(names)
        moved(staging, folder, [name for name in names if name == "config.json"] + names[:1], before_first)
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(save_module, "move_in", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        train_gausscse.main(train_args(backbone, data_dir, out, *FLAGS, "--similarity_reduction", "sum"))
    assert json.loads((out / "config.json").read_text())["similarity_reduction"] == "sum"  # a mix on disk
    monkeypatch.setattr(save_module, "move_in", moved)
    cut = rf"{out}: a save into this folder stopped while moving its files in"
    with pytest.raises(ModelLoadError, match=cut):
        load_model(out)
    with pytest.raises(ValueError, match=cut):  # the folder's own copy of CutSaveError
        AutoModel.from_pretrained(out, trust_remote_code=True)
    with pytest.raises(ValueError, match=cut):
        SentenceTransformer(str(out), trust_remote_code=True)
    with pytest.raises(ValueError, match=cut):
        load_encoder(str(out))  # gausscse-evaluate's and the search's loader
    train_gausscse.main(train_args(backbone, data_dir, out, *FLAGS, "--similarity_reduction", "sum"))
    assert load_model(out).config.similarity_reduction == "sum"  # a completed save: the new model, whole


def test_a_reader_waits_for_a_save_moving_in_and_loads_again_after_one(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / SAVE_STATE_FILE).write_text(json.dumps({"save": "a", "state": "moving"}))
    finish = threading.Timer(0.3, lambda: (folder / SAVE_STATE_FILE).write_text('{"save": "a", "state": "done"}'))
    finish.start()
    started = time.perf_counter()
    assert load_whole(folder, lambda: "model a") == "model a"
    assert time.perf_counter() - started >= 0.25  # it waited for the save
    loads = []

    def load_during_a_save() -> str:  # a whole save happens while this load reads
        loads.append(1)
        if len(loads) == 1:
            (folder / SAVE_STATE_FILE).write_text('{"save": "b", "state": "done"}')
        return f"load {len(loads)}"

    assert load_whole(folder, load_during_a_save) == "load 2"  # read again: one model, not a mix
