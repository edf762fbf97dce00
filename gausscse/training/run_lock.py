"""One training run per output folder: an advisory lock file beside ``--output_dir``, held for the whole run.

``<parent>/.<name>.lock`` (beside the folder, so it can be taken before the folder exists and never lands in the
model folder that [`gausscse.training.save.save_model_folder`] swaps in whole) holds JSON naming its holder: ``pid``,
``host``, ``started`` (ISO time), ``command`` and ``output_dir``. The holder also keeps an exclusive ``flock`` on it,
which the kernel drops when the holder's process ends, however it ends (a crash or ``kill -9`` included).

What [`RunLock`] guarantees, where ``fcntl.flock`` works (Linux, macOS; also network file systems that pass
``flock`` on):

- of any number of runs taking the lock of one folder at the same time, exactly one gets it; the others get
  [`OutputDirLockedError`] naming the holder;
- a lock left by a run that ended without removing it (killed, crashed) is *stale*: the file exists but no process
  holds its ``flock``. On the holder's own host the next run takes it over (with a warning naming the dead pid), and
  two runs that find the same stale lock still cannot both proceed: a stale lock is only replaced, with one atomic
  rename, by the run that holds its ``flock`` and has checked that it is still the file at the lock's path;
- a lock written on another host is never taken over (from here we cannot tell whether that run still goes on);
- a lock file that does not hold a GaussCSE lock's JSON is never taken over or removed;
- the holder removes the file when it lets go (``with`` block left, exception or not). A process killed outright
  leaves the file, stale, for the next run to take over.

Where ``flock`` is missing or refused (Windows, some network file systems), a lock is judged stale when it was taken
on this host by a pid that no longer runs, and its takeover is best effort.

Only this standard-library module is needed (no torch): tests and tools may load it on its own.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import logging
import os
import socket
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

logger = logging.getLogger(__name__)

LOCK_SUFFIX = ".lock"
_ATTEMPTS = 20  # a lock that is released or replaced while we look at it: look again, this many times


class OutputDirLockedError(FileExistsError):
    """The output folder is held by another run (or its lock file cannot be read): one line says which run holds it
    and what to do. A ``FileExistsError``, so ``gausscse-train`` reports it with one line and exit status 2."""


def lock_path(output_dir: str | Path) -> Path:
    """The lock file of ``output_dir``: ``<parent>/.<name>.lock`` of its absolute, symlink-free path."""
    folder = Path(output_dir).resolve()
    return folder.parent / f".{folder.name}{LOCK_SUFFIX}"


def _pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this host (one owned by another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError, OSError):  # not a valid pid (or Windows' os.kill refusing signal 0)
        return False
    return True


def _try_flock(descriptor: int) -> bool | None:
    """Take an exclusive ``flock`` on ``descriptor`` without waiting: ``True`` taken, ``False`` held by another open
    file, ``None`` where the system or file system has no ``flock``."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        if error.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return None
        raise
    return True


def _same_file(descriptor: int, path: Path) -> bool:
    """Whether ``path`` is (still) the file open as ``descriptor``."""
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(descriptor)
    return (at_path.st_dev, at_path.st_ino) == (opened.st_dev, opened.st_ino)


def _read(descriptor: int) -> bytes:
    os.lseek(descriptor, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(descriptor, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _close(descriptor: int | None) -> None:
    if descriptor is not None:
        with contextlib.suppress(OSError):
            os.close(descriptor)


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
        self._descriptor: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._descriptor is not None

    def holder_info(self) -> dict[str, Any]:
        """What this run writes into the lock file."""
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": list(sys.argv),
            "output_dir": str(self.output_dir),
        }

    def acquire(self) -> RunLock:
        """Take the lock, or raise [`OutputDirLockedError`] naming the run that holds it. A stale lock (see the
        module's docstring) is taken over with a warning."""
        if self._descriptor is not None:
            raise RuntimeError(f"{self.path} is already held by this RunLock")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(_ATTEMPTS):
            if self._create():
                return self
            if self._inspect_and_take_over():
                return self
        raise OutputDirLockedError(
            f"{self.flag} {self.output_dir}: could not take its lock {self.path}, which other runs keep taking and "
            "releasing; is the same training started several times?"
        )

    def release(self) -> None:
        """Remove the lock file (if it is still ours) and let go of it. Does nothing when not held."""
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is None:
            return
        try:
            if _same_file(descriptor, self.path):  # removed while the flock still keeps other runs from replacing it
                self.path.unlink(missing_ok=True)
        finally:
            _close(descriptor)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    # ---------------------------------------------------------------------------------------------- taking the lock

    def _new_lock_file(self) -> tuple[int, str]:
        """A temporary file beside the lock, already flocked and holding this run's JSON: ``(descriptor, path)``.
        It becomes the lock with one atomic step, so no other run ever sees a lock file that is empty or unlocked."""
        descriptor, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f"{self.path.name}.", suffix=".tmp")
        try:
            _try_flock(descriptor)  # cannot be held by anyone else: the file is new
            os.write(descriptor, json.dumps(self.holder_info()).encode("utf-8"))
            os.chmod(temporary, 0o644)  # mkstemp makes 0600: other users' runs read who holds the folder
        except BaseException:
            _close(descriptor)
            Path(temporary).unlink(missing_ok=True)
            raise
        return descriptor, temporary

    def _create(self) -> bool:
        """Put a new lock file at the lock's path unless a file is there (``False``)."""
        descriptor, temporary = self._new_lock_file()
        try:
            try:
                os.link(temporary, self.path)  # fails if the path exists, as O_CREAT | O_EXCL would
            except FileExistsError:
                _close(descriptor)
                return False
            except OSError:  # a file system without hard links: create the lock file itself, exclusively
                _close(descriptor)
                return self._create_without_link()
            self._descriptor = descriptor
            return True
        finally:
            Path(temporary).unlink(missing_ok=True)

    def _create_without_link(self) -> bool:
        """[`_create`] where hard links are refused: ``O_CREAT | O_EXCL`` on the lock's path, then the flock (waited
        for: a run inspecting the new, still empty file lets go of it at once) and the JSON."""
        try:
            descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
        except FileExistsError:
            return False
        try:
            if fcntl is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(descriptor, fcntl.LOCK_EX)
            os.write(descriptor, json.dumps(self.holder_info()).encode("utf-8"))
        except BaseException:
            _close(descriptor)
            self.path.unlink(missing_ok=True)
            raise
        self._descriptor = descriptor
        return True

    def _inspect_and_take_over(self) -> bool:
        """The lock file exists: take it over when it is stale (``True``), raise when it is held, ``False`` when it
        changed while we looked (look again)."""
        try:
            try:
                descriptor = os.open(self.path, os.O_RDWR)  # read-write: an exclusive lock over NFS needs it
            except PermissionError:  # another user's lock: read-only still reads and flocks it on a local disk
                descriptor = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False  # released meanwhile
        except OSError as error:
            raise OutputDirLockedError(
                f"{self.flag} {self.output_dir} has a lock file {self.path} that cannot be opened ({error}): another "
                "run may hold the folder; delete the file if no training writes into it"
            ) from None
        try:
            flocked = _try_flock(descriptor)
            if not _same_file(descriptor, self.path):
                return False  # replaced or removed meanwhile
            holder = self._parse(_read(descriptor))
            if holder is None:
                raise OutputDirLockedError(
                    f"{self.flag} {self.output_dir}: its lock file {self.path} is not a GaussCSE run lock (unreadable "
                    "JSON, or no pid and host); if no training writes into that folder, delete the lock file and "
                    "start again"
                )
            pid, host = holder["pid"], holder["host"]
            here = socket.gethostname()
            if host != here:
                raise self._held(holder, "and is on another host, so whether it still runs cannot be told from here")
            if flocked is False:
                if _pid_alive(pid):
                    raise self._held(holder, "and it is still running")
                raise self._held(holder, "which has ended, but a process it started still holds the lock")
            if flocked is None and _pid_alive(pid):  # no flock to ask: the pid alone tells
                raise self._held(holder, "and it is still running")
            # stale: its run is gone; we hold its flock (where there is one), so no other run replaces it now
            new_descriptor, temporary = self._new_lock_file()
            try:
                os.replace(temporary, self.path)
            except BaseException:
                _close(new_descriptor)
                Path(temporary).unlink(missing_ok=True)
                raise
            self._descriptor = new_descriptor
            logger.warning(
                "%s %s: took over the stale lock %s of pid %s on %s (started %s), which ended without releasing it",
                self.flag,
                self.output_dir,
                self.path,
                pid,
                host,
                holder.get("started", "?"),
            )
            return True
        finally:
            _close(descriptor)  # lets go of the old file's flock, after the new file took its place

    @staticmethod
    def _parse(content: bytes) -> dict[str, Any] | None:
        try:
            holder = json.loads(content.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(holder, dict) or not isinstance(holder.get("pid"), int) or not holder.get("host"):
            return None
        return holder

    def _held(self, holder: dict[str, Any], state: str) -> OutputDirLockedError:
        command = holder.get("command")
        command_text = ""
        if isinstance(command, list) and command:
            command_text = " ".join(map(str, command))
            command_text = f", command: {command_text[:200]}{'...' if len(command_text) > 200 else ''}"
        return OutputDirLockedError(
            f"{self.flag} {self.output_dir} is in use by another training run: pid {holder['pid']} on "
            f"{holder['host']}, started {holder.get('started', '?')}{command_text}, holds its lock {self.path} "
            f"{state}. Wait for that run to end, or, if it is gone, delete {self.path}; --overwrite_output_dir does "
            "not override this"
        )


__all__ = ["LOCK_SUFFIX", "OutputDirLockedError", "RunLock", "lock_path"]
