#!/usr/bin/env bash
# One device call: tq_sdpa's tests, then the 8B-shaped decode under tq-build's one-token GQA
# attention (tq_sdpa, runtime/gqa_attention.py) for bf16, affine-4, Q3 and pair gate/up + mul1
# down (lm_head 4-bit as recipes/qwen38-q3.yaml), then bf16 and the pair variant under
# transformers' sdpa on the same machine. TAG, END_S, ATTNS, ONLY, ONLY_SDPA, DECODE_ARGS,
# SKIP_TESTS. bash bench/device/attn.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
TAG=${TAG:--attn}
nvidia-smi --query-gpu=name --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
[ -z "$SKIP_TESTS" ] && timeout 200 python3 -m pytest -q tests/test_gqa_attention.py 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -2
for attn in ${ATTNS:-tq_sdpa sdpa}; do
  only=${ONLY:-bf16,affine4-cu-lm4-qkv,q3-fused-cu-lm4-qkv,p3g-fused-cu-lm4-qkv}
  [ "$attn" = sdpa ] && only=${ONLY_SDPA:-bf16,p3g-fused-cu-lm4-qkv}
  timeout "$(left)" python3 bench/decode_8b.py --compile --no-eager --attn "$attn" --only "$only" \
    $DECODE_ARGS --tag="$TAG-$attn" 2>&1 | grep -E "compile \{|Error" | cut -c1-160
  cp "bench/results/decode_8b-cuda$TAG-$attn.json" "$OUT/" 2>/dev/null
done
echo "=== done $SECONDS s"
