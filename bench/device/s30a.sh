#!/usr/bin/env bash
# Session 30's first call (written in session 29): (1) the GPU test the 100/110 s limits cut in
# session 29 (every library raises the cols kernel's shared memory); (2) the M = 4 table with
# the new cols sum (pair cols at M = 4 still walks each row apart); (3) Nsight Compute over the
# decode kernels at M = 4 (the missed M = 4 ≥ 2× target on 8192²: what limits the rows kernel
# there) and at M = 1 for the new cols sum.   TAG, END_S.   bash bench/device/s30a.sh (carry .whl)
source bench/device/env.sh
: "${END_S:=540}"
TAG=${TAG:--s30}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 200 python3 -m pytest -q tests/test_trellis_int8.py -k "cuda_cols" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -2
echo "=== M = 4 $SECONDS s"
timeout 120 python3 bench/pair_gemv.py --quick --ks 3,4 --ms 4,2 --shapes 8192x8192,gate,down \
  --tag="$TAG-m4" 2>&1 | tee "$OUT/m4$TAG.log" | grep -v Warn | cut -c1-250
cp "bench/results/pair_gemv-cuda$TAG-m4.json" "$OUT/" 2>/dev/null
for m in 4 1; do
  echo "=== ncu M = $m $SECONDS s"
  [ "$(left)" -gt 60 ] && timeout "$(( $(left) - 20 ))" ncu --clock-control none \
    -k regex:'pair_|rows|cols|affine' --section SpeedOfLight \
    --section WarpStateStats --section Occupancy --section LaunchStats \
    python3 bench/ncu_decode.py --k 3 --m $m > "$OUT/ncu-m$m$TAG.txt" 2>&1
  grep -E "pair_|Duration|DRAM Throughput|Issue Slots|Registers Per|No Eligible" \
    "$OUT/ncu-m$m$TAG.txt" | head -60 | cut -c1-160
done
echo "=== done $SECONDS s"
