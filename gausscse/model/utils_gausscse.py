"""File and fingerprint utilities of a GaussCSE folder (ships with the weights as Hub custom code): files written
whole through a temporary file and ``os.replace``, and the weights' fingerprint that ONNX graphs, encode pools and
search indexes record."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import weakref
from pathlib import Path
from typing import Any

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
