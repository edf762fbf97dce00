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
BASE_FOLDER = "base-model"  # in an adapter folder: the GaussCSE model its adapter is on, where the run made it new
ADAPTER_SETTINGS = ("search_kl_weight", "entailment_cosine_weight", "entailment_threshold")  # chosen after training
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


def write_adapter_extras(folder: Path, record: dict | None, config) -> None:
    """What an adapter folder holds beside peft's files: the sentence-transformers files, the code and the base's
    record (``None``: none) with the ``ADAPTER_SETTINGS`` of ``config`` (the adapter's model's) that are set; the
    weights get the mode of the config peft wrote (safetensors writes 0600)."""
    weights = folder / ADAPTER_SAFE_WEIGHTS_NAME
    if weights.is_file():
        weights.chmod((folder / ADAPTER_CONFIG_NAME).stat().st_mode & 0o777)
    for name, content in SENTENCE_TRANSFORMERS_FILES.items():
        write_json_atomic(folder / name, content)
    copy_shipped_files(folder)
    if record is not None:
        settings = {name: getattr(config, name) for name in ADAPTER_SETTINGS if getattr(config, name, None) is not None}
        write_json_atomic(folder / BASE_RECORD_FILE, {**record, "settings": settings})


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


def read_base_record(adapter: str | Path, hub_kwargs: dict) -> dict | None:
    """``adapter``'s ``BASE_RECORD_FILE`` (``None``: it has none), checked: ``ValueError`` naming it when damaged."""
    recorded_file = cached_file(str(adapter), BASE_RECORD_FILE, **hub_kwargs, **MISSING_OK)
    if recorded_file is None:
        return None
    try:
        recorded = json.loads(Path(recorded_file).read_text(encoding="utf-8"))
        was, _, settings = recorded["sha256"], recorded["base_model_name_or_path"], recorded.get("settings", {})
        for field, value in (("sha256", was), ("settings", settings)):
            if not isinstance(value, dict):
                raise TypeError(f"{field} is a {type(value).__name__}")
        unknown = sorted(set(settings) - set(ADAPTER_SETTINGS))
        if unknown:
            raise KeyError(f"settings {unknown}: not among {list(ADAPTER_SETTINGS)}")
    except (ValueError, KeyError, TypeError) as error:  # JSON, a field missing, of another kind
        raise ValueError(
            f"{adapter}: its {BASE_RECORD_FILE} is damaged ({type(error).__name__}: {error}); it should be "
            '{"base_model_name_or_path": ..., "sha256": {file: digest}, "settings": {...}}, as training wrote it'
        ) from error
    return recorded


def check_base(adapter: str | Path, base: str, hub_kwargs: dict) -> None:
    """``ValueError`` unless ``base`` has the files ``adapter``'s ``BASE_RECORD_FILE`` (if any) records."""
    recorded = read_base_record(adapter, hub_kwargs)
    if recorded is None:
        return
    was, named = recorded["sha256"], recorded["base_model_name_or_path"]
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
        if peft_model_id is not None:
            self.apply_adapter_settings(peft_model_id, kwargs.get("adapter_kwargs") or {}, check=False)
        return info

    def apply_adapter_settings(self, adapter: str | Path, hub_kwargs: dict | None = None, check: bool = True) -> None:
        """Set the ``ADAPTER_SETTINGS`` the adapter folder ``adapter`` records (those chosen at the end of its
        training: the search score's λ, the entailment score's α and threshold) in this model's config, over its
        base's; each checked as the config checks it (``ValueError`` naming the file); with ``check``, this model
        checked first to be the base the adapter was trained on ([`check_base`]). ``AutoModel``,
        ``SentenceTransformer`` and ``load_model`` do both when they load an adapter; after
        ``PeftModel.from_pretrained(base, adapter)`` (peft's route, which reads only peft's files) call
        ``peft_model.get_base_model().apply_adapter_settings(adapter)``."""
        hub_kwargs = {key: value for key, value in (hub_kwargs or {}).items() if key in HUB_KWARGS}
        if check and self.name_or_path:
            check_base(adapter, self.name_or_path, hub_kwargs)
        recorded = read_base_record(adapter, hub_kwargs)
        for name, value in (recorded or {}).get("settings", {}).items():
            try:
                setattr(self.config, name, value)
            except (TypeError, ValueError) as error:
                raise ValueError(f"{adapter}: its {BASE_RECORD_FILE} sets {name}={value!r}: {error}") from None

    def adapter_base(self) -> str | None:
        """The base model the active adapter names (``base_model_name_or_path``)."""
        return self.peft_config[self.active_adapters()[0]].base_model_name_or_path
