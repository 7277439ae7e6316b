#!/usr/bin/env bash
# The next call, in order of need: (1) the vector word loads' GPU tests (k = 2, 4; session
# 27 timed them but its test call stopped at a tc case before them); (2) the 8B-shaped decode at a
# 4096-slot cache (bf16, affine-4, pair gate/up + mul1 down; lm_head 4-bit, split-KV
# attention) and the decode-attention tests; (3) issue 19's kernel table with the time left
# (bench/pair_gemv.py: mul1 too, every instance, the cols calls by kernel). TAG, END_S.
# bash bench/device/s27a.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT, left
: "${END_S:=560}"
TAG=${TAG:--s27a}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 120 python3 -m pytest -q tests/test_pair_cuda.py \
  -k "misaligned or (kernel and (2-16 or 4-16))" 2>&1 | tee "$OUT/tests-pair$TAG.log" | tail -3
echo "=== decode $SECONDS s"
timeout 100 python3 -m pytest -q tests/test_decode_attention.py tests/test_gqa_attention.py 2>&1 \
  | tee "$OUT/tests-attn$TAG.log" | tail -2
timeout 230 python3 bench/decode_8b.py --compile --no-eager --attn tq_sdpa \
  --only bf16,affine4-cu-lm4-qkv,p3g-fused-cu-lm4-qkv --cache-len 4096 --tag="$TAG-ctx" 2>&1 \
  | grep -E "compile \{|Error" | cut -c1-200
cp "bench/results/decode_8b-cuda$TAG-ctx.json" "$OUT/" 2>/dev/null
echo "=== kernels $SECONDS s"
[ "$(left)" -gt 40 ] && timeout "$(( $(left) - 10 ))" python3 bench/pair_gemv.py --ks 3,4 --ms 1,4 \
  --shapes down,8192x8192,gate --tag="$TAG" 2>&1 | tee "$OUT/kernels$TAG.log" | cut -c1-250
cp "bench/results/pair_gemv-cuda$TAG.json" "$OUT/" 2>/dev/null
echo "=== done $SECONDS s"
