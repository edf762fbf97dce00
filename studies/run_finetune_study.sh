#!/usr/bin/env bash
# The reproduction study with full fine-tuning: the four GaussCSE loss variants × both similarity reductions and
# supervised SimCSE, each fine-tuned from the packaged MiniLM with the quickstart recipe as it was (configs/study_base.yaml)
# for STEPS steps and each seed of SEEDS; SNLI-dev metrics of the final weights (full dev set, for choosing
# defaults); one evaluation of all runs on the full test splits with McNemar's tests; then results/REPRODUCTION.md.
# Usage: STEPS=200 SEEDS="0" bash studies/run_finetune_study.sh   (about 5 min per run on 2 CPU cores)
# Finished runs (a train_results.json in their folder) are not trained again: an interrupted study resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
source studies/study_env.sh
steps=${STEPS:-200}
seeds=${SEEDS:-0}
runs=${RUNS_DIR:-outputs/finetune_study}
out=results/finetune_study
reference=ent+con+rev_mean_dim
configs=(ent+con+rev:mean_dim ent+con:mean_dim ent+rev:mean_dim ent:mean_dim
  ent+con+rev:sum ent+con:sum ent+rev:sum ent:sum simcse:sum)
models=()
baselines=()
for seed in $seeds; do
  for config in "${configs[@]}"; do
    loss=${config%%:*}
    reduction=${config##*:}
    name="${loss}_${reduction}_seed$seed"
    if [ ! -f "$runs/$name/train_results.json" ]; then
      .venv/bin/python train_gausscse.py configs/study_base.yaml --model_name_or_path "$backbone" --start paper \
        --output_dir "$runs/$name" --loss "$loss" --similarity_reduction "$reduction" --seed "$seed" \
        --max_steps "$steps" --bf16 "$bf16" --eval_strategy steps --eval_steps 1000000 --save_strategy no \
        --overwrite_output_dir  # a run cut short is trained again from scratch
    fi
    if [ "${loss}_$reduction" = "$reference" ]; then models+=("$runs/$name"); else baselines+=("$runs/$name"); fi
  done
done
.venv/bin/gausscse-evaluate --model "${models[@]}" --baseline "${baselines[@]}" --tasks nli,direction \
  --output "$out" --max_length 64 --no_plots $bf16_flag
mkdir -p "$out/train"
for folder in "${models[@]}" "${baselines[@]}"; do
  cp "$folder/train_results.json" "$out/train/$(basename "$folder").json"
done
write_study_json "$out/study.json" "$steps" "$seeds"
.venv/bin/python -m studies.finetune_report
