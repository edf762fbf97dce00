#!/usr/bin/env bash
# The release study: which recipe configs/release.yaml trains for an hour on 2 CPU cores (issue 25). Every candidate
# starts from the packaged all-MiniLM-L6-v2 with the quickstart recipe (configs/study_base.yaml, the quickstart recipe as it was: ent+con+rev, the
# similarity issue's mean_kl reduction, two paths — μ from a frozen copy of the backbone, log σ² trained — with the
# retrieval term, batch 64, max length 64, packed, backbone rate 1e-4, heads 1e-3, 10 % warm-up, linear decay, the
# precision the quickstart picks) and changes one thing:
#   base           the quickstart recipe as it is
#   lr_3e-5        backbone learning rate 3e-5 (the paper's)
#   lr_3e-4        backbone learning rate 3e-4
#   len_32         max length 32 (the paper's; more steps in the same minutes, MNLI premises cut)
#   batch_128      batch 128 (more in-batch negatives, fewer steps)
#   shared_simcse  one trained encoder for μ and σ² (--frozen_mean false) with the released code's auxiliary SimCSE
#                  term on μ (--simcse_weight 1): μ learns NLI too, at the risk of the backbone's retrieval quality
# Same training minutes for all: each candidate trains for BUDGET_SECONDS (600 s, a sixth of the release hour); its
# step count is that budget over its own seconds per step, measured by a 30-step probe of the same configuration
# (the linear schedule ends at that step). Packing is no candidate: it gives the same loss, faster (BENCHMARKS.md).
# The reduction is the similarity issue's (mean_kl, results/REPRODUCTION.md), not chosen again.
#
# Selection rule, fixed before the runs (SNLI dev only; applied by studies/release_report.py):
#   1. per candidate, the mean over its seeds of, on SNLI dev: direction accuracy (similarity rule, all entailment
#      pairs), AUPRC (binary NLI) and entailment-retrieval nDCG@10 through the model's own similarity (2,000 claims ×
#      all premises, as the test sets);
#   2. a candidate is eligible if that retrieval nDCG@10 is at least the untouched backbone's cosine nDCG@10 on the
#      same set minus 1.5 points (what the forgetting issue asks: do not lose the backbone's retrieval);
#   3. among eligible candidates the highest score = direction + AUPRC wins; candidates within 0.5 points of the best
#      score are ordered by retrieval nDCG@10;
#   4. seed 42 for every candidate; the two best by 1–3 also get seed 1, and the rule is applied again to the
#      two-seed means of those two. The winner's flags, trained for the hour, are configs/release.yaml.
# The test sets (SNLI test, MNLI matched/mismatched, SICK; retrieval) are evaluated for every run and reported, never
# used to choose.
#
# Usage: bash studies/run_release_study.sh train SEED CANDIDATE...   (one training run per candidate)
#        bash studies/run_release_study.sh evaluate                  (every trained run, dev and test; the report)
# Finished runs (a train_results.json in their folder) are not trained again: an interrupted study resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
source studies/study_env.sh
runs=${RUNS_DIR:-outputs/release_study}
out=results/release_study
BUDGET_SECONDS=600
PROBE_STEPS=30
mkdir -p "$out/train" "$out/probe" "$runs"

candidate_flags() {
  case $1 in
    base) echo "" ;;
    lr_3e-5) echo "--learning_rate 3e-5" ;;
    lr_3e-4) echo "--learning_rate 3e-4" ;;
    len_32) echo "--max_seq_length 32" ;;
    batch_128) echo "--per_device_train_batch_size 128" ;;
    shared_simcse) echo "--start backbone --frozen_mean false --simcse_weight 1" ;;
    *) echo "unknown candidate $1" >&2; exit 2 ;;
  esac
}

# the configuration a step's cost depends on (learning rates cost nothing)
shape_of() {
  case $1 in
    base | lr_*) echo base ;;
    *) echo "$1" ;;
  esac
}

# seconds per step of a candidate's configuration: a PROBE_STEPS-step run without evaluation (measured once)
seconds_per_step() {
  local shape
  shape=$(shape_of "$1")
  if [ ! -f "$out/probe/$shape.json" ]; then
    # shellcheck disable=SC2046
    train_candidate "$runs/probe_$shape" 42 $(candidate_flags "$1") --max_steps "$PROBE_STEPS" --eval_strategy no \
      --logging_steps "$PROBE_STEPS" >&2
    cp "$runs/probe_$shape/train_results.json" "$out/probe/$shape.json"
    rm -rf "$runs/probe_$shape"
  fi
  .venv/bin/python -c "import json, sys; print(json.load(open(sys.argv[1]))['train_runtime'] / int(sys.argv[2]))" \
    "$out/probe/$shape.json" "$PROBE_STEPS"
}

case ${1:-} in
  train)
    seed=$2
    shift 2
    for candidate in "$@"; do
      name="${candidate}_seed$seed"
      if [ ! -f "$runs/$name/train_results.json" ]; then
        per_step=$(seconds_per_step "$candidate")
        steps=$(.venv/bin/python -c "import sys; print(int(float(sys.argv[1]) / float(sys.argv[2])))" \
          "$BUDGET_SECONDS" "$per_step")
        echo "release study: $name, $steps steps ($per_step s/step)" >&2
        # shellcheck disable=SC2046
        train_candidate "$runs/$name" "$seed" $(candidate_flags "$candidate") --max_steps "$steps" --eval_steps "$steps"
      fi
      cp "$runs/$name/train_results.json" "$out/train/$name.json"
    done
    ;;
  evaluate)
    evaluate_study "$runs" "$out" nli,direction,retrieval nli,retrieval "budget_seconds=$BUDGET_SECONDS"
    .venv/bin/python -m studies.release_report
    ;;
  *) echo "usage: bash studies/run_release_study.sh train SEED CANDIDATE... | evaluate" >&2; exit 2 ;;
esac
