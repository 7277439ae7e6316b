#!/usr/bin/env bash
# Session 29's third call: (1) the GPU tests the second call's 150 s cut off (the PDL chains
# with the new sums, mul1's cols raise test, the pair fp16 cols cases); (2) the cols walks at
# k = 2, 3, 4 on 5120 × 17408 (every cfg, mul1 beside), then the pair rows at k = 2, 3, 4,
# M = 1, 4 (default instances) — the table in one run; (3) the 8B-shaped decode at
# the default 128-slot cache: bf16, affine-4, p3h.   TAG, END_S.   bash bench/device/s29b.sh
source bench/device/env.sh
: "${END_S:=480}"
TAG=${TAG:--s29b}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 100 python3 -m pytest -q tests/test_pdl_chain.py tests/test_trellis_int8.py \
  -k "chain or pdl or cuda_cols" 2>&1 | tee "$OUT/tests$TAG.log" | tail -2
timeout 60 python3 -m pytest -q tests/test_pair_cuda.py -k "fp16 and not 17408" 2>&1 \
  | tee -a "$OUT/tests$TAG.log" | tail -2
echo "=== cols $SECONDS s"
timeout 150 python3 bench/pair_gemv.py --ks 2,3,4 --ms 1 --shapes down --tag="$TAG-cols" 2>&1 \
  | tee "$OUT/cols$TAG.log" | grep -v Warn | cut -c1-300
cp "bench/results/pair_gemv-cuda$TAG-cols.json" "$OUT/" 2>/dev/null
echo "=== rows $SECONDS s"
timeout 60 python3 bench/pair_gemv.py --quick --ks 2,3,4 --ms 1,4 --shapes 8192x8192,gate \
  --tag="$TAG-rows" 2>&1 | tee "$OUT/rows$TAG.log" | grep -v Warn | cut -c1-250
cp "bench/results/pair_gemv-cuda$TAG-rows.json" "$OUT/" 2>/dev/null
echo "=== decode $SECONDS s"
[ "$(left)" -gt 170 ] && timeout "$(( $(left) - 5 ))" python3 bench/decode_8b.py --compile \
  --no-eager --attn tq_sdpa --only bf16,affine4-cu-lm4-qkv,p3h-fused-cu-lm4-qkv \
  --tag="$TAG-dec" 2>&1 | grep -E "compile \{|Error" | cut -c1-200
cp "bench/results/decode_8b-cuda$TAG-dec.json" "$OUT/" 2>/dev/null
echo "=== done $SECONDS s"
