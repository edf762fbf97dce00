"""Configuration of a GaussCSE model (ships with the weights as Hub custom code)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from .gaussian import LOGVAR_BOUND, check_reduction
from .utils_gausscse import write_json_atomic

POOLINGS = ("cls", "mean")  # a GaussCSE model's sentence vector
TOKEN_POOLINGS = (*POOLINGS, "max")  # pool_tokens's; max only for the point-encoder baselines
# written beside config.json: the folder is a sentence-transformers model of one module, scored by dot product
SENTENCE_TRANSFORMERS_FILES = {
    "modules.json": [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformer_gausscse.GaussCSETransformer"}],
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


# the largest weight of a score term (λ, α): its product with any KL/d the log σ² clamp allows stays finite in float32
MAX_SCORE_WEIGHT = 1e6
# the scores' settings (chosen after training, or set by hand) and the largest value each takes
SCORE_SETTING_MAXIMA = {
    "search_kl_weight": MAX_SCORE_WEIGHT,
    "entailment_cosine_weight": MAX_SCORE_WEIGHT,
    "entailment_threshold": 1.0,
}


def check_number(name: str, value: Any, maximum: float) -> None:
    """``ValueError`` naming the config field ``name`` unless ``value`` is ``None`` or a number (not a bool, not text)
    in [0, ``maximum``]."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= maximum:
        raise ValueError(f"{name} must be a number in [0, {maximum:g}], got {value!r}")


def check_trunk_layers(config: GaussCSEConfig) -> None:
    """``ValueError`` unless ``variance_layers`` and ``mean_layers`` are each 0/``None`` or whole numbers in
    [1, the encoder's layers], ``mean_layers`` only on one trunk (``variance_layers``) whose μ learns."""
    layers = getattr(config.encoder_config, "num_hidden_layers", None)
    for name in ("variance_layers", "mean_layers"):
        value = getattr(config, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
        if value and not (layers and value <= layers):
            raise ValueError(f"{name} must be at most the encoder's layers ({layers}), got {name}={value}")
    if config.mean_layers and not (config.variance_layers and not config.frozen_mean):
        raise ValueError(
            f"mean_layers (the encoder's top layers μ learns through) needs variance_layers >= 1 (one trunk) and "
            f"frozen_mean=False, got variance_layers={config.variance_layers}, frozen_mean={config.frozen_mean}"
        )


class GaussCSEConfig(PreTrainedConfig):
    r"""Configuration of [`GaussCSEModel`]: a pre-trained encoder plus a mean head and a log-variance head.

    Args:
        encoder_config, pooling: the encoder's config (default BERT-base); `"cls"` (the paper's) or `"mean"` pooling.
        mean_activation, normalize_mean: `"tanh"` (released code) or `"none"` on the mean head; L2-normalise μ after it.
        head_init: fresh heads `"random"` (N(0, 0.02²), as the paper) or `"identity"` (identity μ head, σ² = 1/d).
        frozen_mean: μ from `mean_encoder`, a frozen copy of the starting encoder (and μ head); `encoder` gives log σ².
        variance_layers: k > 0: one trunk, the encoder gives μ and a trained copy of its top k layers log σ²; with
            `frozen_mean` μ is the encoder's own (frozen), else μ learns through the encoder's top `mean_layers` layers.
        mean_layers: one trunk without `frozen_mean`: how many of the encoder's top layers learn (μ learns NLI too);
            the layers below and the embeddings stay frozen; `None`: the whole encoder learns.
        embedding_size, similarity_reduction: d (default: hidden size); `"mean_kl"` (default), `"sum"` or `"mean_dim"`.
        search_kl_weight: λ of the search score cos(μ_q, μ_x) − λ · KL(q‖x) / d; `None`: no search score stated.
        entailment_cosine_weight: α of the entailment score 1 / (1/sim(hyp‖pre) + α·(1 − cos(μ_hyp, μ_pre))) that
            binary NLI decides by; `None` or 0: sim(hyp‖pre). entailment_threshold: "entails" iff score ≥ it.
        point_embeddings: a point encoder (trained on μ alone), evaluated by cos(μ).
        logvar_min, logvar_max: clamp range of log σ² (default ±10, within ±30).
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
    mean_layers: int | None = None
    embedding_size: int | None = None
    similarity_reduction: str = "mean_kl"
    search_kl_weight: float | None = None
    entailment_cosine_weight: float | None = None
    entailment_threshold: float | None = None
    point_embeddings: bool = False
    logvar_min: float = -10.0
    logvar_max: float = 10.0

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.check()

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs):
        """``PreTrainedConfig.from_dict``, whose keyword overrides (``from_pretrained(path, search_kl_weight=…)``,
        ``AutoModel``'s, sentence-transformers' ``config_kwargs``) are set after ``__init__``: checked again."""
        encoder_config = config_dict.get("encoder_config")
        if encoder_config is not None and not isinstance(encoder_config, (dict, PreTrainedConfig)):
            kind = type(encoder_config).__name__
            raise ValueError(f"encoder_config must be an object (the encoder's own config), got a {kind}")
        loaded = super().from_dict(config_dict, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded).check()
        return loaded

    def __setattr__(self, key: str, value: Any) -> None:
        """A score setting (λ, α, the threshold) is checked whenever it is set."""
        if key in SCORE_SETTING_MAXIMA:
            check_number(key, value, SCORE_SETTING_MAXIMA[key])
        super().__setattr__(key, value)

    def check(self) -> None:
        """``ValueError`` naming the first field whose value a GaussCSE model cannot take."""
        for argument, valid in (
            ("pooling", POOLINGS),
            ("mean_activation", MEAN_ACTIVATIONS),
            ("head_init", HEAD_INITS),
        ):
            if getattr(self, argument) not in valid:
                raise ValueError(f"{argument} must be one of {valid}, got {getattr(self, argument)!r}")
        check_reduction(self.similarity_reduction)
        if not -LOGVAR_BOUND <= self.logvar_min < self.logvar_max <= LOGVAR_BOUND:
            bounds = f"-{LOGVAR_BOUND:g} <= logvar_min < logvar_max <= {LOGVAR_BOUND:g}"
            raise ValueError(f"need {bounds}, got logvar_min={self.logvar_min}, logvar_max={self.logvar_max}")
        check_trunk_layers(self)
        for name, maximum in SCORE_SETTING_MAXIMA.items():
            check_number(name, getattr(self, name), maximum)
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
        """Write ``config.json`` and ``SENTENCE_TRANSFORMERS_FILES``: every save loads with sentence-transformers."""
        super().save_pretrained(save_directory, push_to_hub=push_to_hub, **kwargs)
        for name, content in SENTENCE_TRANSFORMERS_FILES.items():
            write_json_atomic(Path(save_directory) / name, content)
