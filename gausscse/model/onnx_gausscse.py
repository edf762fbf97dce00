"""ONNX Runtime for a GaussCSE model (Hub custom code): graphs recording the fingerprint of the model they serve."""

from __future__ import annotations

import copy
import importlib
import importlib.util
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np
import torch
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from torch import nn
from transformers.utils import cached_file, logging

from .utils_gausscse import model_fingerprint, write_bytes_atomic

try:  # in a try block: transformers' import check lets folders load without ONNX Runtime
    import onnxruntime
except ImportError:
    onnxruntime = None

ONNX_FOLDER = "onnx"  # a model folder's graphs, as sentence-transformers places them
ONNX_FILE = f"{ONNX_FOLDER}/model.onnx"
QUANTIZED_ONNX_FILE = f"{ONNX_FOLDER}/model_qint8.onnx"
FINGERPRINT_KEY = "gausscse_fingerprint"
OUTPUT_NAMES = ("mu", "logvar", "last_hidden_state")
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# the first of these ONNX Runtime has (its own list can start with providers that do not run a local graph)
DEFAULT_PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")
EXPORT_HINT = "gausscse.model.onnx_gausscse.export_onnx(model, folder"
EXPORT_KWARGS = "model_kwargs={'export': True}"

logger = logging.get_logger(__name__)


def require_onnxruntime():
    """The ``onnxruntime`` module; ``ImportError`` saying what to install otherwise."""
    if onnxruntime is None:
        raise ImportError("GaussCSE's ONNX backend needs ONNX Runtime: pip install onnxruntime")
    return onnxruntime


def with_fingerprint(model_bytes: bytes, fingerprint: str) -> bytes:
    """``model_bytes`` recording ``fingerprint`` under ``FINGERPRINT_KEY`` in its ``metadata_props``."""
    onnx = importlib.import_module("onnx")
    graph = onnx.load_model_from_string(model_bytes)
    metadata = {entry.key: entry.value for entry in graph.metadata_props}
    onnx.helper.set_model_props(graph, {**metadata, FINGERPRINT_KEY: fingerprint})
    return graph.SerializeToString()


def graph_fingerprint(path: str | Path) -> str | None:
    """The fingerprint the graph at ``path`` records (by onnx, else ONNX Runtime); None if none or no graph."""
    try:
        graph = importlib.import_module("onnx").load(path, load_external_data=False)
        return {entry.key: entry.value for entry in graph.metadata_props}.get(FINGERPRINT_KEY)
    except ImportError:
        pass
    except Exception:  # protobuf's DecodeError and onnx's own errors: no ONNX graph
        return None
    try:
        session = require_onnxruntime().InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception:  # no ONNX Runtime, or ONNX Runtime's own exception types (InvalidProtobuf, Fail, ...)
        return None
    return session.get_modelmeta().custom_metadata_map.get(FINGERPRINT_KEY)


class _GaussianForward(nn.Module):
    """``GaussCSEModel.forward`` on token tensors, returning the graph's outputs (``OUTPUT_NAMES``)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> tuple[torch.Tensor, ...]:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        output = self.model(**inputs, return_dict=True)  # forward drops token_type_ids=None
        return output.mu, output.logvar, output.last_hidden_state


def export_graphs(model, quantize: bool = False) -> dict[str, bytes]:
    """``{ONNX_FILE: float32 graph}`` of ``model`` (with ``quantize`` also ``QUANTIZED_ONNX_FILE``: the encoder's
    ``MatMul`` weights int8, the heads float32), each recording its fingerprint. Needs ``onnx onnxscript``."""
    require_onnxruntime()
    tokenizer_inputs = model.get_tokenizer().model_input_names
    input_names = tuple(name for name in TOKEN_INPUTS if name in tokenizer_inputs)
    example = torch.tensor([[101, 2023, 2003, 102], [101, 2023, 102, 0]])
    examples = {
        "input_ids": example.clamp_max(model.config.encoder_config.vocab_size - 1),
        "attention_mask": (example > 0).long(),
        "token_type_ids": torch.zeros_like(example),
    }
    # a fresh graph even under torch.inference_mode (encode), whose tensors torch.export cannot trace
    with torch.inference_mode(False), tempfile.TemporaryDirectory() as scratch:
        paths = {ONNX_FILE: Path(scratch) / "model.onnx"}
        torch.onnx.export(
            _GaussianForward(copy.deepcopy(model).to("cpu", torch.float32)).eval(),
            (),
            str(paths[ONNX_FILE]),
            kwargs={name: examples[name] for name in input_names},
            input_names=list(input_names),
            output_names=list(OUTPUT_NAMES),
            dynamic_shapes={name: {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC} for name in input_names},
            opset_version=18,
            dynamo=True,
            external_data=False,
            verbose=False,
        )
        if quantize:
            quantization = importlib.import_module("onnxruntime.quantization")
            paths[QUANTIZED_ONNX_FILE] = Path(scratch) / "model_qint8.onnx"
            # 7-bit weights (reduce_range): without VNNI, ONNX Runtime sums uint8 × int8 pairs in a saturating int16,
            # exact only for |w| ≤ 64, so every x86-64 CPU computes the same integers
            quantization.quantize_dynamic(
                str(paths[ONNX_FILE]),
                str(paths[QUANTIZED_ONNX_FILE]),
                weight_type=quantization.QuantType.QInt8,
                per_channel=True,
                reduce_range=True,
                op_types_to_quantize=["MatMul"],
            )
        fingerprint = model_fingerprint(model)
        return {name: with_fingerprint(path.read_bytes(), fingerprint) for name, path in paths.items()}


def export_onnx(model, folder: str | Path, quantize: bool = False) -> list[Path]:
    """Write ``folder/onnx/model.onnx`` (and the int8 graph with ``quantize``); returns the paths written."""
    graphs = export_graphs(model, quantize)
    for name, data in graphs.items():
        write_bytes_atomic(Path(folder) / name, data)
    return [Path(folder) / name for name in graphs]


class OnnxGaussianEncoder:
    """An ONNX Runtime session of a GaussCSE graph: token tensors → float32 CPU ``mu``, ``logvar``,
    ``last_hidden_state``; ``provider``: default CUDA where available, else CPU."""

    def __init__(self, model_bytes: bytes, file_name: str = ONNX_FILE, provider: str | None = None):
        runtime = require_onnxruntime()
        self.file_name = file_name
        self.model_bytes = model_bytes
        available = runtime.get_available_providers()
        self.provider = provider or next(name for name in DEFAULT_PROVIDERS if name in available)
        providers = list(dict.fromkeys([self.provider, "CPUExecutionProvider"]))
        try:
            self.session = runtime.InferenceSession(model_bytes, providers=providers)
        except Exception as error:  # ONNX Runtime's own exception types (InvalidProtobuf, Fail, ...)
            raise ValueError(f"{file_name} is not a loadable ONNX graph: {str(error).splitlines()[0]}") from None
        self.input_names = tuple(node.name for node in self.session.get_inputs())
        outputs = tuple(node.name for node in self.session.get_outputs())
        if outputs != OUTPUT_NAMES:
            raise ValueError(f"{file_name} outputs {outputs}, a GaussCSE graph outputs {OUTPUT_NAMES}")
        self.fingerprint = self.session.get_modelmeta().custom_metadata_map.get(FINGERPRINT_KEY)
        mu_size = self.session.get_outputs()[0].shape[-1]
        self.embedding_size = mu_size if isinstance(mu_size, int) else None

    @classmethod
    def from_model(
        cls, model, file_name: str = ONNX_FILE, provider: str | None = None, export: bool | None = None
    ) -> OnnxGaussianEncoder:
        """The graph ``file_name`` of the model's folder, refused unless exported from ``model``; exported instead with
        ``export``, or if ``export`` is None and the float32 graph is missing."""
        model_bytes = None if export else read_model_file(model.name_or_path, file_name)
        if model_bytes is not None:
            encoder = cls(model_bytes, file_name, provider)
            encoder.check_model(model, str(Path(model.name_or_path) / file_name))
            return encoder
        if not export and (export is False or file_name != ONNX_FILE):
            quantize = ", quantize=True" if file_name == QUANTIZED_ONNX_FILE else ""
            name = repr(model.name_or_path) if model.name_or_path else "this model (built in memory)"
            hint = f"{EXPORT_HINT}{quantize}) (with sentence-transformers: {EXPORT_KWARGS})"
            raise FileNotFoundError(f"{name} has no {file_name}: export it with {hint}")
        if export is None:
            logger.warning(f"{model.name_or_path or 'this model'} has no {file_name}: exporting it now")
        graphs = export_graphs(model, quantize=file_name == QUANTIZED_ONNX_FILE)
        return cls(graphs.get(file_name, graphs[ONNX_FILE]), file_name, provider)

    def check_model(self, model, where: str) -> None:
        """``ValueError`` naming ``where`` unless this graph was exported from ``model`` as it is now."""
        size = model.config.embedding_size
        if self.embedding_size not in (None, size):
            problem = f"outputs {self.embedding_size}-dimensional Gaussians, this model's are {size}-dimensional"
        elif self.fingerprint is None:
            problem = "records no GaussCSE fingerprint (exported before graphs recorded one, or by another tool)"
        elif self.fingerprint != model_fingerprint(model):
            problem = "was exported from other weights or another config than this model"
        else:
            return
        again = f"export it again with {EXPORT_HINT}) (with sentence-transformers: {EXPORT_KWARGS})"
        raise ValueError(f"{where} {problem}: {again}")

    def __call__(self, features: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{"mu", "logvar", "last_hidden_state"}`` for the token tensors in ``features``."""
        missing = [name for name in self.input_names if name not in features]
        if missing:
            raise ValueError(f"the ONNX graph needs {self.input_names}; features lack {missing}")
        feeds = {name: np.ascontiguousarray(features[name].cpu().numpy(), dtype=np.int64) for name in self.input_names}
        outputs = self.session.run(list(OUTPUT_NAMES), feeds)
        return {name: torch.from_numpy(value).float() for name, value in zip(OUTPUT_NAMES, outputs, strict=True)}

    def forward_batches(
        self, inputs: Iterable[tuple[torch.Tensor, Mapping[str, torch.Tensor]]], dtype: torch.dtype | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """``(rows, μ, log σ²)`` of each ``(rows, features)`` batch, in the graph's own precision."""
        if dtype not in (None, torch.float32):
            raise ValueError(f"backend='onnx' runs the graph's own precision; dtype={dtype} is for backend='torch'")
        for rows, features in inputs:
            output = self(features)
            yield rows, output["mu"], output["logvar"]

    def save(self, folder: str | Path) -> Path:
        """Write the graph to ``folder / file_name`` (appearing whole); returns the path."""
        path = Path(folder) / self.file_name
        write_bytes_atomic(path, self.model_bytes)
        return path


def read_model_file(name_or_path: str, file_name: str) -> bytes | None:
    """The bytes of ``file_name`` in the folder or Hub repo ``name_or_path``; None if none (never the working dir)."""
    if not name_or_path:
        return None
    if not Path(name_or_path).is_dir():
        try:
            validate_repo_id(name_or_path)
        except HFValidationError:
            return None
        if Path(name_or_path).exists():
            return None
    path = cached_file(name_or_path, file_name, _raise_exceptions_for_missing_entries=False)
    return Path(path).read_bytes() if path else None


class OnnxSessions(dict):
    """A model's sessions by ``(file_name, provider)``; a copy of the model starts with none."""

    def __deepcopy__(self, memo: dict) -> OnnxSessions:
        return type(self)()

    def __reduce__(self) -> tuple:
        return type(self), ()


def remove_stale_graphs(folder: str | Path, model) -> list[Path]:
    """Delete (with a warning) the graphs of ``folder/onnx`` not exported from ``model``; returns them."""
    graphs = Path(folder) / ONNX_FOLDER
    paths = sorted(graphs.glob("*.onnx"))
    if not paths:
        return []
    if not any(importlib.util.find_spec(name) for name in ("onnx", "onnxruntime")):
        logger.warning(f"Kept {graphs}: neither onnx nor onnxruntime is installed to read its fingerprints")
        return []
    fingerprint = model_fingerprint(model)
    stale = [path for path in paths if graph_fingerprint(path) != fingerprint]
    for path in stale:
        path.unlink()
    if stale:
        removed = ", ".join(map(str, stale))
        logger.warning(f"Removed {removed}: not exported from the model in {folder}. Export them again: {EXPORT_HINT})")
    if not any(graphs.iterdir()):
        graphs.rmdir()
    return stale


class OnnxMixin:
    """A model's ONNX Runtime sessions (``_onnx_encoders``), each kept while the weights' fingerprint fits."""

    def onnx_encoder(self, file_name: str = ONNX_FILE, provider: str | None = None) -> OnnxGaussianEncoder:
        """The session of ``encode(backend="onnx")``, kept while the fingerprint fits."""
        key = (file_name, provider)
        kept = self._onnx_encoders.get(key)
        if kept is None or kept.fingerprint != model_fingerprint(self):
            kept = self._onnx_encoders[key] = OnnxGaussianEncoder.from_model(self, file_name, provider)
        return kept
