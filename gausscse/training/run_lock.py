"""One training run per output folder: a file lock beside ``--output_dir``, held for the whole run.

``<parent>/.<name>.lock`` (beside the folder, so it can be taken before the folder exists and never lands in the
model folder that [`gausscse.training.save.save_model_folder`] swaps in whole) is locked with ``filelock.FileLock``:
an exclusive ``flock``, which the kernel drops when the holder's process ends, however it ends (a crash or
``kill -9`` included), so a run that died never blocks the next one. ``<parent>/.<name>.lock.json`` names the holder —
``pid``, ``host``, ``started`` (ISO time), ``command``, ``output_dir`` — for the message that refuses a second run,
and for the warning of the run that comes after one that did not end cleanly.

What [`RunLock`] guarantees, where ``flock`` works (Linux, macOS; network file systems that pass it on): of any
number of runs taking the lock of one folder at the same time, exactly one gets it; the others get
[`OutputDirLockedError`] naming the holder. The lock file itself stays (removing it while others may wait on it is
the race file locks avoid); the holder's description is removed when it lets go.

Only this module, the standard library and ``filelock`` are needed (no torch): tests and tools may load it on its
own.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import socket
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from filelock import FileLock, Timeout

logger = logging.getLogger(__name__)

LOCK_SUFFIX = ".lock"
HOLDER_SUFFIX = ".json"  # the holder's description: the lock file's name plus this


class OutputDirLockedError(FileExistsError):
    """The output folder is held by another run: one line says which run holds it and what to do. A
    ``FileExistsError``, so ``gausscse-train`` reports it with one line and exit status 2."""


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
    """The lock of one output folder, for one run: ``with RunLock(output_dir): ...`` (or [`acquire`] /
    [`release`]). See the module's docstring for what it guarantees.

    ``output_dir``: the folder the run writes (it need not exist; its parent is created). ``flag``: how error
    messages name it (the command-line flag that gave it).
    """

    def __init__(self, output_dir: str | Path, flag: str = "--output_dir") -> None:
        self.output_dir = Path(output_dir)
        self.flag = flag
        self.path = lock_path(output_dir)
        self.holder_path = self.path.with_name(self.path.name + HOLDER_SUFFIX)
        # one lock object per RunLock (not filelock's per-path singleton): a second RunLock of this very process
        # is refused like another run's
        self._lock = FileLock(str(self.path), timeout=0, is_singleton=False, thread_local=False)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._lock.is_locked

    def holder_info(self) -> dict[str, Any]:
        """What this run writes into the holder description."""
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": list(sys.argv),
            "output_dir": str(self.output_dir),
        }

    def acquire(self) -> RunLock:
        """Take the lock, or raise [`OutputDirLockedError`] naming the run that holds it. The lock of a run that
        ended without letting go is taken with a warning naming that run."""
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
                self.path,
                previous["pid"],
                previous.get("host", "?"),
                previous.get("started", "?"),
            )
        try:
            self._write_holder()
        except BaseException:
            self._lock.release()
            raise
        return self

    def release(self) -> None:
        """Remove the holder description and let go of the lock. Does nothing when not held."""
        if not self.held:
            return
        try:
            self.holder_path.unlink(missing_ok=True)
        finally:
            self._lock.release()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def _write_holder(self) -> None:
        """This run's description, appearing whole (readable by other users' runs)."""
        descriptor, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f"{self.holder_path.name}.")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(self.holder_info(), handle)
            os.chmod(temporary, 0o644)
            os.replace(temporary, self.holder_path)
        finally:
            Path(temporary).unlink(missing_ok=True)

    def _refusal(self) -> OutputDirLockedError:
        holder = read_holder(self.holder_path) or {}
        command = holder.get("command")
        command_text = ""
        if isinstance(command, list) and command:
            command_text = " ".join(map(str, command))
            command_text = f", command: {command_text[:200]}{'...' if len(command_text) > 200 else ''}"
        who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, started {holder.get('started', '?')}"
        return OutputDirLockedError(
            f"{self.flag} {self.output_dir} is in use by another training run: {who}{command_text}, holds its lock "
            f"{self.path} (still running: the lock goes when its process ends). Wait for that run to end or choose "
            "another folder; --overwrite_output_dir does not override this"
        )


__all__ = ["LOCK_SUFFIX", "OutputDirLockedError", "RunLock", "lock_path"]
