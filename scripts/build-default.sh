#!/usr/bin/env bash
# Set up (if needed), then build the embedded default model end to end:
# SmolLM2-135M-Instruct -> untie + γ-fold + R1/R2 + self-generated calibration + affine
# 4-bit g64 GPTQ -> out/smollm2-rot-gptq4 (the best measured 4.5-bpw recipe; its evaluate
# stage prints perplexity / KL / top-1 / EOS probe), then show it loading and generating
# in stock mlx-lm and verify it (`tq-build verify`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
tq-build plan recipes/smollm2-rot-gptq4.yaml
tq-build recipes/smollm2-rot-gptq4.yaml --force
python tests/mlx_check.py out/smollm2-rot-gptq4 "What is the capital of France?" 8
tq-build verify out/smollm2-rot-gptq4
