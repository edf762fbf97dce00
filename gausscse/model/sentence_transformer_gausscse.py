"""GaussCSE as a sentence-transformers model: ``SentenceTransformer(folder_or_hub_id, trust_remote_code=True)``.

Ships with the weights as custom code beside ``modeling_gausscse.py`` (``modules.json`` names this file's
[`GaussCSETransformer`]); the only file of the folder that needs ``sentence-transformers`` (≥ 6).

The routes (``direction="entailing"``, the default), with A and B the maps of ``kl_feature_map``,
KL(q‖x) = ⟨A(q), B(x)⟩:

* ``encode(texts)`` → μ (d values): a point embedding for cosine similarity (STS, clustering), as for any model;
* ``encode_query(claims)`` → −A(q) and ``encode_document(passages)`` → B(x) (2d + 2 values each, float32: computed
  in float64, returned as sentence-transformers' ``precision="float32"`` says), so that
  ``dot(encode_query(q), encode_document(x)) = −KL(N_q‖N_x)`` to float32 rounding: the ``sum`` similarity is
  sim(q‖x) = 1 / (1 − dot), the ``mean_kl`` one 1 / (1 − dot / d), and sentence-transformers' ``dot`` ranks first
  the passages that entail the claim, as the model's own similarity for these two reductions;
* ``encode(texts, output_value=None)`` → per sentence a dict with ``mu`` and ``logvar`` (and the token features).

What would break dot = −KL on those two routes is refused with a ``ValueError``: ``normalize_embeddings=True``,
``precision`` other than ``"float32"`` (int8, uint8, binary, ubinary) and ``truncate_dim`` (the argument or the
model's). ``get_embedding_dimension()`` is d, what ``encode`` returns; ``get_embedding_dimension(task="query")`` (or
``"document"``) is the route's 2d + 2. A plain ``SentenceTransformer`` holding this module (what loading a folder
gives) becomes a [`GaussCSESentenceTransformer`] when it is built, which is where these checks live.

A model that states a search score (``config.search_kl_weight`` = λ, set by training) routes to it instead
(``score="auto"``, the default): ``encode_query`` → [μ_q/‖μ_q‖, −(λ/d)·A(q)], ``encode_document`` → [μ_x/‖μ_x‖, B(x)]
(3d + 2 values), so ``dot = cos(μ_q, μ_x) − λ·KL(q‖x)/d``: relevance plus direction, the score its ``GaussianIndex``
ranks by. ``score="similarity"`` keeps the −KL routes; ``score="search"`` requires λ.

``direction="entailed_by"`` swaps the sides (−B(q), A(x): dot = −KL(x‖q), what the query entails);
``direction="none"`` gives μ on every route (use cosine). A ``mean_dim`` model (mean_k 1/(1 + KL_k), no function of
the total KL) is ranked by the ``sum`` form on these routes, which is logged when it loads;
``GaussCSEModel.similarity`` computes its own reduction exactly.
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
from .encoding_gausscse import DEFAULT_MAX_LENGTH, check_sentences, resolve_max_length
from .gaussian import KL_REDUCTIONS, SEARCH_DIRECTIONS, query_map, search_map_width, stored_map
from .modeling_gausscse import GaussCSEModel
from .onnx_gausscse import ONNX_FILE, OnnxGaussianEncoder

try:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import InputModule
except ImportError as error:  # in a try block, so transformers' import check lets AutoModel users load without it
    raise ImportError("GaussCSE's sentence-transformers face needs `pip install 'sentence-transformers>=6'`") from error

logger = logging.get_logger(__name__)

# direction → (side of kl_feature_map for the query, for the document); the query's map is negated
DIRECTIONS = {**SEARCH_DIRECTIONS, "none": None}
ROUTE_TASKS = ("query", "document")  # the tasks encode_query / encode_document pass
SCORES = ("auto", "search", "similarity")  # what the routes' dot product is (module docstring)
# SentenceTransformer(..., backend=...) → what runs the forward pass; "onnx" reads these keys of model_kwargs, as
# sentence-transformers' own ONNX backend does: file_name (default onnx/model.onnx), provider, export
BACKENDS = ("torch", "onnx")
ONNX_MODEL_KWARGS = ("file_name", "provider", "export")
_ENCODE_SIGNATURE = inspect.signature(SentenceTransformer.encode)


def _check_task(task: str | None) -> None:
    if task is not None and task not in ROUTE_TASKS:
        raise ValueError(f"task must be 'query', 'document' or None, got {task!r}")


class GaussCSETransformer(InputModule):
    """The whole GaussCSE model (encoder, pooling, μ and log σ² heads) as one sentence-transformers input module.

    Args:
        model: the [`GaussCSEModel`].
        tokenizer: its tokenizer.
        max_seq_length: truncation length in tokens; default (and cap): the encoder's limit ([`resolve_max_length`]).
        direction: what ``encode_query``/``encode_document`` retrieve (module docstring): ``"entailing"`` (documents
            x that entail the query q, dot = −KL(q‖x)), ``"entailed_by"`` (dot = −KL(x‖q)) or ``"none"`` (μ).
        onnx_encoder: run the forward pass in ONNX Runtime (what ``backend="onnx"`` loads); the routes are then
            computed on its μ and log σ² exactly as on PyTorch's.
        score: what the routes' dot product is: ``"search"`` (the model's search score, λ from its config),
            ``"similarity"`` (−KL) or ``"auto"`` (the search score when the model states λ).
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
        # the search score's λ on the routes, None for −KL
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
        """Load the model, its tokenizer and ``sentence_bert_config.json`` (if any) from a folder or Hub repo.

        ``backend="onnx"`` (what ``SentenceTransformer(..., backend="onnx")`` passes) also loads the ONNX graph the
        forward pass then runs on: ``model_kwargs["file_name"]`` (default ``onnx/model.onnx``; the int8 one is
        ``onnx/model_qint8.onnx``), exported from the PyTorch weights if the folder has none (or with
        ``model_kwargs["export"] = True``; save the model to keep it), on ``model_kwargs["provider"]``."""
        backend = kwargs.get("backend", "torch")
        if backend not in BACKENDS:
            raise ValueError(
                f"backend={backend!r}: a GaussCSE model runs with backend 'torch' or 'onnx' (ONNX Runtime on the "
                "folder's onnx/ graph); OpenVINO is not supported"
            )
        model_kwargs = dict(model_kwargs or {})
        onnx_kwargs = {key: model_kwargs.pop(key) for key in ONNX_MODEL_KWARGS if key in model_kwargs}
        if onnx_kwargs and backend != "onnx":
            raise ValueError(f"model_kwargs {sorted(onnx_kwargs)} are for backend='onnx', the backend is {backend!r}")
        hub = {"subfolder": subfolder, "token": token, "cache_dir": cache_folder, "revision": revision}
        hub["local_files_only"] = local_files_only
        config = cls.load_config(
            model_name_or_path,
            subfolder=subfolder,
            token=token,
            cache_folder=cache_folder,
            revision=revision,
            local_files_only=local_files_only,
        )
        model = GaussCSEModel.from_pretrained(model_name_or_path, **hub, **(config_kwargs or {}), **model_kwargs)
        tokenizer = AutoTokenizer.from_pretrained(
            model_name_or_path, config=model.config, **hub, **(processor_kwargs or {})
        )
        onnx_encoder = None
        if backend == "onnx":
            model.get_tokenizer(tokenizer)
            onnx_encoder = OnnxGaussianEncoder.from_model(
                model, onnx_kwargs.get("file_name", ONNX_FILE), onnx_kwargs.get("provider"), onnx_kwargs.get("export")
            )
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
        inputs = {
            name: features[name] for name in ("input_ids", "attention_mask", "token_type_ids") if name in features
        }
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
        """The vector of a route: μ (no task, or ``direction="none"``); for ``direction="entailing"`` −A(q)
        (``task="query"``) and B(x) (``task="document"``), so ⟨−A(q), B(x)⟩ = −KL(q‖x) ([`kl_feature_map`]), or with a
        search score the maps whose dot product is cos − λ·KL/d ([`query_map`], [`stored_map`]).

        The maps are computed in float64 and returned in float32, sentence-transformers' ``precision="float32"``:
        the float32 dot product is −KL within (2d + 4)·ε₃₂·Σ_k |q_k x_k| (tested against torch.distributions over
        the whole log σ² clamp range). That sum reaches ~10⁷ for d = 768 at log σ² = −10, so near-duplicates of
        such tiny variances can swap places in the ranking; ``GaussCSEModel.similarity`` and ``GaussianIndex`` stay
        exact."""
        _check_task(task)
        sides = DIRECTIONS[self.direction]
        if task is None or sides is None:
            return mu
        make_map = query_map if task == "query" else stored_map
        return make_map(mu, logvar, self.direction, self.kl_weight).float()

    def get_embedding_dimension(self, task: str | None = None) -> int:
        """The dimension of a route's vectors: d (μ) without a task, which sentence-transformers reads as the
        dimension of ``encode``; for ``task="query"`` / ``"document"`` 2d + 2 (the search score's 3d + 2; d with
        ``direction="none"``)."""
        _check_task(task)
        dimension = self.model.config.embedding_size
        return dimension if task is None or self.direction == "none" else search_map_width(dimension, self.kl_weight)

    def breaks_kl(self, task: str | None) -> bool:
        """Whether ``task`` routes to the KL vectors (dot = −KL), which no sentence-transformers option may alter."""
        return task in ROUTE_TASKS and self.direction != "none"

    def on_model_ready(self, model) -> None:
        """sentence-transformers' hook, called once the model that holds this module is built: a plain
        ``SentenceTransformer`` (what ``SentenceTransformer(folder, trust_remote_code=True)`` builds) becomes a
        [`GaussCSESentenceTransformer`], whose ``encode`` refuses the options that break dot = −KL on the routes
        (sentence-transformers applies them after this module, out of its sight) and whose
        ``get_embedding_dimension`` takes a task. Another subclass, or a model with modules after this one (their output
        is no longer the −KL vectors), is left as it is, with a warning."""
        if type(model) is SentenceTransformer and len(model) == 1:
            model.__class__ = GaussCSESentenceTransformer
        elif not isinstance(model, GaussCSESentenceTransformer):
            logger.warning(
                f"{type(model).__name__} of {len(model)} module(s) is not a GaussCSESentenceTransformer: "
                "normalize_embeddings, precision and truncate_dim are not checked on encode_query/encode_document, "
                "and any of them (or a module after this one) breaks dot = −KL"
            )

    def save(self, output_path: str, *args, **kwargs) -> None:
        """Write the GaussCSE folder (``save_pretrained``: weights, config, code, the sentence-transformers files),
        the module's tokenizer (handed to the model, whose ``save_pretrained`` writes it) and
        ``sentence_bert_config.json``; with the ONNX backend also its graph (``onnx/...``), while it is the graph of
        the weights saved (after they changed, it is left out with a warning: export it again)."""
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
    """A ``SentenceTransformer`` of one [`GaussCSETransformer`] (a plain one holding the module becomes this class
    when it is built: [`GaussCSETransformer.on_model_ready`]).

    * ``encode`` (so ``encode_query``, ``encode_document``) refuses, on the KL routes, the options that break
      dot = −KL: ``normalize_embeddings=True``, a ``precision`` other than ``"float32"`` and ``truncate_dim``.
    * ``get_embedding_dimension(task=None)``: d without a task (what ``encode`` returns), the route's 2d + 2 with
      ``task="query"`` / ``"document"``.
    * ``save`` (and ``save_pretrained``, ``push_to_hub``) names the module by the file shipped in the folder,
      ``sentence_transformer_gausscse``, as a folder loaded with ``trust_remote_code`` does (sentence-transformers'
      own ``save`` would name the Python path it was imported from, ``gausscse.model...``, which loads only where the
      gausscse package is installed), and keeps this object's settings (prompts, similarity function, ...) in
      ``config_sentence_transformers.json``, which the module's ``save_pretrained`` rewrites with the defaults."""

    def _gausscse_module(self) -> GaussCSETransformer | None:
        return next((module for module in self if isinstance(module, GaussCSETransformer)), None)

    def encode(self, *args, **kwargs):
        """sentence-transformers' ``encode``, after [`check_route_options`] on the same arguments and, with the ONNX
        backend, a check that the graph is still the model's (weights changed in memory since it loaded are
        refused, as ``GaussCSEModel.encode(backend="onnx")`` refuses them)."""
        self.check_route_options(*args, **kwargs)
        module = self._gausscse_module()
        if module is not None and module.onnx_encoder is not None:
            module.onnx_encoder.check_model(module.model, module.onnx_encoder.file_name)
        return super().encode(*args, **kwargs)

    def check_route_options(self, *args, **kwargs) -> None:
        """Raise ``ValueError`` if ``encode(*args, **kwargs)`` asks for a KL route (``task="query"`` /
        ``"document"``, what ``encode_query`` / ``encode_document`` pass) with an option that breaks dot = −KL."""
        task = kwargs.get("task")  # keyword-only (encode_query / encode_document pass it)
        module = self._gausscse_module()
        if module is None or not module.breaks_kl(task):
            return
        bound = _ENCODE_SIGNATURE.bind_partial(self, *args, **kwargs)  # partial: the deprecated sentences= keyword
        bound.apply_defaults()
        options = bound.arguments
        if options["output_value"] != "sentence_embedding":
            return
        call = f"encode_{task}"
        what = "−KL between the two Gaussians" if module.kl_weight is None else "the model's search score"
        why = (
            f"this GaussCSE model's {task} vectors are built so that query · document = {what}, which is what "
            "st.similarity (dot) ranks by"
        )
        if options["normalize_embeddings"]:
            raise ValueError(
                f"{call}(normalize_embeddings=True) is refused: {why}; unit-length vectors give cosines that rank "
                "differently. Compare the vectors as returned, with st.similarity or an inner-product index; for "
                "unit-length point embeddings (cosine similarity), use μ: st.encode(texts, normalize_embeddings=True)."
            )
        precision = options["precision"]
        if precision not in (None, "float32"):
            raise ValueError(
                f"{call}(precision={precision!r}) is refused: {why}; their entries span many orders of magnitude "
                "(1/σ², μ/σ² and a constant that cancels against them), so quantised vectors lose the ranking. Keep "
                "precision='float32'; to quantise point embeddings, use μ: st.encode(texts, precision="
                f"{precision!r})."
            )
        truncate_dim = options["truncate_dim"] if options["truncate_dim"] is not None else self.truncate_dim
        if truncate_dim is not None:
            raise ValueError(
                f"{call}(truncate_dim={truncate_dim}) is refused: {why}; that dot product runs over all "
                f"{module.get_embedding_dimension(task)} values, and a truncated vector keeps only part of the sum. "
                "Call it without truncate_dim (for one set on the model: inside `with st.truncate_embeddings(None):`);"
                " truncate μ with st.encode."
            )

    def get_embedding_dimension(self, task: str | None = None) -> int | None:
        """The dimension of ``encode``'s vectors (μ: d) without a task, as sentence-transformers defines it; with
        ``task="query"`` / ``"document"``, that of ``encode_query`` / ``encode_document`` (2d + 2; d with
        ``direction="none"``)."""
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
    """``model`` as a ``SentenceTransformer`` with ``dot`` similarity; ``tokenizer`` defaults to the model's own."""
    module = GaussCSETransformer(model, model.get_tokenizer(tokenizer), direction=direction, score=score)
    return GaussCSESentenceTransformer(modules=[module], similarity_fn_name="dot", device=str(model.device))


__all__ = ["DIRECTIONS", "GaussCSESentenceTransformer", "GaussCSETransformer", "to_sentence_transformer"]
