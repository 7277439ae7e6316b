#!/usr/bin/env bash
# One device call: the decode libraries as they ship (session 19's unrun checks) — the pair
# kernels' CUDA tests, the PDL chain tests, the affine CUDA tests (default, then every launch
# on the wide instance: TQ_AFF_WIDE_TILES=1), and the 8B-shaped decode with no tuning flags
# (bf16, Q3, pair gate/up + mul1 down; DECODE_ONLY, DECODE_ARGS: other variants, flags), within
# END_S. bash bench/device/ship_check.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
TAG=${TAG:--ship}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 260 python3 -m pytest -q -x tests/test_pair_cuda.py tests/test_pdl_chain.py \
  tests/test_affine_cuda.py tests/test_affine_kernel.py 2>&1 | tee "$OUT/tests$TAG.log" | tail -3
TQBUILD_AFFINE_FLAGS=-DTQ_AFF_WIDE_TILES=1 timeout 90 python3 -m pytest -q -x \
  tests/test_affine_cuda.py tests/test_affine_kernel.py -k "cuda or CUDA" 2>&1 \
  | tee "$OUT/tests-wide$TAG.log" | tail -2
TORCHINDUCTOR_ENABLE_PDL=1 timeout "$(left)" python3 bench/decode_8b.py --compile --no-eager \
  --only "${DECODE_ONLY:-bf16,q3-fused-cu-lm8-qkv,p3g-fused-cu-lm8-qkv}" $DECODE_ARGS --tag="$TAG" 2>&1 \
  | grep -E "compile \{|Error" | cut -c1-200
cp bench/results/decode_8b-cuda$TAG.json "$OUT/" 2>/dev/null
echo "=== done $SECONDS s"
