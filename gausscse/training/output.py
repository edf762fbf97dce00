"""The final model in ``--output_dir`` itself (as every Hugging Face example script leaves it): weights + config +
code files (auto_map) + tokenizer + model card + ``train_results.json`` beside the ``checkpoint-N`` folders, the
whole folder swapped atomically; and its push to the Hub (the model files only)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi

from gausscse import GaussCSEModel
from gausscse.io import link_tree, replace_folder

from .lora import has_lora, merge_lora, save_adapter_model
from .model_card import FIGURE_FILE, write_model_card
from .trainer import check_finite_weights

TRAIN_RESULTS_FILE = "train_results.json"
STAGING_SUFFIX = ".saving"  # the new output folder is built at .<name>.saving beside it
MANIFEST_FILE = ".final-model-files.json"  # the files of the final model, for the next save and the Hub upload


def save_model_folder(
    model: GaussCSEModel,
    tokenizer: Any,
    model_dir: str | Path,
    card: Mapping[str, Any],
    results: Mapping[str, Any],
    merge: bool = False,
    figure: str | Path | None = None,
) -> Path:
    """Write the final model into ``model_dir`` (the output folder; other entries such as ``checkpoint-N`` stay).

    Non-finite weights are refused before anything is written. The new folder is built beside ``model_dir``: the
    model files, plus hard links to everything else already there (checkpoints, logs; not the earlier final model's
    files), then swapped with ``model_dir`` in one atomic step (``renameat2``), so whatever moment the process dies,
    ``model_dir`` holds the whole old or the whole new model. Where the system cannot swap folders atomically, each
    file is moved into place with its own atomic rename instead. A LoRA model is merged into a plain GaussCSE folder
    when ``merge``, else saved as adapter + heads.
    ``card``: keyword arguments of [`gausscse.training.model_card.render_model_card`]; ``results``:
    ``train_results.json``; ``figure``: a PNG of the final evaluation, saved as ``FIGURE_FILE`` and shown in the card.
    """
    check_finite_weights(model, "the final model")
    model_dir = Path(model_dir)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = model_dir.parent / f".{model_dir.name}{STAGING_SUFFIX}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    adapter = has_lora(model) and not merge
    if adapter:
        save_adapter_model(model, staging)
    else:
        if has_lora(model):
            merge_lora(model)
        model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if figure is not None:
        shutil.copyfile(figure, staging / FIGURE_FILE)
    write_model_card(
        staging,
        **card,
        reduction=model.config.similarity_reduction,
        embedding_size=model.config.embedding_size,
        adapter=adapter,
        figure=None if figure is None else FIGURE_FILE,
    )
    (staging / TRAIN_RESULTS_FILE).write_text(json.dumps(dict(results), indent=2, default=str), encoding="utf-8")
    written = sorted(path.name for path in staging.iterdir())
    (staging / MANIFEST_FILE).write_text(json.dumps(written), encoding="utf-8")
    manifest = model_dir / MANIFEST_FILE
    earlier = set(json.loads(manifest.read_text(encoding="utf-8"))) if manifest.is_file() else set()
    if model_dir.is_dir():
        for entry in model_dir.iterdir():
            if entry.name not in earlier | set(written) | {MANIFEST_FILE}:
                link_tree(entry, staging / entry.name)
    if not replace_folder(staging, model_dir):
        replace_files(staging, model_dir, written, earlier)
    return model_dir


def replace_files(staging: Path, model_dir: Path, written: list[str], earlier: set[str]) -> None:
    """The fallback of [`save_model_folder`]: move each new file into ``model_dir`` with its own atomic rename,
    remove the earlier model's files the new one lacks, write the manifest last."""
    for name in sorted(earlier - set(written)):
        stale = model_dir / name
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink(missing_ok=True)
    for name in written:
        os.replace(staging / name, model_dir / name)
    os.replace(staging / MANIFEST_FILE, model_dir / MANIFEST_FILE)
    shutil.rmtree(staging)


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
