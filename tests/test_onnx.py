"""ONNX Runtime serving: the exported graph gives PyTorch's μ and log σ² (BERT, RoBERTa, the frozen μ path), through
``GaussCSEModel.encode(backend="onnx")`` and ``SentenceTransformer(folder, trust_remote_code=True, backend="onnx")``
in a fresh process that runs only the folder's shipped code — with the PyTorch weights wiped after loading, so the
numbers can only come from ONNX Runtime; int8 files, saving, and the errors."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime
import pytest
import torch

from gausscse.model.onnx_gausscse import ONNX_FILE, QUANTIZED_ONNX_FILE, OnnxGaussianEncoder, export_onnx

SENTENCES = [
    "A man is playing a red guitar on a stage while a crowd watches.",
    "Dogs run.",
    "A woman cooks pasta in a small kitchen.",
    "Two children are swimming in a lake near the mountains at noon.",
    "x",
]


@pytest.fixture
def saved_model(tmp_path, make_tiny_model, minilm_tokenizer):
    def save(**config_kwargs):
        folder = tmp_path / f"model-{len(list(tmp_path.iterdir()))}"
        model = make_tiny_model(similarity_reduction="sum", **config_kwargs)
        model.get_tokenizer(minilm_tokenizer)
        model.save_pretrained(folder)
        return model, folder

    return save


@pytest.mark.parametrize(
    "config",
    [{}, {"frozen_mean": True}, {"frozen_mean": True, "variance_layers": 1}, {"model_type": "roberta"}],
    ids=["bert", "frozen_mean", "trunk", "roberta"],
)
def test_onnx_encode_equals_pytorch(config, saved_model):
    model, folder = saved_model(**config)
    written = export_onnx(model, folder)
    assert written == [folder / ONNX_FILE] and (folder / ONNX_FILE).is_file()
    reference = model.encode(SENTENCES, batch_size=2)
    for batch_size in (1, 2, 5):  # batches of one sentence and of several lengths: both axes dynamic
        onnx = model.encode(SENTENCES, batch_size=batch_size, backend="onnx")
        torch.testing.assert_close(onnx.mu, reference.mu, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(onnx.logvar, reference.logvar, atol=1e-5, rtol=1e-4)
    assert model.onnx_encoder().session.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(ValueError, match=r"backend must be one of \('torch', 'onnx'\), got 'openvino'"):
        model.encode(SENTENCES, backend="openvino")


def test_the_onnx_backend_runs_onnx_runtime_in_a_fresh_process(saved_model, fresh_python, tmp_path):
    """Only the folder's shipped code (the gausscse package blocked); after loading, every PyTorch weight is set to
    zero: the routes still equal PyTorch's, so ONNX Runtime computed them. Saving keeps the graph."""
    model, folder = saved_model()
    st = model.as_sentence_transformer()
    expected = {
        route: getattr(st, route)(SENTENCES, convert_to_tensor=True).tolist()
        for route in ("encode", "encode_query", "encode_document")
    }
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    code = f"""
import json, torch
from sentence_transformers import SentenceTransformer
st = SentenceTransformer({str(folder)!r}, trust_remote_code=True, backend="onnx")
module = st[0]
assert st.backend == "onnx" and type(module.onnx_encoder).__name__ == "OnnxGaussianEncoder", module
import onnxruntime
assert isinstance(module.onnx_encoder.session, onnxruntime.InferenceSession)
with torch.no_grad():
    for parameter in module.model.parameters():
        parameter.zero_()
expected = json.load(open({str(tmp_path / "expected.json")!r}))
for route, values in expected.items():
    got = getattr(st, route)({SENTENCES!r}, convert_to_tensor=True)
    torch.testing.assert_close(got, torch.tensor(values), atol=1e-4, rtol=1e-4)
st.save_pretrained({str(tmp_path / "resaved")!r})
print("ok")
"""
    assert fresh_python(code, tmp_path).strip().endswith("ok")
    assert not (folder / ONNX_FILE).exists()  # exported at load (the folder had none), not written into the folder
    OnnxGaussianEncoder((tmp_path / "resaved" / ONNX_FILE).read_bytes())  # ... but saved with the model


def test_int8_graph_is_written_loaded_and_close(saved_model):
    """The int8 graph's integer products cannot saturate on any x86-64 CPU, so what it computes is the same on all of
    them up to float32 rounding, and its distance from float32 is the quantisation's alone.

    ONNX Runtime multiplies uint8 activations (0..255, ``DynamicQuantizeLinear``) by the int8 weights. With AVX-VNNI /
    AVX512-VNNI / AMX the products accumulate in int32; without VNNI (AVX2, AVX512F/BW) ``vpmaddubsw`` adds each
    pair of products in a saturating int16 first: exact only while 2·255·|w| ≤ 32767, i.e. |w| ≤ 64. 8-bit weights
    (up to 127) broke that, and an AVX2-only CPU returned another μ. So the weights must fit in
    7 bits (``reduce_range``), checked here on the graph itself; then the 0.05 bound below is a property of this
    model's quantisation (same integers everywhere), not of the CPU that runs the test."""
    model, folder = saved_model()
    export_onnx(model, folder, quantize=True)
    assert (folder / QUANTIZED_ONNX_FILE).stat().st_size < (folder / ONNX_FILE).stat().st_size
    graph = onnx.load(folder / QUANTIZED_ONNX_FILE).graph
    weights = {tensor.name: onnx.numpy_helper.to_array(tensor) for tensor in graph.initializer}
    products = [node for node in graph.node if node.op_type == "MatMulInteger"]
    assert len(products) == 14  # every weight matrix of the 2 encoder layers (q, k, v, output, 2 feed-forward)...
    for node in products:
        activation, weight = node.input[0], weights[node.input[1]]
        assert weight.dtype == np.int8 and int(np.abs(weight.astype(np.int32)).max()) <= 64, node.name
        producer = next(other for other in graph.node if activation in other.output)
        assert producer.op_type == "DynamicQuantizeLinear"  # ... times uint8 activations: 2·255·64 = 32640 ≤ 32767
    reference = model.encode(SENTENCES)
    int8 = model.encode(SENTENCES, backend="onnx", onnx_file=QUANTIZED_ONNX_FILE)
    assert not torch.equal(int8.mu, reference.mu)  # the quantised graph really ran
    torch.testing.assert_close(int8.mu, reference.mu, atol=0.05, rtol=0)
    torch.testing.assert_close(int8.logvar, reference.logvar, atol=0.05, rtol=0)


def test_onnx_errors_are_named(saved_model, tmp_path):
    from gausscse.model.sentence_transformer_gausscse import GaussCSETransformer

    model, folder = saved_model()
    with pytest.raises(FileNotFoundError, match=r"has no onnx/model\.onnx: export it with"):
        OnnxGaussianEncoder.from_model(model, export=False)
    with pytest.raises(FileNotFoundError, match=r"has no onnx/other\.onnx"):
        OnnxGaussianEncoder.from_model(model, "onnx/other.onnx")
    with pytest.raises(ValueError, match=r"backend='openvino': a GaussCSE model runs with backend 'torch' or 'onnx'"):
        GaussCSETransformer.load(str(folder), backend="openvino")
    with pytest.raises(ValueError, match=r"model_kwargs \['file_name'\] are for backend='onnx'"):
        GaussCSETransformer.load(str(folder), backend="torch", model_kwargs={"file_name": ONNX_FILE})
    with pytest.raises(ValueError, match=r"onnx/model\.onnx is not a loadable ONNX graph"):
        OnnxGaussianEncoder(b"not a graph")
    with pytest.raises(ValueError, match=r"a GaussCSE graph outputs"):
        OnnxGaussianEncoder(other_graph(tmp_path))


def other_graph(tmp_path) -> bytes:
    """A valid ONNX graph that is no GaussCSE graph (one output, ``y``)."""

    class Double(torch.nn.Module):
        def forward(self, x):
            return 2 * x

    path = tmp_path / "double.onnx"
    torch.onnx.export(Double(), (torch.ones(2),), str(path), output_names=["y"], dynamo=True, external_data=False)
    assert onnxruntime.InferenceSession(path.read_bytes()).get_outputs()[0].name == "y"
    return path.read_bytes()
