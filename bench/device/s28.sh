#!/usr/bin/env bash
# Session 28's call, in order of need: (1) the pair kernels' GPU tests that never ran on a GPU
# (session 27's vector word loads at k = 2, 4; the packed-fp16 cols walk, all k); (2) the cols
# walk in fp16 against the int8 walk and mul1 on 5120 × 17408 (bench/pair_gemv.py, every cols
# cfg, the calls by kernel); (3) the 8B-shaped decode at a 4096-slot cache (bf16, affine-4, pair
# gate/up + mul1 down, and pair gate/up + the fp16 pair down; lm_head 4-bit, split-KV
# attention); (4) the rows kernel table with the time left. Written in session 28, which got no
# device time. TAG, END_S.   bash bench/device/s28.sh   (carry .whl)
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT, left
: "${END_S:=560}"
TAG=${TAG:--s28}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 150 python3 -m pytest -q tests/test_pair_cuda.py \
  -k "misaligned or fp16 or signatures or (kernel and (2-16 or 4-16) and not 17408)" 2>&1 \
  | tee "$OUT/tests-pair$TAG.log" | tail -3
echo "=== cols $SECONDS s"
timeout 120 python3 bench/pair_gemv.py --ks 3,4 --ms 1 --shapes down --tag="$TAG-cols" 2>&1 \
  | tee "$OUT/cols$TAG.log" | cut -c1-300
cp "bench/results/pair_gemv-cuda$TAG-cols.json" "$OUT/" 2>/dev/null
echo "=== decode $SECONDS s"
[ "$(left)" -gt 280 ] && timeout 270 python3 bench/decode_8b.py --compile --no-eager --attn tq_sdpa \
  --only bf16,affine4-cu-lm4-qkv,p3g-fused-cu-lm4-qkv,p3h-fused-cu-lm4-qkv --cache-len 4096 --tag="$TAG-ctx" 2>&1 \
  | grep -E "compile \{|Error" | cut -c1-200
cp "bench/results/decode_8b-cuda$TAG-ctx.json" "$OUT/" 2>/dev/null
echo "=== rows $SECONDS s"
[ "$(left)" -gt 40 ] && timeout "$(( $(left) - 10 ))" python3 bench/pair_gemv.py --quick \
  --ks 3,4 --ms 1,4 --shapes down,8192x8192,gate --tag="$TAG-rows" 2>&1 | tee "$OUT/rows$TAG.log" \
  | cut -c1-250
cp "bench/results/pair_gemv-cuda$TAG-rows.json" "$OUT/" 2>/dev/null
echo "=== done $SECONDS s"
