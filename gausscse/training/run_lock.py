"""One training run per output folder: ``filelock`` on ``<parent>/.<name>.lock`` (the ``flock`` goes with its
process), the holder (pid, host, start, command) described in ``<parent>/.<name>.lock.json`` for the refusal message
and the warning after a run that died. Needs only the standard library and ``filelock`` (no torch)."""

from __future__ import annotations

import datetime
import json
import logging
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

logger = logging.getLogger(__name__)


class OutputDirLockedError(FileExistsError):
    """The output folder is held by another run (a ``FileExistsError``: ``gausscse-train`` reports it in one line)."""


def lock_path(output_dir: str | Path) -> Path:
    """The lock file of ``output_dir``: ``<parent>/.<name>.lock`` of its absolute, symlink-free path."""
    folder = Path(output_dir).resolve()
    return folder.parent / f".{folder.name}.lock"


def read_holder(path: Path) -> dict[str, Any] | None:
    """The holder description at ``path`` (``None`` if there is none or it is not one)."""
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return holder if isinstance(holder, dict) and isinstance(holder.get("pid"), int) else None


class RunLock:
    """The lock of ``output_dir`` (which need not exist) for one run: ``with RunLock(output_dir): ...``. A refused
    run gets [`OutputDirLockedError`] naming the holder; a lock left by a run that ended without letting go is taken
    with a warning. The lock file stays; the description goes on release."""

    def __init__(self, output_dir: str | Path) -> None:
        self.output_dir = Path(output_dir)
        self.path = lock_path(output_dir)
        self.holder_path = self.path.with_name(self.path.name + ".json")
        # not filelock's per-path singleton: a second RunLock of this very process is refused like another run's
        self._lock = FileLock(str(self.path), timeout=0, is_singleton=False, thread_local=False)

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def acquire(self) -> RunLock:
        if self.held:
            raise RuntimeError(f"{self.path} is already held by this RunLock")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except Timeout:
            holder = read_holder(self.holder_path) or {}
            who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, started {holder.get('started', '?')}"
            command = " ".join(map(str, holder["command"])) if isinstance(holder.get("command"), list) else ""
            if command:
                who += f", command: {command[:200]}{'...' if len(command) > 200 else ''}"
            raise OutputDirLockedError(
                f"--output_dir {self.output_dir} is in use by another training run ({who}), still running: it holds "
                f"the lock {self.path}. Wait for that run to end or choose another folder; --overwrite_output_dir does "
                "not override this"
            ) from None
        previous = read_holder(self.holder_path)
        if previous is not None:
            logger.warning(
                "took over the stale lock %s of pid %s on %s (started %s): that run ended without releasing it",
                *(self.path, previous["pid"], previous.get("host", "?"), previous.get("started", "?")),
            )
        try:
            self._write_holder()
        except BaseException:
            self._lock.release()
            raise
        return self

    def release(self) -> None:
        """Remove the holder description and let go (nothing when not held)."""
        if not self.held:
            return
        try:
            self.holder_path.unlink(missing_ok=True)
        finally:
            self._lock.release()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def _write_holder(self) -> None:
        """This run's description, appearing whole and readable by other users' runs."""
        started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": started}
        holder.update(command=list(sys.argv), output_dir=str(self.output_dir))
        descriptor, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f"{self.holder_path.name}.")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(holder, handle)
            os.chmod(temporary, 0o644)
            os.replace(temporary, self.holder_path)
        finally:
            Path(temporary).unlink(missing_ok=True)
