#!/usr/bin/env bash
# Session 29's second call: (1) GPU tests of the cols paths whose sum changed (pair_cols_sum
# reads tile_range, eight warps a period; sum_splits triggers after its wait): the pair cols
# cases, the PDL chains, mul1's cols case; (2) pair cols at k = 3 on 5120 × 17408 and
# 4096 × 14336 against mul1 and against session 28's source (bench/device/pair_gemv_s28.cu,
# --ab-source) in the same run; (3) the 8B-shaped decode at a 4096-slot cache: bf16, affine-4,
# p3h (pair gate/up + the fp16 pair down).   TAG, END_S.   bash bench/device/s29.sh (carry .whl)
# Session 28's source first, untracked so that it travels:
#   git show 965b150:tqbuild/runtime/pair_gemv.cu > bench/device/pair_gemv_s28.cu
source bench/device/env.sh
: "${END_S:=560}"
TAG=${TAG:--s29}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
cp bench/device/pair_gemv_s28.cu tqbuild/runtime/pair_gemv_s28.cu  # its headers beside it
timeout 150 python3 -m pytest -q tests/test_pair_cuda.py tests/test_pdl_chain.py \
  tests/test_trellis_int8.py -k "(cols and not 17408) or chain or pdl or (cuda and cols)" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -3
echo "=== cols $SECONDS s"
timeout 150 python3 bench/pair_gemv.py --ks 3 --ms 1 --shapes down,down8b \
  --ab-source tqbuild/runtime/pair_gemv_s28.cu --tag="$TAG-cols" 2>&1 \
  | tee "$OUT/cols$TAG.log" | grep -v Warn | cut -c1-400
cp "bench/results/pair_gemv-cuda$TAG-cols.json" "$OUT/" 2>/dev/null
echo "=== decode $SECONDS s"
[ "$(left)" -gt 250 ] && timeout "$(( $(left) - 5 ))" python3 bench/decode_8b.py --compile \
  --no-eager --attn tq_sdpa --only bf16,affine4-cu-lm4-qkv,p3h-fused-cu-lm4-qkv --cache-len 4096 \
  --tag="$TAG-ctx" 2>&1 | grep -E "compile \{|Error" | cut -c1-200
cp "bench/results/decode_8b-cuda$TAG-ctx.json" "$OUT/" 2>/dev/null
echo "=== done $SECONDS s"
