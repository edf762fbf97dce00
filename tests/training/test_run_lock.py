"""One training run per ``--output_dir``: the run lock beside the folder (filelock), held for the whole run, naming
its holder to a refused run, taken with a warning after a run that died; and a staging folder of its own for every
final save."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from transformers import AutoTokenizer

import train_gausscse
from gausscse import GaussCSEModel
from gausscse.cli.train import hold_output_dir
from gausscse.training import run_lock
from gausscse.training.run_lock import OutputDirLockedError, RunLock, lock_path
from gausscse.training.save import save_model_folder
from gausscse.training.trainer import GaussCSETrainer

from ..helpers import final_save, fresh_env, train_args

CARD = {"model_name": "m", "base_model": "b", "datasets": [], "metrics": {}, "training_arguments": {}, "data_stats": {}}
QUICK = ("--max_steps", "2", "--save_steps", "2", "--eval_strategy", "no")

# A child process that loads run_lock.py on its own (no torch: it starts in a few tens of milliseconds). It takes the
# lock of argv[2] (after a file argv[3] appears, when given), says "won" or "refused", and lets go when stdin closes.
CHILD = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("run_lock", sys.argv[1])
run_lock = importlib.util.module_from_spec(spec)
sys.modules["run_lock"] = run_lock
spec.loader.exec_module(run_lock)
print("ready", flush=True)
while len(sys.argv) > 3 and not os.path.exists(sys.argv[3]):
    pass
lock = run_lock.RunLock(sys.argv[2])
try:
    lock.acquire()
except run_lock.OutputDirLockedError:
    print("refused", flush=True)
else:
    print("won", flush=True)
sys.stdin.read()
lock.release()
"""


def start_child(output: Path, go: Path | None = None) -> subprocess.Popen:
    command = [sys.executable, "-c", CHILD, run_lock.__file__, str(output), *([str(go)] if go else [])]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    return child


def finish(child: subprocess.Popen) -> None:
    child.stdin.close()
    assert child.wait(timeout=30) == 0


def dead_pid() -> int:
    """The pid of a process of this host that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def holder_path(output: Path) -> Path:
    return RunLock(output).holder_path


def write_stale_lock(output: Path, pid: int, host: str | None = None) -> Path:
    """What a run killed outright leaves: the lock file (no process holds its flock) and its holder description."""
    path = lock_path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    holder = {"pid": pid, "host": host or socket.gethostname(), "started": "2020-01-01T00:00:00+00:00"}
    holder_path(output).write_text(json.dumps(holder))
    return holder_path(output)


def contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_a_second_training_into_a_held_output_dir_is_refused_even_with_overwrite(backbone, data_dir, tmp_path, caplog):
    output = tmp_path / "run"
    output.mkdir()
    (output / "model.safetensors").write_bytes(b"the running run's model")
    (output / "README.md").write_text("its card")
    before = contents(output)
    holder = start_child(output, go=None)
    try:
        assert holder.stdout.readline().strip() == "won"
        command = [str(Path(sys.executable).parent / "gausscse-train"), *train_args(backbone, data_dir, output, *QUICK)]
        done = subprocess.run(
            [*command, "--overwrite_output_dir"], cwd=tmp_path, env=fresh_env(tmp_path), capture_output=True, text=True
        )
        assert done.returncode == 2, done.stderr[-3000:]
        assert "Traceback" not in done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith(f"gausscse-train: error: --output_dir {output} is in use by another training run")
        for part in (f"pid {holder.pid} on {socket.gethostname()}", str(lock_path(output)), "still running"):
            assert part in last
        with pytest.raises(OutputDirLockedError, match=f"pid {holder.pid} "):  # in-process, without the flag
            train_gausscse.main(train_args(backbone, data_dir, output, *QUICK))
        assert contents(output) == before
        assert not list(tmp_path.glob(".run.saving*"))
        assert json.loads(holder_path(output).read_text())["pid"] == holder.pid  # still the holder's lock
    finally:
        holder.send_signal(signal.SIGKILL)  # killed outright: its description stays, its flock goes with it
        holder.wait()
    assert holder_path(output).exists()
    with caplog.at_level(logging.WARNING, logger=run_lock.__name__), RunLock(output) as lock:
        assert json.loads(lock.holder_path.read_text())["pid"] == os.getpid()
    assert f"took over the stale lock {lock_path(output)} of pid {holder.pid}" in caplog.text
    assert not holder_path(output).exists() and not lock.held


def test_a_stale_lock_is_taken_over_and_the_lock_is_held_during_the_run_and_gone_after(
    backbone, data_dir, tmp_path, caplog, monkeypatch
):
    output = tmp_path / "run"
    gone = dead_pid()
    lock = write_stale_lock(output, gone)  # the holder description
    held_by = []
    train = GaussCSETrainer.train

    def spying_train(self, *args, **kwargs):
        held_by.append(json.loads(lock.read_text())["pid"])
        return train(self, *args, **kwargs)

    monkeypatch.setattr(GaussCSETrainer, "train", spying_train)
    with caplog.at_level(logging.WARNING, logger=run_lock.__name__):
        model_dir = train_gausscse.main(train_args(backbone, data_dir, output, *QUICK))
    assert f"took over the stale lock {lock_path(output)} of pid {gone}" in caplog.text
    assert held_by == [os.getpid()]
    assert (model_dir / "model.safetensors").is_file()
    assert sorted(path.name for path in tmp_path.iterdir()) == [".run.lock", "run"]  # no holder, no staging folder

    # a failed run lets go too: refused by the emptiness check (which comes after the lock), or failing mid-way
    with pytest.raises(ValueError, match="is not empty"):
        train_gausscse.main(train_args(backbone, data_dir, output, *QUICK))
    assert not lock.exists()

    def failing_train(self, *args, **kwargs):
        held_by.append(json.loads(holder_path(tmp_path / "other").read_text())["pid"])
        raise RuntimeError("the training failed")

    monkeypatch.setattr(GaussCSETrainer, "train", failing_train)
    with pytest.raises(RuntimeError, match="the training failed"):
        train_gausscse.main(train_args(backbone, data_dir, tmp_path / "other", *QUICK))
    assert held_by == [os.getpid(), os.getpid()] and not holder_path(tmp_path / "other").exists()
    with RunLock(tmp_path / "other"):  # and it is free again
        pass


def test_runs_racing_for_one_lock_never_both_get_it(tmp_path):
    for round_ in range(8):
        output, go = tmp_path / f"out{round_}", tmp_path / f"go{round_}"
        if round_ % 2:  # every one of them finds the same stale lock
            write_stale_lock(output, dead_pid())
        children = [start_child(output, go) for _ in range(3)]
        go.touch()
        try:
            results = sorted(child.stdout.readline().strip() for child in children)
        finally:
            for child in children:
                finish(child)
        assert results == ["refused", "refused", "won"], f"round {round_}: {results}"
        assert not holder_path(output).exists()


def test_a_description_left_behind_never_blocks_and_another_lock_of_this_process_is_refused(tmp_path, caplog):
    """The flock alone decides: a holder description of a run on another host or an unreadable one does not keep a
    free folder (the warning names what was left), and a second RunLock of this very process is refused while the
    first is held."""
    output = tmp_path / "out"
    write_stale_lock(output, 1234, host="another-host.example")
    with caplog.at_level(logging.WARNING, logger=run_lock.__name__), RunLock(output) as lock:
        with pytest.raises(OutputDirLockedError, match=f"pid {os.getpid()} .*still running"):
            RunLock(output).acquire()
        assert lock.held
        long_path = "/data/" + "x" * 300  # cut at 200 characters, not shortened to "python..." by whole words
        for command, shown in (
            (["python", long_path], f", command: python {long_path[:193]}...)"),
            ([], "started ?),"),
        ):
            lock.holder_path.write_text(json.dumps({"pid": 1, "command": command}))
            with pytest.raises(
                OutputDirLockedError, match="Wait for that run to end or choose another folder"
            ) as error:
                RunLock(output).acquire()
            assert shown in str(error.value)
    assert "of pid 1234 on another-host.example" in caplog.text
    holder_path(output).write_text("not json {")
    with RunLock(output) as lock:
        assert json.loads(lock.holder_path.read_text())["pid"] == os.getpid()
    assert not lock.held and not holder_path(output).exists()


def test_the_other_processes_stop_when_the_main_one_is_refused(tmp_path, monkeypatch):
    output = tmp_path / "out"
    sent = []

    def broadcast(objects, src):  # rank 0 sends its decision, the other ranks receive the last one sent
        if rank == src:
            sent.append(objects[0])
        else:
            objects[0] = sent[-1]

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "broadcast_object_list", broadcast)
    with RunLock(output):
        rank = 0
        main_process = SimpleNamespace(output_dir=str(output), process_index=rank, world_size=2)
        with pytest.raises(OutputDirLockedError, match="is in use"), hold_output_dir(main_process):
            pytest.fail("the main process went on into a held folder")
        rank = 1
        other_process = SimpleNamespace(output_dir=str(output), process_index=rank, world_size=2)
        with pytest.raises(OutputDirLockedError, match="is in use"), hold_output_dir(other_process):
            pytest.fail("another process went on into a held folder")
    assert len(sent) == 1 and str(output) in sent[0]
    rank = 0
    with hold_output_dir(main_process):  # free now: the main process takes it and says so
        assert sent[-1] is None and holder_path(output).exists()
    assert not holder_path(output).exists()


def test_each_final_save_stages_in_a_folder_of_its_own_and_leaves_other_runs_staging(backbone, tmp_path, monkeypatch):
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    folder = tmp_path / "out"
    others = [tmp_path / ".out.saving", tmp_path / ".out.saving.abcd1234"]  # another run's, mid-save
    for other in others:
        other.mkdir()
        (other / "gaussian.py").write_text("another run's file")
    staged = []
    move_in = save_model_folder.__globals__["move_in"]

    def spying_move_in(staging, target, names, before_first=None):
        staged.append(staging)
        return move_in(staging, target, names, before_first)

    monkeypatch.setattr("gausscse.training.save.move_in", spying_move_in)
    torch.manual_seed(0)
    model = GaussCSEModel.from_backbone(str(backbone), start="paper")
    for _ in range(2):
        final_save(model, tokenizer, folder, CARD, {})
    assert len(staged) == 2 and staged[0] != staged[1]
    assert all(path.parent == tmp_path and path.name.startswith(".out.saving.") for path in staged)
    for other in others:
        assert (other / "gaussian.py").read_text() == "another run's file"
    assert sorted(path.name for path in tmp_path.iterdir()) == [".out.saving", ".out.saving.abcd1234", "out"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask  # not mkdtemp's 0700
    assert GaussCSEModel.from_pretrained(folder) is not None
