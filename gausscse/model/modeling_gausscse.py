"""GaussCSE (Yoda et al., EACL 2024): forward, heads and similarity API (ships with the weights as Hub custom code)."""

from __future__ import annotations

import copy
import importlib
import math
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import ModelOutput

from .adapters_gausscse import (
    AdapterMixin,
    base_record,
    check_loading_info,
    check_not_old_layout,
    is_adapter_model,
    remove_other_layout,
    write_adapter_extras,
)
from .backbone_gausscse import BackboneMixin, build_encoder, encoder_layers_path
from .configuration_gausscse import GaussCSEConfig
from .encoding_gausscse import (
    DEFAULT_MAX_LENGTH,
    EncodeMixin,
    check_sentences,
    pool_packed_tokens,
    pool_tokens,
    resolve_max_length,
)
from .gaussian import (
    EntailmentDirection,
    GaussianEmbeddings,
    entailment_direction,
    paired_entailment_score,
    paired_similarity,
    similarity_matrix,
)
from .onnx_gausscse import OnnxMixin, OnnxSessions, remove_stale_graphs
from .shipped_gausscse import SENTENCE_TRANSFORMERS_MODULE, copy_shipped_files
from .utils_gausscse import load_whole


class _ReachedLayer(Exception):
    """Raised by ``GaussCSEModel.frozen_part``'s hook to stop the encoder at the first trained layer."""


PUSH_ARGUMENTS = ("repo_id", "token", "private", "commit_message", "revision", "create_pr", "commit_description")
Sentences = GaussianEmbeddings | Sequence[str]


@dataclass
class GaussCSEOutput(ModelOutput):
    """Output of [`GaussCSEModel`]: ``mu``, ``logvar`` ``(batch, d)``, ``pooled_output`` and the encoder's states."""

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


class GaussCSEModel(EncodeMixin, OnnxMixin, BackboneMixin, AdapterMixin, PreTrainedModel):
    """An encoder with a mean head and a log-variance head: each sentence becomes N(μ, diag σ²)."""

    config_class = GaussCSEConfig
    base_model_prefix = "gausscse"
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Fresh heads: N(0, initializer_range²), zero biases; with ``head_init="identity"``: identity μ, σ² = 1/d."""
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
            init.normal_(module.weight, mean=0.0, std=getattr(self.config.encoder_config, "initializer_range", 0.02))
            init.zeros_(module.bias)

    def __init__(
        self,
        config: GaussCSEConfig,
        encoder: PreTrainedModel | None = None,
        mean_encoder: PreTrainedModel | None = None,
    ):
        super().__init__(config)
        self.encoder = encoder if encoder is not None else build_encoder(config.encoder_config)
        self.mean_encoder = None
        self.variance_layers = None
        if config.variance_layers:  # one trunk: the encoder is the frozen μ path, log σ² from copies of its top
            if mean_encoder is not None:
                raise ValueError("mean_encoder is for two paths; with variance_layers the encoder itself gives μ")
            self._layers_path = encoder_layers_path(self.encoder)
            top = self.encoder.get_submodule(self._layers_path)[-config.variance_layers :]
            self.variance_layers = nn.ModuleList(copy.deepcopy(layer) for layer in top)
        elif config.frozen_mean and mean_encoder is not None:
            self.mean_encoder = mean_encoder
        elif config.frozen_mean:  # a copy of the encoder given (it starts where μ stays), else built to be loaded
            self.mean_encoder = copy.deepcopy(encoder) if encoder is not None else build_encoder(config.encoder_config)
        elif mean_encoder is not None:
            raise ValueError("mean_encoder is only used with frozen_mean=True")
        hidden_size = config.encoder_config.hidden_size
        self.mean_head = nn.Linear(hidden_size, config.embedding_size)
        self.logvar_head = nn.Linear(hidden_size, config.embedding_size)
        self._tokenizer = None
        self._onnx_encoders = OnnxSessions()
        self.post_init()
        self.freeze_mean_path()

    def frozen_modules(self) -> list[nn.Module]:
        """What takes no gradient and stays in eval mode: with ``frozen_mean`` the μ path (encoder and head); on one
        trunk whose μ learns, an identity μ head (μ stays the pooled vector) and, with ``mean_layers`` = k, the
        encoder's embeddings and layers below its top k; else nothing."""
        config = self.config
        if config.frozen_mean:  # μ from mean_encoder (two paths), else from the encoder itself
            return [self.mean_head, self.mean_encoder if self.mean_encoder is not None else self.encoder]
        if self.variance_layers is None:
            return []
        frozen = [self.mean_head] if config.head_init == "identity" else []
        if config.mean_layers:
            layers = self.encoder.get_submodule(self._layers_path)
            outside = [child for child in self.encoder.children() if all(m is not layers for m in child.modules())]
            frozen += [*layers[: len(layers) - config.mean_layers], *outside]  # the embeddings, the layers below
        return frozen

    def freeze_mean_path(self) -> None:
        """[`frozen_modules`] take no gradient and stay in eval mode (no dropout)."""
        for module in self.frozen_modules():
            module.requires_grad_(False).eval()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """``PreTrainedModel.from_pretrained`` (an adapter folder: its base model, then the adapter), refusing weights
        that do not fit and adapter folders of the earlier layout (with the command that converts them)."""
        check_not_old_layout(pretrained_model_name_or_path, kwargs)
        wants_info = kwargs.pop("output_loading_info", False)
        folder = Path(str(pretrained_model_name_or_path), kwargs.get("subfolder") or "")
        model, info = load_whole(  # never a mix of two saves: the old model or the new one, or refused
            folder,
            lambda: super(GaussCSEModel, cls).from_pretrained(
                pretrained_model_name_or_path, *model_args, output_loading_info=True, **kwargs
            ),
        )
        check_loading_info(pretrained_model_name_or_path, info)
        if kwargs.get("subfolder") and Path(pretrained_model_name_or_path, kwargs["subfolder"]).is_dir():
            model.name_or_path = str(Path(pretrained_model_name_or_path, kwargs["subfolder"]))  # its ONNX graphs
        model.freeze_mean_path()
        return (model, info) if wants_info else model

    def save_pretrained(
        self, save_directory: str | Path, *args, is_main_process: bool = True, push_to_hub: bool = False, **kwargs
    ) -> None:
        """``PreTrainedModel.save_pretrained`` (with adapters loaded: peft's adapter folder) plus the tokenizer and
        shipped code; removes ONNX graphs of other weights; ``push_to_hub`` uploads the finished folder
        (``PUSH_ARGUMENTS``; ``repo_id`` default: the folder's name)."""
        if not is_main_process:
            return
        hub_arguments = {key: kwargs.pop(key) for key in PUSH_ARGUMENTS if key in kwargs}
        folder = Path(save_directory)
        adapter = is_adapter_model(self)
        remove_other_layout(folder, adapter)
        super().save_pretrained(folder, *args, **kwargs)
        if adapter:  # transformers wrote peft's files only
            write_adapter_extras(folder, base_record(self.adapter_base()), self.config)
        self.save_tokenizer(folder)
        written = "adapter_config.json" if adapter else "config.json"
        for path in folder.glob("*model*.safetensors"):  # safetensors writes 0600: the mode of the config just written
            path.chmod((folder / written).stat().st_mode & 0o777)
        copy_shipped_files(folder)
        remove_stale_graphs(folder, self)
        if push_to_hub:
            self.push_to_hub(hub_arguments.pop("repo_id", folder.name), **hub_arguments)

    def train(self, mode: bool = True) -> GaussCSEModel:
        """As ``nn.Module.train``; the frozen modules ([`frozen_modules`]) stay in eval mode (no dropout)."""
        super().train(mode)
        for module in self.frozen_modules():
            module.eval()
        return self

    def pool(
        self,
        last_hidden_state: torch.Tensor,
        attention_mask: torch.Tensor | None,
        sentence_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One vector per sentence: [`pool_tokens`], or [`pool_packed_tokens`] for packed rows (``sentence_index``)."""
        if sentence_index is None:
            return pool_tokens(last_hidden_state, attention_mask, self.config.pooling)
        return pool_packed_tokens(last_hidden_state, sentence_index, self.config.pooling)

    def gaussian_mean(self, pooled: torch.Tensor) -> torch.Tensor:
        """Pooled v → μ = tanh(W_μ v + b_μ) (``mean_activation``), L2-normalised with ``normalize_mean``."""
        mu = self.mean_head(pooled)
        if self.config.mean_activation == "tanh":
            mu = torch.tanh(mu)
        return F.normalize(mu, dim=-1) if self.config.normalize_mean else mu

    def gaussian_heads(self, pooled: torch.Tensor, mu: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Pooled v → (μ, log σ² = W_σ v + b_σ clamped); ``mu`` if given (a frozen μ path's [`gaussian_mean`])."""
        mu = self.gaussian_mean(pooled) if mu is None else mu
        return mu, self.logvar_head(pooled).clamp(self.config.logvar_min, self.config.logvar_max)

    def cached_from(self) -> int | None:
        """The encoder layer where a training step's work begins: what lies below it (and, for a frozen μ, μ itself)
        no step can change, so [`frozen_part`] computes it once per sentence; ``None`` where nothing is frozen
        below a trained layer (two paths, one encoder, a trunk whose whole encoder learns)."""
        config, layers = self.config, self.config.encoder_config.num_hidden_layers
        if self.variance_layers is None or not (config.frozen_mean or config.mean_layers):
            return None
        return layers - max(config.variance_layers, 0 if config.frozen_mean else config.mean_layers)

    @torch.no_grad()
    def frozen_part(self, **inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What no training step changes, for a batch of encoder inputs (padded or packed, no ``sentence_index``):
        the hidden states entering layer [`cached_from`] ``(R, L, h)`` and, for a frozen μ, μ of each sentence
        (pooled with ``sentence_index`` where given). [`forward`] takes both back as ``frozen_states`` /
        ``frozen_mu``."""
        start = self.cached_from()
        if start is None:
            raise ValueError("this model has no frozen part below a trained layer (see GaussCSEModel.cached_from)")
        sentence_index = inputs.pop("sentence_index", None)
        layers = self.encoder.get_submodule(self._layers_path)
        frozen_mean = self.config.frozen_mean
        caught: dict = {}

        def catch(module, args, layer_kwargs):
            caught["hidden"] = args[0]
            if not frozen_mean:  # a learning μ: nothing above this layer is frozen, so the encoder stops here
                raise _ReachedLayer

        hook = layers[start].register_forward_pre_hook(catch, with_kwargs=True)
        training = self.training
        self.encoder.eval()  # as in training, where the frozen layers stay in eval mode: no dropout drawn
        try:
            last_hidden_state = self.encoder(**inputs, return_dict=True).last_hidden_state
        except _ReachedLayer:
            return caught["hidden"], None
        finally:
            hook.remove()
            self.train(training)
        return caught["hidden"], self.gaussian_mean(
            self.pool(last_hidden_state, inputs.get("attention_mask"), sentence_index)
        )

    def run_layers(
        self, layers, hidden: torch.Tensor, trunk_inputs: dict, caught: dict | None = None, branch: int | None = None
    ) -> torch.Tensor:
        """``hidden`` through ``layers`` with the prepared layer inputs of ``trunk_inputs`` (``args``, ``kwargs``);
        the input of layer ``branch`` into ``caught["hidden"]``."""
        for index, layer in enumerate(layers):
            if index == branch:
                caught["hidden"] = hidden
            hidden = layer(hidden, *trunk_inputs["args"], **trunk_inputs["kwargs"])
            hidden = hidden[0] if isinstance(hidden, tuple) else hidden
        return hidden

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
        frozen_states: torch.Tensor | None = None,
        frozen_mu: torch.Tensor | None = None,
        **kwargs,
    ) -> GaussCSEOutput | tuple:
        """Encode a batch: padded, or packed (block-diagonal ``(R, 1, L, L)`` mask, restarting ``position_ids`` and
        ``sentence_index`` ``(R, L)``, −1 for padding: one ``mu``/``logvar`` row per sentence, in index order).
        ``frozen_states`` (and ``frozen_mu``): [`frozen_part`] of this batch, computed earlier: only the layers from
        [`cached_from`] on run (the same Gaussians, to float32 rounding)."""
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
        pool = partial(self.pool, attention_mask=attention_mask, sentence_index=sentence_index)
        if self.variance_layers is not None:
            layers = self.encoder.get_submodule(self._layers_path)
            branch = len(layers) - len(self.variance_layers)
            caught: dict = {}  # the input of the encoder's layer L − k, where the copies branch off
            if frozen_states is not None:
                start = self.cached_from()
                trunk_inputs = {"args": (self.layer_mask(frozen_states, attention_mask),), "kwargs": {}}
                caught["hidden"] = frozen_states
                if frozen_mu is None:  # μ learns: the encoder's layers from `start` on
                    last_hidden_state = self.run_layers(
                        layers[start:], frozen_states, trunk_inputs, caught, branch - start
                    )
                    mu = self.gaussian_mean(pool(last_hidden_state))
                else:
                    last_hidden_state, mu = None, frozen_mu
                encoder_output = BaseModelOutput(last_hidden_state=last_hidden_state)
            else:

                def catch(module, args, layer_kwargs):
                    caught.update(hidden=args[0], args=args[1:], kwargs=layer_kwargs)

                hook = layers[branch].register_forward_pre_hook(catch, with_kwargs=True)
                try:  # a frozen μ path is never part of the graph; a learning one from its lowest trained layer on
                    with torch.no_grad() if self.config.frozen_mean else nullcontext():
                        encoder_output = self.encoder(**encoder_inputs, **kwargs, return_dict=True)
                finally:
                    hook.remove()
                mu = self.gaussian_mean(pool(encoder_output.last_hidden_state))
                trunk_inputs = caught
            pooled = pool(self.run_layers(self.variance_layers, caught["hidden"], trunk_inputs))
        else:
            encoder_output = self.encoder(**encoder_inputs, **kwargs, return_dict=True)
            pooled, mu = pool(encoder_output.last_hidden_state), None
            if self.mean_encoder is not None:
                mean_inputs = {name: value for name, value in encoder_inputs.items() if not name.startswith("output_")}
                with torch.no_grad():  # the frozen μ path: never part of the graph
                    mean_hidden = self.mean_encoder(**mean_inputs, **kwargs, return_dict=True).last_hidden_state
                    mu = self.gaussian_mean(pool(mean_hidden))
        mu, logvar = self.gaussian_heads(pooled, mu)
        output = GaussCSEOutput(
            mu=mu,
            logvar=logvar,
            pooled_output=pooled,
            last_hidden_state=encoder_output.last_hidden_state,
            hidden_states=encoder_output.get("hidden_states"),
            attentions=encoder_output.get("attentions"),
        )
        return output if (return_dict if return_dict is not None else self.config.return_dict) else output.to_tuple()

    def layer_mask(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None):
        """The attention mask as the encoder prepares it for its layers (transformers' ``create_bidirectional_mask``),
        for the layers run on [`frozen_part`]'s states."""
        return create_bidirectional_mask(
            config=self.encoder.config, inputs_embeds=hidden, attention_mask=attention_mask
        )

    # the user API beside the mixins' (EncodeMixin: tokenizer, encode, pools; OnnxMixin: sessions): similarities
    def _pair(self, a: Sentences, b: Sentences, names=("a", "b"), rows: str | None = None) -> tuple:
        """``a``, ``b`` as checked 2-D [`GaussianEmbeddings`] of one dimension (one length for ``rows``)."""
        pair = []
        for name, value in zip(names, (a, b), strict=True):
            embeddings = value if isinstance(value, GaussianEmbeddings) else self.encode(check_sentences(name, value))
            pair.append((embeddings[None] if embeddings.mu.ndim == 1 else embeddings).check(name))
        if pair[0].dim != pair[1].dim:
            raise ValueError(f"{names[0]} and {names[1]} have different dimensions: {pair[0].dim} and {pair[1].dim}")
        if rows is not None and len(pair[0]) != len(pair[1]):
            lengths = f"{len(pair[0])} and {len(pair[1])}"
            raise ValueError(f"{names[0]} and {names[1]} must have the same length{rows}, got {lengths}")
        return tuple(pair)

    def similarity(self, a: Sentences, b: Sentences) -> torch.Tensor:
        """All pairs S_ij = sim(a_i‖b_j), ``(len(a), len(b))``; ``a``, ``b``: embeddings or sentences."""
        a, b = self._pair(a, b)
        return similarity_matrix(a.mu, a.logvar, b.mu, b.logvar, reduction=self.config.similarity_reduction)

    def similarity_pairwise(self, a: Sentences, b: Sentences) -> torch.Tensor:
        """Row-wise sim(a_i‖b_i), shape ``(N,)``: the diagonal of [`similarity`]; ``a``, ``b`` of the same length."""
        a, b = self._pair(a, b, rows=" for row-wise similarity")
        return paired_similarity(a.mu, a.logvar, b.mu, b.logvar, reduction=self.config.similarity_reduction)

    def entailment_score(self, premises: Sentences, hypotheses: Sentences) -> torch.Tensor:
        """Score in [0, 1] that premise_i entails hypothesis_i, shape ``(N,)``: sim(hyp_i‖pre_i), or with the config's
        ``entailment_cosine_weight`` α, 1 / (1/sim(hyp_i‖pre_i) + α·(1 − cos(μ_hyp_i, μ_pre_i)))."""
        premises, hypotheses = self._pair(premises, hypotheses, ("premises", "hypotheses"), rows="")
        config = self.config
        return paired_entailment_score(
            hypotheses.mu,
            hypotheses.logvar,
            premises.mu,
            premises.logvar,
            config.similarity_reduction,
            config.entailment_cosine_weight,
        )

    def entails(self, premises: Sentences, hypotheses: Sentences) -> torch.Tensor:
        """Per pair, does premise_i entail hypothesis_i? [`entailment_score`] ≥ the config's ``entailment_threshold``
        (chosen on SNLI dev at the end of training), shape ``(N,)``, bool."""
        if self.config.entailment_threshold is None:
            raise ValueError(
                "entails() needs a model whose config states entailment_threshold (set at the end of "
                "training, or by python -m gausscse.evaluation.entailment_weight --model DIR)"
            )
        return self.entailment_score(premises, hypotheses) >= self.config.entailment_threshold

    def entailment_direction(self, a: Sentences, b: Sentences) -> EntailmentDirection:
        """Per pair, does a_i entail b_i? Both rules of the paper (§3.2): [`entailment_direction`]."""
        a, b = self._pair(a, b, rows="")
        return entailment_direction(a, b, self.config.similarity_reduction)

    def as_sentence_transformer(self, tokenizer=None, direction: str = "entailing", score: str = "auto"):
        """This model as a ``SentenceTransformer`` (≥ 6): ``encode`` → μ; query/document: dot = −KL or the score."""
        # by name at call time: that module imports this one, and AutoModel does not require sentence-transformers
        st_code = importlib.import_module(f".{SENTENCE_TRANSFORMERS_MODULE}", __package__)
        module = st_code.GaussCSETransformer(self, self.get_tokenizer(tokenizer), direction=direction, score=score)
        return st_code.GaussCSESentenceTransformer(modules=[module], similarity_fn_name="dot", device=str(self.device))


GaussCSEConfig.register_for_auto_class()
GaussCSEModel.register_for_auto_class("AutoModel")
# No AutoConfig/AutoModel.register here (remote code: later folders would run the first one's); see __init__.py.
__all__ = ["DEFAULT_MAX_LENGTH", "EntailmentDirection", "GaussCSEModel", "GaussCSEOutput", "resolve_max_length"]
