"""File and fingerprint utilities of a GaussCSE folder (ships with the weights as Hub custom code): files written
whole through a temporary file and ``os.replace``, the save-state file that makes a folder's model either the old one
or the new one whole (or refused, naming the cut save), and the weights' fingerprint that ONNX graphs, encode pools
and search indexes record."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import torch


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and ``os.replace``, so it appears whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(partial, 0o666 & ~mask)  # mkstemp makes 0600; the file gets the usual permissions
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


SAVE_STATE_FILE = ".gausscse-save.json"  # {"save": id, "state": "moving" | "done"}: a save that moves files in
LOAD_ATTEMPTS = 30  # a load tried again while a save moves its files in (each move is one rename: milliseconds)
LOAD_PAUSE = 0.1  # seconds between those tries
Loaded = TypeVar("Loaded")


class CutSaveError(ValueError):
    """A folder whose last save stopped while moving its files in: its files may be a mix of two models."""


@contextmanager
def moving_in(folder: str | Path) -> Iterator[Callable[[], None]]:
    """A save's files moved into ``folder`` one by one: the block gets ``mark()``, to call right before the first
    move, which marks the folder as being written ([`load_whole`] waits); a clean exit marks it done. A save killed
    (or failing) after ``mark()`` leaves the mark, so every loader refuses the mix instead of loading it; one that
    stops before it leaves the old model as it was."""
    folder, save = Path(folder), uuid.uuid4().hex
    yield lambda: write_json_atomic(folder / SAVE_STATE_FILE, {"save": save, "state": "moving"})
    write_json_atomic(folder / SAVE_STATE_FILE, {"save": save, "state": "done"})


def save_state(folder: Path) -> dict | None:
    """The folder's save-state record (``None``: none, or not a local folder); an unreadable one counts as moving."""
    try:
        state = json.loads((folder / SAVE_STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"state": "moving", "save": None}
    return state if isinstance(state, dict) else {"state": "moving", "save": None}


def load_whole(folder: str | Path, load: Callable[[], Loaded]) -> Loaded:
    """``load()`` of the model in ``folder`` when no save is moving files into it, from start to end (loaded again
    where a save came in between); [`CutSaveError`] naming the folder where a save's mark stays (a save killed while
    moving its files in). Not a local folder (a Hub id): ``load()``."""
    folder = Path(folder)
    if not folder.is_dir():
        return load()
    for attempt in range(LOAD_ATTEMPTS):
        if attempt:
            time.sleep(LOAD_PAUSE)
        before = save_state(folder)
        if before is not None and before.get("state") != "done":
            continue
        loaded = load()
        if save_state(folder) == before:
            return loaded
    raise CutSaveError(
        f"{folder}: a save into this folder stopped while moving its files in ({SAVE_STATE_FILE} says so): its files "
        "may be a mix of two models, so it is not loaded. Save or train the model into it again"
    )


def write_json_atomic(path: str | Path, content: Any) -> None:
    """``content`` as indented JSON at ``path``, appearing whole ([`write_bytes_atomic`])."""
    write_bytes_atomic(path, (json.dumps(content, indent=2) + "\n").encode("utf-8"))


# config fields left out of a model's fingerprint, which covers what its Gaussians depend on: where and how it was
# loaded, and the scores' weights and threshold (chosen after training, they rank and decide but change no Gaussian;
# an index records the λ it ranks by in its own settings)
VOLATILE_CONFIG_KEYS = frozenset(
    {"transformers_version", "dtype", "torch_dtype", "architectures", "auto_map"}
    | {"output_attentions", "output_hidden_states", "return_dict"}
    | {"search_kl_weight", "entailment_cosine_weight", "entailment_threshold"}
)


def stable_config(config: Any) -> Any:
    """``config`` (a nested ``to_dict()``) without private and ``VOLATILE_CONFIG_KEYS``, as strict JSON."""
    if isinstance(config, dict):
        return {
            str(key): stable_config(value)
            for key, value in config.items()
            if not str(key).startswith("_") and key not in VOLATILE_CONFIG_KEYS
        }
    if isinstance(config, (list, tuple)):
        return [stable_config(item) for item in config]
    if isinstance(config, float) and config != config:
        return None
    return config


# model → (its state when fingerprinted, the tensors it names, the fingerprint)
_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def model_fingerprint(model: torch.nn.Module) -> str:
    """SHA-256 of every weight (floating ones as float32: any load precision) and the [`stable_config`], recorded by a
    ``SentenceIndex`` and an ONNX graph; cached per model while its tensors (held) and config are unchanged."""
    tensors = model.state_dict(keep_vars=True)
    config = json.dumps(stable_config(model.config.to_dict()), sort_keys=True, default=str)
    state = (tuple((name, id(tensor), tensor._version, tensor.data_ptr()) for name, tensor in tensors.items()), config)
    cached = _FINGERPRINTS.get(model)
    if cached is not None and cached[0] == state:
        return cached[2]
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.float() if tensor.is_floating_point() else tensor
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(memoryview(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()))
    digest.update(config.encode())
    _FINGERPRINTS[model] = (state, list(tensors.values()), digest.hexdigest())
    return digest.hexdigest()
