#!/usr/bin/env bash
# Session 26, one call: pair_rows_tc (the pair rows on the tensor cores) tested and timed
# beside pair_rows (its default instance) and bf16 cuBLAS on the rows shapes of issue 19
# at M = 4, 1, 2, 8 (k = 3, 4); then what session 25 left unrun: the 8B-shaped decode at a
# 4096-slot cache (bf16, affine-4, pair gate/up + mul1 down) and the decode-attention
# tests, as far as END_S allows. TAG, END_S.
# bash bench/device/s26b.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT, left
: "${END_S:=580}"
TAG=${TAG:--s26b}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 100 python3 -m pytest -q -x tests/test_pair_cuda.py -k "tc" 2>&1 \
  | tee "$OUT/tests-tc$TAG.log" | tail -4
echo "=== kernels $SECONDS s"
timeout "$(( $(left) * 9 / 20 ))" python3 bench/pair_gemv.py --quick --ks 3,4 --ms 4,1,2,8 \
  --shapes 8192x8192,gate --tag="$TAG" 2>&1 | tee "$OUT/kernels$TAG.log" \
  | grep -o '"shape": "[a-z0-9]*"\|"k": [0-9]\|"M": [0-9]\|"[a-z1-9]*_seconds": [0-9.e-]*\|"tc_cfg": "[^"]*"' \
  | paste -sd' ' | sed 's/"shape"/\n"shape"/g'
cp "bench/results/pair_gemv-cuda$TAG.json" "$OUT/" 2>/dev/null
echo "=== decode $SECONDS s"
[ "$(left)" -gt 120 ] && timeout "$(( $(left) - 30 ))" python3 bench/decode_8b.py --compile \
  --no-eager --attn tq_sdpa --only bf16,affine4-cu-lm4-qkv,p3g-fused-cu-lm4-qkv \
  --cache-len 4096 --tag="$TAG-ctx" 2>&1 | grep -E "compile \{|Error" | cut -c1-200
cp "bench/results/decode_8b-cuda$TAG-ctx.json" "$OUT/" 2>/dev/null
echo "=== attention tests $SECONDS s"
[ "$(left)" -gt 20 ] && timeout "$(( $(left) - 3 ))" python3 -m pytest -q \
  tests/test_decode_attention.py 2>&1 | tee "$OUT/tests-attn$TAG.log" | tail -3
echo "=== done $SECONDS s"
