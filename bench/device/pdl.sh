#!/usr/bin/env bash
# One device call for the PDL opt-ins (trigger after each kernel's own wait) and the
# per-kernel decode ratios: bash bench/device/pdl.sh STEP...
# Steps: tests (the CUDA tests under the PDL flags), decode (TORCHINDUCTOR_ENABLE_PDL=1
# bench/decode_8b.py bf16 + Q3 without the flags, then Q3 with them: same machine),
# gemv (bench/trellis_gemv.py, the three shapes, M = 1 and 4, default block shapes).
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
PDLF=(TQBUILD_GEMV_FLAGS=-DTQ_PDL_IN=1 TQBUILD_AFFINE_FLAGS=-DTQ_AFF_PDL=1)
TAG=${TAG:--s16}
: "${END_S:=570}"  # the call's end (s), read by env.sh's left
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
for step in "$@"; do
  echo "=== $step $(date +%T)"
  case $step in
    tests) env "${PDLF[@]}" timeout "${TESTS_S:-200}" python -m pytest -q tests/test_pdl_chain.py \
             tests/test_trellis_int8.py tests/test_affine_kernel.py -k "cuda or chain or CUDA" 2>&1 \
             | tee "$OUT/pdl-pytest.log" | tail -8 ;;
    decode) TORCHINDUCTOR_ENABLE_PDL=1 timeout "${DECODE_S:-260}" python bench/decode_8b.py \
              --compile --no-eager --only bf16,q3-fused-cu-lm8-qkv --tag="$TAG"p 2>&1 | tail -6
            env "${PDLF[@]}" TORCHINDUCTOR_ENABLE_PDL=1 timeout "${DECODE_S:-260}" \
              python bench/decode_8b.py --compile --no-eager --only q3-fused-cu-lm8-qkv \
              --tag="$TAG"pp 2>&1 | tail -6
            cp bench/results/decode_8b-cuda"$TAG"p*.json "$OUT/" ;;
    gemv) timeout "$(left)" python bench/trellis_gemv.py --no-sweep --ms 1,4 \
            --shapes 8192x8192,gate,down --tag="$TAG" 2>&1 | cut -c1-250 | tail -40
          cp bench/results/trellis_gemv-cuda"$TAG"*.json "$OUT/" ;;
  esac
done
echo "=== done $(date +%T)"
