#!/usr/bin/env bash
# Session 30's second call (written in session 29): the 8B-shaped decode with the MLP all in
# the pair code (p3: down on the packed-fp16 cols walk, the default since session 29) beside
# pair gate/up + mul1 down (p3g), affine-4 and bf16 in one process — which of p3 and p3g is
# faster was never measured on one machine — at the default 128-slot cache, then at 4096 if
# the time allows.   TAG, END_S.   bash bench/device/s30b.sh (carry .whl)
source bench/device/env.sh
: "${END_S:=570}"
TAG=${TAG:--s30}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
for len in 128 4096; do
  echo "=== decode $len $SECONDS s"
  [ "$(left)" -gt 200 ] && timeout "$(( $(left) - 5 ))" python3 bench/decode_8b.py --compile \
    --no-eager --attn tq_sdpa --cache-len $len \
    --only bf16,affine4-cu-lm4-qkv,p3-fused-cu-lm4-qkv,p3g-fused-cu-lm4-qkv \
    --tag="$TAG-dec$len" 2>&1 | grep -E "compile \{|Error" | cut -c1-200
  cp "bench/results/decode_8b-cuda$TAG-dec$len.json" "$OUT/" 2>/dev/null
done
echo "=== done $SECONDS s"
