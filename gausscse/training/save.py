"""The final model in ``--output_dir`` itself, beside the ``checkpoint-N`` folders (weights, config and code files,
tokenizer, card, ``train_results.json``), written beside it and moved in; and its push to the Hub (model files
only)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, constants, get_token
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from peft import PeftModel
from transformers import Trainer

from gausscse.hub.model_card import FIGURE_FILE, write_model_card
from gausscse.io import first_line, move_in, remove_entry, resolved_target, staging_folder, write_atomic, write_json
from gausscse.loading import is_hub_id
from gausscse.model.adapters_gausscse import remove_other_layout
from gausscse.model.onnx_gausscse import remove_stale_graphs
from gausscse.model.utils_gausscse import moving_in

from .lora import is_lora, merge_lora
from .trainer import add_adapter_extras, check_finite_weights

FINAL_FILES_LIST = ".final-model-files.json"  # the files of the final model, for the next save and the Hub upload


def save_model_folder(
    trainer: Trainer,
    model_dir: str | Path,
    card: Mapping[str, Any],
    results: Mapping[str, Any],
    merge: bool = False,
    figure: str | Path | None = None,
) -> Path:
    """Write the final model into ``model_dir``; its other entries (``checkpoint-N``, logs) stay.

    Non-finite weights are refused first. ``trainer.save_model`` (transformers' own: weights, config and code files,
    tokenizer, ``training_args.bin``) writes the model completely into a staging folder of this save's own beside
    ``model_dir`` (a save that fails there leaves ``model_dir`` as it was); its files are then moved in by
    ``os.replace`` (each appears whole), the list of the model's files (``FINAL_FILES_LIST``) last, and the earlier
    model's files that the new one lacks are deleted. A LoRA model (``PeftModel``) is merged when ``merge`` (the
    trainer then holds the merged model), else saved as a PEFT adapter folder with what its readers need beside it.
    ``card``: the arguments of [`gausscse.hub.model_card.render_model_card`]; ``results``: ``train_results.json``;
    ``figure``: a PNG shown in the card."""
    check_finite_weights(trainer.model, "the final model")
    model_dir = resolved_target(model_dir)  # a symbolic link stays; the folder it points to is written
    with staging_folder(model_dir, f".{model_dir.name}.saving.") as staging:  # gone on any error too
        if merge and isinstance(trainer.model, PeftModel):
            trainer.model = merge_lora(trainer.model)
        model = trainer.model
        adapter = is_lora(model)
        model.get_tokenizer(trainer.processing_class)  # the model's own save writes it beside the weights too
        trainer.save_model(str(staging))
        if isinstance(model, PeftModel):  # the LoRA adapters stay unmerged: a PEFT adapter folder
            add_adapter_extras(staging, model)
        if figure is not None:
            shutil.copyfile(figure, staging / FIGURE_FILE)
        config = model.config
        write_model_card(
            staging,
            **card,
            reduction=config.similarity_reduction,
            embedding_size=config.embedding_size,
            adapter=adapter,
            figure=None if figure is None else FIGURE_FILE,
            search_kl_weight=config.search_kl_weight,
            entailment_cosine_weight=config.entailment_cosine_weight,
            entailment_threshold=config.entailment_threshold,
        )
        write_json(staging / "train_results.json", dict(results))
        written = sorted(path.name for path in staging.iterdir())
        (staging / FINAL_FILES_LIST).write_text(json.dumps(written), encoding="utf-8")
        manifest = model_dir / FINAL_FILES_LIST
        earlier = set(json.loads(manifest.read_text(encoding="utf-8"))) if manifest.is_file() else set()
        model_dir.mkdir(parents=True, exist_ok=True)
        with moving_in(model_dir) as mark:  # a save killed once files move leaves its mark: loaders refuse the mix
            move_in(staging, model_dir, [*written, FINAL_FILES_LIST], before_first=mark)
            for name in sorted(earlier - set(written)):
                remove_entry(model_dir / name)
            remove_other_layout(model_dir, adapter)  # a model saved here without the manifest, of the other layout
            remove_stale_graphs(model_dir, model)
    return model_dir


class HubPushError(ValueError):
    """``--push_to_hub`` cannot work (no repo id, no token, the Hub offline or unreachable): one line says why."""


def check_hub_push(repo_id: str | None, token: str | None = None, adapter_base: str | None = None) -> None:
    """[`HubPushError`] unless the final push can work: ``repo_id`` a valid ``user/name``; an unmerged adapter's
    base model ``adapter_base`` a Hub id; not offline; a token (``token``, ``HF_TOKEN`` or ``hf auth login``) the Hub
    accepts, with write access to the repo's namespace."""
    if not repo_id:
        raise HubPushError("--push_to_hub needs --hub_model_id <user or org>/<name>")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise HubPushError(f"--hub_model_id {repo_id!r} is not a valid Hub repo id: {error}") from None
    if adapter_base is not None and not is_hub_id(adapter_base):
        raise HubPushError(
            f"--push_to_hub: an adapter on {adapter_base}, a local base model which no one else has: add "
            "--merge_lora, or start from a GaussCSE model on the Hub"
        )
    if constants.HF_HUB_OFFLINE:
        raise HubPushError("--push_to_hub: the Hub is in offline mode (HF_HUB_OFFLINE=1); unset it or drop the flag")
    token = token or get_token()
    if not token:
        raise HubPushError("--push_to_hub: no Hub token; run `hf auth login`, set HF_TOKEN or pass --hub_token")
    try:
        account = HfApi(token=token).whoami()
    except Exception as error:  # whatever stops whoami (offline, refused, DNS, HTTP client errors) stops the push
        raise HubPushError(
            f"--push_to_hub: cannot reach the Hub or the token was refused ({first_line(error)})"
        ) from None
    if account.get("auth", {}).get("accessToken", {}).get("role") == "read":
        raise HubPushError("--push_to_hub: the Hub token is read-only; use a token with write access")
    namespaces = {account.get("name"), *(org.get("name") for org in account.get("orgs", []))}
    if "/" in repo_id and repo_id.split("/")[0] not in namespaces:
        raise HubPushError(f"--hub_model_id {repo_id}: the token's account cannot write to {repo_id.split('/')[0]!r}")


def add_final_model_file(model_dir: str | Path, name: str) -> None:
    """Count the file ``name`` a later step wrote into the final model folder among the model's files (the Hub upload
    takes it, the next save replaces it); the manifest is rewritten atomically."""
    manifest = Path(model_dir) / FINAL_FILES_LIST
    if not (Path(model_dir) / name).is_file():
        raise FileNotFoundError(f"{Path(model_dir) / name}: no such file in the model folder")
    files = json.loads(manifest.read_text(encoding="utf-8"))
    write_atomic(manifest, json.dumps(sorted({*files, name})))


def push_model_folder(
    model_dir: str | Path, repo_id: str, token: str | None = None, private: bool | None = None
) -> str:
    """Create ``repo_id`` if needed, upload the final model's files of ``model_dir`` (not its checkpoints) and return
    the commit URL."""
    files = json.loads((Path(model_dir) / FINAL_FILES_LIST).read_text(encoding="utf-8"))
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    commit = api.upload_folder(
        folder_path=str(model_dir), repo_id=repo_id, allow_patterns=files, commit_message="Upload GaussCSE model"
    )
    return str(commit)
