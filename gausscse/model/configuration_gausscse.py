"""Configuration of a GaussCSE model (ships with the weights as Hub custom code)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import weakref
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from .gaussian import LOGVAR_BOUND, check_reduction

# The sentence vector of a GaussCSE model (``pooling``): the one list of poolings; TOKEN_POOLINGS adds the max over
# tokens that only point-encoder baselines use.
POOLINGS = ("cls", "mean")
# The poolings of token states into one vector (encoding_gausscse.pool_tokens): a GaussCSE model's own (POOLINGS) and
# the max over tokens, which only the point-encoder baselines use (gausscse-evaluate --baseline pools as the
# sentence-transformers model does). A GaussCSE model never max-pools: the paper pools [CLS], and pool_packed pools cls
# and mean only.
TOKEN_POOLINGS = (*POOLINGS, "max")
# The files that make a GaussCSE folder a sentence-transformers model, written beside config.json: one module, the
# whole model (sentence_transformer_gausscse.py ships with the code), scored by dot product (its routes give −KL).
SENTENCE_TRANSFORMERS_FILES = {
    "modules.json": [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformer_gausscse.GaussCSETransformer"},
    ],
    "config_sentence_transformers.json": {
        "model_type": "SentenceTransformer",
        "similarity_fn_name": "dot",
        "requirements": {
            "sentence-transformers": {
                "specifier": ">=6",
                "reason": "custom module API (InputModule.preprocess, forward_kwargs) of version 6",
            }
        },
    },
}
MEAN_ACTIVATIONS = ("tanh", "none")
HEAD_INITS = ("random", "identity")


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """``data`` at ``path``, appearing whole: a temporary file of this call's own beside it (two writers never share
    one), then ``os.replace``; on an error the temporary file is removed and ``path`` is left as it was. (The shipped
    files' own copy of ``gausscse.io``'s atomic write: Hub custom code cannot import the library.)"""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(partial, 0o666 & ~mask)  # mkstemp makes 0600; the file gets the usual permissions
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, content: Any) -> None:
    """``content`` as indented JSON at ``path``, appearing whole ([`write_bytes_atomic`])."""
    write_bytes_atomic(path, (json.dumps(content, indent=2) + "\n").encode("utf-8"))


# Config fields that change with where and how a model is loaded, not with what it computes: left out of its
# fingerprint ([`model_fingerprint`]), as are the private ones (``_name_or_path``, ``_attn_implementation``, ...).
VOLATILE_CONFIG_KEYS = frozenset(
    {
        "transformers_version",
        "dtype",
        "torch_dtype",
        "architectures",
        "auto_map",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
    }
)


def stable_config(config: Any) -> Any:
    """``config`` (a nested ``to_dict()``) without private keys and ``VOLATILE_CONFIG_KEYS``, as strict JSON values:
    keys as strings, NaN as ``None``."""
    if isinstance(config, dict):
        return {
            str(key): stable_config(value)
            for key, value in config.items()
            if not str(key).startswith("_") and key not in VOLATILE_CONFIG_KEYS
        }
    if isinstance(config, (list, tuple)):
        return [stable_config(item) for item in config]
    if isinstance(config, float) and config != config:
        return None
    return config


# model → (the state its fingerprint was computed from, the fingerprint): see weights_state
_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def weights_state(model: torch.nn.Module) -> tuple:
    """What says a model's weights are unchanged since a fingerprint: each weight tensor itself (held, so no new
    tensor can take its identity), its in-place version counter and its data pointer, and the config."""
    tensors = tuple(
        (name, tensor, tensor._version, tensor.data_ptr()) for name, tensor in model.state_dict(keep_vars=True).items()
    )
    return tensors, json.dumps(stable_config(model.config.to_dict()), sort_keys=True, default=str)


def same_weights_state(first: tuple, second: tuple) -> bool:
    """Whether two [`weights_state`]s are of the same, unchanged weights and config."""
    (tensors_a, config_a), (tensors_b, config_b) = first, second
    return (
        config_a == config_b
        and len(tensors_a) == len(tensors_b)
        and all(
            name_a == name_b and tensor_a is tensor_b and version_a == version_b and pointer_a == pointer_b
            for (name_a, tensor_a, version_a, pointer_a), (name_b, tensor_b, version_b, pointer_b) in zip(
                tensors_a, tensors_b, strict=True
            )
        )
    )


def model_fingerprint(model: torch.nn.Module) -> str:
    """SHA-256 of what makes a model's Gaussians: every weight (name, dtype, shape, bytes, in name order; floating
    weights as float32, so a model loaded in another precision, ``dtype=``, is the same model) and the config without
    the fields that only say where or how it was loaded ([`stable_config`]). A model saved and loaded again keeps its
    fingerprint; any retrained, merged or differently configured one gets another. What a ``SentenceIndex`` and an
    exported ONNX graph record of the model they were made from. Hashing takes about 0.05 s per 100 MB of weights on
    one core, so it is kept per model and computed again only when [`weights_state`] says the weights or the config
    changed (an ONNX encode checks it at every call)."""
    state = weights_state(model)
    cached = _FINGERPRINTS.get(model)
    if cached is not None and same_weights_state(cached[0], state):
        return cached[1]
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.float() if tensor.is_floating_point() else tensor
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(memoryview(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()))
    digest.update(state[1].encode())
    _FINGERPRINTS[model] = (state, digest.hexdigest())
    return digest.hexdigest()


def _check_choice(argument: str, value: Any, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"{argument} must be one of {valid}, got {value!r}")


class GaussCSEConfig(PreTrainedConfig):
    r"""Configuration of [`GaussCSEModel`]: a pre-trained encoder plus a mean head and a log-variance head.

    Args:
        encoder_config (`PreTrainedConfig` or `dict`, *optional*):
            Config of the encoder (any model `AutoModel` builds: BERT, RoBERTa, MiniLM, DeBERTa, ...).
            Defaults to a BERT-base config.
        pooling (`str`, defaults to `"cls"`):
            `"cls"`: the first token's vector (BERT `[CLS]`, RoBERTa `<s>`), as in the paper;
            `"mean"`: the attention-masked mean of the last hidden states.
        mean_activation (`str`, defaults to `"tanh"`):
            Activation on the mean head: `"tanh"` as the released code, or `"none"`.
        normalize_mean (`bool`, defaults to `False`):
            L2-normalise μ (after the head and its activation), as a sentence-transformers `Normalize` module does.
        head_init (`str`, defaults to `"random"`):
            How fresh heads start: `"random"` (weights N(0, 0.02²), biases 0, as the paper) or `"identity"`: the μ
            head is the identity map (needs `embedding_size` = the encoder's hidden size) and the log-variance head
            starts constant, σ² = 1/d for every sentence (zero weights, bias −log d), so an untrained model's μ is the
            backbone's pooled vector and KL(a‖b)/d = ‖μ_a − μ_b‖²/2 (= 1 − cos for unit μ). Only read when heads
            are created, not when trained weights are loaded.
        frozen_mean (`bool`, defaults to `False`):
            Two paths: μ comes from `mean_encoder`, a frozen copy of the encoder it started from (and a frozen μ
            head), while the trained `encoder` gives log σ² only. μ then stays the backbone's sentence embedding
            (its STS and retrieval quality are kept) and direction is learnt through the variances. The frozen
            path costs one more forward pass (no backward) and a second copy of the encoder's weights, unless
            `variance_layers` is set.
        variance_layers (`int`, defaults to 0):
            With `frozen_mean`, k > 0 gives one shared trunk instead of two paths: the encoder itself is frozen and
            gives μ, and log σ² comes from a trained copy of its top k layers, run on the frozen encoder's states
            below them (a forward pass costs 1 + k/L of the encoder's, the weights k/L more). 0: two full paths.
        embedding_size (`int`, *optional*):
            Dimension d of the Gaussians. Defaults to the encoder's hidden size.
        similarity_reduction (`str`, defaults to `"mean_kl"`):
            `"mean_kl"`: sim(a‖b) = 1 / (1 + KL / d), the full KL scaled by 1/d (the default: the reduction study of
            `results/REPRODUCTION.md` chose it on SNLI dev; monotone in the KL like `"sum"`, so search and
            sentence-transformers' `dot` rank exactly, and not saturated as the KL grows with d);
            `"sum"`: sim(a‖b) = 1 / (1 + Σ_k KL_k), the paper's eq. 2;
            `"mean_dim"`: sim(a‖b) = mean_k 1 / (1 + KL_k), as the released code computes it.
        search_kl_weight (`float`, *optional*):
            λ of the model's search score cos(μ_q, μ_x) − λ · KL(q‖x) / d (relevance by the cosine of the means, plus
            direction), chosen on SNLI dev at the end of training (`gausscse.evaluation.search_weight`); λ = 0 is the
            cosine. `None` (models saved before it existed): no search score is stated.
        point_embeddings (`bool`, defaults to `False`):
            The model is a point encoder: trained on μ alone (the supervised SimCSE loss sets it), its σ² head
            untrained; evaluation scores it by the cosine of μ.
        logvar_min, logvar_max (`float`, defaults to -10 and 10):
            Clamp range of the predicted log σ², so exp(±logvar) and the KL stay finite; within ±30.

    Example:

    ```python
    >>> from gausscse import GaussCSEConfig, GaussCSEModel
    >>> config = GaussCSEConfig(encoder_config={"model_type": "bert", "hidden_size": 64,
    ...     "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128})
    >>> model = GaussCSEModel(config)
    ```
    """

    model_type = "gausscse"
    sub_configs_defaults = {"encoder_config": SubConfigSpec(config_class=AutoConfig, model_type="bert")}  # noqa: RUF012

    encoder_config: PreTrainedConfig | dict[str, Any] | None = None
    pooling: str = "cls"
    mean_activation: str = "tanh"
    normalize_mean: bool = False
    head_init: str = "random"
    frozen_mean: bool = False
    variance_layers: int = 0
    embedding_size: int | None = None
    similarity_reduction: str = "mean_kl"
    search_kl_weight: float | None = None
    point_embeddings: bool = False
    logvar_min: float = -10.0
    logvar_max: float = 10.0

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        _check_choice("pooling", self.pooling, POOLINGS)
        _check_choice("mean_activation", self.mean_activation, MEAN_ACTIVATIONS)
        _check_choice("head_init", self.head_init, HEAD_INITS)
        check_reduction(self.similarity_reduction)
        if not -LOGVAR_BOUND <= self.logvar_min < self.logvar_max <= LOGVAR_BOUND:
            raise ValueError(
                f"need -{LOGVAR_BOUND:g} <= logvar_min < logvar_max <= {LOGVAR_BOUND:g} (beyond, exp(log σ²) overflows "
                f"the similarity), got logvar_min={self.logvar_min}, logvar_max={self.logvar_max}"
            )
        layers = getattr(self.encoder_config, "num_hidden_layers", None)
        if self.variance_layers and not (self.frozen_mean and layers and 0 < self.variance_layers <= layers):
            raise ValueError(
                f"variance_layers (the top layers copied for log σ² on a frozen trunk) needs frozen_mean=True and "
                f"1 <= variance_layers <= the encoder's num_hidden_layers ({layers}), got variance_layers="
                f"{self.variance_layers}, frozen_mean={self.frozen_mean}"
            )
        if self.search_kl_weight is not None and not 0 <= self.search_kl_weight < float("inf"):
            raise ValueError(f"search_kl_weight must be a finite number >= 0, got {self.search_kl_weight}")
        if self.embedding_size is None:
            self.embedding_size = self.encoder_config.hidden_size
        if self.embedding_size < 1:
            raise ValueError(f"embedding_size must be a positive integer, got {self.embedding_size}")
        if self.head_init == "identity" and self.embedding_size != self.encoder_config.hidden_size:
            raise ValueError(
                f"head_init='identity' needs embedding_size equal to the encoder's hidden size "
                f"({self.encoder_config.hidden_size}), got {self.embedding_size}"
            )

    def save_pretrained(self, save_directory: str | os.PathLike, push_to_hub: bool = False, **kwargs) -> None:
        """Write ``config.json`` and beside it ``modules.json`` and ``config_sentence_transformers.json``, so the
        folder also loads with ``SentenceTransformer(folder, trust_remote_code=True)``. Written with the config, they
        come with every save of the model (``save_pretrained``, ``push_to_hub``, Trainer checkpoints); each file
        appears whole (temporary file + ``os.replace``)."""
        super().save_pretrained(save_directory, push_to_hub=push_to_hub, **kwargs)
        for name, content in SENTENCE_TRANSFORMERS_FILES.items():
            write_json_atomic(Path(save_directory) / name, content)


__all__ = [
    "HEAD_INITS",
    "MEAN_ACTIVATIONS",
    "POOLINGS",
    "SENTENCE_TRANSFORMERS_FILES",
    "TOKEN_POOLINGS",
    "VOLATILE_CONFIG_KEYS",
    "GaussCSEConfig",
    "model_fingerprint",
    "stable_config",
    "write_bytes_atomic",
    "write_json_atomic",
]
