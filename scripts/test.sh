#!/usr/bin/env bash
# Set up from scratch if needed, then lint and run the whole test suite offline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# TOKENIZERS_PARALLELISM=false: the tests fork (DataLoader workers, DDP, subprocesses) after tokenising.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Two pytest workers (pytest-xdist; GAUSSCSE_TEST_WORKERS overrides), each test file on one worker (its module
# fixtures built once), one torch thread per worker (and per process it starts) so that the workers do not wait on
# each other's threads: most tests start fresh processes, which a second core runs side by side.
workers=${GAUSSCSE_TEST_WORKERS:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
.venv/bin/ruff check .
.venv/bin/python -m pytest -n "$workers" --dist loadfile "$@"
