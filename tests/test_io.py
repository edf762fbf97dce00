"""gausscse.io: a write shows the whole new file or leaves the old one, with the usual permissions."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from gausscse.io import atomic_path, check_output_location, current_umask, write_atomic, write_json


def test_a_failed_write_leaves_the_earlier_file_and_no_temporary(tmp_path):
    target = tmp_path / "report.md"
    write_atomic(target, "old\n")
    with pytest.raises(RuntimeError, match="disk full"), atomic_path(target) as temporary:
        temporary.write_text("half of the new")
        raise RuntimeError("disk full")
    assert target.read_text() == "old\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["report.md"]


def test_written_files_follow_the_umask_and_json_is_strict(tmp_path):
    previous = os.umask(0o027)
    try:
        write_json(tmp_path / "deep" / "results.json", {"auprc": float("nan"), 3: [1.5]})
    finally:
        os.umask(previous)
    path = tmp_path / "deep" / "results.json"
    assert path.stat().st_mode & 0o777 == 0o640  # not mkstemp's 0600
    assert json.loads(path.read_text()) == {"auprc": None, "3": [1.5]}


def test_a_saved_index_gets_the_umask_s_permissions(tmp_path):
    """Every file a folder save moves in (``move_in``: an index's ``gaussians.safetensors``, which safetensors writes
    0600, beside its JSON files) has the permissions the umask gives."""
    import torch

    from gausscse import GaussianEmbeddings
    from gausscse.search import GaussianIndex

    index = GaussianIndex(4, "sum")
    index.add(GaussianEmbeddings(torch.zeros(3, 4), torch.zeros(3, 4)))
    previous = os.umask(0o027)
    try:
        index.save(tmp_path / "index")
    finally:
        os.umask(previous)
    modes = {path.name: path.stat().st_mode & 0o777 for path in (tmp_path / "index").iterdir()}
    assert "gaussians.safetensors" in modes and set(modes.values()) == {0o640}, modes


def test_the_shipped_atomic_write_keeps_concurrent_writers_apart(tmp_path):
    """The model folder's own atomic write (ONNX graphs, modules.json, config files): two writers of one path at once
    each succeed and the file is always one writer's bytes, whole (a shared temporary name made one fail with
    FileNotFoundError and let the other report success over mixed bytes)."""
    import threading

    from gausscse.model.utils_gausscse import write_bytes_atomic

    target = tmp_path / "onnx" / "model.onnx"
    payloads = [bytes([value]) * (1 << 20) for value in (1, 2)]
    errors: list[BaseException] = []

    def writer(payload: bytes) -> None:
        try:
            for _ in range(30):
                write_bytes_atomic(target, payload)
        except BaseException as error:  # collected: a thread's exception would not fail the test
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(payload,)) for payload in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert target.read_bytes() in payloads
    assert not list(target.parent.glob(".*.tmp"))
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())


def test_an_existing_output_folder_that_takes_no_new_files_is_refused_up_front(tmp_path, monkeypatch):
    """A save stages beside its folder and then moves files into it: the folder itself must take new entries too (it
    was only the parent that was tried, so a whole run trained and then lost its model at the save)."""
    locked = tmp_path / "out"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        if os.access(locked, os.W_OK):  # root writes anywhere: the folder refuses as a read-only mount would
            real = tempfile.mkdtemp

            def refuse(*args, dir=None, **kwargs):
                if dir is not None and Path(dir).resolve() == locked.resolve():
                    raise PermissionError(13, "Permission denied")
                return real(*args, dir=dir, **kwargs)

            monkeypatch.setattr(tempfile, "mkdtemp", refuse)
        with pytest.raises(ValueError, match=rf"--output_dir {locked}: cannot write in {locked} \(Permission denied\)"):
            check_output_location(locked, "--output_dir")
        assert check_output_location(tmp_path / "new" / "folder", "--output_dir") == tmp_path / "new" / "folder"
    finally:
        locked.chmod(0o755)


def test_gausscse_search_refuses_a_corpus_or_model_inside_the_index_it_replaces(tmp_path):
    """``build --corpus IX/corpus.txt --index IX`` read the corpus, then the save replaced IX and deleted it: refused
    before any work, the corpus kept."""
    from gausscse.cli.search import main as search

    index = tmp_path / "ix"
    index.mkdir()
    (index / "index_config.json").write_text("{}")  # an earlier index: the save would replace the folder
    corpus = index / "corpus.txt"
    corpus.write_text("A man plays a guitar.\n")
    with pytest.raises(ValueError, match=rf"--corpus {corpus} lies inside --index {index}: saving the index replaces"):
        search(["build", "--model", str(tmp_path / "no-model"), "--corpus", str(corpus), "--index", str(index)])
    (tmp_path / "corpus.txt").write_text("A man plays a guitar.\n")
    (index / "model").mkdir()
    with pytest.raises(ValueError, match=rf"--model {index / 'model'} lies inside --index {index}"):
        search(["build", "--model", str(index / "model"), "--corpus", str(tmp_path / "corpus.txt"), "--index",
                str(index)])  # fmt: skip
    assert corpus.read_text() == "A man plays a guitar.\n"
