"""A folder's two layouts (Hub custom code): full weights, or an adapter folder (LoRA unmerged, heads apart)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel
from transformers.dynamic_module_utils import custom_object_save
from transformers.utils import CONFIG_NAME, SAFE_WEIGHTS_INDEX_NAME, cached_file

try:  # only an adapter (LoRA) folder needs peft; in a try block, so transformers' import check does not require it
    from peft import PeftConfig, PeftModel, get_peft_model, set_peft_model_state_dict
except ImportError:
    PeftConfig = PeftModel = get_peft_model = set_peft_model_state_dict = None

from .backbone_gausscse import HUB_KWARGS, backbone_record, encoder_init_kwargs, local_backbone, read_backbone_file
from .configuration_gausscse import GaussCSEConfig

ADAPTER_FOLDER = "adapter"
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
BACKBONE_FILE = "backbone.json"
HEADS_FILE = "heads.safetensors"


def has_adapter(encoder: nn.Module) -> bool:
    """Whether ``encoder`` is a peft ``PeftModel`` (LoRA adapters on the backbone, not merged)."""
    return PeftModel is not None and isinstance(encoder, PeftModel)


def adapter_heads_file(name_or_path: str | Path, hub_kwargs: dict | None = None) -> str | None:
    """The local path of ``HEADS_FILE`` if ``name_or_path`` (folder or Hub id) is an adapter folder, else ``None``."""
    hub_kwargs = {key: value for key, value in (hub_kwargs or {}).items() if key in HUB_KWARGS}
    missing_ok = {"_raise_exceptions_for_missing_entries": False, "_raise_exceptions_for_connection_errors": False}
    return cached_file(str(name_or_path), HEADS_FILE, **hub_kwargs, **missing_ok)


def recorded_backbone(folder: str | Path) -> str | None:
    """``base_model_name_or_path`` of a local adapter folder's adapter config; ``None`` for other folders."""
    config_path = Path(folder) / ADAPTER_FOLDER / ADAPTER_CONFIG_FILE
    if not (Path(folder) / HEADS_FILE).is_file() or not config_path.is_file():
        return None
    try:
        base = json.loads(config_path.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    return base if isinstance(base, str) else None


def adapter_file(name_or_path: str | Path, name: str, hub_kwargs: dict, required: bool = True) -> Path | None:
    """The local ``ADAPTER_FOLDER/name``; ``None`` if absent and not ``required`` (else ``FileNotFoundError``)."""
    subfolder = "/".join(part for part in (hub_kwargs.get("subfolder", ""), ADAPTER_FOLDER) if part)
    if Path(name_or_path).is_dir():
        path = Path(name_or_path) / subfolder / name
        if required and not path.is_file():
            raise FileNotFoundError(
                f"{name_or_path} is an adapter folder ({HEADS_FILE}) that lacks {subfolder}/{name}: copy the whole "
                f"folder, {ADAPTER_FOLDER}/ included"
            )
        return path if path.is_file() else None
    hub_kwargs = {**hub_kwargs, "subfolder": subfolder}
    found = cached_file(str(name_or_path), name, **hub_kwargs, _raise_exceptions_for_missing_entries=required)
    return None if found is None else Path(found)


def remove_other_layout(folder: Path, adapter: bool) -> None:
    """Clear ``folder`` of the other layout (``adapter``: an adapter folder) before a save writes its own."""
    if adapter:
        for path in [*folder.glob("model*.safetensors"), folder / SAFE_WEIGHTS_INDEX_NAME]:
            path.unlink(missing_ok=True)
    else:
        (folder / HEADS_FILE).unlink(missing_ok=True)
        shutil.rmtree(folder / ADAPTER_FOLDER, ignore_errors=True)


def check_loading_info(name_or_path: str | Path, info: dict) -> None:
    """Refuse a checkpoint whose weights do not fit the model (transformers would start them at random)."""
    kinds = ("missing_keys", "unexpected_keys", "mismatched_keys")
    problems = {kind: sorted(map(str, info[kind])) for kind in kinds if info.get(kind)}
    if problems:
        listed = "; ".join(f"{kind.replace('_', ' ')}: {', '.join(names[:3])}" for kind, names in problems.items())
        fix = "load it with the gausscse version that wrote it and save it again there"
        raise ValueError(f"{name_or_path}: its weights do not fit a GaussCSE model of its config ({listed}); {fix}")


def load_adapter_folder(model_class, name_or_path: str | Path, heads_file: str, config=None, **kwargs):
    """An adapter folder as a ``model_class`` model: the backbone its adapter names (an encoder, the one
    ``BACKBONE_FILE`` recorded; its code never runs), the LoRA adapters and the heads; ``kwargs``: Hub args."""
    if PeftModel is None:
        raise ImportError(f"{name_or_path} holds a LoRA adapter (not merged): loading it needs `pip install peft`")
    hub_kwargs = {key: value for key, value in kwargs.items() if key in HUB_KWARGS and value is not None}
    if config is None:
        config = GaussCSEConfig.from_pretrained(name_or_path, **hub_kwargs)
    # peft's files, fetched beside each other: peft then reads a local folder
    adapter_config_file = adapter_file(name_or_path, ADAPTER_CONFIG_FILE, hub_kwargs)
    adapter_weights_file = adapter_file(name_or_path, ADAPTER_WEIGHTS_FILE, hub_kwargs)
    # None for a folder saved before backbones were recorded: its backbone loads unchecked
    recorded_file = adapter_file(name_or_path, BACKBONE_FILE, hub_kwargs, required=False)
    adapter_config = PeftConfig.from_pretrained(str(adapter_config_file.parent))
    adapter_config.inference_mode = True  # loaded adapters are frozen, as peft's own loading leaves them
    base = local_backbone(adapter_config.base_model_name_or_path)  # what a later save of this model records
    base_kwargs = {key: kwargs[key] for key in ("token", "cache_dir") if kwargs.get(key) is not None}
    base_config = read_backbone_file(base, CONFIG_NAME, base_kwargs) if base else None
    if isinstance(base_config, dict) and base_config.get("model_type") == GaussCSEConfig.model_type:
        itself = Path(base).is_dir() and Path(base).resolve() == Path(name_or_path).resolve()  # would recurse
        raise ValueError(
            f"{name_or_path}: the backbone its adapter names ({ADAPTER_FOLDER}/{ADAPTER_CONFIG_FILE}) is "
            f"{'this folder itself' if itself else f'the GaussCSE model {base}'}, not an encoder"
        )
    encoder_kwargs = {**base_kwargs, **({"dtype": kwargs["dtype"]} if kwargs.get("dtype") is not None else {})}
    try:
        encoder = AutoModel.from_pretrained(
            base, **encoder_init_kwargs(config.encoder_config), **encoder_kwargs, trust_remote_code=False
        )
    except (OSError, ValueError, TypeError) as error:
        raise OSError(
            f"{name_or_path} is a LoRA adapter on the backbone {base!r}, which cannot be loaded here: {error}. Point "
            "adapter_config.json's base_model_name_or_path at it, or share it merged (train with --merge_lora)"
        ) from error
    found = backbone_record(base, base_kwargs)  # after loading: a Hub backbone's weight files are downloaded
    if recorded_file is not None:
        recorded = json.loads(recorded_file.read_text(encoding="utf-8"))
        was, now = recorded["sha256"], found["sha256"]
        differing = sorted(name for name in {*was, *now} if was.get(name) != now.get(name))
        if differing:
            raise ValueError(
                f"{name_or_path}: its adapter was trained on the backbone {recorded['base_model_name_or_path']} (its "
                f"{ADAPTER_FOLDER}/{BACKBONE_FILE}); the backbone found, {found['base_model_name_or_path']}, is not "
                f"that one: its {', '.join(differing)} differ by SHA-256. Point {ADAPTER_FOLDER}/{ADAPTER_CONFIG_FILE}"
                "'s base_model_name_or_path at the backbone the adapter was trained on"
            )
    model = model_class(config, encoder=encoder)
    model.backbone_record = found
    model.encoder = get_peft_model(encoder, adapter_config)
    model.load_adapter_weights(adapter_weights_file)  # once, and checked (peft's own loading only warns)
    model.load_head_weights(heads_file)
    model.name_or_path = str(name_or_path)  # encode() finds the tokenizer here
    return model.to(encoder.dtype).eval()  # the heads in the backbone's dtype


def head_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """The μ and log σ² heads' tensors by their ``HEADS_FILE`` keys (``mean_head.weight``, ...)."""
    return {key: value for key, value in model.state_dict().items() if key.startswith(("mean_head.", "logvar_head."))}


def save_adapter_folder(model: nn.Module, folder: Path) -> list[Path]:
    """Save ``model`` as an adapter folder (refusing its own backbone's folder); returns the weight files written."""
    folder.mkdir(parents=True, exist_ok=True)
    adapter_folder = folder / ADAPTER_FOLDER
    with tempfile.TemporaryDirectory(dir=folder) as scratch:  # peft's save_pretrained also rewrites README.md
        model.encoder.save_pretrained(scratch)
        written = json.loads((Path(scratch) / ADAPTER_CONFIG_FILE).read_text(encoding="utf-8"))
        base = written["base_model_name_or_path"]
        if base and Path(base).is_dir() and Path(base).resolve() == folder.resolve():
            raise ValueError(f"{folder} is the backbone of this model's adapter: save it to another folder")
        remove_other_layout(folder, adapter=True)
        adapter_folder.mkdir(exist_ok=True)
        for name in (ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE):
            os.replace(Path(scratch) / name, adapter_folder / name)
    if model.backbone_record is None:
        (adapter_folder / BACKBONE_FILE).unlink(missing_ok=True)  # an earlier save's record names another backbone
    else:
        (adapter_folder / BACKBONE_FILE).write_text(json.dumps(model.backbone_record, indent=2), encoding="utf-8")
    heads = {key: value.detach().cpu().contiguous() for key, value in head_tensors(model).items()}
    save_file(heads, folder / HEADS_FILE, metadata={"format": "pt"})
    custom_object_save(model, folder, config=model.config)  # the code files, and auto_map in the config
    model.config.save_pretrained(folder)
    return [folder / HEADS_FILE, adapter_folder / ADAPTER_WEIGHTS_FILE]


class AdapterMixin:
    """Loading a LoRA adapter's and the heads' weights into a model."""

    def load_adapter_weights(self, adapter_weights_file: str | Path) -> None:
        """Load an ``ADAPTER_WEIGHTS_FILE`` into the model's encoder: every LoRA weight in it, every tensor fitting."""
        result = set_peft_model_state_dict(self.encoder, load_file(str(adapter_weights_file)))
        missing = [name for name in result.missing_keys if "lora_" in name]
        if result.unexpected_keys or missing:
            raise ValueError(
                f"{adapter_weights_file}: the adapter does not fit this model (unexpected: "
                f"{result.unexpected_keys[:3]}, missing: {missing[:3]})"
            )

    def load_head_weights(self, heads_file: str | Path) -> None:
        """Copy the μ and log σ² heads of a ``HEADS_FILE`` (keys ``mean_head.weight``, ...) into the model."""
        heads = load_file(str(heads_file))
        expected = {key: tuple(value.shape) for key, value in head_tensors(self).items()}
        found = {key: tuple(value.shape) for key, value in heads.items()}
        if found != expected:
            raise ValueError(f"{heads_file}: expected the tensors (name: shape) {expected}, found {found}")
        with torch.no_grad():
            for key, value in heads.items():
                head_name, parameter = key.split(".", 1)
                getattr(getattr(self, head_name), parameter).copy_(value)
