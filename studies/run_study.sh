#!/usr/bin/env bash
# Rerun the frozen-backbone (heads-only) study (results/study/study.json + plots, ~40 min on 2 CPU cores), then
# regenerate results/HEADS_ONLY.md from it (results/BENCHMARKS.md is bench/run_benchmarks.sh's). The
# full-fine-tuning study behind results/REPRODUCTION.md is studies/run_finetune_study.sh.
# Extra arguments go to studies/study.py (e.g. --seeds 1 2 3).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/python -m studies.study --output results/study "$@"
.venv/bin/python -m studies.heads_only_report
