"""GaussCSE (Yoda et al., EACL 2024): forward, heads and similarity API. Ships with the weights as Hub custom code.

encoder → pooled vector v → μ = tanh(W_μ v + b_μ), log σ² = W_σ v + b_σ (clamped). With ``frozen_mean`` μ comes from
a frozen copy of the starting encoder; with ``variance_layers`` = k too, the frozen encoder gives μ and trained copies
of its top k layers give log σ².
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
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
from .devices_gausscse import EncodePool
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
from .gaussian import (
    EntailmentDirection,
    GaussianEmbeddings,
    entailment_direction,
    paired_similarity,
    similarity_matrix,
)
from .onnx_gausscse import OnnxSessions, model_onnx_encoder, remove_stale_graphs
from .shipped_gausscse import copy_shipped_files, sentence_transformers_module

# save_pretrained(..., push_to_hub=True, ...): the arguments it hands to push_to_hub once the folder is written
PUSH_ARGUMENTS = ("repo_id", "token", "private", "commit_message", "revision", "create_pr", "commit_description")
Sentences = GaussianEmbeddings | Sequence[str]


@dataclass
class GaussCSEOutput(ModelOutput):
    """Output of [`GaussCSEModel`]: ``mu``, ``logvar`` ``(batch, embedding_size)``; ``pooled_output`` v of the
    trained encoder ``(batch, hidden)``; ``last_hidden_state``, ``hidden_states``, ``attentions`` of the encoder."""

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
        """Fresh heads: weights N(0, initializer_range²), biases 0; with ``head_init="identity"`` an identity μ head
        and σ² = 1/d (zero weights, bias −log d), so KL(a‖b)/d = ‖μ_a − μ_b‖²/2."""
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


class GaussCSEModel(GaussCSEPreTrainedModel):
    """An encoder with a mean head and a log-variance head: each sentence becomes N(μ, diag σ²).

    Load with ``AutoModel.from_pretrained(path_or_hub_id, trust_remote_code=True)``; start from a pre-trained encoder
    with [`GaussCSEModel.from_backbone`].

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
        # [`backbone_record`] of the encoder's backbone (from_backbone, adapter folders), which adapter saves record
        self.backbone_record: dict | None = None
        self._onnx_encoders = OnnxSessions()
        self.post_init()
        self.freeze_mean_path()

    def freeze_mean_path(self) -> None:
        """With ``frozen_mean``: the μ path (encoder and head) takes no gradient and stays in eval mode."""
        if self.config.frozen_mean:
            self.mu_encoder.requires_grad_(False)
            self.mean_head.requires_grad_(False)
            self.mu_encoder.eval()

    @property
    def mu_encoder(self) -> nn.Module:
        """The encoder whose states give μ: ``mean_encoder`` (two paths), else ``encoder``."""
        return self.mean_encoder if self.mean_encoder is not None else self.encoder

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """``PreTrainedModel.from_pretrained``, refusing weights that do not fit ([`check_loading_info`]); an adapter
        folder is rebuilt from its backbone, adapter and heads ([`load_adapter_folder`])."""
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
            model.name_or_path = str(Path(pretrained_model_name_or_path, kwargs["subfolder"]))  # its ONNX graphs
        model.freeze_mean_path()
        return (model, info) if wants_info else model

    load_adapter_weights = load_adapter_weights
    load_head_weights = load_head_weights
    from_backbone = classmethod(model_from_backbone)

    def save_pretrained(
        self,
        save_directory: str | Path,
        *args,
        is_main_process: bool = True,
        state_dict: dict | None = None,
        push_to_hub: bool = False,
        **kwargs,
    ) -> None:
        """``PreTrainedModel.save_pretrained`` plus the tokenizer and every shipped code file, so the folder loads and
        encodes anywhere. An encoder with unmerged LoRA adapters is saved as an adapter folder instead
        ([`save_adapter_folder`]); either layout first removes the other's files. ONNX graphs of other weights are
        removed. ``state_dict`` is used for full folders only; ``push_to_hub=True`` uploads the finished folder
        (``repo_id``, default the folder's name, and ``PUSH_ARGUMENTS`` in ``kwargs``)."""
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
        """As ``nn.Module.train``; the frozen μ path stays in eval mode (no dropout)."""
        super().train(mode)
        if self.config.frozen_mean:
            self.mu_encoder.eval()
        return self

    def pool(self, last_hidden_state: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """v = h[:, 0] (``cls``) or the masked mean of h (``mean``): [`pool_tokens`]."""
        return pool_tokens(last_hidden_state, attention_mask, self.config.pooling)

    def pool_batch(
        self, last_hidden_state: torch.Tensor, attention_mask: torch.Tensor | None, sentence_index: torch.Tensor | None
    ) -> torch.Tensor:
        """One vector per sentence: [`pool`], or for packed rows (``sentence_index`` ``(R, L)``, −1 for padding)
        [`pool_packed_tokens`]."""
        if sentence_index is None:
            return self.pool(last_hidden_state, attention_mask)
        return pool_packed_tokens(last_hidden_state, sentence_index, self.config.pooling)

    def mean_from_pooled(self, pooled: torch.Tensor) -> torch.Tensor:
        """μ = tanh(W_μ v + b_μ) (no tanh with ``mean_activation="none"``), L2-normalised with ``normalize_mean``."""
        mu = self.mean_head(pooled)
        if self.config.mean_activation == "tanh":
            mu = torch.tanh(mu)
        return F.normalize(mu, dim=-1) if self.config.normalize_mean else mu

    def logvar_from_pooled(self, pooled: torch.Tensor) -> torch.Tensor:
        """log σ² = W_σ v + b_σ clamped to [``logvar_min``, ``logvar_max``]."""
        return self.logvar_head(pooled).clamp(self.config.logvar_min, self.config.logvar_max)

    def gaussian_heads(self, pooled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pooled v → (μ, log σ²) (a ``frozen_mean`` forward takes μ from its frozen path's own v)."""
        return self.mean_from_pooled(pooled), self.logvar_from_pooled(pooled)

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
        """Encode a batch: padded (one sentence per row, ``attention_mask`` ``(B, L)``) or packed (a block-diagonal
        ``(R, 1, L, L)`` bool mask, ``position_ids`` restarting at each sentence and ``sentence_index`` ``(R, L)``, −1
        for padding; then ``mu``/``logvar`` have one row per sentence, in index order)."""
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
        pool = partial(self.pool_batch, attention_mask=attention_mask, sentence_index=sentence_index)
        if self.variance_layers is not None:
            with torch.no_grad():  # the frozen μ path: never part of the graph
                encoder_output, caught = self._run_catching_top(encoder_inputs, kwargs)
            mu = self.mean_from_pooled(pool(encoder_output.last_hidden_state))
            hidden, *layer_args = caught["args"]
            for layer in self.variance_layers:
                hidden = layer(hidden, *layer_args, **caught["kwargs"])
                hidden = hidden[0] if isinstance(hidden, tuple) else hidden
            pooled = pool(hidden)
        else:
            encoder_output = self.encoder(**encoder_inputs, **kwargs, return_dict=True)
            pooled = pool(encoder_output.last_hidden_state)
            if self.mean_encoder is None:
                mu = self.mean_from_pooled(pooled)
            else:
                mean_inputs = {name: value for name, value in encoder_inputs.items() if not name.startswith("output_")}
                with torch.no_grad():  # the frozen μ path: never part of the graph
                    mean_hidden = self.mean_encoder(**mean_inputs, **kwargs, return_dict=True).last_hidden_state
                    mu = self.mean_from_pooled(pool(mean_hidden))
        output = GaussCSEOutput(
            mu=mu,
            logvar=self.logvar_from_pooled(pooled),
            pooled_output=pooled,
            last_hidden_state=encoder_output.last_hidden_state,
            hidden_states=encoder_output.get("hidden_states"),
            attentions=encoder_output.get("attentions"),
        )
        return output if (return_dict if return_dict is not None else self.config.return_dict) else output.to_tuple()

    def _run_catching_top(self, encoder_inputs: dict, kwargs: dict) -> tuple:
        """Run the encoder, catching the inputs (hidden states, prepared mask, ...) of its layer L − k."""
        layers = self.encoder.get_submodule(self._layers_path)
        caught: dict = {}

        def catch(module, args, layer_kwargs):
            caught.update(args=args, kwargs=layer_kwargs)

        hook = layers[len(layers) - len(self.variance_layers)].register_forward_pre_hook(catch, with_kwargs=True)
        try:
            return self.encoder(**encoder_inputs, **kwargs, return_dict=True), caught
        finally:
            hook.remove()

    # the user API: tokenizer and encode loop (encoding_gausscse.py), ONNX sessions (onnx_gausscse.py), similarities
    get_tokenizer = model_tokenizer
    encode = encode_sentences
    onnx_encoder = model_onnx_encoder
    stop_multi_process_pool = staticmethod(EncodePool.close)

    def start_multi_process_pool(self, target_devices: Sequence[str | torch.device] | None = None) -> EncodePool:
        """An [`EncodePool`] on ``target_devices`` (default: every CUDA device, else CPU processes) for
        ``encode(..., pool=pool)``."""
        return EncodePool(self, target_devices)

    def _pair(self, a: Sentences, b: Sentences, names=("a", "b"), rows: str | None = None) -> tuple:
        """``a``, ``b`` as checked 2-D [`GaussianEmbeddings`] (sentences are encoded) of one dimension and, for a
        row-wise use (``rows`` says which, for the message), of one length."""
        pair = []
        for name, value in zip(names, (a, b), strict=True):
            embeddings = value if isinstance(value, GaussianEmbeddings) else self.encode(check_sentences(name, value))
            if embeddings.mu.ndim == 1:
                embeddings = GaussianEmbeddings(embeddings.mu[None], embeddings.logvar[None])
            pair.append(embeddings.check(name))
        if pair[0].dim != pair[1].dim:
            raise ValueError(f"{names[0]} and {names[1]} have different dimensions: {pair[0].dim} and {pair[1].dim}")
        if rows is not None and len(pair[0]) != len(pair[1]):
            lengths = f"{len(pair[0])} and {len(pair[1])}"
            raise ValueError(f"{names[0]} and {names[1]} must have the same length{rows}, got {lengths}")
        return tuple(pair)

    def similarity(self, a: Sentences, b: Sentences) -> torch.Tensor:
        """All pairs S_ij = sim(a_i‖b_j) by ``config.similarity_reduction``, shape ``(len(a), len(b))``; ``a``, ``b``:
        [`GaussianEmbeddings`] or lists of sentences."""
        a, b = self._pair(a, b)
        return similarity_matrix(a.mu, a.logvar, b.mu, b.logvar, reduction=self.config.similarity_reduction)

    def similarity_pairwise(self, a: Sentences, b: Sentences) -> torch.Tensor:
        """Row-wise sim(a_i‖b_i), shape ``(N,)``: the diagonal of [`similarity`]; ``a``, ``b`` of the same length."""
        a, b = self._pair(a, b, rows=" for row-wise similarity")
        return paired_similarity(a.mu, a.logvar, b.mu, b.logvar, reduction=self.config.similarity_reduction)

    def entailment_score(self, premises: Sentences, hypotheses: Sentences) -> torch.Tensor:
        """Score that premise_i entails hypothesis_i: sim(hyp_i‖pre_i), shape ``(N,)``."""
        premises, hypotheses = self._pair(premises, hypotheses, ("premises", "hypotheses"), rows="")
        return self.similarity_pairwise(hypotheses, premises)

    def entailment_direction(self, a: Sentences, b: Sentences) -> EntailmentDirection:
        """Per pair, does a_i entail b_i rather than b_i entail a_i? Both rules of the paper (§3.2):
        [`entailment_direction`]."""
        a, b = self._pair(a, b, rows="")
        return entailment_direction(a, b, self.config.similarity_reduction)

    def as_sentence_transformer(self, tokenizer=None, direction: str = "entailing", score: str = "auto"):
        """This model as a ``SentenceTransformer`` (sentence-transformers ≥ 6), as ``SentenceTransformer(folder,
        trust_remote_code=True)`` loads a saved folder: ``encode`` → μ; ``encode_query`` / ``encode_document`` →
        vectors whose dot product is −KL(query‖document) or the model's search score (``direction``, ``score``: see
        ``sentence_transformer_gausscse.py``)."""
        # by name at call time: that module imports this one, and AutoModel does not require sentence-transformers
        return sentence_transformers_module().to_sentence_transformer(self, tokenizer, direction=direction, score=score)


GaussCSEConfig.register_for_auto_class()
GaussCSEModel.register_for_auto_class("AutoModel")
# No AutoConfig/AutoModel.register here: this file also runs as a folder's remote code, and registering then would make
# later folders run the first folder's code. The installed package registers instead (gausscse/model/__init__.py).

# gausscse.cli imports DEFAULT_MAX_LENGTH and resolve_max_length from here
__all__ = ["DEFAULT_MAX_LENGTH", "EntailmentDirection", "GaussCSEModel", "GaussCSEOutput", "resolve_max_length"]
