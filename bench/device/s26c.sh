#!/usr/bin/env bash
# Session 26, a short call (what little device time is left): pair_rows_tc's GPU tests at
# k = 3, L = 16, then its time beside pair_rows (default instance) and bf16 cuBLAS on the
# rows shapes of issue 19 at M = 4, 1, 2, 8 (k = 3). TAG, END_S.
# bash bench/device/s26c.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT, left
: "${END_S:=250}"
TAG=${TAG:--s26c}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
timeout 80 python3 -m pytest -q -x tests/test_pair_cuda.py -k "tc and (3-16 or dtype or instances)" \
  2>&1 | tee "$OUT/tests-tc$TAG.log" | tail -4
echo "=== kernels $SECONDS s"
timeout "$(( $(left) - 3 ))" python3 bench/pair_gemv.py --quick --ks 3 --ms 4,1,2,8 \
  --shapes 8192x8192,gate --tag="$TAG" 2>&1 | tee "$OUT/kernels$TAG.log" \
  | grep -o '"shape": "[a-z0-9]*"\|"k": [0-9]\|"M": [0-9]\|"[a-z1-9]*_seconds": [0-9.e-]*\|"tc_cfg": "[^"]*"' \
  | paste -sd' ' | sed 's/"shape"/\n"shape"/g'
cp "bench/results/pair_gemv-cuda$TAG.json" "$OUT/" 2>/dev/null
echo "=== done $SECONDS s"
