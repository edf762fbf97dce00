"""LoRA (``peft``) on a whole GaussCSE model: adapters on the trained encoder's projections, the heads trained and
saved whole (``modules_to_save``). A run saves merged, or as a standard PEFT adapter folder (``adapter_config.json`` +
``adapter_model.safetensors``) whose base is a GaussCSE model folder or Hub id; ``AutoModel``, ``PeftModel`` and
``SentenceTransformer`` load it. ``python -m gausscse.training.lora OLD NEW`` converts an adapter folder of the
earlier layout (``adapter/`` + ``heads.safetensors``)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from peft import LoraConfig, PeftModel, get_peft_model, set_peft_model_state_dict
from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer, PreTrainedConfig

from gausscse import GaussCSEConfig, GaussCSEModel
from gausscse.io import check_not_nested
from gausscse.loading import adapter_base_of
from gausscse.model.adapters_gausscse import (
    BASE_FOLDER,
    OLD_ADAPTER_FOLDER,
    OLD_HEADS_FILE,
    base_record,
    check_base,
    is_adapter_model,
    remove_other_layout,
    write_adapter_extras,
)
from gausscse.model.backbone_gausscse import local_backbone


def default_target_modules(model: GaussCSEModel) -> list[str]:
    """peft's LoRA targets for the encoder's architecture (BERT: query, value)."""
    model_type = model.config.encoder_config.model_type
    if model_type not in TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING:
        raise ValueError(f"peft has no default LoRA targets for a {model_type!r} encoder: pass --lora_target_modules")
    return list(TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING[model_type])


def lora_config(
    model: GaussCSEModel, r: int, alpha: float, dropout: float, target_modules: list[str] | None = None
) -> LoraConfig:
    """LoRA on the modules named ``target_modules`` (default: peft's for the encoder) of the trained encoder only (a
    frozen μ path keeps its weights); the heads that train are saved whole. ``ValueError`` for a model with
    ``variance_layers`` (its trained part is those copied layers)."""
    if model.variance_layers is not None:
        raise ValueError(
            "--lora_r with --variance_layers: the trained part is the copied top layers already; drop --lora_r (or "
            "--variance_layers 0)"
        )
    names = "|".join(re.escape(name) for name in (target_modules or default_target_modules(model)))
    heads = ["logvar_head"] if model.config.frozen_mean else ["mean_head", "logvar_head"]
    return LoraConfig(
        r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=rf"encoder\..*\.({names})", modules_to_save=heads
    )


def apply_lora(
    model: GaussCSEModel,
    r: int,
    alpha: float,
    dropout: float,
    target_modules: list[str] | None = None,
    base_folder: Path | None = None,
) -> PeftModel:
    """``model`` as a ``PeftModel`` with LoRA adapters ([`lora_config`], checked before anything is written; the
    backbone weights frozen); ``base_folder``: where ``model`` is first saved as the base its adapter folders name
    ([`save_base`]: an unmerged run on a new model)."""
    config = lora_config(model, r, alpha, dropout, target_modules)
    if base_folder is not None:
        save_base(model, base_folder)
    return get_peft_model(model, config)


def merge_lora(model: PeftModel) -> GaussCSEModel:
    """Fold the adapters into the weights: a plain GaussCSE model again."""
    return model.merge_and_unload()


def is_lora(model) -> bool:
    """Whether ``model`` carries LoRA adapters (a ``PeftModel``, or a GaussCSE model loaded from an adapter folder)."""
    return isinstance(model, PeftModel) or is_adapter_model(model)


def save_base(model: GaussCSEModel, folder: Path) -> None:
    """Save ``model`` (before its adapters) as the base its adapter folders name; ``model.name_or_path`` becomes the
    folder's absolute path, which peft records."""
    model.save_pretrained(folder)
    model.name_or_path = local_backbone(str(folder))


def save_adapter_folder(model: PeftModel, folder: Path) -> None:
    """peft's adapter folder of ``model`` plus what every reader needs beside it: the tokenizer, the
    sentence-transformers files, the shipped code and the base's record (checked when it loads)."""
    folder, base_name = Path(folder), model.peft_config["default"].base_model_name_or_path
    try:
        config, _ = PreTrainedConfig.get_config_dict(str(base_name))
    except (OSError, ValueError, TypeError):
        config = {}
    if config.get("model_type") != GaussCSEConfig.model_type:
        raise ValueError(
            f"the adapter's base model, {base_name}, is not a saved GaussCSE model (readers load the base, then the "
            "adapter): save the model with gausscse.training.lora.save_base before apply_lora, or merge the adapters"
        )
    if Path(base_name).is_dir() and Path(base_name).resolve() == folder.resolve():
        raise ValueError(f"{folder} is the base model of this adapter: save the adapter to another folder")
    remove_other_layout(folder, adapter=True)
    model.save_pretrained(folder)
    model.get_base_model().save_tokenizer(folder)
    write_adapter_extras(folder, base_record(base_name), model.get_base_model().config)


def load_for_training(name_or_path: str | Path) -> PeftModel:
    """An adapter folder as a ``PeftModel`` whose adapters and heads train again (the base it names, loaded after
    [`check_base`]: a base whose files changed since the adapter was saved is refused, not trained on)."""
    base_name = adapter_base_of(name_or_path)
    check_base(name_or_path, base_name, {})
    base = GaussCSEModel.from_pretrained(base_name)
    return PeftModel.from_pretrained(base, str(name_or_path), is_trainable=True)


def check_conversion(old: Path, new: Path) -> None:
    """``ValueError`` naming the folder, before any work, unless ``old`` is an adapter folder of the earlier layout
    and ``new`` a folder to create (absent or empty, apart from ``old``)."""
    if not old.is_dir():
        raise ValueError(f"OLD {old}: no such folder")
    if not (old / OLD_ADAPTER_FOLDER / "adapter_config.json").is_file() or not (old / OLD_HEADS_FILE).is_file():
        if (old / "adapter_config.json").is_file():
            what = "already a standard PEFT adapter folder: nothing to convert, load it as it is"
        elif (old / "config.json").is_file():
            what = "a whole model, not an adapter folder: nothing to convert"
        else:
            what = f"not an adapter folder of the earlier layout ({OLD_ADAPTER_FOLDER}/ + {OLD_HEADS_FILE})"
        raise ValueError(f"OLD {old}: {what}")
    if new.exists() and (not new.is_dir() or any(new.iterdir())):
        raise ValueError(f"NEW {new} exists and is not an empty folder: give a new folder (nothing there is replaced)")
    check_not_nested(old, "OLD", new, "NEW", "the converted folder goes elsewhere")


def convert_adapter_folder(old: str | Path, new: str | Path) -> Path:
    """Convert an adapter folder of the earlier layout (LoRA on the encoder in ``adapter/``, the heads in
    ``heads.safetensors``) into a standard PEFT adapter folder ``new``, with its base in ``new/base-model``."""
    old, new = Path(old), Path(new)
    check_conversion(old, new)
    encoder_adapter = json.loads((old / OLD_ADAPTER_FOLDER / "adapter_config.json").read_text(encoding="utf-8"))
    config = GaussCSEConfig.from_pretrained(old)
    encoder = AutoModel.from_pretrained(encoder_adapter["base_model_name_or_path"], trust_remote_code=False)
    model = GaussCSEModel(config, encoder=encoder)
    heads = load_file(str(old / OLD_HEADS_FILE))
    missing = model.load_state_dict(heads, strict=False)
    if missing.unexpected_keys:
        raise ValueError(f"{old / OLD_HEADS_FILE}: unexpected tensors {missing.unexpected_keys[:3]}")
    model.get_tokenizer(AutoTokenizer.from_pretrained(old, trust_remote_code=False))
    save_base(model, new / BASE_FOLDER)
    targets = encoder_adapter["target_modules"]
    targets = sorted(targets) if isinstance(targets, list) else None
    peft_model = apply_lora(
        model, encoder_adapter["r"], encoder_adapter["lora_alpha"], encoder_adapter["lora_dropout"], targets
    )
    weights = load_file(str(old / OLD_ADAPTER_FOLDER / "adapter_model.safetensors"))
    renamed = {
        re.sub(r"^base_model\.model\.", "base_model.model.encoder.", key): value for key, value in weights.items()
    }
    saved_whole = tuple(f"{name}." for name in peft_model.peft_config["default"].modules_to_save)
    renamed |= {f"base_model.model.{key}": value for key, value in heads.items() if key.startswith(saved_whole)}
    result = set_peft_model_state_dict(peft_model, renamed)
    missing = [name for name in result.missing_keys if "lora_" in name]
    if result.unexpected_keys or missing:
        raise ValueError(
            f"{old}: its adapter does not fit (unexpected: {result.unexpected_keys[:3]}, missing: {missing[:3]})"
        )
    save_adapter_folder(peft_model, new)
    card = old / "README.md"
    if card.is_file():
        (new / "README.md").write_bytes(card.read_bytes())
    return new


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m gausscse.training.lora", description=convert_adapter_folder.__doc__.split(".")[0]
    )
    parser.add_argument("old", help="the adapter folder of the earlier layout (adapter/ + heads.safetensors)")
    parser.add_argument("new", help="the folder to write (the standard PEFT adapter, its base in new/base-model)")
    args = parser.parse_args(argv)
    try:
        print(convert_adapter_folder(args.old, args.new))
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")


if __name__ == "__main__":
    main()
