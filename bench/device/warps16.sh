#!/usr/bin/env bash
# One device call for the 16-warp cols block (the default since session 24) against the 8-warp
# one (-DTQ_COLS_WARPS=8): every int8 reference case run to the end under each build
# (bench/device/int8_cases.py), the int8 / PDL-chain / pair / affine CUDA tests on the
# default build, then the 8B-shaped decode
# (tq_sdpa, lm_head 4-bit) of bf16 and pair gate/up + mul1 down under each build, one process
# a build, the same machine; then (VIT=1, time left) mul1's L = 16 per-tensor Viterbi.
# TAG, END_S. bash bench/device/warps16.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
TAG=${TAG:--w16}
W8="-DTQ_COLS_WARPS=8"
: "${END_S:=570}"  # the call's end (s), read by env.sh's left
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
for flags in "" "$W8"; do
  echo "=== cases [$flags] $SECONDS s"
  TQBUILD_GEMV_FLAGS="$flags" timeout 150 python3 bench/device/int8_cases.py 2>&1 \
    | tee -a "$OUT/cases$TAG.log" | tail -12
done
echo "=== tests $SECONDS s"
timeout 150 python3 -m pytest -q tests/test_trellis_int8.py tests/test_pdl_chain.py \
  tests/test_pair_cuda.py tests/test_affine_cuda.py -k "cuda or pdl" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -4
BOTH_OK=$(grep -c "^64 of 64" "$OUT/cases$TAG.log")
for flags in "" "$W8"; do
  [ -n "$flags" ] && [ "$BOTH_OK" != 2 ] && { echo "a build failed a case: no 8-warp decode"; break; }
  name=$([ -n "$flags" ] && echo w8 || echo w16)
  echo "=== decode $name $SECONDS s"
  TQBUILD_GEMV_FLAGS="$flags" timeout "$(( $(left) - 20 ))" python3 bench/decode_8b.py --compile \
    --no-eager --attn tq_sdpa --only bf16,p3g-fused-cu-lm4-qkv --tag="$TAG-$name" 2>&1 \
    | grep -E "compile \{|Error" | cut -c1-200
  cp "bench/results/decode_8b-cuda$TAG-$name.json" "$OUT/" 2>/dev/null
done
if [ -n "$VIT" ] && [ "$(left)" -gt 60 ]; then
  echo "=== viterbi mul1 L16 $SECONDS s"
  timeout "$(left)" python3 bench/viterbi_cuda.py --code mul1 --ls 16 --no-old --skip-bare \
    --tag="$TAG-mul1" 2>&1 | tail -8 | cut -c1-300
  cp "bench/results/viterbi_cuda-cuda$TAG-mul1.json" "$OUT/" 2>/dev/null
fi
echo "=== done $SECONDS s"
