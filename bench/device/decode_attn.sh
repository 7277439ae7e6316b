#!/usr/bin/env bash
# One device call for split-KV flash decoding in tq_sdpa (TQBUILD_DECODE_ATTN=1,
# runtime/decode_attention.py): its CUDA tests and the PDL chain (the 16-warp cols block, the
# default since session 24, under inductor's PDL), the compiled one-token attention alone
# (bench/gqa_attention.py, bfloat16, all positions attended and a quarter of them), then the
# 8B-shaped decode (tq_sdpa, lm_head 4-bit) of bf16 and pair gate/up + mul1 down with it off
# and on, alternating, one process each, the same machine; then at a 4096-slot cache (DECODE
# left). TAG, END_S. bash bench/device/decode_attn.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
TAG=${TAG:--dattn}
: "${END_S:=570}"  # the call's end (s), read by env.sh's left
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 200 python3 -m pytest -q tests/test_decode_attention.py tests/test_gqa_attention.py \
  tests/test_pdl_chain.py 2>&1 | tee "$OUT/tests$TAG.log" | tail -3
for valid in 1.0 0.25; do
  timeout 120 python3 bench/gqa_attention.py --dtype bfloat16 --valid $valid --splits 0,1,2,4,8 \
    --tag="$TAG-v$valid" 2>&1 | tail -4 | cut -c1-300
  cp bench/results/gqa_attention-cuda"$TAG-v$valid".json "$OUT/" 2>/dev/null
done
run() {  # name, TQBUILD_DECODE_ATTN, extra decode args
  echo "=== decode $1 $SECONDS s"
  TQBUILD_DECODE_ATTN=$2 timeout "$(( $(left) - 10 ))" python3 bench/decode_8b.py --compile \
    --no-eager --attn tq_sdpa --only bf16,p3g-fused-cu-lm4-qkv $3 --tag="$TAG-$1" 2>&1 \
    | grep -E "compile \{|Error" | cut -c1-200
  cp "bench/results/decode_8b-cuda$TAG-$1.json" "$OUT/" 2>/dev/null
}
run off1 0; run on1 1; run off2 0; run on2 1
[ "$(left)" -gt 150 ] && { run ctx-off 0 "--cache-len 4096"; run ctx-on 1 "--cache-len 4096"; }
echo "=== done $SECONDS s"
