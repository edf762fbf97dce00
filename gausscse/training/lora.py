"""LoRA (``peft``) on the backbone of a GaussCSE model; the μ/σ² heads train fully. A LoRA model saves merged
([`merge_lora`]) or as an adapter folder (``gausscse.model.adapters_gausscse``); Trainer checkpoints of a LoRA model
are adapter folders too ([`load_adapter_checkpoint`])."""

from __future__ import annotations

from pathlib import Path

from peft import LoraConfig, get_peft_model

from gausscse import GaussCSEModel
from gausscse.model.adapters_gausscse import ADAPTER_FOLDER, ADAPTER_WEIGHTS_FILE, HEADS_FILE, has_adapter


def _train_heads(model: GaussCSEModel) -> GaussCSEModel:
    for head in (model.mean_head, model.logvar_head):
        head.requires_grad_(True)
    model.freeze_mean_path()  # a frozen_mean model's μ path stays frozen (its head too)
    return model


def apply_lora(
    model: GaussCSEModel, r: int, alpha: float, dropout: float, target_modules: list[str] | None = None
) -> GaussCSEModel:
    """Replace ``model.encoder`` with a ``PeftModel`` holding LoRA adapters (base weights frozen); returns ``model``."""
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules)
    model.encoder = get_peft_model(model.encoder, config)
    return _train_heads(model)


def has_lora(model: GaussCSEModel) -> bool:
    """Whether the model's encoder carries (unmerged) LoRA adapters."""
    return has_adapter(model.encoder)


def merge_lora(model: GaussCSEModel) -> GaussCSEModel:
    """Fold the adapters into the backbone weights (a plain GaussCSE model again); returns ``model``."""
    model.encoder = model.encoder.merge_and_unload()
    return model


def make_adapters_trainable(model: GaussCSEModel) -> GaussCSEModel:
    """A loaded adapter folder continues training: its LoRA weights take gradients again (peft loads them frozen),
    the backbone stays frozen; returns ``model``."""
    for name, parameter in model.encoder.named_parameters():
        parameter.requires_grad_("lora_" in name)
    return _train_heads(model)


def is_adapter_checkpoint(folder: str | Path) -> bool:
    """Whether ``folder`` (a local ``checkpoint-N``) holds an adapter and heads rather than full weights."""
    return (Path(folder) / HEADS_FILE).is_file() and (Path(folder) / ADAPTER_FOLDER / ADAPTER_WEIGHTS_FILE).is_file()


def load_adapter_checkpoint(model: GaussCSEModel, folder: str | Path) -> None:
    """Put the adapter weights and heads of an adapter ``folder`` into ``model`` (which carries the same adapters)."""
    model.load_adapter_weights(Path(folder) / ADAPTER_FOLDER / ADAPTER_WEIGHTS_FILE)
    model.load_head_weights(Path(folder) / HEADS_FILE)
