"""Pairwise similarity: GaussCSE's matrix form vs the released code's torch.distributions broadcast.

Measures, side by side in one run, the time and peak extra memory of the N×M similarity matrix sim(a_i‖b_j):

* ``ours_sum``       — :func:`gausscse.model.gaussian.similarity_matrix` with ``reduction="sum"`` (matrix products,
                       memory O(N·M + (N+M)·d));
* ``ours_mean_kl``   — the same with ``reduction="mean_kl"``, 1 / (1 + KL/d) (the same matrix product);
* ``ours_mean_dim``  — the same with ``reduction="mean_dim"`` (row chunks, bounded memory);
* ``reference``      — ``torch.distributions.kl_divergence`` of two Normals broadcast to N×M×d, then
                       ``mean(1 / (1 + KL_d))`` over d, as the released code does;
* ``reference_chunked`` — the same broadcast in row chunks of at most ``DEFAULT_CHUNK_ELEMENTS`` elements (bounded
                       memory, as ``ours_mean_dim``), reduced to 1 / (1 + KL/d): what ``ours_mean_kl`` computes.

Each variant runs in its own subprocess so its peak memory is its own: on CUDA ``max_memory_allocated``, on CPU the
growth of the peak resident set size (``ru_maxrss``) over the inputs' footprint.

    python -m bench.bench_similarity                 # N=M=1024, d=384 on CPU
    python -m bench.bench_similarity --device cuda --json results/bench_similarity_cuda.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import time
from pathlib import Path

import torch
from torch.distributions import Normal, kl_divergence

from bench.common import run_worker
from gausscse.io import write_json
from gausscse.model.gaussian import DEFAULT_CHUNK_ELEMENTS, similarity_matrix

VARIANTS = ("ours_sum", "ours_mean_kl", "ours_mean_dim", "reference", "reference_chunked")
REFERENCES = ("reference", "reference_chunked")


def broadcast_kl(mu_a, logvar_a, mu_b, logvar_b) -> torch.Tensor:
    """Per-dimension KL(a_i‖b_j) of all pairs, ``(N, M, d)``, through torch.distributions."""
    return kl_divergence(
        Normal(mu_a[:, None, :], torch.exp(0.5 * logvar_a)[:, None, :]),
        Normal(mu_b[None, :, :], torch.exp(0.5 * logvar_b)[None, :, :]),
    )


def reference_pairwise_similarity(mu_a, logvar_a, mu_b, logvar_b) -> torch.Tensor:
    """The released code's way: an N×M×d broadcast through torch.distributions, averaged over dimensions."""
    return (1.0 / (1.0 + broadcast_kl(mu_a, logvar_a, mu_b, logvar_b))).mean(dim=-1)


def chunked_reference_mean_kl(mu_a, logvar_a, mu_b, logvar_b) -> torch.Tensor:
    """1 / (1 + KL/d) from the torch.distributions broadcast, built in row chunks of bounded size."""
    rows = max(1, DEFAULT_CHUNK_ELEMENTS // (mu_b.shape[0] * mu_b.shape[1]))
    chunks = []
    for start in range(0, mu_a.shape[0], rows):
        kl = broadcast_kl(mu_a[start : start + rows], logvar_a[start : start + rows], mu_b, logvar_b)
        chunks.append(1.0 / (1.0 + kl.mean(dim=-1)))
    return torch.cat(chunks)


def run_variant(variant: str, n: int, m: int, dim: int, device: str, repeats: int) -> dict:
    """Time ``variant`` (median of ``repeats``, after a warm-up if repeats > 1) and measure its peak extra memory."""
    generator = torch.Generator().manual_seed(0)
    mu_a, mu_b = (torch.tanh(torch.randn(size, dim, generator=generator)).to(device) for size in (n, m))
    logvar_a, logvar_b = (torch.randn(size, dim, generator=generator).to(device) for size in (n, m))
    function = {
        "ours_sum": lambda: similarity_matrix(mu_a, logvar_a, mu_b, logvar_b, reduction="sum"),
        "ours_mean_kl": lambda: similarity_matrix(mu_a, logvar_a, mu_b, logvar_b, reduction="mean_kl"),
        "ours_mean_dim": lambda: similarity_matrix(mu_a, logvar_a, mu_b, logvar_b, reduction="mean_dim"),
        "reference": lambda: reference_pairwise_similarity(mu_a, logvar_a, mu_b, logvar_b),
        "reference_chunked": lambda: chunked_reference_mean_kl(mu_a, logvar_a, mu_b, logvar_b),
    }[variant]

    def synchronize() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
    rss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds = []
    with torch.no_grad():
        if repeats > 1:  # warm-up; a single repeat (the slow reference) is timed cold
            function()
            synchronize()
        for _ in range(repeats):
            start = time.perf_counter()
            result = function()
            synchronize()
            seconds.append(time.perf_counter() - start)
    if device.startswith("cuda"):
        peak_bytes = torch.cuda.max_memory_allocated() - baseline
    else:
        peak_bytes = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before_kib) * 1024
    return {
        "variant": variant,
        "median_seconds": statistics.median(seconds),
        "peak_extra_bytes": int(peak_bytes),
        "checksum": float(result.double().sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls of our variants (after one warm-up)")
    parser.add_argument(
        "--reference_repeats", type=int, default=1, help="timed calls of the reference (1: the single call is timed)"
    )
    parser.add_argument("--json", type=Path, help="also write the results here (atomically)")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        print(json.dumps(run_variant(args.worker, args.n, args.m, args.dim, args.device, args.repeats)))
        return

    rows = {}
    for variant in VARIANTS:
        repeats = args.reference_repeats if variant in REFERENCES else args.repeats
        rows[variant] = run_worker(
            __spec__.name,
            ["--worker", variant, "--n", str(args.n), "--m", str(args.m), "--dim", str(args.dim),
             "--device", args.device, "--repeats", str(repeats)],
        )  # fmt: skip

    reference = rows["reference"]
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    print(
        f"pairwise similarity, N={args.n}, M={args.m}, d={args.dim}, device={args.device} ({device_name}), "
        f"torch {torch.__version__}, {os.cpu_count()} CPU cores, median of {args.repeats} "
        f"(reference: {args.reference_repeats})"
    )
    chunked = rows["reference_chunked"]
    print(
        f"{'variant':<19}{'time (ms)':>12}{'peak extra memory (MiB)':>26}{'speed-up vs reference':>24}"
        f"{'vs reference_chunked':>23}"
    )
    for variant, row in rows.items():
        speedup = reference["median_seconds"] / row["median_seconds"]
        row["speedup_vs_reference"] = speedup
        row["speedup_vs_reference_chunked"] = chunked["median_seconds"] / row["median_seconds"]
        row["memory_ratio_vs_reference"] = reference["peak_extra_bytes"] / max(row["peak_extra_bytes"], 1)
        print(
            f"{variant:<19}{row['median_seconds'] * 1e3:>12.2f}{row['peak_extra_bytes'] / 2**20:>26.1f}"
            f"{speedup:>23.1f}×{row['speedup_vs_reference_chunked']:>22.1f}×"
        )
    for ours, theirs in (("ours_mean_dim", "reference"), ("ours_mean_kl", "reference_chunked")):
        same = abs(rows[ours]["checksum"] - rows[theirs]["checksum"]) <= 1e-3 * abs(rows[theirs]["checksum"])
        print(f"{ours} and {theirs} give the same matrix (checksum within 1e-3): {same}")
    print(
        f"ours_mean_kl against the chunked reference (the same similarity): "
        f"{rows['ours_mean_kl']['speedup_vs_reference_chunked']:.1f}× faster"
    )
    print(
        f"ours_sum against the reference: {rows['ours_sum']['speedup_vs_reference']:.1f}× faster, "
        f"{rows['ours_sum']['memory_ratio_vs_reference']:.0f}× less peak memory"
    )
    if args.json:
        payload = {
            "n": args.n,
            "m": args.m,
            "dim": args.dim,
            "device": args.device,
            "device_name": device_name,
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "repeats": args.repeats,
            "rows": rows,
        }
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
