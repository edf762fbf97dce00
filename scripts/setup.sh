#!/usr/bin/env bash
# Create .venv and install the pinned requirements and the project (editable); idempotent: skipped when requirements.txt and pyproject.toml are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.requirements.sha256
want=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch alone first, so pip takes the local CPU wheel instead of a CUDA build with gigabytes of extras.
.venv/bin/python -m pip install -q "$(grep -E '^torch==' requirements.txt)"
.venv/bin/python -m pip install -q -r requirements.txt
# the project itself, editable: the gausscse package and its commands (gausscse-train, gausscse-evaluate, ...)
.venv/bin/python -m pip install -q --no-deps --no-build-isolation -e .
echo "$want" > "$stamp"
