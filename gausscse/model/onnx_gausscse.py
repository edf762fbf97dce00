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

Each graph records, in its ONNX ``metadata_props`` (``FINGERPRINT_KEY``), the fingerprint of the weights and config it
was exported from (``configuration_gausscse.model_fingerprint``). A graph is served only to the model it was exported
from: one of other weights, of another dimension or with no fingerprint is refused
([`OnnxGaussianEncoder.check_model`]), and ``GaussCSEModel.save_pretrained`` removes the folder's graphs of other
weights ([`remove_stale_graphs`]).

sentence-transformers' own ONNX path (optimum) exports Hugging Face architectures by name and cannot export this
custom model (and optimum-onnx needs transformers < 4.58, where this project runs on transformers 5).
"""

from __future__ import annotations

import copy
import importlib
import io
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from torch import nn
from transformers.utils import logging

from .configuration_gausscse import model_fingerprint, write_bytes_atomic

try:  # in a try block: transformers' import check lets folders load without ONNX Runtime
    import onnxruntime
except ImportError:
    onnxruntime = None

ONNX_FOLDER = "onnx"  # a model folder's graphs, as sentence-transformers places them
ONNX_FILE = f"{ONNX_FOLDER}/model.onnx"
QUANTIZED_ONNX_FILE = f"{ONNX_FOLDER}/model_qint8.onnx"
# the metadata_props key of the model_fingerprint of the weights and config a graph was exported from
FINGERPRINT_KEY = "gausscse_fingerprint"
OUTPUT_NAMES = ("mu", "logvar", "last_hidden_state")
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OPSET_VERSION = 18
# the default execution provider: the first of these ONNX Runtime has (its own list can start with providers that do
# not run a local graph, e.g. AzureExecutionProvider in the CPU wheel)
DEFAULT_PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")

logger = logging.get_logger(__name__)

# An ONNX file is a protobuf ModelProto; its metadata_props (field 14) are StringStringEntryProto messages (key = 1,
# value = 2). They are read and written here in plain Python: a saved folder is checked (``save_pretrained``) where
# neither onnx nor ONNX Runtime is installed, and a graph's file is read field by field, skipping the graph itself.
METADATA_FIELD = 14
ENTRY_KEY, ENTRY_VALUE = 1, 2
VARINT, LENGTH_DELIMITED = 0, 2  # protobuf wire types; the fixed-size ones: wire type → bytes of the value
FIXED_SIZES = {1: 8, 5: 4}


def require_onnxruntime():
    """The ``onnxruntime`` module; ``ImportError`` saying what to install otherwise."""
    if onnxruntime is None:
        raise ImportError("GaussCSE's ONNX backend needs ONNX Runtime: pip install onnxruntime")
    return onnxruntime


def _read_varint(stream: BinaryIO) -> int:
    """The protobuf varint at the stream's position (7 bits a byte, least significant first)."""
    value, shift = 0, 0
    while True:
        byte = stream.read(1)
        if not byte:
            raise ValueError("the protobuf message ends inside a varint")
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
        shift += 7


def _varint(value: int) -> bytes:
    """``value`` (≥ 0) as a protobuf varint."""
    encoded = bytearray()
    while value >= 0x80:
        encoded.append(value & 0x7F | 0x80)
        value >>= 7
    encoded.append(value)
    return bytes(encoded)


def _fields(stream: BinaryIO) -> Iterator[tuple[int, int, int, int]]:
    """``(field number, start, value start, end)`` of each top-level field of the protobuf message in ``stream``
    (``start``: where its tag is); values are skipped, not read. ``ValueError`` if it is no protobuf message."""
    size = stream.seek(0, os.SEEK_END)
    position = 0
    while position < size:
        stream.seek(position)
        tag = _read_varint(stream)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == LENGTH_DELIMITED:
            length = _read_varint(stream)
            value_start = stream.tell()
            end = value_start + length
        elif wire_type == VARINT:
            value_start = stream.tell()
            _read_varint(stream)
            end = stream.tell()
        elif wire_type in FIXED_SIZES:
            value_start = stream.tell()
            end = value_start + FIXED_SIZES[wire_type]
        else:
            raise ValueError(f"protobuf wire type {wire_type} at byte {position}: not an ONNX file")
        if number == 0 or end > size:
            raise ValueError(f"a protobuf field at byte {position} is malformed or runs past the end")
        yield number, position, value_start, end
        position = end


def _metadata_entry(data: bytes) -> tuple[str, str]:
    """``(key, value)`` of a serialised StringStringEntryProto."""
    strings = {number: data[value_start:end] for number, _, value_start, end in _fields(io.BytesIO(data))}
    return strings.get(ENTRY_KEY, b"").decode("utf-8"), strings.get(ENTRY_VALUE, b"").decode("utf-8")


def graph_metadata(source: bytes | str | Path) -> dict[str, str]:
    """The ``metadata_props`` of an ONNX graph, given as bytes or as a file (read field by field: the graph itself
    is skipped); ``ValueError`` if it is no protobuf message."""
    with io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb") as stream:
        metadata = {}
        for number, _, value_start, end in _fields(stream):
            if number == METADATA_FIELD:
                stream.seek(value_start)
                key, value = _metadata_entry(stream.read(end - value_start))
                metadata[key] = value
        return metadata


def with_graph_metadata(model_bytes: bytes, metadata: Mapping[str, str]) -> bytes:
    """``model_bytes`` (a serialised ONNX graph) with ``metadata`` in its ``metadata_props``, replacing the entries
    of the same keys (ONNX refuses duplicate keys); the rest of the graph is kept byte for byte."""
    view = memoryview(model_bytes)
    kept = [
        view[start:end]
        for number, start, value_start, end in _fields(io.BytesIO(model_bytes))
        if number != METADATA_FIELD or _metadata_entry(bytes(view[value_start:end]))[0] not in metadata
    ]
    entries = [
        _length_delimited(
            METADATA_FIELD, _length_delimited(ENTRY_KEY, key.encode()) + _length_delimited(ENTRY_VALUE, value.encode())
        )
        for key, value in metadata.items()
    ]
    return b"".join([*kept, *entries])


def _length_delimited(number: int, value: bytes) -> bytes:
    """A protobuf field ``number`` holding ``value`` (a string, bytes or a message)."""
    return _varint(number << 3 | LENGTH_DELIMITED) + _varint(len(value)) + value


def graph_fingerprint(path: str | Path) -> str | None:
    """The model fingerprint the ONNX graph at ``path`` records (``FINGERPRINT_KEY``); None if it records none or is no
    ONNX file."""
    try:
        return graph_metadata(path).get(FINGERPRINT_KEY)
    except ValueError:
        return None


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
    """The float32 ONNX graph of ``model``'s forward pass (module docstring), serialised, recording ``model``'s
    fingerprint (``FINGERPRINT_KEY``); batch and sequence axes dynamic. ``model`` itself is not changed (a float32 CPU
    copy is exported)."""
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
        return with_graph_metadata(path.read_bytes(), {FINGERPRINT_KEY: model_fingerprint(model)})


def quantize_onnx_bytes(model_bytes: bytes) -> bytes:
    """``model_bytes`` with the encoder's matrix products quantised to int8 (ONNX Runtime's ``quantize_dynamic``:
    signed int8 weights, one scale per output channel; activations quantised per batch at run time). The μ and
    log σ² heads (``Gemm`` nodes) stay float32: KL is sensitive to log σ², and per-tensor scales or quantised heads
    moved it further. What int8 costs in ranking and accuracy: ``bench/bench_serving.py``.

    The weights use 7 bits (``reduce_range``, |w| ≤ 64): on CPUs without VNNI (AVX2, AVX512F/BW) ONNX Runtime adds
    pairs of uint8 × int8 products in a saturating int16 (``vpmaddubsw``), exact only for 2·255·|w| ≤ 32767: with
    8-bit weights such a CPU computed another μ than a VNNI one; with 7 bits every x86-64 CPU computes the same
    integers.

    The fingerprint ``model_bytes`` records is recorded in the int8 graph too: it is checked like its source."""
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
        fingerprint = graph_metadata(model_bytes).get(FINGERPRINT_KEY)
        quantized = target.read_bytes()
        return quantized if fingerprint is None else with_graph_metadata(quantized, {FINGERPRINT_KEY: fingerprint})


def export_onnx(model, folder: str | Path, quantize: bool = False) -> list[Path]:
    """Write ``folder/onnx/model.onnx`` (and ``onnx/model_qint8.onnx`` with ``quantize``) for ``model``, each file
    appearing whole and recording the model's fingerprint; returns the paths written. The folder is usually the
    model's own, beside its weights."""
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

    Attributes:
        fingerprint: the model fingerprint the graph records (``FINGERPRINT_KEY``), None if it records none.
        embedding_size: the dimension of the graph's μ (None where the graph leaves it symbolic).
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
        self.fingerprint = graph_metadata(model_bytes).get(FINGERPRINT_KEY)
        mu_size = self.session.get_outputs()[0].shape[-1]
        self.embedding_size = mu_size if isinstance(mu_size, int) else None

    @classmethod
    def from_model(
        cls, model, file_name: str = ONNX_FILE, provider: str | None = None, export: bool | None = None
    ) -> OnnxGaussianEncoder:
        """The graph ``file_name`` of the model's folder or Hub repo (``model.name_or_path``), served only if it was
        exported from this model ([`check_model`]). Exported from ``model`` itself instead when ``export`` is true, or
        when ``export`` is None, the model has no such file and ``file_name`` is the float32 graph: the int8 graph is
        never made implicitly ([`export_onnx`]``(model, folder, quantize=True)`` writes it)."""
        model_bytes = None if export else read_model_file(model.name_or_path, file_name)
        if model_bytes is not None:
            encoder = cls(model_bytes, file_name, provider)
            encoder.check_model(model, str(Path(model.name_or_path) / file_name))
            return encoder
        if not export and (export is False or file_name != ONNX_FILE):
            quantize = ", quantize=True" if file_name == QUANTIZED_ONNX_FILE else ""
            name = repr(model.name_or_path) if model.name_or_path else "this model (built in memory)"
            raise FileNotFoundError(
                f"{name} has no {file_name}: export it with "
                f"gausscse.model.onnx_gausscse.export_onnx(model, folder{quantize}) (with sentence-transformers: "
                "model_kwargs={'export': True})"
            )
        if export is None:
            logger.warning(
                f"{model.name_or_path or 'this model'} has no {file_name}: exporting it from the PyTorch weights now. "
                "Save it to skip this next time: st.save_pretrained(folder), or "
                "gausscse.model.onnx_gausscse.export_onnx(model, folder)."
            )
        model_bytes = export_onnx_bytes(model)
        if file_name == QUANTIZED_ONNX_FILE:
            model_bytes = quantize_onnx_bytes(model_bytes)
        return cls(model_bytes, file_name, provider)

    def check_model(self, model, where: str) -> None:
        """``ValueError`` (one line, naming ``where``, the graph's file) unless this graph was exported from
        ``model`` as it is now: μ of the model's dimension, and the model's fingerprint recorded."""
        again = (
            "export it again from this model with gausscse.model.onnx_gausscse.export_onnx(model, folder) (with "
            "sentence-transformers: model_kwargs={'export': True})"
        )
        size = model.config.embedding_size
        if self.embedding_size not in (None, size):
            raise ValueError(
                f"{where} outputs {self.embedding_size}-dimensional Gaussians, this model's are {size}-dimensional: "
                f"it is the graph of another model; {again}"
            )
        if self.fingerprint is None:
            raise ValueError(
                f"{where} records no GaussCSE fingerprint (exported before graphs recorded one, or by another tool), "
                f"so nothing says it was exported from this model's weights; {again}"
            )
        fingerprint = model_fingerprint(model)
        if self.fingerprint != fingerprint:
            raise ValueError(
                f"{where} was exported from other weights or another config than this model (graph fingerprint "
                f"{self.fingerprint[:12]}, model {fingerprint[:12]}): {again}"
            )

    def __call__(self, features: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{"mu", "logvar", "last_hidden_state"}`` for the token tensors in ``features`` (the graph's inputs)."""
        missing = [name for name in self.input_names if name not in features]
        if missing:
            raise ValueError(f"the ONNX graph needs {self.input_names}; features lack {missing}")
        feeds = {name: np.ascontiguousarray(features[name].cpu().numpy(), dtype=np.int64) for name in self.input_names}
        outputs = self.session.run(list(OUTPUT_NAMES), feeds)
        return {name: torch.from_numpy(value).float() for name, value in zip(OUTPUT_NAMES, outputs, strict=True)}

    def forward_batches(
        self, inputs: Iterable[tuple[torch.Tensor, Mapping[str, torch.Tensor]]], dtype: torch.dtype | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """``(rows, μ, log σ²)`` of each ``(rows, features)`` batch (``encode(backend="onnx")``; the graph's own
        precision: ``dtype`` is refused)."""
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
    """The bytes of ``file_name`` in the local folder or Hub repo ``name_or_path``; None if it has no such file, or
    if ``name_or_path`` is neither a folder nor a Hub id (``""``: a model built in memory; a folder since removed).
    Never a file of the working directory."""
    if not name_or_path:
        return None
    folder = Path(name_or_path)
    if folder.is_dir():
        local = folder / file_name
        return local.read_bytes() if local.is_file() else None
    if folder.exists() or not is_hub_repo_id(name_or_path):
        return None
    from transformers.utils import cached_file

    path = cached_file(name_or_path, file_name, _raise_exceptions_for_missing_entries=False)
    return Path(path).read_bytes() if path else None


def is_hub_repo_id(name: str) -> bool:
    """Whether ``name`` is spelled as a Hub repository id (``name`` or ``namespace/name``): the shipped code's copy of
    ``gausscse.loading.valid_repo_id``."""
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


class OnnxSessions(dict):
    """The [`OnnxGaussianEncoder`] sessions a ``GaussCSEModel`` keeps, by ``(file_name, provider)``. A copy of the
    model (``copy.deepcopy``, which [`export_onnx_bytes`] makes, or pickling) starts with none: an ONNX Runtime
    session cannot be copied, and the copy's weights may change."""

    def __deepcopy__(self, memo: dict) -> OnnxSessions:
        return type(self)()

    def __reduce__(self) -> tuple:
        return type(self), ()


def model_onnx_encoder(model, file_name: str = ONNX_FILE, provider: str | None = None) -> OnnxGaussianEncoder:
    """The ONNX Runtime session of ``encode``'s ``backend="onnx"`` (``GaussCSEModel.onnx_encoder``; ``model`` is the
    model): the graph ``file_name`` of the model's folder or Hub repo, refused unless exported from this model's
    weights and config; or, if the folder has no float32 graph, this model exported now
    ([`OnnxGaussianEncoder.from_model`]; [`export_onnx`] writes it to a folder). Kept in the model's [`OnnxSessions`]
    per file and provider while the model's fingerprint is the one the graph records: once the weights or config
    change, the next call builds (and checks) a fresh one. The fingerprint is computed on every call (about 0.05 s
    per 100 MB of weights)."""
    key = (file_name, provider)
    kept = model._onnx_encoders.get(key)
    if kept is None or kept.fingerprint != model_fingerprint(model):
        kept = model._onnx_encoders[key] = OnnxGaussianEncoder.from_model(model, file_name, provider)
    return kept


def remove_stale_graphs(folder: str | Path, model) -> list[Path]:
    """Delete the ONNX graphs of ``folder/onnx`` not exported from ``model`` as it is now (recording another
    fingerprint, none, or no ONNX file), and that folder if it is left empty; returns the paths removed, which are
    logged. What saving a model into a folder does after writing its weights: a graph of the weights it replaced would
    be refused when served anyway."""
    graphs = Path(folder) / ONNX_FOLDER
    paths = sorted(graphs.glob("*.onnx"))
    if not paths:
        return []
    fingerprint = model_fingerprint(model)
    stale = [path for path in paths if graph_fingerprint(path) != fingerprint]
    for path in stale:
        path.unlink()
    if stale:
        logger.warning(
            f"Removed {', '.join(str(path) for path in stale)}: not exported from the model saved in {folder} (other "
            "weights or config, or no fingerprint). Export them again: "
            "gausscse.model.onnx_gausscse.export_onnx(model, folder)"
        )
    if not any(graphs.iterdir()):
        graphs.rmdir()
    return stale


__all__ = [
    "FINGERPRINT_KEY",
    "ONNX_FILE",
    "QUANTIZED_ONNX_FILE",
    "OnnxGaussianEncoder",
    "OnnxSessions",
    "export_onnx",
    "export_onnx_bytes",
    "graph_fingerprint",
    "graph_metadata",
    "model_onnx_encoder",
    "quantize_onnx_bytes",
    "remove_stale_graphs",
]
