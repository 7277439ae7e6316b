#!/usr/bin/env bash
# A second call on the same warm machine as s27a.sh: the 8B-shaped decode at the
# 128-slot cache of session 25's 2.57× (bf16, affine-4, pair gate/up + mul1 down; lm_head
# 4-bit, split-KV attention, PDL), with this session's pair libraries, then the graph-timed
# attention if s27a's time ran out before it. TAG, END_S.
# bash bench/device/s27b.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT, left
: "${END_S:=400}"
TAG=${TAG:--s27b}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 300 python3 bench/decode_8b.py --compile --no-eager --attn tq_sdpa \
  --only bf16,affine4-cu-lm4-qkv,p3g-fused-cu-lm4-qkv --tag="$TAG" 2>&1 \
  | grep -E "compile \{|Error" | cut -c1-200
cp "bench/results/decode_8b-cuda$TAG.json" "$OUT/" 2>/dev/null
[ "$(left)" -gt 35 ] && timeout "$(( $(left) - 5 ))" python3 bench/gqa_attention.py \
  --dtype bfloat16 --lengths 128,4096,16384 --splits 0 --tag="$TAG" 2>&1 | cut -c1-300 \
  && cp bench/results/gqa_attention-cuda"$TAG".json "$OUT/"
echo "=== done $SECONDS s"
