"""A folder's two layouts (Hub custom code): full weights, or a standard PEFT adapter folder (LoRA saved unmerged:
``adapter_config.json`` + ``adapter_model.safetensors``, no ``config.json``: transformers loads the GaussCSE base model
the adapter names, then the adapter). Beside peft's files: the tokenizer, the sentence-transformers files, the code and
``BASE_RECORD_FILE``, the SHA-256 of the base's files, checked when the adapter loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from transformers.utils import (
    ADAPTER_CONFIG_NAME,
    ADAPTER_SAFE_WEIGHTS_NAME,
    CONFIG_NAME,
    SAFE_WEIGHTS_INDEX_NAME,
    cached_file,
)

from .backbone_gausscse import HUB_KWARGS, backbone_record
from .configuration_gausscse import SENTENCE_TRANSFORMERS_FILES
from .shipped_gausscse import copy_shipped_files
from .utils_gausscse import write_json_atomic

BASE_RECORD_FILE = "base_model.json"
OLD_ADAPTER_FOLDER = "adapter"  # the earlier layout: LoRA on the encoder in adapter/, the heads in heads.safetensors
OLD_HEADS_FILE = "heads.safetensors"
CONVERT_COMMAND = "python -m gausscse.training.lora"
MISSING_OK = {"_raise_exceptions_for_missing_entries": False, "_raise_exceptions_for_connection_errors": False}


def is_adapter_model(model) -> bool:
    """Whether ``model`` carries peft adapters loaded into it (transformers' ``PeftAdapterMixin``)."""
    return bool(getattr(model, "_hf_peft_config_loaded", False))


def check_not_old_layout(name_or_path: str | Path, hub_kwargs: dict) -> None:
    """``ValueError`` with the converting command for an adapter folder of the earlier layout."""
    hub_kwargs = {key: value for key, value in hub_kwargs.items() if key in HUB_KWARGS}
    if cached_file(str(name_or_path), OLD_HEADS_FILE, **hub_kwargs, **MISSING_OK) is not None:
        raise ValueError(
            f"{name_or_path} is a LoRA adapter folder of the earlier layout ({OLD_ADAPTER_FOLDER}/ + "
            f"{OLD_HEADS_FILE}): convert it once with `{CONVERT_COMMAND} {name_or_path} NEW_FOLDER` and load NEW_FOLDER"
        )


def remove_other_layout(folder: Path, adapter: bool) -> None:
    """Clear ``folder`` of the other layout (``adapter``: an adapter folder, which must hold no ``config.json``) and
    of the earlier adapter layout, before a save writes its own."""
    others = [folder / CONFIG_NAME, *folder.glob("model*.safetensors"), folder / SAFE_WEIGHTS_INDEX_NAME]
    if not adapter:
        others = [folder / ADAPTER_CONFIG_NAME, folder / ADAPTER_SAFE_WEIGHTS_NAME, folder / BASE_RECORD_FILE]
    for path in [*others, folder / OLD_HEADS_FILE]:
        path.unlink(missing_ok=True)
    shutil.rmtree(folder / OLD_ADAPTER_FOLDER, ignore_errors=True)


def write_adapter_extras(folder: Path, record: dict | None) -> None:
    """What an adapter folder holds beside peft's files: the sentence-transformers files, the code and the base's
    record (``None``: none); the weights get the mode of the config peft wrote (safetensors writes 0600)."""
    weights = folder / ADAPTER_SAFE_WEIGHTS_NAME
    if weights.is_file():
        weights.chmod((folder / ADAPTER_CONFIG_NAME).stat().st_mode & 0o777)
    for name, content in SENTENCE_TRANSFORMERS_FILES.items():
        write_json_atomic(folder / name, content)
    copy_shipped_files(folder)
    if record is not None:
        write_json_atomic(folder / BASE_RECORD_FILE, record)


def check_loading_info(name_or_path: str | Path, info: dict) -> None:
    """Refuse a checkpoint whose weights do not fit the model (transformers would start them at random)."""
    kinds = ("missing_keys", "unexpected_keys", "mismatched_keys")
    problems = {kind: sorted(map(str, info[kind])) for kind in kinds if info.get(kind)}
    if problems:
        listed = "; ".join(f"{kind.replace('_', ' ')}: {', '.join(names[:3])}" for kind, names in problems.items())
        fix = "load it with the gausscse version that wrote it and save it again there"
        raise ValueError(f"{name_or_path}: its weights do not fit a GaussCSE model of its config ({listed}); {fix}")


def base_record(base: str | None) -> dict | None:
    """The SHA-256 of a base model's config and weight files ([`backbone_record`]); ``None`` without a base."""
    return None if base is None else backbone_record(base)


def check_base(adapter: str | Path, base: str, hub_kwargs: dict) -> None:
    """``ValueError`` unless ``base`` has the files ``adapter``'s ``BASE_RECORD_FILE`` (if any) records."""
    recorded_file = cached_file(str(adapter), BASE_RECORD_FILE, **hub_kwargs, **MISSING_OK)
    if recorded_file is None:
        return
    try:
        recorded = json.loads(Path(recorded_file).read_text(encoding="utf-8"))
        was, named = recorded["sha256"], recorded["base_model_name_or_path"]
        if not isinstance(was, dict):
            raise TypeError(f"sha256 is a {type(was).__name__}")
    except (ValueError, KeyError, TypeError) as error:  # JSON, a field missing, of another kind
        raise ValueError(
            f"{adapter}: its {BASE_RECORD_FILE} is damaged ({type(error).__name__}: {error}); it should be "
            '{"base_model_name_or_path": ..., "sha256": {file: digest}}, as training wrote it'
        ) from error
    now = backbone_record(base)["sha256"]
    differing = sorted(name for name in {*was, *now} if was.get(name) != now.get(name))
    if differing:
        raise ValueError(
            f"{adapter}: its adapter was trained on the base model {named} "
            f"({BASE_RECORD_FILE}); the base loaded, {base}, is not that one: its {', '.join(differing)} differ by "
            f"SHA-256. Point {ADAPTER_CONFIG_NAME}'s base_model_name_or_path at the base the adapter was trained on"
        )


class AdapterMixin:
    """peft's adapters on a GaussCSE model (transformers' ``PeftAdapterMixin``), checked against their base."""

    def load_adapter(self, peft_model_id: str | None = None, *args, **kwargs):
        """``PeftAdapterMixin.load_adapter`` after [`check_base`] of this model against the adapter's record; a
        ``ValueError`` ([`check_loading_info`]) where its weights do not fit."""
        if peft_model_id is not None and self.name_or_path:
            hub_kwargs = {
                key: value for key, value in (kwargs.get("adapter_kwargs") or {}).items() if key in HUB_KWARGS
            }
            check_base(peft_model_id, self.name_or_path, hub_kwargs)
        try:
            info = super().load_adapter(peft_model_id, *args, **kwargs)
        except RuntimeError as error:  # transformers: tensors of other shapes, named in its load report
            raise ValueError(
                f"{peft_model_id}: its adapter weights do not fit the base model {self.name_or_path} (tensors of other "
                f"shapes: {str(error).splitlines()[0]})"
            ) from error
        if info is not None:  # peft only warns of adapter weights that do not fit
            check_loading_info(peft_model_id, info.to_dict())
        return info

    def adapter_base(self) -> str | None:
        """The base model the active adapter names (``base_model_name_or_path``)."""
        return self.peft_config[self.active_adapters()[0]].base_model_name_or_path
