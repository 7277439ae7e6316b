#!/usr/bin/env bash
# One H200 call of issue 21's measurements: bash bench/device/trellis_quality.sh STEP...
# Steps: corr (the W/H, bench/trellis_levers.py), cond (the better-
# conditioned H), codes (Gaussian MSE of every code, L 12/16, k 2-4), real (SmolLM2 MLP tensors carried in bench/real_subset, made by
# bench/smollm2_hessians.py), tests (CUDA trellis tests). Results go to $OUT;
# ARMS / REAL_ARMS pick arms, TAG suffixes the file names.
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
ARMS=${ARMS:-"L12;L12 ax0 g16;L12 ax0 g16 alpha 1.10 refit;L16 ax0 g16;L16 ax0 g16 alpha 1.10 refit"}
for step in "$@"; do
  echo "=== $step $(date +%T)"
  case $step in
    corr) for s in gate down; do
            timeout "${CORR_S:-170}" python bench/trellis_levers.py --shapes $s --arms "$ARMS" --ks "${KS:-2,3,4}" \
              --out "$OUT/trellis_quality-$s-cuda$TAG.json" | cut -c1-300
          done ;;
    cond) for s in gate down; do
            timeout "${COND_S:-70}" python bench/trellis_levers.py --shapes $s --hessian conditioned \
              --arms "L12;L12 ax0 g16 alpha 1.10 refit;L16 ax0 g16 alpha 1.10 refit" \
              --out "$OUT/trellis_quality-conditioned-$s-cuda.json" | cut -c1-300
          done ;;
    real) timeout "${REAL_S:-80}" python bench/trellis_quality_real.py bench/real_subset --k "${KS:-2,3,4}" \
            --arms "${REAL_ARMS:-L12;L12 ax0 g16 alpha 1.10 refit;L16 ax0 g16 alpha 1.10 refit}" \
            --out "$OUT/trellis_quality-smollm2-cuda$TAG.json" | cut -c1-300 ;;
    tests) timeout "${TESTS_S:-150}" python -m pytest -q -x ${TESTS:-tests/test_trellis.py tests/test_viterbi_cuda.py} ${TESTK:+-k "$TESTK"} 2>&1 | tail -8 ;;
    codes) timeout 120 python bench/trellis_codec.py --device cuda --codes --out "$OUT" | cut -c1-200 ;;
  esac
done
echo "=== done $(date +%T)"
