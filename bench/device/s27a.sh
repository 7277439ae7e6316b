#!/usr/bin/env bash
# The next call: session 27's vector word loads (k = 2, 4) tested on the GPU, then what
# sessions 25–26 left unrun, on one machine — the decode-attention
# tests (the device case passed once, session 26), the 8B-shaped decode at a 4096-slot cache
# (bf16, affine-4, pair gate/up + mul1 down; lm_head 4-bit, split-KV attention), issue 19's
# kernel table (bench/pair_gemv.py: bf16 cuBLAS, mul1, pair at k = 2, 3, 4, M = 1, 4 on
# its three shapes, under PDL and without) and the graph-timed attention. TAG, END_S.
# bash bench/device/s27a.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT, left
: "${END_S:=570}"
TAG=${TAG:--s27a}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 120 python3 -m pytest -q tests/test_pair_cuda.py -k "misaligned or (kernel and (2-16 or 4-16))" \
  2>&1 | tee "$OUT/tests-pair$TAG.log" | tail -3
echo "=== attention tests $SECONDS s"
timeout 110 python3 -m pytest -q tests/test_decode_attention.py tests/test_gqa_attention.py 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -3
echo "=== decode $SECONDS s"
timeout 230 python3 bench/decode_8b.py --compile --no-eager --attn tq_sdpa \
  --only bf16,affine4-cu-lm4-qkv,p3g-fused-cu-lm4-qkv --cache-len 4096 --tag="$TAG-ctx" 2>&1 \
  | grep -E "compile \{|Error" | cut -c1-200
cp "bench/results/decode_8b-cuda$TAG-ctx.json" "$OUT/" 2>/dev/null
echo "=== kernels $SECONDS s"
timeout "$(( $(left) - 40 ))" python3 bench/pair_gemv.py --ks 4,3,2 --ms 1,4 \
  --shapes 8192x8192,gate,down --tag="$TAG" 2>&1 | tee "$OUT/kernels$TAG.log" | cut -c1-250
cp "bench/results/pair_gemv-cuda$TAG.json" "$OUT/" 2>/dev/null
[ "$(left)" -gt 35 ] && timeout "$(( $(left) - 5 ))" python3 bench/gqa_attention.py \
  --dtype bfloat16 --lengths 128,4096,16384 --splits 0 --tag="$TAG" 2>&1 | cut -c1-300 \
  && cp bench/results/gqa_attention-cuda"$TAG".json "$OUT/"
echo "=== done $SECONDS s"
