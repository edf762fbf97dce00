#!/usr/bin/env bash
# Rerun the reproduction study (results/study/study.json + plots, ~40 min on 2 CPU cores), the full fine-tuning
# check (results/study/finetune/, ~16 min), then regenerate results/REPRODUCTION.md and
# results/BENCHMARKS.md from the JSON files. Extra arguments go to results/study.py (e.g. --seeds 1 2 3).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/python results/study.py --output results/study "$@"
# Full fine-tuning check: the quickstart once per similarity reduction (about 8 min each on 2 CPU cores).
for reduction in mean_dim sum; do
  bash scripts/quickstart.sh "outputs/study_finetune_$reduction" --similarity_reduction "$reduction"
  mkdir -p "results/study/finetune/$reduction"
  cp "outputs/study_finetune_$reduction/model/train_results.json" "results/study/finetune/$reduction/train_results.json"
  cp "outputs/study_finetune_$reduction/eval/results.json" "results/study/finetune/$reduction/eval_results.json"
done
.venv/bin/python results/write_reports.py
