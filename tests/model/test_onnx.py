"""ONNX Runtime serving: the exported graph gives PyTorch's μ and log σ² (BERT, RoBERTa, the frozen μ path), through
``GaussCSEModel.encode(backend="onnx")`` and ``SentenceTransformer(folder, trust_remote_code=True, backend="onnx")``
in a fresh process that runs only the folder's shipped code — with the PyTorch weights wiped after loading, so the
numbers can only come from ONNX Runtime; int8 files, saving, and the errors."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from unittest import mock

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime
import pytest
import torch

from gausscse import GaussCSEModel
from gausscse.model import onnx_gausscse
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
        model.name_or_path = str(folder)  # its graphs are read from there, as for a model loaded from the folder
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
    """Only the folder's shipped code (the gausscse package blocked); after loading, the PyTorch model's forward
    raises: the routes still equal PyTorch's, so ONNX Runtime computed them. Saving keeps the graph."""
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
def no_pytorch(*args, **kwargs):
    raise AssertionError("the PyTorch forward ran")
module.model.forward = no_pytorch
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


def test_saving_new_weights_removes_the_stale_graph(saved_model, make_tiny_model, minilm_tokenizer):
    """A graph records the fingerprint of the weights it was exported from: saving the same model again keeps its
    graphs, saving other weights into the folder removes them, and the folder then serves its new weights."""
    model, folder = saved_model()
    export_onnx(model, folder, quantize=True)
    model.save_pretrained(folder)
    assert (folder / ONNX_FILE).is_file() and (folder / QUANTIZED_ONNX_FILE).is_file()
    other = make_tiny_model(seed=1, similarity_reduction="sum")
    other.get_tokenizer(minilm_tokenizer)
    with mock.patch.object(onnx_gausscse.logger, "warning") as warned:
        other.save_pretrained(folder)
    assert not (folder / ONNX_FILE).exists() and not (folder / QUANTIZED_ONNX_FILE).exists()
    again = "Export them again: gausscse.model.onnx_gausscse.export_onnx(model, folder)"
    assert any(again in call.args[0] for call in warned.call_args_list)
    reloaded = GaussCSEModel.from_pretrained(folder)
    onnx, reference = reloaded.encode(SENTENCES, backend="onnx"), reloaded.encode(SENTENCES)
    torch.testing.assert_close(onnx.mu, reference.mu, atol=1e-5, rtol=1e-4)


def test_a_save_without_any_onnx_reader_keeps_the_graphs(saved_model, make_tiny_model, minilm_tokenizer, monkeypatch):
    """With neither onnx nor ONNX Runtime installed nothing can read a graph's fingerprint: a save of other weights
    keeps the graphs (serving checks them) rather than remove graphs it cannot judge."""
    model, folder = saved_model()
    export_onnx(model, folder)
    find_spec = importlib.util.find_spec
    readers = ("onnx", "onnxruntime")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name in readers else find_spec(name))
    other = make_tiny_model(seed=1, similarity_reduction="sum")
    other.get_tokenizer(minilm_tokenizer)
    other.save_pretrained(folder)
    assert (folder / ONNX_FILE).is_file()


def test_the_final_training_save_removes_the_earlier_models_graph(make_tiny_model, minilm_tokenizer, tmp_path):
    """``gausscse-train --overwrite_output_dir`` into a folder holding ``onnx/``: the final save keeps the folder's
    other entries, but not a graph of the earlier model."""
    from ..helpers import final_save

    card = {"model_name": "m", "base_model": "b", "datasets": [], "metrics": {}, "training_arguments": {},
            "data_stats": {}}  # fmt: skip
    folder = tmp_path / "out"
    earlier, trained = make_tiny_model(seed=0), make_tiny_model(seed=1)
    final_save(earlier, minilm_tokenizer, folder, card, {})
    export_onnx(earlier, folder)
    (folder / "notes.txt").write_text("the user's own file")
    final_save(trained, minilm_tokenizer, folder, card, {})
    assert not (folder / ONNX_FILE).exists() and (folder / "notes.txt").is_file()


@pytest.mark.parametrize(
    ("graph_of", "message"),
    [
        ({"seed": 1}, r"was exported from other weights or another config than this model"),
        ({"embedding_size": 16}, r"outputs 16-dimensional Gaussians, this model's are 32-dimensional"),
        (None, r"records no GaussCSE fingerprint"),
    ],
    ids=["other-weights", "other-dimension", "no-fingerprint"],
)
def test_a_graph_not_exported_from_this_model_is_refused_when_served(
    graph_of, message, saved_model, make_tiny_model, minilm_tokenizer
):
    """A graph of other weights, of a model of another dimension, or one that records no fingerprint (exported before
    fingerprints, or by another tool) in the folder: ``encode(backend="onnx")`` and the sentence-transformers module
    refuse it, naming the file and how to export it again; ``export=True`` exports this model's own."""
    from gausscse.model.sentence_transformer_gausscse import GaussCSETransformer

    model, folder = saved_model()
    if graph_of is None:  # this model's graph without its metadata
        export_onnx(model, folder)
        graph = onnx.load(folder / ONNX_FILE)
        del graph.metadata_props[:]
        onnx.save(graph, folder / ONNX_FILE)
    else:
        other = make_tiny_model(similarity_reduction="sum", **graph_of)
        other.get_tokenizer(minilm_tokenizer)
        export_onnx(other, folder)
    expected = rf"^{re.escape(str(folder / ONNX_FILE))} {message}.*export_onnx\(model, folder\).*'export': True"
    with pytest.raises(ValueError, match=expected):
        model.encode(SENTENCES, backend="onnx")
    with pytest.raises(ValueError, match=expected):
        GaussCSETransformer.load(str(folder), backend="onnx")
    module = GaussCSETransformer.load(str(folder), backend="onnx", model_kwargs={"export": True})
    onnx_mu = module.forward(module.preprocess(SENTENCES))["mu"]
    torch.testing.assert_close(onnx_mu, module.model(**module.preprocess(SENTENCES)).mu, atol=1e-5, rtol=1e-4)


def test_a_model_in_memory_never_reads_the_working_directory(make_tiny_model, minilm_tokenizer, tmp_path, monkeypatch):
    """A model built in memory has no folder: ``encode(backend="onnx")`` exports it rather than reading
    ``./onnx/model.onnx`` of wherever the process stands; a folder that no longer exists is not looked up on the Hub."""
    (tmp_path / "onnx").mkdir()
    (tmp_path / ONNX_FILE).write_bytes(b"the graph of some other model")
    monkeypatch.chdir(tmp_path)
    model = make_tiny_model()
    model.get_tokenizer(minilm_tokenizer)
    assert model.name_or_path == ""
    onnx_mu = model.encode(SENTENCES, backend="onnx").mu
    torch.testing.assert_close(onnx_mu, model.encode(SENTENCES).mu, atol=1e-5, rtol=1e-4)
    model.name_or_path = str(tmp_path / "gone")
    with pytest.raises(FileNotFoundError, match=r"gone' has no onnx/model\.onnx: export it with"):
        OnnxGaussianEncoder.from_model(model, export=False)


def test_export_after_an_onnx_encode_works(saved_model):
    """The README's flow: ``encode(backend="onnx")`` keeps an ONNX Runtime session on the model, which neither
    ``export_onnx`` (it exports a deep copy) nor a copy of the model takes along."""
    model, folder = saved_model()
    reference = model.encode(SENTENCES)
    model.encode(SENTENCES, backend="onnx")  # the folder has no graph: exported now, its session kept
    copied = copy.deepcopy(model)
    assert export_onnx(model, folder) == [folder / ONNX_FILE]
    for served in (model, copied):
        torch.testing.assert_close(served.encode(SENTENCES, backend="onnx").mu, reference.mu, atol=1e-5, rtol=1e-4)


def test_a_missing_int8_graph_is_not_made_implicitly(saved_model):
    """Only the float32 graph is exported when missing; the int8 one is asked for by name, with a float32 session
    kept or not."""
    model, folder = saved_model()
    expected = r"has no onnx/model_qint8\.onnx: export it with .*export_onnx\(model, folder, quantize=True\)"
    with pytest.raises(FileNotFoundError, match=expected):
        OnnxGaussianEncoder.from_model(model, QUANTIZED_ONNX_FILE)
    model.encode(SENTENCES, backend="onnx")
    with pytest.raises(FileNotFoundError, match=expected):
        model.encode(SENTENCES, backend="onnx", onnx_file=QUANTIZED_ONNX_FILE)
    assert not (folder / "onnx").exists()


def test_a_changed_model_gets_a_fresh_checked_session(saved_model, make_tiny_model, minilm_tokenizer):
    """The sessions a model keeps are for its weights as they are: changed in place, a model in memory is exported
    again, and a model whose folder's graph is of its earlier weights is refused."""
    in_memory = make_tiny_model()
    in_memory.get_tokenizer(minilm_tokenizer)
    in_memory.encode(SENTENCES, backend="onnx")
    with torch.no_grad():
        in_memory.mean_head.bias.add_(0.5)
    onnx_mu = in_memory.encode(SENTENCES, backend="onnx").mu
    torch.testing.assert_close(onnx_mu, in_memory.encode(SENTENCES).mu, atol=1e-5, rtol=1e-4)
    model, folder = saved_model()
    export_onnx(model, folder)
    model.encode(SENTENCES, backend="onnx")
    with torch.no_grad():
        model.mean_head.bias.add_(0.5)
    with pytest.raises(ValueError, match="was exported from other weights"):
        model.encode(SENTENCES, backend="onnx")


def test_a_sentence_transformer_on_onnx_refuses_weights_changed_in_memory(saved_model):
    """``SentenceTransformer(folder, backend="onnx")`` whose model's weights are changed after loading: its encode
    served the graph of the old weights unchanged (the PyTorch backend then differed by ~2); now it is refused as
    ``model.encode(backend="onnx")`` refuses it."""
    from sentence_transformers import SentenceTransformer

    model, folder = saved_model()
    export_onnx(model, folder)
    st = SentenceTransformer(str(folder), backend="onnx", trust_remote_code=True)
    before = st.encode(SENTENCES)
    with torch.no_grad():
        st[0].model.mean_head.weight.mul_(-1)
    with pytest.raises(ValueError, match=r"onnx/model\.onnx was exported from other weights .*export_onnx"):
        st.encode(SENTENCES)
    with torch.no_grad():
        st[0].model.mean_head.weight.mul_(-1)
    np.testing.assert_array_equal(st.encode(SENTENCES), before)  # its own weights again: served


def test_a_graph_serves_its_model_loaded_in_another_precision_and_from_a_subfolder(saved_model, tmp_path):
    """The fingerprint is of the weights as float32: a bfloat16 folder with the graph exported from it, loaded with
    ``dtype=torch.float32``, is the model its graph was exported from (it was refused as "other weights"); a model
    loaded with ``subfolder=`` serves the graph of that subfolder, not the parent folder's."""
    model, _ = saved_model()
    model.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    export_onnx(model, tmp_path / "bf16")
    widened = GaussCSEModel.from_pretrained(tmp_path / "bf16", dtype=torch.float32)
    widened.get_tokenizer(model.get_tokenizer())
    widened.encode(SENTENCES, backend="onnx")  # served, not refused
    model.float()
    other, _ = saved_model(seed=3)
    export_onnx(other, tmp_path / "top")  # the parent folder's graph is of another model
    other.save_pretrained(tmp_path / "top")
    model.save_pretrained(tmp_path / "top" / "sub")
    export_onnx(model, tmp_path / "top" / "sub")
    nested = GaussCSEModel.from_pretrained(tmp_path / "top", subfolder="sub")
    torch.testing.assert_close(nested.encode(SENTENCES, backend="onnx").mu, model.encode(SENTENCES).mu,
                               atol=1e-5, rtol=1e-4)  # fmt: skip


def test_a_sentence_transformer_saves_only_a_graph_of_its_weights(saved_model, tmp_path):
    """``st.save_pretrained`` writes the module's graph beside the weights only while the graph is theirs."""
    from gausscse.model.sentence_transformer_gausscse import GaussCSETransformer

    model, folder = saved_model()
    export_onnx(model, folder)
    module = GaussCSETransformer.load(str(folder), backend="onnx")
    module.save(str(tmp_path / "same"))
    assert (tmp_path / "same" / ONNX_FILE).is_file()
    with torch.no_grad():
        module.model.mean_head.bias.add_(0.5)
    module.save(str(tmp_path / "changed"))
    assert not (tmp_path / "changed" / ONNX_FILE).exists()


def test_a_graph_exported_by_the_package_is_served_by_the_folders_own_code(saved_model, fresh_python, tmp_path):
    """The fingerprint a graph records (computed by the installed package) is the one the folder's shipped code
    computes for the model it loads: the graph is served, not refused, in a fresh process without the package."""
    model, folder = saved_model(frozen_mean=True)
    export_onnx(model, folder)
    expected = model.encode(SENTENCES).mu.tolist()
    code = f"""
import torch
from sentence_transformers import SentenceTransformer
st = SentenceTransformer({str(folder)!r}, trust_remote_code=True, backend="onnx")
got = st.encode({SENTENCES!r}, convert_to_tensor=True)
torch.testing.assert_close(got, torch.tensor({expected!r}), atol=1e-5, rtol=1e-4)
print("ok")
"""
    assert fresh_python(code, tmp_path).strip().endswith("ok")


def test_choosing_a_score_weight_keeps_the_folders_graph_and_fingerprint(saved_model, data_dir):
    """λ, α and the threshold rank and decide but change no Gaussian: setting them on a saved folder (the README's
    ``python -m gausscse.evaluation.search_weight --model DIR``, and α by ``entailment_weight``) keeps the model's
    fingerprint, so the folder's ONNX graph is still its own; a weight changed in place is another fingerprint."""
    from gausscse.evaluation import entailment_weight, search_weight
    from gausscse.model.utils_gausscse import model_fingerprint

    model, folder = saved_model()
    export_onnx(model, folder)
    before = model_fingerprint(GaussCSEModel.from_pretrained(folder))
    search_weight.main(["--model", str(folder), "--data_dir", str(data_dir)])
    entailment_weight.main(["--model", str(folder), "--data_dir", str(data_dir)])
    reloaded = GaussCSEModel.from_pretrained(folder)
    assert reloaded.config.search_kl_weight is not None and reloaded.config.entailment_threshold is not None
    assert model_fingerprint(reloaded) == before
    onnx, reference = reloaded.encode(SENTENCES, backend="onnx"), reloaded.encode(SENTENCES)  # not refused
    torch.testing.assert_close(onnx.mu, reference.mu, atol=1e-5, rtol=1e-4)
    with torch.no_grad():
        reloaded.logvar_head.bias.add_(0.1)
    assert model_fingerprint(reloaded) != before


def test_the_kept_fingerprint_follows_every_change_of_the_weights(make_tiny_model):
    """The fingerprint an ONNX encode checks at every call is kept per model (hashing the weights each time cost more
    than encoding a sentence) and is recomputed after any change: in place, a replaced parameter, ``.data`` swapped,
    the config changed; each time it equals the fingerprint of a fresh copy (hashed from scratch)."""
    from gausscse.model.utils_gausscse import model_fingerprint

    model = make_tiny_model()
    seen = {model_fingerprint(model)}

    def changes():
        with torch.no_grad():
            model.mean_head.bias.add_(0.5)
        yield
        model.mean_head.weight = torch.nn.Parameter(model.mean_head.weight.detach() * 2)
        yield
        model.logvar_head.bias.data = model.logvar_head.bias.detach() + 1
        yield
        model.config.logvar_max = model.config.logvar_max - 1
        yield

    for _ in changes():
        kept = model_fingerprint(model)
        assert kept == model_fingerprint(copy.deepcopy(model)) and kept not in seen
        seen.add(kept)
    with mock.patch("hashlib.sha256", side_effect=AssertionError("hashed again")):
        assert model_fingerprint(model) == kept  # unchanged: the kept value, no hashing
