"""One training run per output folder: ``filelock`` on ``<parent>/.<name>.lock`` beside ``--output_dir`` (the kernel
drops the ``flock`` when its process ends, however it ends), with the holder (pid, host, start, command) described
in ``<parent>/.<name>.lock.json`` for the refusal message and for the warning after a run that died. Of any number of
runs taking the lock at once, exactly one gets it. Needs only the standard library and ``filelock`` (no torch)."""

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

LOCK_SUFFIX = ".lock"
HOLDER_SUFFIX = ".json"  # the holder's description: the lock file's name plus this


class OutputDirLockedError(FileExistsError):
    """The output folder is held by another run (a ``FileExistsError``: ``gausscse-train`` reports it in one line)."""


def lock_path(output_dir: str | Path) -> Path:
    """The lock file of ``output_dir``: ``<parent>/.<name>.lock`` of its absolute, symlink-free path."""
    folder = Path(output_dir).resolve()
    return folder.parent / f".{folder.name}{LOCK_SUFFIX}"


def read_holder(path: Path) -> dict[str, Any] | None:
    """The holder description at ``path`` (``None`` if there is none or it is not one)."""
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return holder if isinstance(holder, dict) and isinstance(holder.get("pid"), int) else None


class RunLock:
    """The lock of ``output_dir`` (which need not exist) for one run: ``with RunLock(output_dir): ...``. A refused
    run gets [`OutputDirLockedError`] naming the holder, ``flag`` naming the folder; a lock left by a run that ended
    without letting go is taken with a warning. The lock file stays; the description goes on release."""

    def __init__(self, output_dir: str | Path, flag: str = "--output_dir") -> None:
        self.output_dir = Path(output_dir)
        self.flag = flag
        self.path = lock_path(output_dir)
        self.holder_path = self.path.with_name(self.path.name + HOLDER_SUFFIX)
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
            raise self._refusal() from None
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

    def _refusal(self) -> OutputDirLockedError:
        holder = read_holder(self.holder_path) or {}
        command = holder.get("command")
        command_text = " ".join(map(str, command)) if isinstance(command, list) else ""
        if command_text:
            command_text = f", command: {command_text[:200]}{'...' if len(command_text) > 200 else ''}"
        who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, started {holder.get('started', '?')}"
        return OutputDirLockedError(
            f"{self.flag} {self.output_dir} is in use by another training run: {who}{command_text}, holds its lock "
            f"{self.path} (still running: the lock goes when its process ends). Wait for that run to end or choose "
            "another folder; --overwrite_output_dir does not override this"
        )
