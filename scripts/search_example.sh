#!/usr/bin/env bash
# Entailment search on real sentences: index the distinct SNLI-test premises with a trained GaussCSE model (default:
# the quickstart's), then ask which of them entail a few short claims.
# Usage: bash scripts/search_example.sh [MODEL] [INDEX_DIR]   (after bash scripts/quickstart.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
model=${1:-outputs/quickstart}
index=${2:-outputs/snli-test-premises}
data=${GAUSSCSE_DATA_DIR:-../shared/data}
.venv/bin/gausscse-search build --model "$model" --corpus "$data/snli/test.jsonl.gz" --column premise --index "$index"
.venv/bin/gausscse-search query --index "$index" -k 3 \
  --entailing "A man is playing music." "Two dogs are outside." "A child is eating."
