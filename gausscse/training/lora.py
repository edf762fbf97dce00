"""LoRA on the backbone of a GaussCSE model (``peft``): adapters in the encoder, the μ/σ² heads trained fully.

A LoRA model is saved either merged ([`merge_lora`], then a plain GaussCSE folder) or, by ``save_pretrained`` itself,
as an adapter folder: ``heads.safetensors`` (the two heads), the GaussCSE config + code, and in ``adapter/`` peft's
``adapter_config.json`` + ``adapter_model.safetensors`` (the encoder's adapter) and ``backbone.json`` (the backbone:
its Hub id or absolute path, and the SHA-256 of its config and weight files). Both load everywhere a GaussCSE
folder loads (``AutoModel`` / ``SentenceTransformer`` with ``trust_remote_code``, ``gausscse.loading.load_model``);
an adapter folder needs peft and its backbone, the one it recorded (another is refused). Trainer checkpoints of a
LoRA model are adapter folders too ([`load_adapter_checkpoint`] puts one back into the model being trained).
"""

from __future__ import annotations

from pathlib import Path

from peft import LoraConfig, get_peft_model

from gausscse import GaussCSEModel
from gausscse.model.adapters_gausscse import ADAPTER_FOLDER, ADAPTER_WEIGHTS_FILE, HEADS_FILE, has_adapter


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
    """Whether the model's encoder carries LoRA adapters (not merged)."""
    return has_adapter(model.encoder)


def merge_lora(model: GaussCSEModel) -> GaussCSEModel:
    """Fold the adapters into the backbone weights: the model becomes a plain GaussCSE model. Returns ``model``."""
    model.encoder = model.encoder.merge_and_unload()
    return model


def make_adapters_trainable(model: GaussCSEModel) -> GaussCSEModel:
    """A loaded adapter folder continues training: its LoRA weights take gradients again (peft loads them frozen),
    the backbone stays frozen, the heads train (the frozen μ path stays frozen). Returns ``model``."""
    for name, parameter in model.encoder.named_parameters():
        parameter.requires_grad_("lora_" in name)
    for head in (model.mean_head, model.logvar_head):
        head.requires_grad_(True)
    model.freeze_mean_path()
    return model


def is_adapter_checkpoint(folder: str | Path) -> bool:
    """Whether ``folder`` (a local ``checkpoint-N``) holds an adapter and heads rather than full weights."""
    return (Path(folder) / HEADS_FILE).is_file() and (Path(folder) / ADAPTER_FOLDER / ADAPTER_WEIGHTS_FILE).is_file()


def load_adapter_checkpoint(model: GaussCSEModel, folder: str | Path) -> None:
    """Put the adapter weights and heads of an adapter ``folder`` into ``model`` (which carries the same adapters):
    how the Trainer resumes from, or keeps the best of, a LoRA model's checkpoints."""
    model.load_adapter_weights(Path(folder) / ADAPTER_FOLDER / ADAPTER_WEIGHTS_FILE)
    model.load_head_weights(Path(folder) / HEADS_FILE)


__all__ = [
    "apply_lora",
    "has_lora",
    "is_adapter_checkpoint",
    "load_adapter_checkpoint",
    "make_adapters_trainable",
    "merge_lora",
]
