"""LoRA on the backbone of a GaussCSE model (``peft``): adapters in the encoder, the μ/σ² heads trained fully.

A LoRA model is saved either merged (a plain GaussCSE folder that loads with ``trust_remote_code``) or as
adapter + heads: ``adapter_config.json``/``adapter_model.safetensors`` (the encoder's adapter),
``heads.safetensors`` (the two heads) and the GaussCSE ``config.json`` (without ``auto_map``: the folder holds no full
weights for ``AutoModel`` to load); [`load_adapter_model`] rebuilds it, its model card says so, and
``gausscse-evaluate`` recognises it ([`is_adapter_folder`]).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from huggingface_hub import snapshot_download
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file

from gausscse import GaussCSEConfig, GaussCSEModel

HEADS_FILE = "heads.safetensors"
# the GaussCSEConfig fields beside the encoder's own config: what rebuilding the model from its backbone needs
HEAD_CONFIG_FIELDS = (
    "pooling",
    "mean_activation",
    "normalize_mean",
    "head_init",
    "frozen_mean",
    "embedding_size",
    "similarity_reduction",
    "logvar_min",
    "logvar_max",
)


def apply_lora(
    model: GaussCSEModel, r: int, alpha: float, dropout: float, target_modules: list[str] | None = None
) -> GaussCSEModel:
    """Replace ``model.encoder`` with a ``PeftModel`` holding LoRA adapters (base weights frozen); heads stay
    trainable. Returns ``model``."""
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules)
    model.encoder = get_peft_model(model.encoder, config)
    for head in (model.mean_head, model.logvar_head):
        head.requires_grad_(True)
    model.freeze_mean_path()  # a frozen_mean model's μ path stays frozen (its head too)
    return model


def has_lora(model: GaussCSEModel) -> bool:
    """Whether the model's encoder carries LoRA adapters."""
    return isinstance(model.encoder, PeftModel)


def merge_lora(model: GaussCSEModel) -> GaussCSEModel:
    """Fold the adapters into the backbone weights: the model becomes a plain GaussCSE model. Returns ``model``."""
    model.encoder = model.encoder.merge_and_unload()
    return model


def save_adapter_model(model: GaussCSEModel, output_dir: str | Path) -> None:
    """Save adapter + heads + GaussCSE config (see the module docstring)."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.encoder.save_pretrained(output_dir)
    heads = {
        f"{name}.{key}": value
        for name in ("mean_head", "logvar_head")
        for key, value in getattr(model, name).state_dict().items()
    }
    save_file({key: value.detach().cpu().contiguous() for key, value in heads.items()}, output_dir / HEADS_FILE)
    config = model.config.to_dict()
    config.pop("auto_map", None)  # no full weights here: AutoModel must not be pointed at code it cannot fill
    (output_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def is_adapter_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder written by [`save_adapter_model`]."""
    return (Path(path) / HEADS_FILE).is_file() and (Path(path) / "adapter_config.json").is_file()


def load_adapter_model(path: str | Path, backbone: str | None = None) -> GaussCSEModel:
    """Rebuild a model saved by [`save_adapter_model`]: the backbone (``backbone`` or the adapter's
    ``base_model_name_or_path``), its adapter and the heads."""
    path = Path(path) if Path(path).is_dir() else Path(snapshot_download(str(path)))  # a local folder or a Hub id
    config = GaussCSEConfig.from_pretrained(path)
    adapter_config = LoraConfig.from_pretrained(path)
    base = backbone or adapter_config.base_model_name_or_path
    model = GaussCSEModel.from_backbone(
        base, start="paper", **{field: getattr(config, field) for field in HEAD_CONFIG_FIELDS}
    )
    model.encoder = PeftModel.from_pretrained(model.encoder, path)
    heads = load_file(path / HEADS_FILE)
    with torch.no_grad():
        for key, value in heads.items():
            head_name, parameter = key.split(".", 1)
            getattr(getattr(model, head_name), parameter).copy_(value)
    return model


__all__ = ["apply_lora", "has_lora", "is_adapter_folder", "load_adapter_model", "merge_lora", "save_adapter_model"]
