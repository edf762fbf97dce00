"""Whether two quickstart output folders hold the same run: the weights byte for byte, the evaluation report and
results apart from timings and the folders' own paths, and the model card.

    python scripts/compare_runs.py outputs/quickstart-check outputs/quickstart
"""

from __future__ import annotations

import argparse
import filecmp
import json
import re
from pathlib import Path
from typing import Any

TIMING_KEYS = {
    "seconds_per_model",
    "seconds_total",
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "elapsed_seconds",
}


def without_timings(value: Any, folder: str) -> Any:
    """``value`` (results.json) without timing fields, the folder's path written as ``OUT``."""
    if isinstance(value, dict):
        return {
            anonymous(key, folder): without_timings(item, folder)
            for key, item in value.items()
            if key not in TIMING_KEYS
        }
    if isinstance(value, list):
        return [without_timings(item, folder) for item in value]
    return anonymous(value, folder) if isinstance(value, str) else value


def anonymous(text: str, folder: str) -> str:
    """``text`` with the folder's path as ``OUT`` and its name (the model's name in tables) as ``MODEL``."""
    return text.replace(folder, "OUT").replace(Path(folder).name, "MODEL")


def report_lines(path: Path, folder: str) -> list[str]:
    """The report's lines, the wall-clock sentence and the folder's path left out."""
    text = anonymous(path.read_text(encoding="utf-8"), folder)
    return [re.sub(r"Wall-clock: [0-9.]+ s", "Wall-clock: …", line) for line in text.splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    args = parser.parse_args()
    names = [str(args.first), str(args.second)]
    same_weights = filecmp.cmp(args.first / "model.safetensors", args.second / "model.safetensors", shallow=False)
    print(f"model.safetensors byte-identical: {same_weights}")
    if all((folder / "eval").is_dir() for folder in (args.first, args.second)):
        reports = [
            report_lines(folder / "eval" / "report.md", name)
            for folder, name in zip([args.first, args.second], names, strict=True)
        ]
        differing_lines = sum(a != b for a, b in zip(*reports, strict=False))
        print(
            f"eval/report.md lines differing (timings, paths aside): {differing_lines} of {len(reports[0])} (line "
            f"counts {len(reports[0])} / {len(reports[1])})"
        )
        results = [
            without_timings(json.loads((folder / "eval" / "results.json").read_text()), name)
            for folder, name in zip([args.first, args.second], names, strict=True)
        ]
        print(f"eval/results.json equal (timings, paths aside): {results[0] == results[1]}")
    else:
        print("eval/: not in both folders (training runs without the quickstart's evaluation): not compared")
    trained = [
        without_timings(json.loads((folder / "train_results.json").read_text()), name)
        for folder, name in zip([args.first, args.second], names, strict=True)
    ]
    print(f"train_results.json equal (timings, paths aside): {trained[0] == trained[1]}")
    cards = [
        anonymous((folder / "README.md").read_text(encoding="utf-8"), name).splitlines()
        for folder, name in zip([args.first, args.second], names, strict=True)
    ]
    differing = [(a, b) for a, b in zip(*cards, strict=False) if a != b]
    print(f"README.md (model card) lines differing: {len(differing)} of {len(cards[0])}")
    for first, second in differing:
        print(f"  < {first[:110]}\n  > {second[:110]}")
    configs = [json.loads((folder / "config.json").read_text()) for folder in (args.first, args.second)]
    extra = sorted(set(configs[1]) ^ set(configs[0]))
    changed = sorted(key for key in set(configs[0]) & set(configs[1]) if configs[0][key] != configs[1][key])
    print(f"config.json keys in one only: {extra}; changed: {changed}")


if __name__ == "__main__":
    main()
