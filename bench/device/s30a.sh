#!/usr/bin/env bash
# Session 30's first call: (1) GPU tests of what changed — pair cols at M > 1 (one decode
# shared by up to 4 rows, fp16 sums over a walker's range), the rows kernel's x loaded four
# trips at a time, the cols entry's new row argument; (2) the M = 1, 2, 4 table at k = 3, 4
# on 8192², gate and down, each case also timed with 21a3ff9's source (the M > 1 cols, the
# rows without the batched x loads: --ab-source) and, for cols at M > 1, a row a call, all
# in the same run; (3) Nsight Compute over the decode kernels at M = 4; (4) the mul1 test
# the time limits cut in session 29, if time is left.   TAG, END_S.
#   git show 21a3ff9:tqbuild/runtime/pair_gemv.cu > bench/device/pair_gemv_s30ab.cu (untracked)
#   bash bench/device/s30a.sh (carry .whl)
source bench/device/env.sh
: "${END_S:=550}"
TAG=${TAG:--s30}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
cp bench/device/pair_gemv_s30ab.cu tqbuild/runtime/pair_gemv_s30ab.cu  # its headers beside it
timeout 170 python3 -m pytest -q tests/test_pair_cuda.py \
  -k "share or fp16 or half_outputs or signatures or misaligned or two_tiles or (rows_kernel and (4-16 or 3-12)) or linear" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -3
echo "=== table $SECONDS s"
timeout 200 python3 bench/pair_gemv.py --quick --ks 3,4 --ms 1,4,2 --shapes 8192x8192,gate,down \
  --ab-source tqbuild/runtime/pair_gemv_s30ab.cu --tag="$TAG" 2>&1 \
  | tee "$OUT/table$TAG.log" | grep -v Warn | cut -c1-600
cp "bench/results/pair_gemv-cuda$TAG.json" "$OUT/" 2>/dev/null
echo "=== ncu M = 4 $SECONDS s"
[ "$(left)" -gt 70 ] && timeout "$(( $(left) < 130 ? $(left) - 10 : 120 ))" ncu --clock-control none \
  -k regex:'pair_|rows|cols' --section SpeedOfLight --section WarpStateStats \
  --section Occupancy --section LaunchStats \
  python3 bench/ncu_decode.py --k 3 --m 4 > "$OUT/ncu-m4$TAG.txt" 2>&1
grep -E "pair_|Duration|DRAM Throughput|Issue Slots|Registers Per|No Eligible|Warp Cycles Per Issued" \
  "$OUT/ncu-m4$TAG.txt" | head -80 | cut -c1-160
echo "=== mul1 cols test $SECONDS s"
[ "$(left)" -gt 60 ] && timeout "$(( $(left) - 5 ))" python3 -m pytest -q tests/test_trellis_int8.py \
  -k "cuda_cols" 2>&1 | tee "$OUT/tests-mul1$TAG.log" | tail -2
echo "=== done $SECONDS s"
