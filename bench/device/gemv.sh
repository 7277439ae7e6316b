#!/usr/bin/env bash
# One H200 call of the int8 trellis kernel work: bash bench/device/gemv.sh STEP...
# Steps: build (compile every (k, L, code) library in parallel), tests (the int8
# kernel tests + the CUDA runtime and affine kernel tests, Triton and CUDA), tcvar (rows_tc
# compile-time variants: tests and times), affine (bench/affine_gemv.py), gemv
# (bench/trellis_gemv.py), decode (bench/decode_8b.py), decodec (the same through
# torch.compile), ncu (Nsight Compute sections of the M = 1 rows and cols kernels),
# triton (the Triton float kernels on CUDA), pair (the pair code's kernels: tests/test_pair_cuda.py,
# then bench/pair_gemv.py beside the mul1 kernels and bf16: PAIR_ARGS).
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TQBUILD_KERNEL_CACHE=${TQBUILD_KERNEL_CACHE:-/tmp/tqk}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
for step in "$@"; do
  echo "=== $step $(date +%T)"
  case $step in
    build) timeout 300 python -c "
import time; t = time.time()
from tqbuild.runtime import trellis_cuda as tc
cases = [(k, L, c) for c in ('mul1', '1mad') for k in (1, 2, 3, 4) for L in (12, 16)]
tc.prebuild(cases); print('built', len(tc._libs), 'failed', tc._failed, round(time.time() - t, 1), 's')" ;;
    tests) timeout "${TESTS_S:-240}" python -m pytest -q tests/test_trellis_int8.py \
             tests/test_runtime_torch.py tests/test_fused_mlp.py tests/test_affine_kernel.py \
             tests/test_affine_cuda.py -k "cuda and not triton_kernels" 2>&1 \
             | tee "$OUT/pytest.log" | tail -30 ;;
    tcvar) # rows_tc compile-time variants (VARIANTS: ';'-separated define sets): the int8
           # kernel tests under each, then k = 3 timings of rows_tc at M = 1, 2, 4 beside the default
           IFS=';' read -ra vs <<< "${VARIANTS:?set VARIANTS}"
           for v in "${vs[@]}"; do
             echo "--- tests with $v"
             TQBUILD_GEMV_FLAGS="$v" timeout "${TESTS_S:-240}" python -m pytest -q -x \
               tests/test_trellis_int8.py -k cuda 2>&1 | tail -3
           done
           timeout "${GEMV_S:-300}" python bench/trellis_gemv.py --variants="$VARIANTS" \
             --variant-cfg='{"tc": true}' --only-variants --ms "${MS:-1,2,4}" \
             --shapes "${SHAPES:-8192x8192,gate,q8b,gateup8b}" --tag="${TAG:--tcvar}" 2>&1 | cut -c1-200
           cp bench/results/trellis_gemv-cuda*-variants.json "$OUT/" ;;
    affine) timeout "${AFFINE_S:-200}" python bench/affine_gemv.py 2>&1 | tee "$OUT/affine.log" \
              | cut -c1-300
            cp bench/results/affine_gemv-cuda*.json "$OUT/" ;;
    pair) timeout "${TESTS_S:-240}" python -m pytest -q -x tests/test_pair_cuda.py 2>&1 \
            | tee "$OUT/pair-pytest.log" | tail -5
          timeout "${PAIR_S:-300}" python bench/pair_gemv.py $PAIR_ARGS 2>&1 | tee "$OUT/pair.log" \
            | cut -c1-400
          cp bench/results/pair_gemv-cuda*.json "$OUT/" ;;
    gemv) timeout "${GEMV_S:-300}" python bench/trellis_gemv.py 2>&1 | tee "$OUT/gemv.log" | cut -c1-300
          cp bench/results/trellis_gemv-cuda.json "$OUT/" ;;
    decode) timeout "${DECODE_S:-300}" python bench/decode_8b.py 2>&1 | tee "$OUT/decode.log" | tail -20
            cp bench/results/decode_8b-cuda.json "$OUT/" ;;
    decodec) timeout "${DECODE_S:-300}" python bench/decode_8b.py --compile 2>&1 \
               | tee "$OUT/decodec.log" | tail -20
             cp bench/results/decode_8b-cuda*.json "$OUT/" ;;
    ncu) timeout "${NCU_S:-240}" ncu --clock-control none -k 'regex:rows_fused|cols_kernel' \
           --launch-skip 2 --launch-count 2 --section SpeedOfLight --section WarpStateStats \
           --section SchedulerStats --section Occupancy --section LaunchStats \
           --section InstructionStats --section MemoryWorkloadAnalysis \
           python bench/device/ncu_gemv.py > "$OUT/ncu.txt" 2>&1; tail -5 "$OUT/ncu.txt" ;;
    triton) timeout "${TRITON_S:-300}" python -m pytest -q tests/test_runtime_torch.py \
              -k triton_kernels_on_cuda 2>&1 | tee "$OUT/triton.log" | tail -5 ;;
  esac
done
echo "=== done $(date +%T)"
