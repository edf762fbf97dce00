"""The encoder a GaussCSE model starts from (ships with the weights as Hub custom code): ``GaussCSEModel.from_backbone``
([`model_from_backbone`]); how a backbone is named and identified, built without its pooler, where its stack of layers
is; and what a start takes from it — the pooling and normalisation of a sentence-transformers backbone (its
``modules.json`` and ``1_Pooling/config.json``) for the ``"backbone"`` start.
"""

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

# How from_backbone sets up the heads: "paper" = [CLS], tanh, random heads (the paper and its released code);
# "backbone" = the backbone's own sentence embedding (its pooling and normalisation), an identity μ head without
# activation, a neutral (zero) log-variance head and the frozen μ path with log σ² from its top layer's copy;
# "auto" = "backbone" for a sentence-transformers model (a folder or Hub repo with modules.json and
# 1_Pooling/config.json), "paper" for any other encoder.
STARTS = ("auto", "paper", "backbone")
# The "backbone" start's log σ² path: a trained copy of the backbone's top layer on the frozen trunk (one forward pass
# plus one layer), what the one-pass study chose on dev data (results/ONEPASS.md); 0 = two full paths.
BACKBONE_VARIANCE_LAYERS = 1
# The Hub arguments of from_pretrained that locate a folder's files (cached_file's)
HUB_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "subfolder", "force_download")


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
    """``(pooling, normalize)`` of a sentence-transformers model: the mode of its ``1_Pooling/config.json``
    (``cls``/``mean``/``max``) and whether ``modules.json`` lists a ``Normalize`` module; ``None`` when
    ``name_or_path`` (a folder or Hub id) is not a sentence-transformers model or pools otherwise (e.g.
    ``mean_sqrt_len``). ``hub_kwargs``: ``revision``, ``token``, ... for ``hf_hub_download``."""
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
    if mode is not None:
        modes = [mode] if mode in TOKEN_POOLINGS else []
    else:  # earlier versions: one boolean per mode
        flags = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens"}
        modes = [mode for mode, key in flags.items() if pooling_config.get(key)]
        if sum(1 for key, on in pooling_config.items() if key.startswith("pooling_mode_") and on) != len(modes):
            return None  # a mode GaussCSE does not have (mean_sqrt_len, weighted mean, ...) is on
    if len(modes) != 1:  # none, or several concatenated
        return None
    normalize = any(str(module.get("type", "")).endswith(".Normalize") for module in modules)
    return modes[0], normalize


def start_fields(name_or_path: str, start: str = "auto", hub_kwargs: dict | None = None) -> dict:
    """The [`GaussCSEConfig`] fields a ``start`` sets (see ``STARTS``): ``"paper"`` → ``{}`` (the config's defaults:
    [CLS], tanh, random heads); ``"backbone"`` → the sentence-transformers pooling and normalisation of
    ``name_or_path`` (mean pooling, no normalisation for a plain encoder), ``mean_activation="none"``,
    ``head_init="identity"``, ``frozen_mean=True`` and ``variance_layers=BACKBONE_VARIANCE_LAYERS`` (one trunk);
    ``"auto"`` → ``"backbone"`` for a sentence-transformers model, else ``"paper"``."""
    if start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, got {start!r}")
    found = sentence_transformers_pooling(name_or_path, hub_kwargs) if start != "paper" else None
    if start == "paper" or (start == "auto" and found is None):
        return {}
    pooling, normalize = found or ("mean", False)
    if pooling not in POOLINGS:
        raise ValueError(
            f"{name_or_path} pools its sentence embedding with {pooling!r}: GaussCSE pools {' or '.join(POOLINGS)}"
        )
    return {
        "pooling": pooling,
        "normalize_mean": normalize,
        "mean_activation": "none",
        "head_init": "identity",
        "frozen_mean": True,
        "variance_layers": BACKBONE_VARIANCE_LAYERS,
    }


def encoder_init_kwargs(config) -> dict:
    """``add_pooling_layer=False`` where the encoder class takes it: the paper pools [CLS] itself, and an
    unused pooler would leave parameters without gradient (DDP's unused-parameter error)."""
    encoder_class = MODEL_MAPPING.get(type(config), None)
    if encoder_class is not None and "add_pooling_layer" in inspect.signature(encoder_class.__init__).parameters:
        return {"add_pooling_layer": False}
    return {}


def build_encoder(encoder_config) -> nn.Module:
    """An encoder of ``encoder_config`` with fresh weights, without its pooler ([`encoder_init_kwargs`]); its own code
    (an ``auto_map``) never runs."""
    return AutoModel.from_config(encoder_config, **encoder_init_kwargs(encoder_config), trust_remote_code=False)


def encoder_layers_path(encoder: nn.Module) -> str:
    """Where the encoder keeps its stack of transformer layers: the name of its first ``nn.ModuleList`` of
    ``num_hidden_layers`` modules (``"encoder.layer"`` of BERT, RoBERTa, MiniLM, DeBERTa, ...)."""
    count = getattr(encoder.config, "num_hidden_layers", None)
    for name, module in encoder.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return name
    raise ValueError(f"{type(encoder).__name__} has no list of {count} layers: variance_layers cannot copy its top")


def encoder_layers(encoder: nn.Module) -> nn.ModuleList:
    """The encoder's stack of transformer layers ([`encoder_layers_path`])."""
    return encoder.get_submodule(encoder_layers_path(encoder))


def local_backbone(name_or_path: str | None) -> str | None:
    """A backbone's name as an adapter folder records it: a local folder as its absolute path, symbolic links resolved
    (the same folder from every working directory); a Hub id as it is."""
    return str(Path(name_or_path).resolve()) if name_or_path and Path(name_or_path).is_dir() else name_or_path


def backbone_weight_files(folder: Path) -> list[str]:
    """The weight files transformers loads from a backbone folder: ``model.safetensors`` or the shards its index lists,
    else ``pytorch_model.bin`` or its shards."""
    for single, index in ((SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME), (WEIGHTS_NAME, WEIGHTS_INDEX_NAME)):
        if (folder / single).is_file():
            return [single]
        if (folder / index).is_file():
            return sorted(set(json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"].values()))
    return []


def backbone_record(name_or_path: str, hub_kwargs: dict | None = None) -> dict:
    """The identity of a backbone (a local folder or Hub id, whose files are found as transformers finds them):
    ``{"base_model_name_or_path": name_or_path, "sha256": {file: SHA-256}}`` over its ``config.json`` and weight files
    ([`backbone_weight_files`]). An adapter folder keeps it as ``BACKBONE_FILE``."""
    hub_kwargs = {key: value for key, value in (hub_kwargs or {}).items() if key in HUB_KWARGS}
    folder = Path(cached_file(str(name_or_path), CONFIG_NAME, **hub_kwargs)).parent
    digests = {}
    for name in (CONFIG_NAME, *backbone_weight_files(folder)):
        with open(folder / name, "rb") as file:
            digests[name] = sha_fileobj(file).hex()
    return {"base_model_name_or_path": str(name_or_path), "sha256": digests}


def model_from_backbone(
    cls, name_or_path: str, *, start: str = "auto", encoder_kwargs: dict | None = None, **config_kwargs
):
    """Start a GaussCSE model from a pre-trained encoder (Hub id or local folder); heads are fresh.
    (``GaussCSEModel.from_backbone``: ``cls`` is the model class.)

    Args:
        name_or_path: anything ``AutoModel.from_pretrained`` loads (BERT, RoBERTa, MiniLM, DeBERTa, ...).
        start: how the model starts ([`start_fields`]): ``"paper"`` ([CLS], tanh, random heads, as the paper),
            ``"backbone"`` (the backbone's own sentence embedding kept as μ: its pooling and normalisation, an
            identity μ head, σ² = 1/d, the frozen μ path) or ``"auto"`` (``"backbone"`` for a sentence-transformers
            model, ``"paper"`` otherwise).
        encoder_kwargs: extra keyword arguments for ``AutoModel.from_pretrained`` (``revision``, ``dtype``, ...);
            the backbone's own code (the ``auto_map`` of its config) runs only with ``trust_remote_code=True``.
        **config_kwargs: [`GaussCSEConfig`] fields (``pooling``, ``similarity_reduction``, ...); they override
            what ``start`` sets.

    A local backbone is named by its absolute path (an adapter folder saved from the model records it), and its
    identity kept ([`backbone_record`]).
    """
    name_or_path = local_backbone(str(name_or_path))
    encoder_kwargs = {"trust_remote_code": False, **(encoder_kwargs or {})}  # never a prompt to run its code
    encoder_config = AutoConfig.from_pretrained(name_or_path, **encoder_kwargs)
    encoder = AutoModel.from_pretrained(name_or_path, **encoder_init_kwargs(encoder_config), **encoder_kwargs)
    started = start_fields(name_or_path, start, encoder_kwargs)
    if config_kwargs.get("frozen_mean") is False and "variance_layers" not in config_kwargs:
        started.pop("variance_layers", None)  # one trunk is a frozen-μ design: a trained μ takes the whole encoder
    config_kwargs = {**started, **config_kwargs}
    # The config would otherwise reset the encoder's attention implementation (sdpa, ...) to unset.
    config_kwargs.setdefault("attn_implementation", encoder.config._attn_implementation)
    model = cls(GaussCSEConfig(encoder_config=encoder.config, **config_kwargs), encoder=encoder)
    model.name_or_path = name_or_path  # encode() finds the encoder's tokenizer here
    model.backbone_record = backbone_record(name_or_path, encoder_kwargs)
    return model


__all__ = [
    "BACKBONE_VARIANCE_LAYERS",
    "STARTS",
    "backbone_record",
    "build_encoder",
    "encoder_init_kwargs",
    "encoder_layers",
    "encoder_layers_path",
    "local_backbone",
    "model_from_backbone",
    "sentence_transformers_pooling",
    "start_fields",
]
