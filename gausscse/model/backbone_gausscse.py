"""The encoder a GaussCSE model starts from (Hub custom code): how a backbone is named, identified and built."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from huggingface_hub import hf_hub_download
from huggingface_hub.errors import EntryNotFoundError
from huggingface_hub.utils.sha import sha_fileobj
from torch import nn
from transformers import AutoConfig, AutoModel
from transformers.models.auto.modeling_auto import MODEL_MAPPING
from transformers.utils import (
    CONFIG_NAME,
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
    cached_file,
)

from .configuration_gausscse import POOLINGS, TOKEN_POOLINGS, GaussCSEConfig

STARTS = ("auto", "paper", "backbone")  # how from_backbone sets up the heads: start_fields
BACKBONE_VARIANCE_LAYERS = 1  # the "backbone" start's log σ² path: a trained copy of the top layer (ONEPASS.md)
HUB_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "subfolder", "force_download")  # locate files


def read_backbone_file(name_or_path: str, filename: str, hub_kwargs: dict) -> dict | list | None:
    """A JSON file of a local folder or Hub repo, ``None`` where it has none (or the Hub cannot be reached)."""
    if Path(name_or_path).is_dir():
        path = Path(name_or_path) / filename
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    try:
        downloaded = hf_hub_download(str(name_or_path), filename, **hub_kwargs)
    except (OSError, EntryNotFoundError, ValueError):  # no such file, no such repo, offline
        return None
    return json.loads(Path(downloaded).read_text(encoding="utf-8"))


def sentence_transformers_pooling(name_or_path: str, hub_kwargs: dict | None = None) -> tuple[str, bool] | None:
    """``(pooling, normalize)`` of a sentence-transformers model; ``None`` if it is none or pools otherwise."""
    hub_kwargs = {key: value for key, value in (hub_kwargs or {}).items() if key in ("revision", "token", "cache_dir")}
    modules = read_backbone_file(name_or_path, "modules.json", hub_kwargs)
    if not isinstance(modules, list):
        return None
    pooling_modules = [module for module in modules if str(module.get("type", "")).endswith(".Pooling")]
    if len(pooling_modules) != 1:
        return None
    pooling_config = read_backbone_file(
        name_or_path, f"{pooling_modules[0].get('path', '1_Pooling')}/config.json", hub_kwargs
    )
    if not isinstance(pooling_config, dict):
        return None
    mode = pooling_config.get("pooling_mode")  # sentence-transformers ≥ 6 writes one field
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    if mode is None:  # earlier versions: one boolean per mode (several on: concatenated)
        flags = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max"}
        on = [key for key, value in pooling_config.items() if key.startswith("pooling_mode_") and value]
        mode = flags.get(on[0]) if len(on) == 1 else None
    if mode not in TOKEN_POOLINGS:  # none, several, or one GaussCSE does not have (mean_sqrt_len, weighted mean, ...)
        return None
    return mode, any(str(module.get("type", "")).endswith(".Normalize") for module in modules)


def start_fields(name_or_path: str, start: str = "auto", hub_kwargs: dict | None = None) -> dict:
    """The [`GaussCSEConfig`] fields a ``start`` sets: ``"paper"`` → ``{}``; ``"backbone"`` → the backbone's own
    embedding, identity μ head, σ² = 1/d, one frozen trunk; ``"auto"``: ``"backbone"`` for sentence-transformers."""
    if start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, got {start!r}")
    found = sentence_transformers_pooling(name_or_path, hub_kwargs) if start != "paper" else None
    if start == "paper" or (start == "auto" and found is None):
        return {}
    pooling, normalize = found or ("mean", False)
    if pooling not in POOLINGS:
        raise ValueError(f"{name_or_path} pools with {pooling!r}: GaussCSE pools {' or '.join(POOLINGS)}")
    return {
        "pooling": pooling,
        "normalize_mean": normalize,
        "mean_activation": "none",
        "head_init": "identity",
        "frozen_mean": True,
        "variance_layers": BACKBONE_VARIANCE_LAYERS,
    }


def encoder_init_kwargs(config) -> dict:
    """``add_pooling_layer=False`` where the encoder class takes it (an unused pooler breaks DDP)."""
    encoder_class = MODEL_MAPPING.get(type(config), None)
    if encoder_class is not None and "add_pooling_layer" in inspect.signature(encoder_class.__init__).parameters:
        return {"add_pooling_layer": False}
    return {}


def build_encoder(encoder_config) -> nn.Module:
    """A fresh encoder of ``encoder_config``, without its pooler; its own code (``auto_map``) never runs."""
    return AutoModel.from_config(encoder_config, **encoder_init_kwargs(encoder_config), trust_remote_code=False)


def encoder_layers_path(encoder: nn.Module) -> str:
    """The name of the encoder's first ``nn.ModuleList`` of ``num_hidden_layers`` modules (``"encoder.layer"``)."""
    count = getattr(encoder.config, "num_hidden_layers", None)
    for name, module in encoder.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return name
    raise ValueError(f"{type(encoder).__name__} has no list of {count} layers: variance_layers cannot copy its top")


def local_backbone(name_or_path: str | None) -> str | None:
    """A backbone's recorded name: a local folder's resolved absolute path, a Hub id as it is."""
    return str(Path(name_or_path).resolve()) if name_or_path and Path(name_or_path).is_dir() else name_or_path


def backbone_weight_files(folder: Path) -> list[str]:
    """The weight files transformers loads from a backbone folder (safetensors or ``.bin``, single or sharded)."""
    for single, index in ((SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME), (WEIGHTS_NAME, WEIGHTS_INDEX_NAME)):
        if (folder / single).is_file():
            return [single]
        if (folder / index).is_file():
            return sorted(set(json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"].values()))
    return []


def backbone_record(name_or_path: str, hub_kwargs: dict | None = None) -> dict:
    """A backbone's identity: its name and the SHA-256 of its ``config.json`` and weight files."""
    hub_kwargs = {key: value for key, value in (hub_kwargs or {}).items() if key in HUB_KWARGS}
    folder = Path(cached_file(str(name_or_path), CONFIG_NAME, **hub_kwargs)).parent
    digests = {}
    for name in (CONFIG_NAME, *backbone_weight_files(folder)):
        with open(folder / name, "rb") as file:
            digests[name] = sha_fileobj(file).hex()
    return {"base_model_name_or_path": str(name_or_path), "sha256": digests}


class BackboneMixin:
    """Building a model on a pre-trained encoder."""

    @classmethod
    def from_backbone(
        cls, name_or_path: str, *, start: str = "auto", encoder_kwargs: dict | None = None, **config_kwargs
    ):
        """A model of fresh heads on a pre-trained encoder, set up by ``start`` ([`start_fields`])
        and ``config_kwargs``; ``encoder_kwargs`` for ``AutoModel.from_pretrained``."""
        name_or_path = local_backbone(str(name_or_path))
        encoder_kwargs = {"trust_remote_code": False, **(encoder_kwargs or {})}  # never a prompt to run its code
        encoder_config = AutoConfig.from_pretrained(name_or_path, **encoder_kwargs)
        encoder = AutoModel.from_pretrained(name_or_path, **encoder_init_kwargs(encoder_config), **encoder_kwargs)
        started = start_fields(name_or_path, start, encoder_kwargs)
        one_trunk = {"variance_layers", "mean_layers"} & config_kwargs.keys()
        if config_kwargs.get("frozen_mean") is False and not one_trunk:
            started.pop("variance_layers", None)  # a trained μ without one trunk's flags: the whole encoder, one path
        config_kwargs = {**started, **config_kwargs}
        # The config would otherwise reset the encoder's attention implementation (sdpa, ...) to unset.
        config_kwargs.setdefault("attn_implementation", encoder.config._attn_implementation)
        model = cls(GaussCSEConfig(encoder_config=encoder.config, **config_kwargs), encoder=encoder)
        model.name_or_path = name_or_path  # encode() finds the encoder's tokenizer here
        return model
