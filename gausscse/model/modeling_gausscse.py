"""GaussCSE: sentences as diagonal Gaussians (Yoda et al., EACL 2024). Ships with the weights as Hub custom code.

encoder → pooled vector v ([CLS] / ``<s>`` or mean) → μ = tanh(W_μ v + b_μ), log σ² = W_σ v + b_σ (clamped).
With ``frozen_mean`` μ comes from a second, frozen copy of the encoder it started from (two paths); with
``variance_layers`` = k as well, the encoder itself is the frozen μ path and log σ² comes from trained copies of its
top k layers run on its own lower states (one shared trunk).
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import EntryNotFoundError
from huggingface_hub.utils.sha import sha_fileobj
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel
from transformers import initialization as init
from transformers.dynamic_module_utils import custom_object_save
from transformers.models.auto.modeling_auto import MODEL_MAPPING
from transformers.utils import (
    CONFIG_NAME,
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
    ModelOutput,
    cached_file,
    logging,
)

try:  # only an adapter (LoRA) folder needs peft; in a try block, so transformers' import check does not require it
    from peft import PeftConfig, PeftModel, get_peft_model, set_peft_model_state_dict
except ImportError:
    PeftConfig = PeftModel = get_peft_model = set_peft_model_state_dict = None

from .configuration_gausscse import POOLINGS, GaussCSEConfig, model_fingerprint
from .gaussian import GaussianEmbeddings, paired_similarity, similarity_matrix
from .onnx_gausscse import ONNX_FILE, OnnxGaussianEncoder, OnnxSessions, remove_stale_graphs

# The poolings of token states into one vector: a GaussCSE model's own (its config's POOLINGS) and the max over tokens,
# which only the point-encoder baselines use (gausscse-evaluate --baseline pools as the sentence-transformers model
# does). A GaussCSE model never max-pools: the paper pools [CLS], and pool_packed pools cls and mean only.
TOKEN_POOLINGS = (*POOLINGS, "max")
# The encoders whose position ids GaussCSE knows, by config.model_type → where a sentence's position ids start: "zero"
# (BERT) or "after_padding", at pad_token_id + 1 (RoBERTa and the encoders built on its embeddings: XLM-R, CamemBERT).
# The one table of both readers: position_offset (so the truncation limit, max_position_embeddings − offset) and
# packing (gausscse.training.batch), which writes each packed sentence's position ids itself and so packs only the
# encoders listed here, not relative (DeBERTa), rotary (ModernBERT) or unknown position schemes. Each entry is tested
# packed = padded (tests/test_packing.py); an encoder not listed starts at 0 for the limit.
ENCODER_POSITIONS = {
    "bert": "zero",
    "roberta": "after_padding",
    "xlm-roberta": "after_padding",
    "camembert": "after_padding",
}
FALLBACK_MAX_LENGTH = 512  # for an encoder that states no limit
# The truncation default of every entry point that encodes sentences: encode(), the sentence-transformers module,
# gausscse-evaluate (and its point-encoder baselines), the SNLI-dev evaluator of training (--eval_max_seq_length),
# gausscse-search. None = all the encoder takes, capped at its limit (resolve_max_length). Training itself truncates
# at --max_seq_length (gausscse.data.tokenize.TRAIN_MAX_LENGTH, the paper's 32) instead.
DEFAULT_MAX_LENGTH: int | None = None
# How from_backbone sets up the heads: "paper" = [CLS], tanh, random heads (the paper and its released code);
# "backbone" = the backbone's own sentence embedding (its pooling and normalisation), an identity μ head without
# activation, a neutral (zero) log-variance head and the frozen μ path with log σ² from its top layer's copy;
# "auto" = "backbone" for a sentence-transformers model (a folder or Hub repo with modules.json and
# 1_Pooling/config.json), "paper" for any other encoder.
STARTS = ("auto", "paper", "backbone")
# The "backbone" start's log σ² path: a trained copy of the backbone's top layer on the frozen trunk (one forward pass
# plus one layer), what the one-pass study chose on dev data (results/ONEPASS.md); 0 = two full paths.
BACKBONE_VARIANCE_LAYERS = 1
# An adapter folder (a model whose encoder carries LoRA adapters, saved unmerged): the two heads in HEADS_FILE, the
# GaussCSE config + code, and peft's adapter_config.json and adapter_model.safetensors in ADAPTER_FOLDER — not at the
# top, where transformers' AutoModel would take the folder for a bare peft adapter and load only its backbone. The
# backbone itself is named by adapter_config.json's base_model_name_or_path (a Hub id, or a local folder's absolute
# path), and identified by BACKBONE_FILE beside it: its name and the SHA-256 of its config and weight files, checked
# when the folder loads. A folder holds one layout: each save removes what a save of the other layout left.
ADAPTER_FOLDER = "adapter"
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
BACKBONE_FILE = "backbone.json"
HEADS_FILE = "heads.safetensors"
HEAD_NAMES = ("mean_head", "logvar_head")
HUB_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "subfolder", "force_download")
# What runs the forward pass of encode(): PyTorch, or ONNX Runtime on the folder's exported graph (onnx_gausscse.py)
ENCODE_BACKENDS = ("torch", "onnx")
# save_pretrained(..., push_to_hub=True, ...): the arguments it hands to push_to_hub once the folder is written
PUSH_ARGUMENTS = ("repo_id", "token", "private", "commit_message", "revision", "create_pr", "commit_description")

logger = logging.get_logger(__name__)


def pool_tokens(last_hidden_state: torch.Tensor, attention_mask: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """``(B, L, h)`` token states → ``(B, h)``: the first token ``h[:, 0]`` (``cls``: [CLS] / ``<s>``), the masked
    mean Σ_t m_t h_t / Σ_t m_t (``mean``) or the masked max over tokens (``max``); no mask means every token."""
    if pooling not in TOKEN_POOLINGS:
        raise ValueError(f"pooling must be one of {TOKEN_POOLINGS}, got {pooling!r}")
    if pooling == "cls":
        return last_hidden_state[:, 0]
    if attention_mask is None:
        attention_mask = last_hidden_state.new_ones(last_hidden_state.shape[:2])
    mask = attention_mask.unsqueeze(-1).to(last_hidden_state.dtype)
    if pooling == "max":
        return last_hidden_state.masked_fill(mask == 0, torch.finfo(last_hidden_state.dtype).min).max(dim=1).values
    return (last_hidden_state * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)


def _read_backbone_file(name_or_path: str, filename: str, hub_kwargs: dict) -> dict | list | None:
    """A JSON file of a local folder or Hub repo, ``None`` where it has none (or the Hub cannot be reached)."""
    if Path(name_or_path).is_dir():
        path = Path(name_or_path) / filename
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    try:
        downloaded = hf_hub_download(str(name_or_path), filename, **hub_kwargs)
    except (OSError, EntryNotFoundError, ValueError):  # no such file, no such repo, offline
        return None
    return json.loads(Path(downloaded).read_text(encoding="utf-8"))


def sentence_transformers_pooling(name_or_path: str, hub_kwargs: dict | None = None) -> tuple[str, bool] | None:
    """``(pooling, normalize)`` of a sentence-transformers model: the mode of its ``1_Pooling/config.json``
    (``cls``/``mean``/``max``) and whether ``modules.json`` lists a ``Normalize`` module; ``None`` when
    ``name_or_path`` (a folder or Hub id) is not a sentence-transformers model or pools otherwise (e.g.
    ``mean_sqrt_len``). ``hub_kwargs``: ``revision``, ``token``, ... for ``hf_hub_download``."""
    hub_kwargs = {key: value for key, value in (hub_kwargs or {}).items() if key in ("revision", "token", "cache_dir")}
    modules = _read_backbone_file(name_or_path, "modules.json", hub_kwargs)
    if not isinstance(modules, list):
        return None
    pooling_modules = [module for module in modules if str(module.get("type", "")).endswith(".Pooling")]
    if len(pooling_modules) != 1:
        return None
    pooling_config = _read_backbone_file(
        name_or_path, f"{pooling_modules[0].get('path', '1_Pooling')}/config.json", hub_kwargs
    )
    if not isinstance(pooling_config, dict):
        return None
    mode = pooling_config.get("pooling_mode")  # sentence-transformers ≥ 6 writes one field
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    if mode is not None:
        modes = [mode] if mode in TOKEN_POOLINGS else []
    else:  # earlier versions: one boolean per mode
        flags = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens"}
        modes = [mode for mode, key in flags.items() if pooling_config.get(key)]
        if sum(1 for key, on in pooling_config.items() if key.startswith("pooling_mode_") and on) != len(modes):
            return None  # a mode GaussCSE does not have (mean_sqrt_len, weighted mean, ...) is on
    if len(modes) != 1:  # none, or several concatenated
        return None
    normalize = any(str(module.get("type", "")).endswith(".Normalize") for module in modules)
    return modes[0], normalize


def pad_token_ids(token_ids: Sequence[Sequence[int]], pad_token_id: int, token_type_ids: bool) -> dict:
    """Right-pad token-id lists into ``input_ids``/``attention_mask`` (and all-zero ``token_type_ids``) tensors of
    the longest length, as the tokenizer's own padding would."""
    length = max(len(ids) for ids in token_ids)
    input_ids = torch.full((len(token_ids), length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
    features = {"input_ids": input_ids, "attention_mask": attention_mask}
    if token_type_ids:
        features["token_type_ids"] = torch.zeros_like(input_ids)
    return features


def position_offset(encoder_config) -> int:
    """The first position id of a sentence (``ENCODER_POSITIONS``): ``pad_token_id + 1`` for RoBERTa-style encoders,
    else 0."""
    after_padding = ENCODER_POSITIONS.get(encoder_config.model_type) == "after_padding"
    return encoder_config.pad_token_id + 1 if after_padding else 0


def resolve_max_length(tokenizer, encoder_config=None, requested: int | None = None) -> int:
    """The one truncation policy: ``requested`` tokens (default: all the encoder takes), capped at the encoder's
    limit = min(tokenizer.model_max_length, max_position_embeddings − position offset)."""
    limits = []
    if tokenizer is not None and tokenizer.model_max_length < 1_000_000:  # "no limit" is a huge sentinel
        limits.append(int(tokenizer.model_max_length))
    if getattr(encoder_config, "max_position_embeddings", None):
        limits.append(encoder_config.max_position_embeddings - position_offset(encoder_config))
    limit = min(limits) if limits else FALLBACK_MAX_LENGTH
    if requested is None:
        return limit
    if not isinstance(requested, int) or requested < 1:
        raise ValueError(f"max_length must be a positive integer, got {requested!r}")
    return min(requested, limit)


@dataclass
class GaussCSEOutput(ModelOutput):
    """Output of [`GaussCSEModel`].

    Args:
        mu (`torch.FloatTensor` of shape `(batch_size, embedding_size)`): means μ of the Gaussians.
        logvar (`torch.FloatTensor` of shape `(batch_size, embedding_size)`): log-variances log σ².
        pooled_output (`torch.FloatTensor` of shape `(batch_size, hidden_size)`): the pooled encoder vector v (of the
            trained encoder; with ``frozen_mean`` μ comes from the frozen path's own v).
        last_hidden_state (`torch.FloatTensor` of shape `(batch_size, seq_len, hidden_size)`): encoder output.
        hidden_states, attentions: as the encoder returns them when asked for.
    """

    mu: torch.FloatTensor | None = None
    logvar: torch.FloatTensor | None = None
    pooled_output: torch.FloatTensor | None = None
    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None

    @property
    def embeddings(self) -> GaussianEmbeddings:
        """μ and log σ² as a [`GaussianEmbeddings`]."""
        return GaussianEmbeddings(self.mu, self.logvar)


@dataclass
class EntailmentDirection:
    """Per pair (a_i, b_i): does a_i entail b_i rather than the reverse?

    Attributes:
        by_similarity: sim(b_i‖a_i) > sim(a_i‖b_i) — the entailed side fits inside the entailing one.
        by_variance: Σlog σ²(a_i) > Σlog σ²(b_i) — the entailing side is the broader Gaussian.
        sim_ba: sim(b_i‖a_i), the score of "a entails b".
        sim_ab: sim(a_i‖b_i), the score of "b entails a".
    """

    by_similarity: torch.Tensor
    by_variance: torch.Tensor
    sim_ba: torch.Tensor
    sim_ab: torch.Tensor


def has_adapter(encoder: nn.Module) -> bool:
    """Whether ``encoder`` is a peft ``PeftModel`` (LoRA adapters on the backbone, not merged)."""
    return PeftModel is not None and isinstance(encoder, PeftModel)


def adapter_heads_file(name_or_path: str | Path, hub_kwargs: dict | None = None) -> str | None:
    """The local path of ``HEADS_FILE`` when ``name_or_path`` (folder or Hub id) is an adapter folder, else ``None``."""
    hub_kwargs = {key: value for key, value in (hub_kwargs or {}).items() if key in HUB_KWARGS}
    return cached_file(
        str(name_or_path),
        HEADS_FILE,
        **hub_kwargs,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
    )


def adapter_file(name_or_path: str | Path, name: str, hub_kwargs: dict, required: bool = True) -> Path | None:
    """The local path of the file ``name`` in the ``ADAPTER_FOLDER`` of an adapter folder or Hub repo (fetched into the
    Hub cache), ``None`` where there is none and it is not ``required``. A local folder without a required file is a
    ``FileNotFoundError`` naming the file (transformers would point at a Hub URL made of the local path)."""
    subfolder = "/".join(part for part in (hub_kwargs.get("subfolder", ""), ADAPTER_FOLDER) if part)
    if Path(name_or_path).is_dir():
        path = Path(name_or_path) / subfolder / name
        if required and not path.is_file():
            raise FileNotFoundError(
                f"{name_or_path} is an adapter folder ({HEADS_FILE}) that lacks {subfolder}/{name}: copy the whole "
                f"folder, {ADAPTER_FOLDER}/ included"
            )
        return path if path.is_file() else None
    hub_kwargs = {**hub_kwargs, "subfolder": subfolder}
    found = cached_file(str(name_or_path), name, **hub_kwargs, _raise_exceptions_for_missing_entries=required)
    return None if found is None else Path(found)


def local_backbone(name_or_path: str | None) -> str | None:
    """A backbone's name as an adapter folder records it: a local folder as its absolute path, symbolic links resolved
    (the same folder from every working directory); a Hub id as it is."""
    return str(Path(name_or_path).resolve()) if name_or_path and Path(name_or_path).is_dir() else name_or_path


def backbone_weight_files(folder: Path) -> list[str]:
    """The weight files transformers loads from a backbone folder: ``model.safetensors`` or the shards its index lists,
    else ``pytorch_model.bin`` or its shards."""
    for single, index in ((SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME), (WEIGHTS_NAME, WEIGHTS_INDEX_NAME)):
        if (folder / single).is_file():
            return [single]
        if (folder / index).is_file():
            return sorted(set(json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"].values()))
    return []


def backbone_record(name_or_path: str, hub_kwargs: dict | None = None) -> dict:
    """The identity of a backbone (a local folder or Hub id, whose files are found as transformers finds them):
    ``{"base_model_name_or_path": name_or_path, "sha256": {file: SHA-256}}`` over its ``config.json`` and weight files
    ([`backbone_weight_files`]). An adapter folder keeps it as ``BACKBONE_FILE``."""
    hub_kwargs = {key: value for key, value in (hub_kwargs or {}).items() if key in HUB_KWARGS}
    folder = Path(cached_file(str(name_or_path), CONFIG_NAME, **hub_kwargs)).parent
    digests = {}
    for name in (CONFIG_NAME, *backbone_weight_files(folder)):
        with open(folder / name, "rb") as file:
            digests[name] = sha_fileobj(file).hex()
    return {"base_model_name_or_path": str(name_or_path), "sha256": digests}


def check_backbone(adapter_folder: str | Path, recorded: dict, found: dict) -> None:
    """Refuse a backbone whose [`backbone_record`] ``found`` differs from the one the adapter folder recorded (its
    ``BACKBONE_FILE``): the adapter would sit on weights it was not trained with."""
    differing = sorted(
        name
        for name in {*recorded["sha256"], *found["sha256"]}
        if recorded["sha256"].get(name) != found["sha256"].get(name)
    )
    if differing:
        raise ValueError(
            f"{adapter_folder}: its adapter was trained on the backbone {recorded['base_model_name_or_path']} (its "
            f"{ADAPTER_FOLDER}/{BACKBONE_FILE}), and the backbone found, {found['base_model_name_or_path']}, is not "
            f"that one: its {', '.join(differing)} differ by SHA-256. Point {ADAPTER_FOLDER}/{ADAPTER_CONFIG_FILE}'s "
            "base_model_name_or_path at the backbone the adapter was trained on, unchanged"
        )


def check_adapter_base(adapter_folder: str | Path, base: str | None, hub_kwargs: dict) -> None:
    """Refuse an adapter whose backbone ``base`` is a GaussCSE model — the adapter folder itself (a LoRA run saved into
    its own backbone), another adapter folder, a full model — rather than an encoder: loading it would load this
    folder again, endlessly, or a cycle of adapter folders."""
    base_config = _read_backbone_file(base, CONFIG_NAME, hub_kwargs) if base else None
    if isinstance(base_config, dict) and base_config.get("model_type") == GaussCSEConfig.model_type:
        itself = Path(base).is_dir() and Path(base).resolve() == Path(adapter_folder).resolve()
        raise ValueError(
            f"{adapter_folder}: the backbone its adapter names ({ADAPTER_FOLDER}/{ADAPTER_CONFIG_FILE} "
            f"base_model_name_or_path) is {'this folder itself' if itself else f'the GaussCSE model {base}'}, not an "
            "encoder: an adapter folder's backbone is the plain encoder its adapter was trained on"
        )


def remove_other_layout(folder: Path, adapter: bool) -> None:
    """Clear ``folder`` of the other layout before a save writes its own (``adapter``: an adapter folder, else full
    weights), so that it holds one model: the full weights (``model*.safetensors``, the sharded index) before an adapter
    folder; ``HEADS_FILE`` and ``ADAPTER_FOLDER`` before full weights (loading takes a folder with heads for an adapter
    folder)."""
    if adapter:
        for path in [*folder.glob("model*.safetensors"), folder / SAFE_WEIGHTS_INDEX_NAME]:
            path.unlink(missing_ok=True)
    else:
        (folder / HEADS_FILE).unlink(missing_ok=True)
        shutil.rmtree(folder / ADAPTER_FOLDER, ignore_errors=True)


def check_loading_info(name_or_path: str | Path, info: dict) -> None:
    """Refuse a checkpoint whose weights do not fit the model: ``transformers`` would only log the missing or
    unexpected names and start those weights at random, which scores as a different model (silent corruption)."""
    problems = {
        kind: sorted(str(name) for name in info.get(kind) or ())
        for kind in ("missing_keys", "unexpected_keys", "mismatched_keys")
    }
    problems = {kind: names for kind, names in problems.items() if names}
    if problems:
        listed = "; ".join(f"{kind.replace('_', ' ')}: {', '.join(names[:3])}" for kind, names in problems.items())
        raise ValueError(
            f"{name_or_path}: its weights do not fit a GaussCSE model of its config ({listed}); loading it would "
            "start those weights at random. A folder written by an earlier gausscse (a LoRA model saved unmerged "
            "wrote encoder.base_model.model.* names) or edited by hand: load it with the version that wrote it, merge "
            "or save it again there"
        )


def share_weight_files(weight_files: Sequence[Path], like: Path) -> None:
    """Give ``weight_files`` the mode of ``like`` (a file the same save wrote with ``open``: 0644 under the usual umask
    022): safetensors writes its files 0600, readable by their owner only."""
    mode = like.stat().st_mode & 0o777
    for path in weight_files:
        path.chmod(mode)


def _encoder_init_kwargs(config) -> dict:
    """``add_pooling_layer=False`` where the encoder class takes it: the paper pools [CLS] itself, and an
    unused pooler would leave parameters without gradient (DDP's unused-parameter error)."""
    encoder_class = MODEL_MAPPING.get(type(config), None)
    if encoder_class is not None and "add_pooling_layer" in inspect.signature(encoder_class.__init__).parameters:
        return {"add_pooling_layer": False}
    return {}


def encoder_layers_path(encoder: nn.Module) -> str:
    """Where the encoder keeps its stack of transformer layers: the name of its first ``nn.ModuleList`` of
    ``num_hidden_layers`` modules (``"encoder.layer"`` of BERT, RoBERTa, MiniLM, DeBERTa, ...)."""
    count = getattr(encoder.config, "num_hidden_layers", None)
    for name, module in encoder.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return name
    raise ValueError(f"{type(encoder).__name__} has no list of {count} layers: variance_layers cannot copy its top")


def encoder_layers(encoder: nn.Module) -> nn.ModuleList:
    """The encoder's stack of transformer layers ([`encoder_layers_path`])."""
    return encoder.get_submodule(encoder_layers_path(encoder))


def _check_sentences(argument: str, sentences) -> list[str]:
    if isinstance(sentences, str) or not isinstance(sentences, Sequence):
        raise TypeError(f"{argument} must be a list of strings, got {type(sentences).__name__}")
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"{argument}[{index}] must be a string, got {type(sentence).__name__}: {sentence!r}")
    return list(sentences)


class GaussCSEPreTrainedModel(PreTrainedModel):
    config_class = GaussCSEConfig
    base_model_prefix = "gausscse"
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Fresh heads: weights N(0, initializer_range²), biases zero (σ² starts near 1); with
        ``head_init="identity"`` the μ head is the identity map and every σ² starts at 1/d (log-variance weights
        zero, bias −log d): then KL(a‖b)/d = ‖μ_a − μ_b‖²/2, which is 1 − cos(μ_a, μ_b) for unit μ, so the untrained
        mean_kl similarity is 1/(2 − cos), a function of the backbone's cosine alone."""
        if not isinstance(module, nn.Linear):
            return
        identity = self.config.head_init == "identity"
        if identity and module is getattr(self, "mean_head", None):
            init.eye_(module.weight)
            init.zeros_(module.bias)
        elif identity and module is getattr(self, "logvar_head", None):
            init.zeros_(module.weight)
            init.constant_(module.bias, -math.log(self.config.embedding_size))
        else:
            std = getattr(self.config.encoder_config, "initializer_range", 0.02)
            init.normal_(module.weight, mean=0.0, std=std)
            init.zeros_(module.bias)


class GaussCSEModel(GaussCSEPreTrainedModel):
    """An encoder with a mean head and a log-variance head: each sentence becomes N(μ, diag σ²).

    Load a trained model with ``AutoModel.from_pretrained(path_or_hub_id, trust_remote_code=True)`` or start a
    new one from any pre-trained encoder with [`GaussCSEModel.from_backbone`].

    Example:

    ```python
    >>> model = AutoModel.from_pretrained("path/to/gausscse", trust_remote_code=True)
    >>> model.entailment_score(["A man plays a guitar on stage."], ["A man plays music."])
    ```
    """

    def __init__(
        self,
        config: GaussCSEConfig,
        encoder: PreTrainedModel | None = None,
        mean_encoder: PreTrainedModel | None = None,
    ):
        super().__init__(config)
        self.encoder = encoder if encoder is not None else self._build_encoder(config.encoder_config)
        self.mean_encoder = None
        self.variance_layers = None
        if config.variance_layers:  # one trunk: the encoder is the frozen μ path, log σ² from copies of its top
            if mean_encoder is not None:
                raise ValueError("mean_encoder is for two paths; with variance_layers the encoder itself gives μ")
            self._layers_path = encoder_layers_path(self.encoder)  # found once: forward looks it up by name
            top = self.encoder.get_submodule(self._layers_path)[-config.variance_layers :]
            self.variance_layers = nn.ModuleList(copy.deepcopy(layer) for layer in top)
        elif config.frozen_mean and mean_encoder is not None:
            self.mean_encoder = mean_encoder
        elif config.frozen_mean:  # a copy of the encoder given (it starts where μ stays), else built to be loaded
            self.mean_encoder = (
                copy.deepcopy(encoder) if encoder is not None else self._build_encoder(config.encoder_config)
            )
        elif mean_encoder is not None:
            raise ValueError("mean_encoder is only used with frozen_mean=True")
        hidden_size = config.encoder_config.hidden_size
        self.mean_head = nn.Linear(hidden_size, config.embedding_size)
        self.logvar_head = nn.Linear(hidden_size, config.embedding_size)
        self._tokenizer = None
        # The backbone the encoder was loaded from ([`backbone_record`]; from_backbone or an adapter folder), which an
        # adapter folder saved from this model records; None for an encoder built from a config or a GaussCSE folder.
        self.backbone_record: dict | None = None
        self._onnx_encoders = OnnxSessions()  # a copy of the model starts with none
        self.post_init()
        self.freeze_mean_path()

    def freeze_mean_path(self) -> None:
        """With ``frozen_mean``: the μ path (``mean_encoder`` and ``mean_head``) takes no gradient and stays in eval
        mode, so no optimizer holds it and μ is deterministic. Done at construction and after loading. With
        ``variance_layers`` the μ path is the encoder itself."""
        frozen = self.mu_encoder if self.config.frozen_mean else None
        if frozen is not None:
            frozen.requires_grad_(False)
            self.mean_head.requires_grad_(False)
            frozen.eval()

    @property
    def mu_encoder(self) -> nn.Module:
        """The encoder whose states give μ: ``mean_encoder`` (two paths), else ``encoder``."""
        return self.mean_encoder if self.mean_encoder is not None else self.encoder

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """``PreTrainedModel.from_pretrained`` for a full folder, refusing weights that do not fit
        ([`check_loading_info`]); an adapter folder (one with ``HEADS_FILE``, see [`save_pretrained`]) is rebuilt from
        its backbone, adapter and heads ([`_from_adapter_folder`]). Then [`freeze_mean_path`] (loading puts fresh
        parameters in place)."""
        heads_file = adapter_heads_file(pretrained_model_name_or_path, kwargs)
        wants_info = kwargs.pop("output_loading_info", False)
        if heads_file is not None:
            model = cls._from_adapter_folder(pretrained_model_name_or_path, heads_file, **kwargs)
            model.freeze_mean_path()
            fitted = {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": [], "error_msgs": []}
            return (model, fitted) if wants_info else model  # the adapter and heads were checked on loading
        model, info = super().from_pretrained(
            pretrained_model_name_or_path, *model_args, output_loading_info=True, **kwargs
        )
        check_loading_info(pretrained_model_name_or_path, info)
        model.freeze_mean_path()
        return (model, info) if wants_info else model

    @classmethod
    def _from_adapter_folder(
        cls, name_or_path: str | Path, heads_file: str, config: GaussCSEConfig | None = None, **kwargs
    ) -> GaussCSEModel:
        """An adapter folder as a model: the backbone its ``adapter_config.json`` names, the LoRA adapters that config
        describes, their weights ([`load_adapter_weights`], checked) and the heads of ``HEADS_FILE``; a ``frozen_mean``
        model's μ path is a copy of the backbone (it is never trained). The backbone must be an encoder, not a GaussCSE
        folder ([`check_adapter_base`]), loads without running its own code, and must be the one the folder's
        ``BACKBONE_FILE`` recorded, where it has one ([`check_backbone`]). ``kwargs``: the Hub arguments (``revision``,
        ``token``, ...), ``dtype``."""
        if PeftModel is None:
            raise ImportError(f"{name_or_path} holds a LoRA adapter (not merged): loading it needs `pip install peft`")
        hub_kwargs = {key: value for key, value in kwargs.items() if key in HUB_KWARGS and value is not None}
        if config is None:
            config = GaussCSEConfig.from_pretrained(name_or_path, **hub_kwargs)
        # peft's files, fetched (or found in the cache) beside each other: peft then reads a local folder
        adapter_files = [
            adapter_file(name_or_path, name, hub_kwargs) for name in (ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE)
        ]
        # None for a folder saved before backbones were recorded: its backbone loads unchecked
        recorded_file = adapter_file(name_or_path, BACKBONE_FILE, hub_kwargs, required=False)
        adapter_config = PeftConfig.from_pretrained(str(adapter_files[0].parent))
        adapter_config.inference_mode = True  # loaded adapters are frozen, as peft's own loading leaves them
        base = local_backbone(adapter_config.base_model_name_or_path)  # what a later save of this model records
        base_kwargs = {key: kwargs[key] for key in ("token", "cache_dir") if kwargs.get(key) is not None}
        check_adapter_base(name_or_path, base, base_kwargs)
        encoder_kwargs = {**base_kwargs, **({"dtype": kwargs["dtype"]} if kwargs.get("dtype") is not None else {})}
        try:
            encoder = AutoModel.from_pretrained(
                base, **_encoder_init_kwargs(config.encoder_config), **encoder_kwargs, trust_remote_code=False
            )
        except (OSError, ValueError, TypeError) as error:
            raise OSError(
                f"{name_or_path} is a LoRA adapter on the backbone {base!r} (adapter_config.json "
                f"base_model_name_or_path), which cannot be loaded here: {error}. Point base_model_name_or_path at a "
                "Hub id or a local copy of that backbone, or share the model merged (train with --merge_lora)"
            ) from error
        found = backbone_record(base, base_kwargs)  # after loading: a Hub backbone's weight files are downloaded
        if recorded_file is not None:
            check_backbone(name_or_path, json.loads(recorded_file.read_text(encoding="utf-8")), found)
        model = cls(config, encoder=encoder)
        model.backbone_record = found
        model.encoder = get_peft_model(encoder, adapter_config)
        model.load_adapter_weights(adapter_files[1])  # once, and checked (peft's own loading only warns)
        model.load_head_weights(heads_file)
        model.name_or_path = str(name_or_path)  # encode() finds the tokenizer here
        return model.to(encoder.dtype).eval()  # the heads in the backbone's dtype

    def load_adapter_weights(self, adapter_weights_file: str | Path) -> None:
        """Put the LoRA weights of an ``ADAPTER_WEIGHTS_FILE`` into this model's encoder (which carries the same
        adapters); every LoRA weight of the encoder must be in the file and every tensor of the file must fit."""
        result = set_peft_model_state_dict(self.encoder, load_file(str(adapter_weights_file)))
        missing = [name for name in result.missing_keys if "lora_" in name]
        if result.unexpected_keys or missing:
            raise ValueError(
                f"{adapter_weights_file}: the adapter does not fit this model (unexpected: "
                f"{result.unexpected_keys[:3]}, missing: {missing[:3]})"
            )

    def load_head_weights(self, heads_file: str | Path) -> None:
        """Copy the μ and log σ² heads of a ``HEADS_FILE`` (keys ``mean_head.weight``, ...) into this model."""
        heads = load_file(str(heads_file))
        expected = {
            f"{name}.{key}": tuple(value.shape)
            for name in HEAD_NAMES
            for key, value in getattr(self, name).state_dict().items()
        }
        found = {key: tuple(value.shape) for key, value in heads.items()}
        if found != expected:
            raise ValueError(f"{heads_file}: expected the tensors (name: shape) {expected}, found {found}")
        with torch.no_grad():
            for key, value in heads.items():
                head_name, parameter = key.split(".", 1)
                getattr(getattr(self, head_name), parameter).copy_(value)

    def save_pretrained(
        self,
        save_directory: str | Path,
        *args,
        is_main_process: bool = True,
        state_dict: dict | None = None,
        push_to_hub: bool = False,
        **kwargs,
    ) -> None:
        """``PreTrainedModel.save_pretrained`` (weights, config, the code files and the sentence-transformers files),
        plus the tokenizer, so the folder (and ``push_to_hub``, which saves through here) encodes wherever it is
        loaded. With LoRA adapters on the encoder (not merged) it writes an adapter folder instead of full weights:
        ``HEADS_FILE``, config and code, and peft's adapter files in ``ADAPTER_FOLDER``; it loads with
        ``from_pretrained`` / ``AutoModel`` / sentence-transformers like a full folder (peft needed). Either save first
        removes what the other layout left in the folder ([`remove_other_layout`]), so it holds one model, and then
        the ONNX graphs of ``onnx/`` exported from other weights ([`remove_stale_graphs`]; this model's stay).
        ``state_dict`` (as Trainer passes it for checkpoints) is used for full folders only. ``push_to_hub=True``
        uploads once the whole folder is written (``repo_id``, default the folder's name, and the other arguments
        of [`push_to_hub`] in ``kwargs``)."""
        if not is_main_process:
            return
        hub_arguments = {key: kwargs.pop(key) for key in PUSH_ARGUMENTS if key in kwargs}
        folder = Path(save_directory)
        if has_adapter(self.encoder):
            weight_files = self._save_adapter_folder(folder)
        else:
            remove_other_layout(folder, adapter=False)
            super().save_pretrained(folder, *args, state_dict=state_dict, **kwargs)
            weight_files = list(folder.glob("model*.safetensors"))
        self._save_tokenizer(folder)
        share_weight_files(weight_files, like=folder / "config.json")
        remove_stale_graphs(folder, self)
        if push_to_hub:
            self.push_to_hub(hub_arguments.pop("repo_id", folder.name), **hub_arguments)

    def _save_adapter_folder(self, folder: Path) -> list[Path]:
        """The adapter folder of [`save_pretrained`]; returns the weight files written. peft's files are written in a
        scratch folder first: its ``save_pretrained`` also rewrites the folder's ``README.md`` (as a peft card). The
        backbone's identity goes into ``BACKBONE_FILE`` ([`backbone_record`]); a folder that is the backbone itself is
        refused before anything in it changes."""
        folder.mkdir(parents=True, exist_ok=True)
        adapter_folder = folder / ADAPTER_FOLDER
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            self.encoder.save_pretrained(scratch)
            written = json.loads((Path(scratch) / ADAPTER_CONFIG_FILE).read_text(encoding="utf-8"))
            base = written["base_model_name_or_path"]
            if base and Path(base).is_dir() and Path(base).resolve() == folder.resolve():
                raise ValueError(
                    f"{folder} is the backbone of this model's adapter: an adapter folder saved there would replace "
                    "the backbone's config and weights and name itself as its backbone; save it to another folder"
                )
            remove_other_layout(folder, adapter=True)
            adapter_folder.mkdir(exist_ok=True)
            for name in (ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE):
                os.replace(Path(scratch) / name, adapter_folder / name)
        if self.backbone_record is None:
            (adapter_folder / BACKBONE_FILE).unlink(missing_ok=True)  # an earlier save's record names another backbone
        else:
            (adapter_folder / BACKBONE_FILE).write_text(json.dumps(self.backbone_record, indent=2), encoding="utf-8")
        heads = {
            f"{name}.{key}": value.detach().cpu().contiguous()
            for name in HEAD_NAMES
            for key, value in getattr(self, name).state_dict().items()
        }
        save_file(heads, folder / HEADS_FILE, metadata={"format": "pt"})
        custom_object_save(self, folder, config=self.config)  # the code files, and auto_map in the config
        self.config.save_pretrained(folder)
        return [folder / HEADS_FILE, adapter_folder / ADAPTER_WEIGHTS_FILE]

    def _save_tokenizer(self, folder: Path) -> None:
        try:
            tokenizer = self.get_tokenizer()
        except ValueError as error:
            logger.warning(
                f"Saved {folder} without a tokenizer ({error}); readers cannot encode with it until one is saved "
                "beside the weights: call model.get_tokenizer(tokenizer) before save_pretrained"
            )
            return
        tokenizer.save_pretrained(folder)

    def train(self, mode: bool = True) -> GaussCSEModel:
        """As ``nn.Module.train``; the frozen μ path stays in eval mode (no dropout), so μ is deterministic."""
        super().train(mode)
        if self.config.frozen_mean:
            self.mu_encoder.eval()
        return self

    @staticmethod
    def _build_encoder(encoder_config) -> PreTrainedModel:
        return AutoModel.from_config(encoder_config, **_encoder_init_kwargs(encoder_config), trust_remote_code=False)

    @classmethod
    def from_backbone(
        cls, name_or_path: str, *, start: str = "auto", encoder_kwargs: dict | None = None, **config_kwargs
    ) -> GaussCSEModel:
        """Start a GaussCSE model from a pre-trained encoder (Hub id or local folder); heads are fresh.

        Args:
            name_or_path: anything ``AutoModel.from_pretrained`` loads (BERT, RoBERTa, MiniLM, DeBERTa, ...).
            start: how the model starts ([`start_fields`]): ``"paper"`` ([CLS], tanh, random heads, as the paper),
                ``"backbone"`` (the backbone's own sentence embedding kept as μ: its pooling and normalisation, an
                identity μ head, σ² = 1/d, the frozen μ path) or ``"auto"`` (``"backbone"`` for a sentence-transformers
                model, ``"paper"`` otherwise).
            encoder_kwargs: extra keyword arguments for ``AutoModel.from_pretrained`` (``revision``, ``dtype``, ...);
                the backbone's own code (the ``auto_map`` of its config) runs only with ``trust_remote_code=True``.
            **config_kwargs: [`GaussCSEConfig`] fields (``pooling``, ``similarity_reduction``, ...); they override
                what ``start`` sets.

        A local backbone is named by its absolute path (an adapter folder saved from the model records it), and its
        identity kept ([`backbone_record`]).
        """
        name_or_path = local_backbone(str(name_or_path))
        encoder_kwargs = {"trust_remote_code": False, **(encoder_kwargs or {})}  # never a prompt to run its code
        encoder_config = AutoConfig.from_pretrained(name_or_path, **encoder_kwargs)
        encoder = AutoModel.from_pretrained(name_or_path, **_encoder_init_kwargs(encoder_config), **encoder_kwargs)
        started = start_fields(name_or_path, start, encoder_kwargs)
        if config_kwargs.get("frozen_mean") is False and "variance_layers" not in config_kwargs:
            started.pop("variance_layers", None)  # one trunk is a frozen-μ design: a trained μ takes the whole encoder
        config_kwargs = {**started, **config_kwargs}
        # The config would otherwise reset the encoder's attention implementation (sdpa, ...) to unset.
        config_kwargs.setdefault("attn_implementation", encoder.config._attn_implementation)
        model = cls(GaussCSEConfig(encoder_config=encoder.config, **config_kwargs), encoder=encoder)
        model.name_or_path = name_or_path  # encode() finds the encoder's tokenizer here
        model.backbone_record = backbone_record(name_or_path, encoder_kwargs)
        return model

    def pool(self, last_hidden_state: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """v = h[:, 0] (``cls``) or the attention-masked mean of h over tokens (``mean``): [`pool_tokens`]."""
        return pool_tokens(last_hidden_state, attention_mask, self.config.pooling)

    def pool_packed(self, last_hidden_state: torch.Tensor, sentence_index: torch.Tensor) -> torch.Tensor:
        """Pool packed rows: v_s = the first token of sentence s (``cls``) or the mean of its tokens (``mean``).

        ``sentence_index`` ``(R, L)``: the sentence of each token, −1 for padding; sentences are contiguous runs.
        Returns ``(S, hidden)`` with S = max index + 1.
        """
        index = sentence_index.flatten()
        tokens = last_hidden_state.flatten(0, 1)
        present = index >= 0
        num_sentences = int(index.max()) + 1 if bool(present.any()) else 0
        if self.config.pooling == "cls":
            starts = present & torch.cat([present.new_ones(1), index[1:] != index[:-1]])
            pooled = tokens.new_zeros(num_sentences, tokens.shape[-1])
            return pooled.index_copy(0, index[starts], tokens[starts])
        sums = tokens.new_zeros(num_sentences, tokens.shape[-1]).index_add(0, index[present], tokens[present])
        counts = torch.bincount(index[present], minlength=num_sentences).clamp_min(1)
        return sums / counts[:, None].to(sums.dtype)

    def mean_from_pooled(self, pooled: torch.Tensor) -> torch.Tensor:
        """μ = tanh(W_μ v + b_μ) (``mean_activation="tanh"``, else without tanh), then divided by its L2 norm
        when ``normalize_mean``."""
        mu = self.mean_head(pooled)
        if self.config.mean_activation == "tanh":
            mu = torch.tanh(mu)
        return F.normalize(mu, dim=-1) if self.config.normalize_mean else mu

    def logvar_from_pooled(self, pooled: torch.Tensor) -> torch.Tensor:
        """log σ² = W_σ v + b_σ clamped to [``logvar_min``, ``logvar_max``]."""
        return self.logvar_head(pooled).clamp(self.config.logvar_min, self.config.logvar_max)

    def gaussian_heads(self, pooled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pooled vectors v → (μ, log σ²) = ([`mean_from_pooled`](v), [`logvar_from_pooled`](v)). (A ``frozen_mean``
        model's forward takes μ from its frozen path's own v.)"""
        return self.mean_from_pooled(pooled), self.logvar_from_pooled(pooled)

    def pool_batch(
        self, last_hidden_state: torch.Tensor, attention_mask: torch.Tensor | None, sentence_index: torch.Tensor | None
    ) -> torch.Tensor:
        """One vector per sentence: [`pool_packed`] for packed rows (``sentence_index`` given), else [`pool`]."""
        if sentence_index is None:
            return self.pool(last_hidden_state, attention_mask)
        return self.pool_packed(last_hidden_state, sentence_index)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        sentence_index: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> GaussCSEOutput | tuple:
        """Encode a batch. Padded input: one sentence per row, ``attention_mask`` ``(B, L)``.

        Packed input (several sentences per row, as ``gausscse.training.batch.TripletCollator(pack=True)`` builds it):
        ``attention_mask`` is a block-diagonal ``(R, 1, L, L)`` bool mask, ``position_ids`` restart at each
        sentence, and ``sentence_index`` ``(R, L)`` gives each token's sentence (−1 for padding); ``mu``/``logvar``
        then have one row per sentence, in sentence-index order.
        """
        encoder_inputs = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "token_type_ids": token_type_ids,
            "position_ids": position_ids,
            "inputs_embeds": inputs_embeds,
            "output_hidden_states": output_hidden_states,
            "output_attentions": output_attentions,
        }
        encoder_inputs = {name: value for name, value in encoder_inputs.items() if value is not None}
        if self.variance_layers is not None:
            return self._trunk_forward(encoder_inputs, kwargs, attention_mask, sentence_index, return_dict)
        encoder_output = self.encoder(**encoder_inputs, **kwargs, return_dict=True)
        pooled = self.pool_batch(encoder_output.last_hidden_state, attention_mask, sentence_index)
        logvar = self.logvar_from_pooled(pooled)
        if self.mean_encoder is None:
            mu = self.mean_from_pooled(pooled)
        else:
            mean_inputs = {name: value for name, value in encoder_inputs.items() if not name.startswith("output_")}
            with torch.no_grad():  # the frozen μ path: never part of the graph
                mean_hidden = self.mean_encoder(**mean_inputs, **kwargs, return_dict=True).last_hidden_state
                mu = self.mean_from_pooled(self.pool_batch(mean_hidden, attention_mask, sentence_index))
        return self._output(mu, logvar, pooled, encoder_output, return_dict)

    def _trunk_forward(
        self,
        encoder_inputs: dict,
        kwargs: dict,
        attention_mask: torch.Tensor | None,
        sentence_index: torch.Tensor | None,
        return_dict: bool | None,
    ) -> GaussCSEOutput | tuple:
        """``forward`` of one shared trunk (``variance_layers`` = k): the frozen encoder runs once and gives μ; the
        inputs of its layer L − k (hidden states and the attention mask as the encoder prepared it) are caught on the
        way and run through the k trained copies, whose pooled output gives log σ²."""
        layers = self.encoder.get_submodule(self._layers_path)
        caught: dict = {}

        def catch(module, args, layer_kwargs):
            caught.update(args=args, kwargs=layer_kwargs)

        hook = layers[len(layers) - len(self.variance_layers)].register_forward_pre_hook(catch, with_kwargs=True)
        try:
            with torch.no_grad():  # the frozen μ path: never part of the graph
                encoder_output = self.encoder(**encoder_inputs, **kwargs, return_dict=True)
        finally:
            hook.remove()
        mu = self.mean_from_pooled(self.pool_batch(encoder_output.last_hidden_state, attention_mask, sentence_index))
        hidden, *layer_args = caught["args"]
        for layer in self.variance_layers:
            hidden = layer(hidden, *layer_args, **caught["kwargs"])
            hidden = hidden[0] if isinstance(hidden, tuple) else hidden
        pooled = self.pool_batch(hidden, attention_mask, sentence_index)
        return self._output(mu, self.logvar_from_pooled(pooled), pooled, encoder_output, return_dict)

    def _output(self, mu, logvar, pooled, encoder_output, return_dict: bool | None) -> GaussCSEOutput | tuple:
        """The [`GaussCSEOutput`] of ``forward`` (its tuple unless ``return_dict``), token states from
        ``encoder_output``."""
        output = GaussCSEOutput(
            mu=mu,
            logvar=logvar,
            pooled_output=pooled,
            last_hidden_state=encoder_output.last_hidden_state,
            hidden_states=encoder_output.get("hidden_states"),
            attentions=encoder_output.get("attentions"),
        )
        use_return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if use_return_dict else output.to_tuple()

    # ----------------------------------------------------------------------------------------------- user API

    def get_tokenizer(self, tokenizer=None):
        """The tokenizer to use: ``tokenizer`` if given, else the one saved in the model's own folder / Hub repo."""
        if tokenizer is not None:
            self._tokenizer = tokenizer
        if self._tokenizer is None:
            if not self.name_or_path:
                raise ValueError("This model has no folder to load a tokenizer from: pass tokenizer=... to encode()")
            try:
                # config=: without it AutoTokenizer reloads this config and, the model type being registered by no
                # one in a process that only ran this folder's code, would ask for trust_remote_code again
                self._tokenizer = AutoTokenizer.from_pretrained(
                    self.name_or_path, config=self.config, trust_remote_code=False
                )
            except (OSError, ValueError) as error:
                raise ValueError(
                    f"No tokenizer found at {self.name_or_path!r}: pass tokenizer=... to encode()"
                ) from error
        return self._tokenizer

    @torch.inference_mode()
    def encode(
        self,
        sentences: str | Sequence[str],
        batch_size: int = 32,
        tokenizer=None,
        device: str | torch.device | None = None,
        show_progress_bar: bool = False,
        max_length: int | None = DEFAULT_MAX_LENGTH,
        output_device: str | torch.device | None = "cpu",
        backend: str = "torch",
        onnx_file: str = ONNX_FILE,
    ) -> GaussianEmbeddings:
        """Encode sentences into Gaussians N(μ, diag σ²), returned as float32 tensors in input order.

        Every sentence is tokenised once, in one call (a fast tokenizer spreads it over threads); the token ids are
        then sorted by length so each batch pads little, padded per batch, and the results put back in input order.

        Args:
            sentences: a string or a list of strings. A single string gives 1-D ``mu``/``logvar``.
            batch_size: sentences per forward pass.
            tokenizer: defaults to the tokenizer saved with the model.
            device: where to run (the model is moved there); defaults to the model's device.
            show_progress_bar: show a tqdm bar over batches.
            max_length: truncation length in tokens; defaults to (and is capped at) the encoder's limit
                ([`resolve_max_length`]).
            output_device: where the returned tensors live: ``"cpu"`` (default) or ``None`` for the model's device
                (no copy back, e.g. to feed a GPU search index).
            backend: ``"torch"`` (default) or ``"onnx"``: the forward pass runs in ONNX Runtime on the CPU, on the
                graph ``onnx_file`` of the model's folder ([`onnx_encoder`]); batching, order and the returned
                float32 tensors are the same.
            onnx_file: the graph for ``backend="onnx"``: ``"onnx/model.onnx"`` (float32, default) or
                ``"onnx/model_qint8.onnx"`` (int8 weights).
        """
        single = isinstance(sentences, str)
        sentences = _check_sentences("sentences", [sentences] if single else sentences)
        if batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
        if backend not in ENCODE_BACKENDS:
            raise ValueError(f"backend must be one of {ENCODE_BACKENDS}, got {backend!r}")
        onnx_encoder = self.onnx_encoder(onnx_file) if backend == "onnx" else None
        if device is not None:
            self.to(device)
        tokenizer = self.get_tokenizer(tokenizer)
        max_length = resolve_max_length(tokenizer, self.config.encoder_config, max_length)
        output_device = self.device if output_device is None else torch.device(output_device)
        was_training = self.training
        self.eval()
        try:
            token_ids = tokenizer(sentences, truncation=True, max_length=max_length)["input_ids"] if sentences else []
            order = sorted(range(len(sentences)), key=lambda index: -len(token_ids[index]))
            with_token_types = "token_type_ids" in tokenizer.model_input_names
            mu = torch.empty(len(sentences), self.config.embedding_size, device=output_device)
            logvar = torch.empty_like(mu)
            for start in tqdm(
                range(0, len(order), batch_size), desc="Encoding", disable=not show_progress_bar, leave=False
            ):
                batch_indices = order[start : start + batch_size]
                features = pad_token_ids(
                    [token_ids[index] for index in batch_indices], tokenizer.pad_token_id or 0, with_token_types
                )
                if onnx_encoder is None:
                    output = self(**{name: tensor.to(self.device) for name, tensor in features.items()})
                    batch_mu, batch_logvar = output.mu, output.logvar
                else:
                    output = onnx_encoder(features)
                    batch_mu, batch_logvar = output["mu"], output["logvar"]
                rows = torch.tensor(batch_indices, device=output_device)
                mu[rows] = batch_mu.float().to(output_device)
                logvar[rows] = batch_logvar.float().to(output_device)
        finally:
            self.train(was_training)  # restored even when encoding fails
        embeddings = GaussianEmbeddings(mu[0], logvar[0]) if single else GaussianEmbeddings(mu, logvar)
        return embeddings.check("encode(sentences)")

    def onnx_encoder(self, file_name: str = ONNX_FILE, provider: str | None = None) -> OnnxGaussianEncoder:
        """The ONNX Runtime session of [`encode`]'s ``backend="onnx"``: the graph ``file_name`` of the model's folder
        or Hub repo, refused unless exported from this model's weights and config; or, if the folder has no float32
        graph, this model exported now (``OnnxGaussianEncoder.from_model``; ``onnx_gausscse.export_onnx`` writes it
        to a folder). Kept per file and provider while the model's fingerprint is the one the graph records: once the
        weights or config change, the next call builds (and checks) a fresh one. The fingerprint is computed on every
        call (about 0.05 s per 100 MB of weights)."""
        key = (file_name, provider)
        kept = self._onnx_encoders.get(key)
        if kept is None or kept.fingerprint != model_fingerprint(self):
            kept = self._onnx_encoders[key] = OnnxGaussianEncoder.from_model(self, file_name, provider)
        return kept

    def _as_embeddings(self, argument: str, value: GaussianEmbeddings | Sequence[str]) -> GaussianEmbeddings:
        if isinstance(value, GaussianEmbeddings):
            embeddings = value
        else:
            embeddings = self.encode(_check_sentences(argument, value))
        if embeddings.mu.ndim == 1:
            embeddings = GaussianEmbeddings(embeddings.mu[None], embeddings.logvar[None])
        return embeddings.check(argument)

    def _check_pair(
        self, a: GaussianEmbeddings | Sequence[str], b: GaussianEmbeddings | Sequence[str], names: tuple[str, str]
    ) -> tuple[GaussianEmbeddings, GaussianEmbeddings]:
        a, b = self._as_embeddings(names[0], a), self._as_embeddings(names[1], b)
        if a.dim != b.dim:
            raise ValueError(f"{names[0]} and {names[1]} have different dimensions: {a.dim} and {b.dim}")
        return a, b

    def similarity(self, a: GaussianEmbeddings | Sequence[str], b: GaussianEmbeddings | Sequence[str]) -> torch.Tensor:
        """Pairwise matrix S_ij = sim(a_i‖b_j) = 1/(1 + KL(N_{a_i}‖N_{b_j})), shape ``(len(a), len(b))``.

        Uses ``config.similarity_reduction``. ``a``, ``b``: [`GaussianEmbeddings`] or lists of sentences.
        """
        a, b = self._check_pair(a, b, ("a", "b"))
        return similarity_matrix(a.mu, a.logvar, b.mu, b.logvar, reduction=self.config.similarity_reduction)

    def similarity_pairwise(
        self, a: GaussianEmbeddings | Sequence[str], b: GaussianEmbeddings | Sequence[str]
    ) -> torch.Tensor:
        """Row-wise sim(a_i‖b_i), shape ``(N,)``, the diagonal of [`similarity`]`(a, b)`; ``a`` and ``b`` must have the
        same length."""
        a, b = self._check_pair(a, b, ("a", "b"))
        if len(a) != len(b):
            raise ValueError(f"a and b must have the same length for row-wise similarity, got {len(a)} and {len(b)}")
        return paired_similarity(a.mu, a.logvar, b.mu, b.logvar, reduction=self.config.similarity_reduction)

    def entailment_score(
        self, premises: GaussianEmbeddings | Sequence[str], hypotheses: GaussianEmbeddings | Sequence[str]
    ) -> torch.Tensor:
        """Score that premise_i entails hypothesis_i: sim(hyp_i‖pre_i), shape ``(N,)``."""
        premises, hypotheses = self._check_pair(premises, hypotheses, ("premises", "hypotheses"))
        if len(premises) != len(hypotheses):
            raise ValueError(
                f"premises and hypotheses must have the same length, got {len(premises)} and {len(hypotheses)}"
            )
        return self.similarity_pairwise(hypotheses, premises)

    def entailment_direction(
        self, a: GaussianEmbeddings | Sequence[str], b: GaussianEmbeddings | Sequence[str]
    ) -> EntailmentDirection:
        """For each pair, does a_i entail b_i rather than b_i entail a_i? Both rules of the paper (§3.2)."""
        a, b = self._check_pair(a, b, ("a", "b"))
        sim_ba = self.entailment_score(a, b)
        sim_ab = self.entailment_score(b, a)
        return EntailmentDirection(
            by_similarity=sim_ba > sim_ab,
            by_variance=a.generality > b.generality,
            sim_ba=sim_ba,
            sim_ab=sim_ab,
        )

    def as_sentence_transformer(self, tokenizer=None, direction: str = "entailing", score: str = "auto"):
        """This model as a sentence-transformers ``SentenceTransformer`` (needs ``sentence-transformers`` ≥ 6), the
        object ``SentenceTransformer(folder, trust_remote_code=True)`` gives for a saved folder: ``encode`` → μ,
        ``encode_query`` / ``encode_document`` → vectors with dot = −KL(query‖document), or the model's search score
        when its config states one (``direction``, ``score``: ``sentence_transformer_gausscse.py``). Its ``save`` /
        ``push_to_hub`` write the same folder as this model's ``save_pretrained`` (weights or adapter, code, tokenizer),
        which loads everywhere."""
        # Imported here, not at the top, and it must stay a relative import: save_pretrained's custom_object_save
        # ships every file this one imports relatively — found by a text search that sees indented lines too — so
        # this line is how sentence_transformer_gausscse.py (named by modules.json) gets into every saved folder.
        # At the top it would be circular (that file imports this one) and make sentence-transformers, which only
        # that file needs, a requirement of AutoModel.
        from .sentence_transformer_gausscse import to_sentence_transformer

        return to_sentence_transformer(self, tokenizer, direction=direction, score=score)


GaussCSEConfig.register_for_auto_class()
GaussCSEModel.register_for_auto_class("AutoModel")
# No AutoConfig/AutoModel.register here: this file also runs as a saved folder's remote code, and a registration made
# then would make every later GaussCSE folder run the first folder's code. The installed package registers instead
# (gausscse/model/__init__.py), so each folder loaded with trust_remote_code runs the code shipped with it.


def start_fields(name_or_path: str, start: str = "auto", hub_kwargs: dict | None = None) -> dict:
    """The [`GaussCSEConfig`] fields a ``start`` sets (see ``STARTS``): ``"paper"`` → ``{}`` (the config's defaults:
    [CLS], tanh, random heads); ``"backbone"`` → the sentence-transformers pooling and normalisation of
    ``name_or_path`` (mean pooling, no normalisation for a plain encoder), ``mean_activation="none"``,
    ``head_init="identity"``, ``frozen_mean=True`` and ``variance_layers=BACKBONE_VARIANCE_LAYERS`` (one trunk);
    ``"auto"`` → ``"backbone"`` for a sentence-transformers model, else ``"paper"``."""
    if start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, got {start!r}")
    found = sentence_transformers_pooling(name_or_path, hub_kwargs) if start != "paper" else None
    if start == "paper" or (start == "auto" and found is None):
        return {}
    pooling, normalize = found or ("mean", False)
    if pooling not in POOLINGS:
        raise ValueError(
            f"{name_or_path} pools its sentence embedding with {pooling!r}: GaussCSE pools {' or '.join(POOLINGS)}"
        )
    return {
        "pooling": pooling,
        "normalize_mean": normalize,
        "mean_activation": "none",
        "head_init": "identity",
        "frozen_mean": True,
        "variance_layers": BACKBONE_VARIANCE_LAYERS,
    }


__all__ = [
    "ADAPTER_CONFIG_FILE",
    "ADAPTER_FOLDER",
    "ADAPTER_WEIGHTS_FILE",
    "BACKBONE_VARIANCE_LAYERS",
    "DEFAULT_MAX_LENGTH",
    "ENCODER_POSITIONS",
    "HEADS_FILE",
    "STARTS",
    "TOKEN_POOLINGS",
    "EntailmentDirection",
    "GaussCSEModel",
    "GaussCSEOutput",
    "GaussCSEPreTrainedModel",
    "adapter_heads_file",
    "encoder_layers",
    "encoder_layers_path",
    "has_adapter",
    "pad_token_ids",
    "pool_tokens",
    "position_offset",
    "resolve_max_length",
    "sentence_transformers_pooling",
    "start_fields",
]
