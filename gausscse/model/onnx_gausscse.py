"""ONNX Runtime for a GaussCSE model (ships with the weights as Hub custom code).

The whole forward pass — encoder(s), pooling, μ and log σ² heads — is exported as one ONNX graph
``(input_ids, attention_mask[, token_type_ids]) → (mu, logvar, last_hidden_state)``: a ``frozen_mean`` model's two
paths are both in it. Only that pass runs in ONNX Runtime; everything after it (the float64 ``kl_feature_map`` routes
of the sentence-transformers module, the similarities, the search) is the same PyTorch code as for a PyTorch model,
on the float32 μ and log σ² the graph returns.

Files, as sentence-transformers names them for its own ONNX backend: ``onnx/model.onnx`` (float32) and
``onnx/model_qint8.onnx`` (weights quantised to int8 by ONNX Runtime's dynamic quantisation; activations quantised
per batch at run time). Written by [`export_onnx`], loaded by [`OnnxGaussianEncoder`]; used by
``SentenceTransformer(folder, trust_remote_code=True, backend="onnx")`` and ``GaussCSEModel.encode(...,
backend="onnx")``. Needs ``pip install onnxruntime`` to run and ``onnx onnxscript`` to export (PyTorch's exporter);
none of them is needed to load the model with PyTorch.

sentence-transformers' own ONNX path (optimum) exports Hugging Face architectures by name and cannot export this
custom model (and optimum-onnx needs transformers < 4.58, where this project runs on transformers 5).
"""

from __future__ import annotations

import copy
import importlib
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers.utils import logging

from .configuration_gausscse import write_bytes_atomic

try:  # in a try block: transformers' import check lets folders load without ONNX Runtime
    import onnxruntime
except ImportError:
    onnxruntime = None

ONNX_FILE = "onnx/model.onnx"
QUANTIZED_ONNX_FILE = "onnx/model_qint8.onnx"
OUTPUT_NAMES = ("mu", "logvar", "last_hidden_state")
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OPSET_VERSION = 18
# the default execution provider: the first of these ONNX Runtime has (its own list can start with providers that do
# not run a local graph, e.g. AzureExecutionProvider in the CPU wheel)
DEFAULT_PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")

logger = logging.get_logger(__name__)


def require_onnxruntime():
    """The ``onnxruntime`` module; ``ImportError`` saying what to install otherwise."""
    if onnxruntime is None:
        raise ImportError("GaussCSE's ONNX backend needs ONNX Runtime: pip install onnxruntime")
    return onnxruntime


class _GaussianForward(nn.Module):
    """``GaussCSEModel.forward`` on token tensors, returning the tuple the ONNX graph outputs (``OUTPUT_NAMES``)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        output = self.model(**inputs, return_dict=True)
        return output.mu, output.logvar, output.last_hidden_state


def model_input_names(model) -> tuple[str, ...]:
    """The token inputs the model's tokenizer produces (``token_type_ids`` for BERT-like encoders only)."""
    names = model.get_tokenizer().model_input_names
    return tuple(name for name in TOKEN_INPUTS if name in names)


def export_onnx_bytes(model, opset_version: int = OPSET_VERSION) -> bytes:
    """The float32 ONNX graph of ``model``'s forward pass (module docstring), serialised; batch and sequence axes
    dynamic. ``model`` itself is not changed (a float32 CPU copy is exported)."""
    require_onnxruntime()
    input_names = model_input_names(model)
    example = torch.tensor([[101, 2023, 2003, 102], [101, 2023, 102, 0]])
    examples = {
        "input_ids": example.clamp_max(model.config.encoder_config.vocab_size - 1),
        "attention_mask": (example > 0).long(),
        "token_type_ids": torch.zeros_like(example),
    }
    # a fresh graph even when called under torch.inference_mode (encode), whose tensors torch.export cannot trace
    with torch.inference_mode(False), tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "model.onnx"
        exported = _GaussianForward(copy.deepcopy(model).to("cpu", torch.float32)).eval()
        torch.onnx.export(
            exported,
            (),
            str(path),
            kwargs={name: examples[name] for name in input_names},
            input_names=list(input_names),
            output_names=list(OUTPUT_NAMES),
            dynamic_shapes={name: {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC} for name in input_names},
            opset_version=opset_version,
            dynamo=True,
            external_data=False,
            verbose=False,
        )
        return path.read_bytes()


def quantize_onnx_bytes(model_bytes: bytes) -> bytes:
    """``model_bytes`` with the encoder's matrix products quantised to int8 (ONNX Runtime's ``quantize_dynamic``:
    signed int8 weights, one scale per output channel; activations quantised per batch at run time). The μ and
    log σ² heads (``Gemm`` nodes) stay float32: KL is sensitive to log σ², and per-tensor scales or quantised heads
    moved it further. What int8 costs in ranking and accuracy: ``bench/bench_serving.py``.

    The weights use 7 bits (``reduce_range``, |w| ≤ 64): on CPUs without VNNI (AVX2, AVX512F/BW) ONNX Runtime adds
    pairs of uint8 × int8 products in a saturating int16 (``vpmaddubsw``), exact only for 2·255·|w| ≤ 32767: with
    8-bit weights such a CPU computed another μ than a VNNI one; with 7 bits every x86-64 CPU computes the same
    integers."""
    require_onnxruntime()
    quantization = importlib.import_module("onnxruntime.quantization")  # needs the onnx package too
    with tempfile.TemporaryDirectory() as scratch:
        source, target = Path(scratch) / "model.onnx", Path(scratch) / "model_qint8.onnx"
        source.write_bytes(model_bytes)
        quantization.quantize_dynamic(
            str(source),
            str(target),
            weight_type=quantization.QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul"],
        )
        return target.read_bytes()


def export_onnx(model, folder: str | Path, quantize: bool = False) -> list[Path]:
    """Write ``folder/onnx/model.onnx`` (and ``onnx/model_qint8.onnx`` with ``quantize``) for ``model``, each file
    appearing whole; returns the paths written. The folder is usually the model's own, beside its weights."""
    model_bytes = export_onnx_bytes(model)
    files = {ONNX_FILE: model_bytes}
    if quantize:
        files[QUANTIZED_ONNX_FILE] = quantize_onnx_bytes(model_bytes)
    written = []
    for name, data in files.items():
        write_bytes_atomic(Path(folder) / name, data)
        written.append(Path(folder) / name)
    return written


class OnnxGaussianEncoder:
    """An ONNX Runtime session of a GaussCSE graph: token tensors → float32 ``mu``, ``logvar``, ``last_hidden_state``
    (torch tensors on the CPU), as ``GaussCSEModel.forward`` gives them.

    Args:
        model_bytes: the serialised graph ([`export_onnx_bytes`], or a file's bytes).
        file_name: where in a model folder the graph lives (``ONNX_FILE``, ``QUANTIZED_ONNX_FILE``): [`save`] writes
            it there.
        provider: ONNX Runtime execution provider (default: CUDA where ONNX Runtime has it, else CPU); the CPU
            provider is kept as the fallback for operators another provider lacks.
    """

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

    @classmethod
    def from_model(
        cls, model, file_name: str = ONNX_FILE, provider: str | None = None, export: bool | None = None
    ) -> OnnxGaussianEncoder:
        """The graph ``file_name`` of the model's folder or Hub repo (``model.name_or_path``); exported from
        ``model`` itself when ``export`` is true, or when ``export`` is None and the folder has no such file (a
        quantised file is never made implicitly: [`export_onnx`] writes it)."""
        model_bytes = None if export else read_model_file(model.name_or_path, file_name)
        if model_bytes is None:
            if export is False or file_name not in (ONNX_FILE, QUANTIZED_ONNX_FILE):
                raise FileNotFoundError(
                    f"{model.name_or_path!r} has no {file_name}: export it with "
                    "gausscse.model.onnx_gausscse.export_onnx(model, folder) (or pass export=True)"
                )
            logger.warning(
                f"{model.name_or_path or 'this model'} has no {file_name}: exporting it from the PyTorch weights now. "
                "Save it to skip this next time: st.save_pretrained(folder), or "
                "gausscse.model.onnx_gausscse.export_onnx(model, folder)."
            )
            model_bytes = export_onnx_bytes(model)
            if file_name == QUANTIZED_ONNX_FILE:
                model_bytes = quantize_onnx_bytes(model_bytes)
        return cls(model_bytes, file_name, provider)

    def __call__(self, features: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{"mu", "logvar", "last_hidden_state"}`` for the token tensors in ``features`` (the graph's inputs)."""
        missing = [name for name in self.input_names if name not in features]
        if missing:
            raise ValueError(f"the ONNX graph needs {self.input_names}; features lack {missing}")
        feeds = {name: np.ascontiguousarray(features[name].cpu().numpy(), dtype=np.int64) for name in self.input_names}
        outputs = self.session.run(list(OUTPUT_NAMES), feeds)
        return {name: torch.from_numpy(value).float() for name, value in zip(OUTPUT_NAMES, outputs, strict=True)}

    def save(self, folder: str | Path) -> Path:
        """Write the graph to ``folder / file_name`` (appearing whole); returns the path."""
        path = Path(folder) / self.file_name
        write_bytes_atomic(path, self.model_bytes)
        return path


def read_model_file(name_or_path: str, file_name: str) -> bytes | None:
    """The bytes of ``file_name`` in a local folder or Hub repo ``name_or_path``; None if it has no such file."""
    local = Path(name_or_path) / file_name
    if local.is_file():
        return local.read_bytes()
    if not name_or_path or Path(name_or_path).is_dir():
        return None
    from transformers.utils import cached_file

    path = cached_file(name_or_path, file_name, _raise_exceptions_for_missing_entries=False)
    return Path(path).read_bytes() if path else None


__all__ = [
    "ONNX_FILE",
    "QUANTIZED_ONNX_FILE",
    "OnnxGaussianEncoder",
    "export_onnx",
    "export_onnx_bytes",
    "quantize_onnx_bytes",
]
