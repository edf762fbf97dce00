"""gausscse.io: a write shows the whole new file or leaves the old one, with the usual permissions."""

from __future__ import annotations

import json
import os

import pytest

from gausscse.io import atomic_path, write_atomic, write_json


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
