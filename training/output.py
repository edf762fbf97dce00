"""The final model folder: weights + config + code files (auto_map) + tokenizer + model card + train_results.json,
written atomically, and its push to the Hub."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi

from gausscse import GaussCSEModel

from .lora import has_lora, merge_lora, save_adapter_model
from .model_card import write_model_card

TRAIN_RESULTS_FILE = "train_results.json"


def save_model_folder(
    model: GaussCSEModel,
    tokenizer: Any,
    model_dir: str | Path,
    card: Mapping[str, Any],
    results: Mapping[str, Any],
    merge: bool = False,
) -> Path:
    """Write the final model into ``model_dir`` (replacing it) via a temporary sibling folder and one rename.

    A LoRA model is merged into a plain GaussCSE folder when ``merge``, else saved as adapter + heads.
    ``card``: keyword arguments of [`training.model_card.render_model_card`]; ``results``: ``train_results.json``.
    """
    model_dir = Path(model_dir)
    staging = model_dir.with_name(f".{model_dir.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    if has_lora(model) and not merge:
        save_adapter_model(model, staging)
    else:
        if has_lora(model):
            merge_lora(model)
        model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    write_model_card(staging, **card)
    (staging / TRAIN_RESULTS_FILE).write_text(json.dumps(dict(results), indent=2, default=str), encoding="utf-8")
    if model_dir.exists():
        shutil.rmtree(model_dir)
    os.replace(staging, model_dir)
    return model_dir


def push_model_folder(
    model_dir: str | Path, repo_id: str, token: str | None = None, private: bool | None = None
) -> str:
    """Create ``repo_id`` if needed and upload exactly ``model_dir``; return the commit URL."""
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    commit = api.upload_folder(folder_path=str(model_dir), repo_id=repo_id, commit_message="Upload GaussCSE model")
    return str(commit)


__all__ = ["TRAIN_RESULTS_FILE", "push_model_folder", "save_model_folder"]
