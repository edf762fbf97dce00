"""The final model in ``--output_dir`` itself (as every Hugging Face example script leaves it): weights + config +
code files (auto_map) + tokenizer + model card + ``train_results.json``, each file replaced atomically beside the
``checkpoint-N`` folders; and its push to the Hub (the model files only)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi

from gausscse import GaussCSEModel
from gausscse.io import write_atomic

from .lora import has_lora, merge_lora, save_adapter_model
from .model_card import write_model_card

TRAIN_RESULTS_FILE = "train_results.json"
STAGING_DIR = ".final-model.tmp"
MANIFEST_FILE = ".final-model-files.json"  # the files of the final model, for the next save and the Hub upload


def save_model_folder(
    model: GaussCSEModel,
    tokenizer: Any,
    model_dir: str | Path,
    card: Mapping[str, Any],
    results: Mapping[str, Any],
    merge: bool = False,
) -> Path:
    """Write the final model into ``model_dir`` (the output folder; other entries such as ``checkpoint-N`` stay).

    Everything is first written to a staging folder inside ``model_dir``, then each file is moved into place with
    one atomic rename, so an interrupted save never leaves a half-written file; files of an earlier final model that
    this one does not write (e.g. a LoRA adapter after a merged model) are removed. A LoRA model is merged into a
    plain GaussCSE folder when ``merge``, else saved as adapter + heads.
    ``card``: keyword arguments of [`training.model_card.render_model_card`]; ``results``: ``train_results.json``.
    """
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    staging = model_dir / STAGING_DIR
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
    written = {path.name for path in staging.iterdir()}
    manifest = model_dir / MANIFEST_FILE
    earlier = set(json.loads(manifest.read_text(encoding="utf-8"))) if manifest.is_file() else set()
    for name in sorted(earlier - written):
        stale = model_dir / name
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink(missing_ok=True)
    for name in sorted(written):
        os.replace(staging / name, model_dir / name)
    staging.rmdir()
    write_atomic(manifest, json.dumps(sorted(written)))
    return model_dir


def push_model_folder(
    model_dir: str | Path, repo_id: str, token: str | None = None, private: bool | None = None
) -> str:
    """Create ``repo_id`` if needed and upload the final model's files of ``model_dir`` (not its checkpoints);
    return the commit URL."""
    manifest = Path(model_dir) / MANIFEST_FILE
    files = json.loads(manifest.read_text(encoding="utf-8"))
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    commit = api.upload_folder(
        folder_path=str(model_dir), repo_id=repo_id, allow_patterns=files, commit_message="Upload GaussCSE model"
    )
    return str(commit)


__all__ = ["TRAIN_RESULTS_FILE", "push_model_folder", "save_model_folder"]
