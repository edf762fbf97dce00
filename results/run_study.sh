#!/usr/bin/env bash
# Rerun the reproduction study (results/study/study.json + plots), then regenerate results/REPRODUCTION.md and
# results/BENCHMARKS.md from the JSON files. Extra arguments go to results/study.py (e.g. --seeds 1 2 3).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/python results/study.py --output results/study "$@"
.venv/bin/python results/write_reports.py
