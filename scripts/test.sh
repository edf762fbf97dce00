#!/usr/bin/env bash
# Set up from scratch if needed, then lint and run the whole test suite offline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# TOKENIZERS_PARALLELISM=false: the tests fork (DataLoader workers, DDP, subprocesses) after tokenising.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
