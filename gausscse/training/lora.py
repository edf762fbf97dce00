"""LoRA (``peft``) on the backbone of a GaussCSE model (the μ/σ² heads train fully); it saves merged or as an
adapter folder (``gausscse.model.adapters_gausscse``), as do its Trainer checkpoints."""

from __future__ import annotations

from pathlib import Path

from peft import LoraConfig, get_peft_model

from gausscse import GaussCSEModel
from gausscse.model.adapters_gausscse import ADAPTER_FOLDER, ADAPTER_WEIGHTS_FILE, HEADS_FILE


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


def load_adapter_checkpoint(model: GaussCSEModel, folder: str | Path) -> bool:
    """Whether ``folder`` (a local ``checkpoint-N``) holds an adapter and heads rather than full weights; if so, they
    are put into ``model`` (which carries the same adapters)."""
    adapter, heads = Path(folder) / ADAPTER_FOLDER / ADAPTER_WEIGHTS_FILE, Path(folder) / HEADS_FILE
    if not (heads.is_file() and adapter.is_file()):
        return False
    model.load_adapter_weights(adapter)
    model.load_head_weights(heads)
    return True
