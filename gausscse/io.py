"""Atomic file output, in one place: whatever this project writes appears whole or not at all.

Every writer goes through [`atomic_path`]: a temporary file in the target's folder, moved over the target with
``os.replace`` (atomic on POSIX and Windows) only when writing succeeded; on an error the temporary file is removed
and an earlier file at the target is left as it was.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (same suffix, so writers that infer a format from it work); on a clean
    exit it replaces ``path``, on an exception it is deleted."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f"{path.suffix}.tmp")
    os.close(descriptor)
    try:
        yield Path(temporary)
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def json_safe(value: Any) -> Any:
    """``value`` with NaN floats as ``None`` and dict keys as strings (strict JSON)."""
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, float) and value != value:
        return None
    return value


def write_json(path: str | Path, payload: Any) -> None:
    """Write ``payload`` as indented JSON, atomically (``NaN`` becomes ``null``)."""
    write_atomic(path, json.dumps(json_safe(payload), indent=2, default=str) + "\n")


__all__ = ["atomic_path", "json_safe", "write_atomic", "write_json"]
