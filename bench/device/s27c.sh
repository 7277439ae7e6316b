#!/usr/bin/env bash
# Session 27's short call (little device time left): the staged pair_rows_tc's GPU tests
# at k = 3 and the vector loads' (k = 4), then pair_rows_tc beside pair_rows and bf16
# cuBLAS on 8192² and 17408 × 5120 at k = 3, M = 4, 1, 2, 8 (quick), then k = 4 M = 1
# (pair_rows's vector loads) if time is left. TAG, END_S.
# bash bench/device/s27c.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT, left
: "${END_S:=300}"
TAG=${TAG:--s27c}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 90 python3 -m pytest -q -x tests/test_pair_cuda.py \
  -k "(tc and 3-16 and (1024 or 34000 or dtype or refuses)) or misaligned" \
  2>&1 | tee "$OUT/tests-pair$TAG.log" | tail -3
echo "=== tc bench $SECONDS s"
pick='"shape": "[a-z0-9]*"\|"k": [0-9]\|"M": [0-9]\|"[a-z1-9_]*seconds[a-z_]*": [0-9.e-]*\|"tc_cfg": "[^"]*"'
timeout "$(( $(left) - 5 ))" python3 bench/pair_gemv.py --quick --ks 3 --ms 4,1,2,8 \
  --shapes 8192x8192,gate --tag="$TAG" 2>&1 | tee "$OUT/kernels$TAG.log" \
  | grep -o "$pick" | paste -sd' ' | sed 's/"shape"/\n"shape"/g'
cp "bench/results/pair_gemv-cuda$TAG.json" "$OUT/" 2>/dev/null
[ "$(left)" -gt 40 ] && timeout "$(( $(left) - 3 ))" python3 bench/pair_gemv.py --quick --ks 4 \
  --ms 1,4 --shapes 8192x8192,gate --tag="$TAG-k4" 2>&1 | tee "$OUT/kernels$TAG-k4.log" \
  | grep -o "$pick" | paste -sd' ' | sed 's/"shape"/\n"shape"/g'
cp "bench/results/pair_gemv-cuda$TAG-k4.json" "$OUT/" 2>/dev/null
echo "=== done $SECONDS s"
