"""The one loader of GaussCSE models (evaluation, search, the demo, continued training): ``load_model(path_or_id)``
takes training outputs, ``checkpoint-N`` folders, LoRA outputs merged or not and Hub ids, with the installed
package's code (a folder's own ``*.py`` never run) and the tokenizer saved beside the weights."""

from __future__ import annotations

from pathlib import Path

import torch
from huggingface_hub import is_offline_mode, try_to_load_from_cache
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from safetensors import SafetensorError
from transformers import AutoTokenizer, PreTrainedConfig
from transformers.utils import ADAPTER_CONFIG_NAME, CONFIG_NAME, SAFE_WEIGHTS_NAME
from transformers.utils.peft_utils import find_adapter_config_file

from gausscse.io import json_value
from gausscse.model import GaussCSEModel
from gausscse.model.adapters_gausscse import BASE_FOLDER

CHECKPOINT_PREFIX = "checkpoint-"  # Trainer's checkpoint-N folders inside an output folder
# Written into checkpoint-N last, when everything else of it is on disk: a checkpoint without it was cut short.
CHECKPOINT_COMPLETE = "checkpoint-complete.json"


class ModelLoadError(ValueError):
    """No GaussCSE model could be loaded from what was given; the message says what to do."""


def is_complete_checkpoint(folder: str | Path) -> bool:
    """Whether ``folder`` is a checkpoint whose save finished (it holds ``CHECKPOINT_COMPLETE``)."""
    return (Path(folder) / CHECKPOINT_COMPLETE).is_file()


def latest_complete_checkpoint(output_dir: str | Path) -> Path | None:
    """The ``checkpoint-N`` of ``output_dir`` with the largest N whose save finished."""
    found = [
        (int(path.name.removeprefix(CHECKPOINT_PREFIX)), path)
        for path in Path(output_dir).glob(f"{CHECKPOINT_PREFIX}*")
        if path.name.removeprefix(CHECKPOINT_PREFIX).isdigit() and is_complete_checkpoint(path)
    ]
    return max(found)[1] if found else None


def valid_repo_id(name: str) -> bool:
    """Whether ``name`` is spelled as a Hub repository id (``huggingface_hub``'s ``validate_repo_id``)."""
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def is_hub_id(name: str) -> bool:
    """Whether ``name`` can be a Hub repository id (a local folder's path is not one)."""
    return not Path(name).exists() and valid_repo_id(name)


def adapter_config_of(name_or_path: str | Path, **hub_kwargs) -> dict | None:
    """The ``adapter_config.json`` of a PEFT adapter folder or Hub repo; ``None`` for anything else."""
    found = find_adapter_config_file(str(name_or_path), **hub_kwargs)
    return None if found is None else json_value(Path(found).read_bytes(), found)


def adapter_base_of(name_or_path: str | Path, **hub_kwargs) -> str | None:
    """The base model a PEFT adapter folder or Hub repo names (``base_model_name_or_path``); ``None`` for anything
    else."""
    return (adapter_config_of(name_or_path, **hub_kwargs) or {}).get("base_model_name_or_path")


def is_adapter(name_or_path: str | Path) -> bool:
    """Whether ``name_or_path`` is a PEFT adapter folder or Hub repo (``False`` where it cannot be reached)."""
    try:
        return adapter_base_of(name_or_path) is not None
    except (OSError, ValueError):
        return False


def is_same_folder(one: str | Path, other: str | Path) -> bool:
    """Whether two names are one existing local folder."""
    return Path(one).is_dir() and Path(other).is_dir() and Path(one).resolve() == Path(other).resolve()


def check_model_reference(name_or_path: str | Path) -> None:
    """A clear [`ModelLoadError`] for something that is neither a model folder nor a possible Hub id."""
    path = Path(name_or_path)
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"{name_or_path}: a file, not a model folder (give the folder that holds config.json)")
        if not (path / "config.json").is_file() and not (path / ADAPTER_CONFIG_NAME).is_file():
            latest = latest_complete_checkpoint(path)  # a run that never finished
            hint = f"; it holds checkpoints: load the latest complete one, {latest}" if latest else ""
            raise ModelLoadError(f"{name_or_path}: no config.json in this folder, so no model{hint}")
    else:
        try:
            validate_repo_id(str(name_or_path))
        except HFValidationError as error:
            raise ModelLoadError(f"{name_or_path}: no such folder, and not a Hub repo id ({error})") from None
        if is_offline_mode() and not isinstance(try_to_load_from_cache(str(name_or_path), CONFIG_NAME), str):
            raise ModelLoadError(
                f"{name_or_path}: no such folder, and the Hub is offline (HF_HUB_OFFLINE=1) with no copy of that repo "
                f"in the Hugging Face cache: pass a local folder, or download it where the Hub is reachable (hf "
                f"download {name_or_path})"
            )


def load_model(
    name_or_path: str | Path,
    revision: str | None = None,
    device: str | torch.device | None = None,
    *,
    token: str | bool | None = None,
    dtype: torch.dtype | None = None,
) -> GaussCSEModel:
    """A GaussCSE model, in eval mode, with its tokenizer (when one was saved), from a folder or Hub id.

    ``revision``: a Hub branch, tag or commit (pin one to reproduce); ``device``: where to put it (default: the
    CPU); ``token``: for a private repo; ``dtype``: of the weights (default: as saved). Raises [`ModelLoadError`]
    when nothing loads there or the model is not a GaussCSE model (saying what to do instead)."""
    check_model_reference(name_or_path)
    hub_kwargs = {key: value for key, value in (("revision", revision), ("token", token)) if value is not None}
    try:  # an adapter folder: its base model's config
        adapter_config = adapter_config_of(name_or_path, **hub_kwargs)
        base = None if adapter_config is None else adapter_config.get("base_model_name_or_path")
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{name_or_path}: its adapter_config.json does not load ({error})") from error
    if adapter_config is not None and (not isinstance(base, str) or is_same_folder(base, name_or_path)):
        raise ModelLoadError(
            f"{name_or_path} is a LoRA adapter whose base model ({ADAPTER_CONFIG_NAME}'s base_model_name_or_path) is "
            f"{'this folder itself' if base else 'not named'}: point it at the GaussCSE model the adapter is on"
        )
    if base is not None and is_adapter(base):
        raise ModelLoadError(
            f"{name_or_path} is a LoRA adapter on the base model {base!r}, itself an adapter: point "
            f"{ADAPTER_CONFIG_NAME}'s base_model_name_or_path at the GaussCSE model the adapter is on"
        )
    own_base = Path(name_or_path) / BASE_FOLDER  # where a run keeps the base it made: beside the adapter
    moved = base is not None and not Path(base).exists() and not valid_repo_id(base) and own_base.is_dir()
    if moved:  # the adapter folder was moved since training: the base it names is gone, its own copy is here
        base = str(own_base)
    try:  # the config as JSON: AutoConfig would offer to run the code of a folder whose model type it does not know
        config, _ = PreTrainedConfig.get_config_dict(str(base or name_or_path), **({} if base else hub_kwargs))
    except (OSError, ValueError) as error:
        if base is not None:
            raise ModelLoadError(
                f"{name_or_path} is a LoRA adapter on the base model {base!r}, which cannot be loaded here ({error}). "
                f"Point {ADAPTER_CONFIG_NAME}'s base_model_name_or_path at it, or share the model merged (train with "
                "--merge_lora)"
            ) from error
        raise ModelLoadError(f"{name_or_path}: no loadable model config ({error})") from error
    model_type = config.get("model_type")
    if model_type != GaussCSEModel.config_class.model_type:
        what = f"a LoRA adapter on {base}, " if base else ""
        raise ModelLoadError(
            f"{name_or_path} is {what}a {model_type!r} model, not a GaussCSE model: start one from it with "
            "GaussCSEModel.from_backbone or gausscse-train --model_name_or_path"
        )
    try:
        weights = {"dtype": dtype} if dtype else {}
        if moved:  # its own base, then the adapter (checked against the base's record, its settings applied)
            model = GaussCSEModel.from_pretrained(base, **weights)
            model.load_adapter(str(name_or_path))
        else:
            model = GaussCSEModel.from_pretrained(str(name_or_path), **hub_kwargs, **weights)
    except SafetensorError as error:  # says neither which file nor why
        raise ModelLoadError(
            f"{name_or_path}: its weights file ({SAFE_WEIGHTS_NAME} or a shard) is damaged or cut short ({error}); "
            "save or download the model again"
        ) from error
    except (OSError, ValueError, ImportError) as error:
        raise ModelLoadError(f"{name_or_path}: the GaussCSE model does not load ({error})") from error
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            str(name_or_path), config=model.config, trust_remote_code=False, **hub_kwargs
        )
        model.get_tokenizer(tokenizer)
    except (OSError, ValueError):
        pass  # no tokenizer saved with it: encode() says so and takes tokenizer=...
    if device is not None:
        model.to(device)
    return model.eval()
