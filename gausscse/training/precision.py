"""``python -m gausscse.training.precision MODEL_PATH`` prints the faster training precision here, bf16 or fp32: a GPU
with bf16 uses it; a CPU without native bf16 (AVX512-BF16 / AMX) emulates it slowly (fp32); a CPU with it times a few
training steps in each."""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import timeit
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch

PROBE_SENTENCES = [
    "A man in a blue shirt is playing a guitar on a small stage in front of a crowd.",
    "Two dogs run through a snowy field.",
    "A woman slices vegetables in a kitchen while talking on the phone.",
    "Children are playing outside.",
]


def _cpuinfo(cpuinfo: Path) -> str:
    try:
        return cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name from ``cpuinfo`` (Linux), else ``platform.processor()``."""
    names = [line.split(":", 1)[1].strip() for line in _cpuinfo(cpuinfo).splitlines() if line.startswith("model name")]
    return names[0] if names else platform.processor() or "unknown"


def cpu_has_native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU flags list AVX512-BF16 or AMX-BF16 (``False`` where ``cpuinfo`` is unreadable)."""
    return not {"avx512_bf16", "amx_bf16"}.isdisjoint(_cpuinfo(cpuinfo).split())


def seconds_per_step(step: Callable[[], None], repeats: int) -> float:
    """The (upper) median wall-clock seconds of ``step()`` over ``repeats`` calls, after one warm-up call."""
    step()
    return statistics.median_high(timeit.repeat(step, number=1, repeat=repeats))


def training_step_seconds(
    model_path: str | Path, bf16: bool, batch_size: int = 96, repeats: int = 3, max_length: int | None = None
) -> float:
    """Seconds of one forward + backward pass on the CPU (bf16 autocast or fp32) of the GaussCSE model on
    ``model_path`` over ``batch_size`` sentences truncated to ``max_length`` (default: training's)."""
    from transformers import AutoTokenizer

    from gausscse import GaussCSEModel
    from gausscse.data.tokenize import TRAIN_MAX_LENGTH

    torch.manual_seed(0)
    model = GaussCSEModel.from_backbone(str(model_path)).train()
    tokenizer = AutoTokenizer.from_pretrained(str(model_path), trust_remote_code=False)
    sentences = (PROBE_SENTENCES * batch_size)[:batch_size]
    max_length = TRAIN_MAX_LENGTH if max_length is None else max_length
    inputs = tokenizer(sentences, padding=True, truncation=True, max_length=max_length, return_tensors="pt")

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext():
            outputs = model(**inputs)
        (outputs.mu.float().square().mean() + outputs.logvar.float().mean()).backward()
        model.zero_grad(set_to_none=True)

    return seconds_per_step(step, repeats)


def main(argv: list[str] | None = None) -> None:
    """Print ``bf16`` or ``fp32``, whichever trains faster here (see the module docstring); the reason on stderr."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_path", help="the backbone (or GaussCSE) folder to time")
    args = parser.parse_args(argv)
    if torch.cuda.is_available():
        choice = "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    elif not cpu_has_native_bf16():
        choice = "fp32"
        print("precision: the CPU has no AVX512-BF16/AMX (bf16 would be emulated): fp32", file=sys.stderr)
    else:
        fp32 = training_step_seconds(args.model_path, bf16=False)
        bf16 = training_step_seconds(args.model_path, bf16=True)
        choice = "bf16" if bf16 < fp32 else "fp32"
        print(f"precision: step fp32 {fp32:.3f} s, bf16 {bf16:.3f} s ({fp32 / bf16:.2f}x): {choice}", file=sys.stderr)
    print(choice)


if __name__ == "__main__":
    main()
