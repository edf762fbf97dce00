"""Files: atomic output (every file this project writes appears whole or not at all, through a temporary beside the
target and ``os.replace``; a folder is built beside its target and its files moved in after their manifest), reads
of a whole folder checked against that manifest, and the one JSON reader."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock
from huggingface_hub.utils.sha import sha_fileobj

from gausscse.model.utils_gausscse import write_bytes_atomic

MANIFEST_FILE = "manifest.json"
READ_ATTEMPTS = 20  # whole-folder reads retried while a save moves its files in
READ_PAUSE = 0.05  # seconds between those tries


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix): on a clean exit it replaces ``path``, on an exception it is
    deleted and an earlier file at ``path`` stays."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f"{path.suffix}.tmp")
    os.close(descriptor)
    try:
        yield Path(temporary)
        os.chmod(temporary, 0o666 & ~current_umask())  # mkstemp makes 0600; a result file gets the usual permissions
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (the model layer's [`write_bytes_atomic`])."""
    write_bytes_atomic(Path(path), text.encode("utf-8"))


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


def json_value(text: str | bytes, path: str | Path, kind: type = dict, line: int | None = None, error=ValueError):
    """The JSON value of ``text`` (the file ``path``, or its line ``line``) if it is a ``kind``; else ``error`` naming
    the file and line (not UTF-8, not JSON, another kind)."""
    try:
        value = json.loads(text)
    except UnicodeDecodeError as decode_error:
        raise error(f"{path} is not UTF-8 text ({decode_error})") from None
    except json.JSONDecodeError as json_error:
        where = line or json_error.lineno
        raise error(f"{path}, line {where}: not JSON ({json_error.msg}, column {json_error.colno})") from None
    if not isinstance(value, kind):
        kind_name = {dict: "object", str: "string", list: "array"}[kind]
        raise error(f"{path}{'' if line is None else f', line {line}'}: not a JSON {kind_name}: {value!r:.80}")
    return value


def json_lines(lines: Iterable[str] | bytes, path: str | Path, kind: type = dict, error=ValueError) -> Iterator[Any]:
    """The values of a JSON Lines file (its lines or its bytes; blank lines skipped), each checked by [`json_value`]."""
    if isinstance(lines, bytes):
        try:  # split at "\n" only, not splitlines(): JSON keeps U+2028 and U+0085 unescaped inside a string
            lines = lines.decode("utf-8").split("\n")
        except UnicodeDecodeError as decode_error:
            raise error(f"{path} is not UTF-8 text ({decode_error})") from None
    for line, text in enumerate(lines, start=1):
        if text.strip():
            yield json_value(text, path, kind, line, error)


def first_line(error: BaseException) -> str:
    """The first line of an error's message (FAISS and HTTP clients add C++ positions and bodies)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def machine_lock(key: str) -> FileLock:
    """A lock that the processes of this machine share for ``key`` (a file in the temporary folder, named by the
    key's hash: nothing is left beside the user's files)."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return FileLock(str(Path(tempfile.gettempdir()) / f"gausscse-{digest}.lock"))


def remove_entry(path: Path) -> None:
    """Delete a file, link or folder (a folder with what it holds); nothing if there is none."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def move_in(staging: Path, folder: Path, names: Iterable[str], before_first: Callable[[], None] | None = None) -> None:
    """Move each entry ``names`` of ``staging`` into ``folder`` by ``os.replace``, in order (each file appears whole,
    with the umask's permissions whatever wrote it: safetensors' ``save_file`` makes 0600); a folder already there
    under a name is deleted first; ``before_first`` is called right before the first move."""
    folder.mkdir(parents=True, exist_ok=True)
    names, mode = list(names), 0o666 & ~current_umask()
    for name in names:
        if (staging / name).is_file() and not (staging / name).is_symlink():
            os.chmod(staging / name, mode)
    if before_first is not None:
        before_first()
    for name in names:
        if (folder / name).is_dir():
            remove_entry(folder / name)
        os.replace(staging / name, folder / name)


def check_replaceable(folder: str | Path, marker: str, flag: str = "") -> None:
    """``FileExistsError`` (naming the argument ``flag``) unless ``folder`` does not exist, is empty or holds ``marker``
    (the file its kind of folder always has), so that a wrong path never wipes someone's data."""
    folder = Path(folder)
    if folder.exists() and not (folder / marker).is_file() and (not folder.is_dir() or any(folder.iterdir())):
        named = f"{flag} {folder}" if flag else str(folder)
        raise FileExistsError(f"{named} exists and has no {marker}: refusing to replace it")


def check_output_location(path: str | Path, flag: str) -> Path:
    """The absolute path of the output folder ``path`` (argument ``flag``); ``ValueError`` naming ``flag`` when it is a
    file, is or holds the working directory, or its nearest existing parent (for staging) or the folder itself, where
    it exists (files are moved into it), takes no new entries."""
    target = Path(path).expanduser().absolute()
    if target.exists() and not target.is_dir():
        raise ValueError(f"{flag} {path} is a file, not a folder")
    resolved = target.resolve()
    if resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents:
        raise ValueError(f"{flag} {path} is the working directory or holds it (replaced whole): pass a folder inside")
    parent = resolved.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: {parent} is a file, not a folder")
    for place in (parent, *([resolved] if resolved.is_dir() else [])):  # staged beside it, then moved into it
        try:
            os.rmdir(tempfile.mkdtemp(dir=place, prefix=".gausscse-write-check."))
        except OSError as error:
            raise ValueError(f"{flag} {path}: cannot write in {place} ({error.strerror or error})") from None
    return target


def check_not_nested(first: str | Path, first_flag: str, second: str | Path, second_flag: str, why: str) -> None:
    """``ValueError``, saying ``why``, when the folders ``first`` and ``second`` are one or one holds the other."""
    one, other = Path(first).resolve(), Path(second).resolve()
    if one == other or one in other.parents or other in one.parents:
        relation = "is" if one == other else "holds" if one in other.parents else "lies inside"
        raise ValueError(f"{first_flag} {first} {relation} the folder of {second_flag} {second}: {why}")


def check_not_inside(path: str | Path, flag: str, folder: str | Path, folder_flag: str, why: str) -> None:
    """``ValueError``, saying ``why``, when ``path`` (argument ``flag``; a file or folder that exists) is ``folder``
    or lies inside it."""
    inner, outer = Path(path).resolve(), Path(folder).resolve()
    if Path(path).exists() and (inner == outer or outer in inner.parents):
        raise ValueError(f"{flag} {path} lies inside {folder_flag} {folder}: {why}")


@contextmanager
def staging_folder(folder: Path, prefix: str) -> Iterator[Path]:
    """A new empty folder (``prefix`` + random) beside ``folder``, usual permissions, deleted when the block ends."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=prefix))
    try:
        staging.chmod(0o777 & ~current_umask())  # mkdtemp makes 0700; the folder it becomes gets the usual mode
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def resolved_target(folder: str | Path) -> Path:
    """The folder to replace for ``folder``: a symbolic link's target (the link stays), else ``folder``."""
    folder = Path(folder)
    return folder.resolve() if folder.is_symlink() else folder


@contextmanager
def atomic_folder(folder: str | Path, marker: str) -> Iterator[Path]:
    """An empty staging folder beside ``folder``: on a clean exit [`write_manifest`] records its files, which are moved
    into ``folder``, the manifest first ([`read_folder`] serves only the files it lists, as it lists them), and
    ``folder``'s other entries are deleted; on an exception it is deleted and ``folder`` is untouched. ``folder`` must
    pass [`check_replaceable`] for ``marker``; a symbolic link stays and its target is written."""
    folder = resolved_target(folder)
    check_replaceable(folder, marker)
    with staging_folder(folder, f".{folder.name}.") as staging:
        yield staging
        write_manifest(staging)
        written = sorted(path.name for path in staging.iterdir())
        with machine_lock(str(folder.resolve())):  # two saves into one folder move in one after the other
            # the manifest first: from then on a reader finds every file it lists or waits (one without a manifest,
            # an older save, never sees the new files as its own)
            move_in(staging, folder, [MANIFEST_FILE, *(name for name in written if name != MANIFEST_FILE)])
            for entry in folder.iterdir():
                if entry.name not in written:
                    remove_entry(entry)


def write_manifest(folder: Path) -> None:
    """``manifest.json`` in ``folder``: the size and SHA-256 of each of its files ([`read_folder`] checks them)."""
    files = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name != MANIFEST_FILE:
            with open(path, "rb") as handle:
                files[path.name] = {"size": path.stat().st_size, "sha256": sha_fileobj(handle).hex()}
    write_json(folder / MANIFEST_FILE, {"files": files})


def read_folder(folder: str | Path, kind: str) -> dict[str, bytes]:
    """``{name: bytes}`` of every file of a folder written by [`atomic_folder`], each as its ``manifest.json`` lists it
    (size and SHA-256; tried again while a save moves its files in). ``ValueError`` naming a listed file that stays
    missing or different (a save cut short: save again); a folder without a manifest is read as it is; ``kind``
    names the folder in messages."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a saved {kind}: no such folder")
    for attempt in range(READ_ATTEMPTS):
        if attempt:
            time.sleep(READ_PAUSE)
        files, problem = _read_folder_once(folder, kind)
        if problem is None:
            return files
    raise ValueError(f"{problem}: save the {kind} again")


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _read_folder_once(folder: Path, kind: str) -> tuple[dict[str, bytes], str | None]:
    """One try of [`read_folder`]: the files, and what does not match the manifest (``None``: all of them)."""
    manifest = _read(folder / MANIFEST_FILE)
    if manifest is None:  # an older folder: its files as they are
        names = [path.name for path in folder.iterdir() if path.is_file() and not path.name.startswith(".")]
        files = {name: _read(folder / name) for name in names}
        return {name: data for name, data in files.items() if data is not None}, None
    try:
        entries = json.loads(manifest)["files"].items()
        listed = {name: (int(row["size"]), str(row["sha256"])) for name, row in entries}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{folder / MANIFEST_FILE} is damaged ({error!r}): save the {kind} again") from None
    files = {}
    for name, (size, sha256) in listed.items():
        data = _read(folder / name)
        if data is None:
            return files, f"{folder / name} is missing (listed in {MANIFEST_FILE})"
        if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
            return files, f"{folder / name} changed after it was saved (size or SHA-256)"
        files[name] = data
    return files, None
