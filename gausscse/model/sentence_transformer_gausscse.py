"""GaussCSE as a sentence-transformers (≥ 6) model: ``SentenceTransformer(folder_or_hub_id, trust_remote_code=True)``.
``encode`` → μ; ``encode_query`` / ``encode_document`` → [`query_map`] / [`stored_map`]: dot = −KL(q‖x)."""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import ModelCard, hf_hub_download
from transformers import AutoTokenizer
from transformers.utils import logging

from .configuration_gausscse import SENTENCE_TRANSFORMERS_FILES
from .encoding_gausscse import DEFAULT_MAX_LENGTH, ENCODE_BACKENDS, check_sentences, resolve_max_length
from .gaussian import KL_REDUCTIONS, SEARCH_DIRECTIONS, query_map, search_map_width, stored_map
from .modeling_gausscse import GaussCSEModel
from .onnx_gausscse import TOKEN_INPUTS, OnnxGaussianEncoder
from .utils_gausscse import model_fingerprint, write_json_atomic

try:
    from sentence_transformers import SentenceTransformer, SentenceTransformerModelCardData
    from sentence_transformers.base.modules import InputModule
except ImportError as error:  # in a try block, so transformers' import check lets AutoModel users load without it
    raise ImportError("GaussCSE's sentence-transformers face needs `pip install 'sentence-transformers>=6'`") from error

logger = logging.get_logger(__name__)

DIRECTIONS = {**SEARCH_DIRECTIONS, "none": None}
ROUTE_TASKS = ("query", "document")  # the tasks encode_query / encode_document pass
SCORES = ("auto", "search", "similarity")  # what the routes' dot product is
ONNX_MODEL_KWARGS = ("file_name", "provider", "export")  # backend="onnx" model_kwargs: OnnxGaussianEncoder.from_model
_ENCODE_SIGNATURE = inspect.signature(SentenceTransformer.encode)


def card_metadata(model_name_or_path: str, subfolder: str = "", **hub) -> dict[str, Any]:
    """The YAML header of the model's card: ``README.md`` of the folder, or of the Hub repository (``hub``: the
    ``hf_hub_download`` keywords the model was loaded with); ``{}`` where there is none or it cannot be reached."""
    try:
        folder = Path(model_name_or_path) / subfolder
        card = folder / "README.md" if folder.is_dir() else hf_hub_download(model_name_or_path, "README.md", **hub)
        return ModelCard.load(card, ignore_metadata_errors=True).data.to_dict() if Path(card).is_file() else {}
    except (OSError, ValueError):  # no card, the Hub unreachable, or a header that is not YAML
        return {}


def loaded_hub_id(model_name_or_path: str) -> str | None:
    """The Hub id a model was loaded by: as given, or the repository of a Hub-cache snapshot folder; ``None`` for
    any other local folder."""
    path = Path(model_name_or_path)
    if not path.exists():
        return model_name_or_path
    repository = next((part for part in path.parts if part.startswith("models--")), None)
    return repository.removeprefix("models--").replace("--", "/") if repository else None


def is_a(instance: Any, class_name: str) -> bool:
    """Whether ``instance``'s class is or derives from a class named ``class_name``: this file runs twice over, as
    the installed package and as a model folder's remote code, and each copy's classes must know the other's."""
    return any(cls.__name__ == class_name for cls in type(instance).__mro__)


def _check_task(task: str | None) -> None:
    if task is not None and task not in ROUTE_TASKS:
        raise ValueError(f"task must be 'query', 'document' or None, got {task!r}")


class GaussCSETransformer(InputModule):
    """The GaussCSE model as one sentence-transformers module. ``direction``: ``"entailing"`` (dot = −KL(q‖x)),
    ``"entailed_by"`` (−KL(x‖q)) or ``"none"`` (μ); ``score``: ``"search"``, ``"similarity"`` (−KL) or ``"auto"``."""

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
        for name, value, valid in (("direction", direction, tuple(DIRECTIONS)), ("score", score, SCORES)):
            if value not in valid:
                raise ValueError(f"{name} must be one of {valid}, got {value!r}")
        kl_weight = getattr(model.config, "search_kl_weight", None)
        if score == "search" and kl_weight is None:
            raise ValueError("score='search' needs a model whose config states search_kl_weight")
        self.score = score
        # λ of the routes' search score; None for −KL
        self.kl_weight = None if score == "similarity" or direction == "none" else kl_weight
        self.model = model
        self.tokenizer = tokenizer
        # the tokens taken as sentence-transformers states it (None: the encoder's limit, resolved here)
        self.max_seq_length = resolve_max_length(tokenizer, model.config.encoder_config, max_seq_length)
        self.direction = direction
        self.onnx_encoder = onnx_encoder
        self.hub_id: str | None = None  # set by load: the Hub id loaded by, and the card's YAML header
        self.card: dict[str, Any] = {}
        reduction = model.config.similarity_reduction
        if direction != "none" and self.kl_weight is None and reduction not in KL_REDUCTIONS:
            logger.warning(
                f"This model's similarity_reduction is {reduction!r}; encode_query/encode_document rank by −KL (the "
                "'sum' form 1/(1 + Σ_k KL_k)), not by mean_k 1/(1 + KL_k) (GaussCSEModel.similarity computes that)"
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
        """Load the model, its tokenizer and ``sentence_bert_config.json``; with ``backend="onnx"`` also the ONNX graph
        (``model_kwargs``: ``file_name``, ``provider``, ``export``: [`OnnxGaussianEncoder.from_model`])."""
        backend = kwargs.get("backend", "torch")
        if backend not in ENCODE_BACKENDS:
            raise ValueError(f"backend={backend!r}: a GaussCSE model runs with backend 'torch' or 'onnx'")
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
            model.get_tokenizer(tokenizer)  # the ONNX export's example inputs
            onnx_encoder = OnnxGaussianEncoder.from_model(model, **onnx_kwargs)
        module = cls(model, tokenizer, **config, onnx_encoder=onnx_encoder)
        hub_files = {"cache_dir": cache_folder, "local_files_only": local_files_only}
        module.hub_id = loaded_hub_id(model_name_or_path)
        module.card = card_metadata(model_name_or_path, subfolder, token=token, revision=revision, **hub_files)
        return module

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
        else:  # the graph serves only the weights it was exported from (a cached fingerprint: cheap per batch)
            self.onnx_encoder.check_model(self.model, self.onnx_encoder.file_name)
            output = self.onnx_encoder(inputs)
            mu, logvar, token_embeddings = output["mu"], output["logvar"], output["last_hidden_state"]
        features.update(mu=mu, logvar=logvar, token_embeddings=token_embeddings)
        features["sentence_embedding"] = self.route(mu, logvar, task)
        return features

    def route(self, mu: torch.Tensor, logvar: torch.Tensor, task: str | None) -> torch.Tensor:
        """A route's vector: μ (no task, or ``direction="none"``), else [`query_map`] or [`stored_map`] in float32."""
        _check_task(task)
        if task is None or self.direction == "none":
            return mu
        make_map = query_map if task == "query" else stored_map
        return make_map(mu, logvar, self.direction, self.kl_weight).float()

    def get_embedding_dimension(self, task: str | None = None) -> int:
        """d (μ) without a task, else 2d + 2 (3d + 2 with the search score, d with ``direction="none"``)."""
        _check_task(task)
        dimension = self.model.config.embedding_size
        return dimension if task is None or self.direction == "none" else search_map_width(dimension, self.kl_weight)

    def on_model_ready(self, model) -> None:
        """sentence-transformers' hook: the model's ``model_card_data`` gets what the model's card states
        ([`fill_card_data`]); a model that is not a [`GaussCSESentenceTransformer`] is told, once, what it does not
        check."""
        if not is_a(model, "GaussCSESentenceTransformer") and self.direction != "none":
            logger.warning_once(
                f"A {type(model).__name__} does not refuse the encode_query/encode_document options that break their "
                "dot product (normalize_embeddings, truncate_dim, a quantised precision); GaussCSESentenceTransformer "
                "does, with the same vectors: `from gausscse import GaussCSESentenceTransformer`, or without the "
                "package `transformers.dynamic_module_utils.get_class_from_dynamic_module("
                "'sentence_transformer_gausscse.GaussCSESentenceTransformer', MODEL)`"
            )
        if type(model.model_card_data) is SentenceTransformerModelCardData:  # not a card data the user chose
            fields = dataclasses.fields(model.model_card_data)
            given = {item.name: getattr(model.model_card_data, item.name) for item in fields if item.init}
            model.model_card_data = GaussCSEModelCardData(**given)
            model.model_card_data.register_model(model)
        self.fill_card_data(model.model_card_data)

    def fill_card_data(self, card_data) -> None:
        """sentence-transformers' ``model_card_data`` from the loaded model's card: ``base_model`` is the Hub id the
        model was loaded by (sentence-transformers' convention, kept offline too) or, for a local folder, the Hub model
        its card says it was trained from; language, license and tags as the card states them."""
        card = self.card
        base_model = self.hub_id or card.get("base_model")
        if base_model and not card_data.base_model:
            card_data.base_model = base_model[0] if isinstance(base_model, list) else base_model
        if card.get("language") and not card_data.language:
            card_data.set_language(card["language"])
        if card.get("license") and not card_data.license:
            card_data.set_license(card["license"])
        card_data.add_tags(card.get("tags") or [])

    def save(self, output_path: str, *args, **kwargs) -> None:
        """Write the model's folder, ``sentence_bert_config.json`` and the ONNX graph if still the model's."""
        self.model.get_tokenizer(self.tokenizer)
        self.model.save_pretrained(output_path)
        if self.onnx_encoder is not None and self.onnx_encoder.fingerprint == model_fingerprint(self.model):
            self.onnx_encoder.save(output_path)
        elif self.onnx_encoder is not None:
            logger.warning(
                f"Saved {output_path} without {self.onnx_encoder.file_name}: the model changed since it was exported"
            )
        self.save_config(output_path)


class GaussCSEModelCardData(SentenceTransformerModelCardData):
    """sentence-transformers' card data for a GaussCSE model (what its save writes into ``README.md``, e.g. after
    ``SentenceTransformerTrainer``): the usage snippet loads the model with ``trust_remote_code=True``, which its
    code shipped beside the weights needs, and ranks passages by the model's score."""

    def generate_usage_snippet(self) -> str:
        model_id = self.model_id or getattr(self, "save_dir", None) or "path/or/hub-id-of-this-model"  # saved folder
        return f"""```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("{model_id}", trust_remote_code=True)  # GaussCSE's code ships beside the weights
claims = ["A man is playing music."]
passages = ["A man is playing a guitar on stage.", "Two dogs run through a snowy field."]
scores = model.similarity(model.encode_query(claims), model.encode_document(passages))  # dot: the model's score
print(scores)  # per claim, the passages that entail it score highest
points = model.encode(passages)  # μ: compare by cosine similarity (STS, clustering)
```"""


class GaussCSESentenceTransformer(SentenceTransformer):
    """A ``SentenceTransformer`` that knows its [`GaussCSETransformer`]: refuses options that break the KL routes,
    reports the routes' dimension, and ``save`` names the module by its shipped file.
    ``GaussCSESentenceTransformer(folder_or_hub_id, trust_remote_code=True)`` loads as ``SentenceTransformer`` does."""

    def _gausscse_module(self) -> GaussCSETransformer | None:
        return next((module for module in self if is_a(module, "GaussCSETransformer")), None)

    @SentenceTransformer.similarity_fn_name.setter
    def similarity_fn_name(self, value) -> None:
        """sentence-transformers' setter; a warning where the KL routes' vectors would be compared by anything but
        the dot product (their dot product is the model's score; a cosine of them ranks otherwise)."""
        SentenceTransformer.similarity_fn_name.fset(self, value)
        module = self._gausscse_module() if self.__dict__.get("_modules") else None  # none yet while constructed
        if (
            value is not None
            and self._similarity_fn_name != "dot"
            and module is not None
            and module.direction != "none"
        ):
            logger.warning(
                f"similarity_fn_name={self._similarity_fn_name!r}: the vectors of encode_query/encode_document rank "
                "by their dot product (the model's score); compared by another function they rank otherwise. Keep "
                "'dot' for them (μ, from encode(), may use any)"
            )

    def encode(self, *args, **kwargs):
        """sentence-transformers' ``encode`` after [`check_route_options`]."""
        self.check_route_options(*args, **kwargs)
        return super().encode(*args, **kwargs)

    def check_route_options(self, *args, **kwargs) -> None:
        """``ValueError`` if a KL route gets ``normalize_embeddings``, ``truncate_dim`` or a non-float32 precision."""
        task = kwargs.get("task")
        module = self._gausscse_module()
        if module is None or task not in ROUTE_TASKS or module.direction == "none":
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
            why = "unit-length vectors rank differently: compare the vectors as returned"
        elif precision not in (None, "float32"):
            option = f"precision={precision!r}"
            why = "quantised, entries of many magnitudes lose the ranking: keep precision='float32'"
        elif truncate_dim is not None:
            option = f"truncate_dim={truncate_dim}"
            why = "the dot product needs all values: drop it (set on the model: `with st.truncate_embeddings(None):`)"
        else:
            return
        what = "−KL between the two Gaussians" if module.kl_weight is None else "the model's search score"
        raise ValueError(
            f"encode_{task}({option}) is refused: its vectors give query · document = {what}, which st.similarity "
            f"ranks by; {why} (μ takes it: st.encode(texts, {option}))"
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
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
        for entry, module in zip(modules, self, strict=True):  # only this module's entry; any others stay as written
            if is_a(module, "GaussCSETransformer"):
                entry["type"] = SENTENCE_TRANSFORMERS_FILES["modules.json"][0]["type"]
        write_json_atomic(modules_file, modules)
