#!/usr/bin/env bash
# Session 31's second call: pair_rows (one warp a row group, 512 threads) with three periods'
# words in flight a lane instead of two (TQ_PAIR_ROWS_D; the first call's ncu put long-
# scoreboard first among the M = 4 stalls, 1.43 cycles an issue). (1) GPU tests of the rows
# kernel at k = 3 (TEST_KL; every instance) and the linear layer; (2) every rows instance at M = 4,
# 2 on 8192² and gate, k = 3, 4, the best also with 43fcdb1's source (two slots:
# --ab-source), in the same run; (3) the M = 4 stall metrics again.   TAG, END_S.
#   git show 43fcdb1:tqbuild/runtime/pair_gemv.cu > bench/device/pair_gemv_s31ab.cu (untracked)
#   bash bench/device/s31b.sh (carry .whl)
source bench/device/env.sh
: "${END_S:=420}"
TAG=${TAG:--s31b}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
cp bench/device/pair_gemv_s31ab.cu tqbuild/runtime/pair_gemv_s31ab.cu  # its headers beside it
timeout 110 python3 -m pytest -q tests/test_pair_cuda.py \
  -k "(rows_kernel and ${TEST_KL:-3-16}) or instances or linear" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -3
echo "=== table $SECONDS s"
timeout 190 python3 bench/pair_gemv.py --no-mul1 --no-sass --ks 3,4 --ms 4,2 \
  --shapes 8192x8192,gate --ab-source tqbuild/runtime/pair_gemv_s31ab.cu --tag="$TAG" 2>&1 \
  | tee "$OUT/table$TAG.log" | grep -v Warn | cut -c1-200
cp "bench/results/pair_gemv-cuda$TAG.json" "$OUT/" 2>/dev/null
echo "=== ncu stalls $SECONDS s"
M=$(stall_metrics)  # (the run of 8b76857 asked for 11 of its 16 stall reasons)
ncu_decode "$OUT/ncu-stalls$TAG.txt" '^pair_rows$' "$M" --k 3 --m 4 --only pair_rows
echo "=== done $SECONDS s"
