"""GaussCSE as a sentence-transformers (≥ 6) model: ``SentenceTransformer(folder_or_hub_id, trust_remote_code=True)``.

Routes (``direction="entailing"``), with A, B of ``kl_feature_map``: ``encode`` → μ; ``encode_query`` → −A(q) and
``encode_document`` → B(x) (2d + 2 float32 values), so dot = −KL(q‖x); a model stating a search score (λ) routes to
[μ/‖μ‖, −(λ/d)·A(q)] and [μ/‖μ‖, B(x)], dot = cos − λ·KL/d. ``"entailed_by"`` swaps the sides; ``"none"`` gives μ.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer
from transformers.utils import logging

from .configuration_gausscse import SENTENCE_TRANSFORMERS_FILES, model_fingerprint, write_json_atomic
from .encoding_gausscse import DEFAULT_MAX_LENGTH, ENCODE_BACKENDS, check_sentences, resolve_max_length
from .gaussian import KL_REDUCTIONS, SEARCH_DIRECTIONS, query_map, search_map_width, stored_map
from .modeling_gausscse import GaussCSEModel
from .onnx_gausscse import TOKEN_INPUTS, OnnxGaussianEncoder

try:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import InputModule
except ImportError as error:  # in a try block, so transformers' import check lets AutoModel users load without it
    raise ImportError("GaussCSE's sentence-transformers face needs `pip install 'sentence-transformers>=6'`") from error

logger = logging.get_logger(__name__)

DIRECTIONS = {**SEARCH_DIRECTIONS, "none": None}
ROUTE_TASKS = ("query", "document")  # the tasks encode_query / encode_document pass
SCORES = ("auto", "search", "similarity")  # what the routes' dot product is
ONNX_MODEL_KWARGS = ("file_name", "provider", "export")  # backend="onnx" model_kwargs: OnnxGaussianEncoder.from_model
_ENCODE_SIGNATURE = inspect.signature(SentenceTransformer.encode)


def _check_task(task: str | None) -> None:
    if task is not None and task not in ROUTE_TASKS:
        raise ValueError(f"task must be 'query', 'document' or None, got {task!r}")


class GaussCSETransformer(InputModule):
    """The whole GaussCSE model as one sentence-transformers input module.

    Args:
        model, tokenizer: the [`GaussCSEModel`] and its tokenizer.
        max_seq_length: truncation in tokens; default and cap: the encoder's limit ([`resolve_max_length`]).
        direction: what ``encode_query``/``encode_document`` retrieve: ``"entailing"`` (documents x entailing the
            query q, dot = −KL(q‖x)), ``"entailed_by"`` (dot = −KL(x‖q)) or ``"none"`` (μ).
        onnx_encoder: an [`OnnxGaussianEncoder`] running the forward pass (``backend="onnx"``).
        score: the routes' dot product: ``"search"`` (the model's search score), ``"similarity"`` (−KL) or ``"auto"``
            (the search score when the model's config states ``search_kl_weight``).
    """

    config_file_name = "sentence_bert_config.json"
    config_keys = ["max_seq_length", "direction", "score"]  # noqa: RUF012 — sentence-transformers' class attribute
    forward_kwargs = {"task"}  # noqa: RUF012 — encode_query / encode_document pass task="query" / "document"
    save_in_root = True

    def __init__(
        self,
        model: GaussCSEModel,
        tokenizer,
        max_seq_length: int | None = DEFAULT_MAX_LENGTH,
        direction: str = "entailing",
        onnx_encoder: OnnxGaussianEncoder | None = None,
        score: str = "auto",
    ):
        super().__init__()
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {tuple(DIRECTIONS)}, got {direction!r}")
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        kl_weight = getattr(model.config, "search_kl_weight", None)
        if score == "search" and kl_weight is None:
            raise ValueError("score='search' needs a model whose config states search_kl_weight")
        self.score = score
        # λ of the routes' search score; None for −KL
        self.kl_weight = None if score == "similarity" or direction == "none" else kl_weight
        self.model = model
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.direction = direction
        self.onnx_encoder = onnx_encoder
        reduction = model.config.similarity_reduction
        if direction != "none" and self.kl_weight is None and reduction not in KL_REDUCTIONS:
            logger.warning(
                f"This GaussCSE model's similarity_reduction is {reduction!r}; encode_query/encode_document give "
                "vectors whose dot product is −KL, so sentence-transformers ranks by the total KL (the 'sum' form "
                "1/(1 + Σ_k KL_k)), not by mean_k 1/(1 + KL_k). GaussCSEModel.similarity computes the model's own form."
            )

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        model_kwargs: dict[str, Any] | None = None,
        processor_kwargs: dict[str, Any] | None = None,
        config_kwargs: dict[str, Any] | None = None,
        **kwargs,
    ) -> GaussCSETransformer:
        """Load the model, its tokenizer and ``sentence_bert_config.json`` from a folder or Hub repo; with
        ``backend="onnx"`` also the ONNX graph ``model_kwargs["file_name"]`` (default ``onnx/model.onnx``) on
        ``model_kwargs["provider"]`` ([`OnnxGaussianEncoder.from_model`], ``model_kwargs["export"]``)."""
        backend = kwargs.get("backend", "torch")
        if backend not in ENCODE_BACKENDS:
            raise ValueError(
                f"backend={backend!r}: a GaussCSE model runs with backend 'torch' or 'onnx' (ONNX Runtime on the "
                "folder's onnx/ graph); OpenVINO is not supported"
            )
        model_kwargs = dict(model_kwargs or {})
        onnx_kwargs = {key: model_kwargs.pop(key) for key in ONNX_MODEL_KWARGS if key in model_kwargs}
        if onnx_kwargs and backend != "onnx":
            raise ValueError(f"model_kwargs {sorted(onnx_kwargs)} are for backend='onnx', the backend is {backend!r}")
        where = {"subfolder": subfolder, "token": token, "revision": revision, "local_files_only": local_files_only}
        config = cls.load_config(model_name_or_path, cache_folder=cache_folder, **where)
        hub = {**where, "cache_dir": cache_folder}
        model = GaussCSEModel.from_pretrained(model_name_or_path, **hub, **(config_kwargs or {}), **model_kwargs)
        tokenizer = AutoTokenizer.from_pretrained(
            model_name_or_path, config=model.config, **hub, **(processor_kwargs or {})
        )
        onnx_encoder = None
        if backend == "onnx":
            model.get_tokenizer(tokenizer)
            onnx_encoder = OnnxGaussianEncoder.from_model(model, **onnx_kwargs)
        return cls(model, tokenizer, **config, onnx_encoder=onnx_encoder)

    def preprocess(self, inputs: Sequence[str], prompt: str | None = None, **kwargs) -> dict[str, torch.Tensor]:
        """Tokenise ``inputs`` (strings; ``prompt`` is prepended) into one padded, truncated batch."""
        texts = check_sentences("inputs", inputs)
        if prompt:
            texts = self._prepend_prompt(texts, prompt)
        max_length = resolve_max_length(self.tokenizer, self.model.config.encoder_config, self.max_seq_length)
        return self.tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")

    def forward(self, features: dict[str, Any], task: str | None = None, **kwargs) -> dict[str, Any]:
        """Add ``mu``, ``logvar`` (float32), ``token_embeddings`` and the route's ``sentence_embedding`` ([`route`])."""
        inputs = {name: features[name] for name in TOKEN_INPUTS if name in features}
        if self.onnx_encoder is None:
            output = self.model(**inputs)
            mu, logvar, token_embeddings = output.mu.float(), output.logvar.float(), output.last_hidden_state
        else:
            output = self.onnx_encoder(inputs)
            mu, logvar, token_embeddings = output["mu"], output["logvar"], output["last_hidden_state"]
        features.update(mu=mu, logvar=logvar, token_embeddings=token_embeddings)
        features["sentence_embedding"] = self.route(mu, logvar, task)
        return features

    def route(self, mu: torch.Tensor, logvar: torch.Tensor, task: str | None) -> torch.Tensor:
        """A route's vector: μ (no task, or ``direction="none"``), else [`query_map`] (``task="query"``) or
        [`stored_map`] (``"document"``), computed in float64 and returned in float32: the dot product is −KL within
        (2d + 4)·ε₃₂·Σ_k |q_k x_k|, so near-duplicates of tiny variances can swap (``GaussianIndex`` is exact)."""
        _check_task(task)
        if task is None or self.direction == "none":
            return mu
        make_map = query_map if task == "query" else stored_map
        return make_map(mu, logvar, self.direction, self.kl_weight).float()

    def get_embedding_dimension(self, task: str | None = None) -> int:
        """d (μ) without a task; for ``task="query"`` / ``"document"`` 2d + 2 (3d + 2 with the search score, d with
        ``direction="none"``)."""
        _check_task(task)
        dimension = self.model.config.embedding_size
        return dimension if task is None or self.direction == "none" else search_map_width(dimension, self.kl_weight)

    def breaks_kl(self, task: str | None) -> bool:
        """Whether ``task`` routes to the KL vectors (dot = −KL), which no sentence-transformers option may alter."""
        return task in ROUTE_TASKS and self.direction != "none"

    def on_model_ready(self, model) -> None:
        """sentence-transformers' hook once the model holding this module is built: a plain ``SentenceTransformer`` of
        this module alone becomes a [`GaussCSESentenceTransformer`]; anything else is left as it is, with a warning."""
        if type(model) is SentenceTransformer and len(model) == 1:
            model.__class__ = GaussCSESentenceTransformer
        elif not isinstance(model, GaussCSESentenceTransformer):
            logger.warning(
                f"{type(model).__name__} of {len(model)} module(s) is not a GaussCSESentenceTransformer: "
                "normalize_embeddings, precision and truncate_dim are not checked on encode_query/encode_document, "
                "and any of them (or a module after this one) breaks dot = −KL"
            )

    def save(self, output_path: str, *args, **kwargs) -> None:
        """Write the model's folder (``save_pretrained``, with this module's tokenizer), ``sentence_bert_config.json``
        and the ONNX graph while it is the graph of the weights saved (else a warning)."""
        self.model.get_tokenizer(self.tokenizer)
        self.model.save_pretrained(output_path)
        if self.onnx_encoder is not None and self.onnx_encoder.fingerprint == model_fingerprint(self.model):
            self.onnx_encoder.save(output_path)
        elif self.onnx_encoder is not None:
            logger.warning(
                f"Saved {output_path} without {self.onnx_encoder.file_name}: the model's weights or config changed "
                "since the graph was exported. Export it again: gausscse.model.onnx_gausscse.export_onnx(model, folder)"
            )
        self.save_config(output_path)


class GaussCSESentenceTransformer(SentenceTransformer):
    """A ``SentenceTransformer`` of one [`GaussCSETransformer`]: ``encode`` refuses on the KL routes the options that
    break their dot product ([`check_route_options`]), ``get_embedding_dimension`` takes a task, and ``save`` names
    the module by its shipped file (loadable without the gausscse package) and keeps this object's settings in
    ``config_sentence_transformers.json``."""

    def _gausscse_module(self) -> GaussCSETransformer | None:
        return next((module for module in self if isinstance(module, GaussCSETransformer)), None)

    def encode(self, *args, **kwargs):
        """sentence-transformers' ``encode`` after [`check_route_options`] and, with ONNX, a check that the graph is
        still the model's."""
        self.check_route_options(*args, **kwargs)
        module = self._gausscse_module()
        if module is not None and module.onnx_encoder is not None:
            module.onnx_encoder.check_model(module.model, module.onnx_encoder.file_name)
        return super().encode(*args, **kwargs)

    def check_route_options(self, *args, **kwargs) -> None:
        """``ValueError`` if ``encode(*args, **kwargs)`` asks for a KL route (``task="query"`` / ``"document"``) with
        ``normalize_embeddings``, a ``precision`` but float32 or ``truncate_dim``."""
        task = kwargs.get("task")
        module = self._gausscse_module()
        if module is None or not module.breaks_kl(task):
            return
        bound = _ENCODE_SIGNATURE.bind_partial(self, *args, **kwargs)  # partial: the deprecated sentences= keyword
        bound.apply_defaults()
        options = bound.arguments
        if options["output_value"] != "sentence_embedding":
            return
        precision = options["precision"]
        truncate_dim = options["truncate_dim"] if options["truncate_dim"] is not None else self.truncate_dim
        if options["normalize_embeddings"]:
            option = "normalize_embeddings=True"
            advice = (
                "unit-length vectors give cosines that rank differently. Compare the vectors as returned; for "
                "unit-length point embeddings, use μ: st.encode(texts, normalize_embeddings=True)."
            )
        elif precision not in (None, "float32"):
            option = f"precision={precision!r}"
            advice = (
                "their entries span many orders of magnitude, so quantised vectors lose the ranking. Keep "
                f"precision='float32'; to quantise point embeddings, use μ: st.encode(texts, precision={precision!r})."
            )
        elif truncate_dim is not None:
            option = f"truncate_dim={truncate_dim}"
            advice = (
                f"that dot product runs over all {module.get_embedding_dimension(task)} values. Call it without "
                "truncate_dim (for one set on the model: inside `with st.truncate_embeddings(None):`); truncate μ "
                "with st.encode."
            )
        else:
            return
        what = "−KL between the two Gaussians" if module.kl_weight is None else "the model's search score"
        raise ValueError(
            f"encode_{task}({option}) is refused: this GaussCSE model's {task} vectors are built so that "
            f"query · document = {what}, which st.similarity (dot) ranks by; {advice}"
        )

    def get_embedding_dimension(self, task: str | None = None) -> int | None:
        """d (``encode``'s μ) without a task, else the route's ([`GaussCSETransformer.get_embedding_dimension`])."""
        module = self._gausscse_module()
        if task is None or module is None:
            _check_task(task)
            return super().get_embedding_dimension()
        return module.get_embedding_dimension(task)

    def save(self, path: str, *args, **kwargs) -> None:
        super().save(path, *args, **kwargs)
        defaults = SENTENCE_TRANSFORMERS_FILES["config_sentence_transformers.json"]
        write_json_atomic(Path(path) / "config_sentence_transformers.json", {**defaults, **self._get_model_config()})
        modules_file = Path(path) / "modules.json"
        shipped_type = SENTENCE_TRANSFORMERS_FILES["modules.json"][0]["type"]
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
        for entry, module in zip(modules, self, strict=True):  # only this module's entry; any others stay as written
            if isinstance(module, GaussCSETransformer):
                entry["type"] = shipped_type
        write_json_atomic(modules_file, modules)


def to_sentence_transformer(
    model: GaussCSEModel, tokenizer=None, direction: str = "entailing", score: str = "auto"
) -> SentenceTransformer:
    """``model`` as a ``SentenceTransformer`` with ``dot`` similarity (``GaussCSEModel.as_sentence_transformer``)."""
    module = GaussCSETransformer(model, model.get_tokenizer(tokenizer), direction=direction, score=score)
    return GaussCSESentenceTransformer(modules=[module], similarity_fn_name="dot", device=str(model.device))
