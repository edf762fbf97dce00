"""GaussCSE: sentences as diagonal Gaussians (Yoda et al., EACL 2024). Ships with the weights as Hub custom code.

encoder → pooled vector v ([CLS] / ``<s>`` or mean) → μ = tanh(W_μ v + b_μ), log σ² = W_σ v + b_σ (clamped).
With ``frozen_mean`` μ comes from a second, frozen copy of the encoder it started from (two paths); with
``variance_layers`` = k as well, the encoder itself is the frozen μ path and log σ² comes from trained copies of its
top k layers run on its own lower states (one shared trunk).

This file is the model: forward, heads, similarity API; the rest is in the other shipped files (shipped_gausscse.py).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.utils import ModelOutput

from .adapters_gausscse import (
    adapter_heads_file,
    check_loading_info,
    has_adapter,
    load_adapter_folder,
    load_adapter_weights,
    load_head_weights,
    remove_other_layout,
    save_adapter_folder,
    share_weight_files,
)
from .backbone_gausscse import build_encoder, encoder_layers_path, model_from_backbone
from .configuration_gausscse import GaussCSEConfig
from .devices_gausscse import start_multi_process_pool, stop_multi_process_pool
from .encoding_gausscse import (
    DEFAULT_MAX_LENGTH,
    check_sentences,
    encode_sentences,
    model_tokenizer,
    pool_packed_tokens,
    pool_tokens,
    resolve_max_length,
    save_model_tokenizer,
)
from .gaussian import EntailmentDirection, GaussianEmbeddings, paired_similarity, similarity_matrix
from .onnx_gausscse import OnnxSessions, model_onnx_encoder, remove_stale_graphs
from .shipped_gausscse import copy_shipped_files, sentence_transformers_module

# save_pretrained(..., push_to_hub=True, ...): the arguments it hands to push_to_hub once the folder is written
PUSH_ARGUMENTS = ("repo_id", "token", "private", "commit_message", "revision", "create_pr", "commit_description")


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
        self.encoder = encoder if encoder is not None else build_encoder(config.encoder_config)
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
            self.mean_encoder = copy.deepcopy(encoder) if encoder is not None else build_encoder(config.encoder_config)
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
        """``PreTrainedModel.from_pretrained`` refusing weights that do not fit ([`check_loading_info`]); an adapter
        folder (``HEADS_FILE``) is rebuilt from its backbone, adapter and heads (``load_adapter_folder``); a local
        ``subfolder`` joins ``name_or_path`` (its ONNX graphs are there). Then [`freeze_mean_path`]."""
        heads_file = adapter_heads_file(pretrained_model_name_or_path, kwargs)
        wants_info = kwargs.pop("output_loading_info", False)
        if heads_file is not None:  # the adapter and heads are checked on loading
            model = load_adapter_folder(cls, pretrained_model_name_or_path, heads_file, **kwargs)
            info = {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": [], "error_msgs": []}
        else:
            model, info = super().from_pretrained(
                pretrained_model_name_or_path, *model_args, output_loading_info=True, **kwargs
            )
            check_loading_info(pretrained_model_name_or_path, info)
        if kwargs.get("subfolder") and Path(pretrained_model_name_or_path, kwargs["subfolder"]).is_dir():
            model.name_or_path = str(Path(pretrained_model_name_or_path, kwargs["subfolder"]))
        model.freeze_mean_path()
        return (model, info) if wants_info else model

    load_adapter_weights = load_adapter_weights  # the adapter-folder layout (adapters_gausscse.py)
    load_head_weights = load_head_weights

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
        removes what the other layout left in the folder ([`remove_other_layout`]), so it holds one model; then every
        shipped code file is copied ([`copy_shipped_files`]) and the ONNX graphs of ``onnx/`` exported from other
        weights removed ([`remove_stale_graphs`]; this model's stay).
        ``state_dict`` (as Trainer passes it for checkpoints) is used for full folders only. ``push_to_hub=True``
        uploads once the whole folder is written (``repo_id``, default the folder's name, and the other arguments
        of [`push_to_hub`] in ``kwargs``)."""
        if not is_main_process:
            return
        hub_arguments = {key: kwargs.pop(key) for key in PUSH_ARGUMENTS if key in kwargs}
        folder = Path(save_directory)
        if has_adapter(self.encoder):
            weight_files = save_adapter_folder(self, folder)
        else:
            remove_other_layout(folder, adapter=False)
            super().save_pretrained(folder, *args, state_dict=state_dict, **kwargs)
            weight_files = list(folder.glob("model*.safetensors"))
        save_model_tokenizer(self, folder)
        share_weight_files(weight_files, like=folder / "config.json")
        copy_shipped_files(folder)
        remove_stale_graphs(folder, self)
        if push_to_hub:
            self.push_to_hub(hub_arguments.pop("repo_id", folder.name), **hub_arguments)

    def train(self, mode: bool = True) -> GaussCSEModel:
        """As ``nn.Module.train``; the frozen μ path stays in eval mode (no dropout), so μ is deterministic."""
        super().train(mode)
        if self.config.frozen_mean:
            self.mu_encoder.eval()
        return self

    # starting from a pre-trained encoder (backbone_gausscse.py)
    from_backbone = classmethod(model_from_backbone)

    def pool(self, last_hidden_state: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """v = h[:, 0] (``cls``) or the attention-masked mean of h over tokens (``mean``): [`pool_tokens`]."""
        return pool_tokens(last_hidden_state, attention_mask, self.config.pooling)

    def pool_packed(self, last_hidden_state: torch.Tensor, sentence_index: torch.Tensor) -> torch.Tensor:
        """Pool packed rows (``sentence_index`` ``(R, L)``: each token's sentence, −1 for padding) into ``(S, hidden)``:
        the first token (``cls``) or the mean of each sentence's tokens (``mean``): [`pool_packed_tokens`]."""
        return pool_packed_tokens(last_hidden_state, sentence_index, self.config.pooling)

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

    # ---------------------------------------------- user API: the tokenizer and the encode loop (encoding_gausscse.py),
    # the ONNX sessions of backend="onnx" (onnx_gausscse.py); the similarity API
    get_tokenizer = model_tokenizer
    encode = encode_sentences
    start_multi_process_pool = start_multi_process_pool
    stop_multi_process_pool = staticmethod(stop_multi_process_pool)
    onnx_encoder = model_onnx_encoder

    def _as_embeddings(self, argument: str, value: GaussianEmbeddings | Sequence[str]) -> GaussianEmbeddings:
        if isinstance(value, GaussianEmbeddings):
            embeddings = value
        else:
            embeddings = self.encode(check_sentences(argument, value))
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
        # by name at call time: that module imports this one, and sentence-transformers is no requirement of AutoModel
        return sentence_transformers_module().to_sentence_transformer(self, tokenizer, direction=direction, score=score)


GaussCSEConfig.register_for_auto_class()
GaussCSEModel.register_for_auto_class("AutoModel")
# No AutoConfig/AutoModel.register here: this file also runs as a saved folder's remote code, and a registration made
# then would make every later GaussCSE folder run the first folder's code. The installed package registers instead
# (gausscse/model/__init__.py), so each folder loaded with trust_remote_code runs the code shipped with it.


# DEFAULT_MAX_LENGTH and resolve_max_length (encoding_gausscse.py's) are imported from here by gausscse.cli
__all__ = ["DEFAULT_MAX_LENGTH", "EntailmentDirection", "GaussCSEModel", "GaussCSEOutput", "resolve_max_length"]
