#!/usr/bin/env bash
# Session 32's first call: pair_rows_mma, the rows kernel on the tensor cores (x as bf16/fp16,
# one decode for every row of x, M ≤ 8). (1) GPU tests: the mma kernel at k = 3, 4 (L = 16),
# the int8 rows kernel's default instances, half outputs, the linear layer; (2) the table:
# 8192² and gate at k = 3, 4, M = 1, 2, 4, 8, the int8 default instance and the mma kernel
# (--quick) next to bf16 cuBLAS, one run; (3) the mma kernel's stalls at M = 4 (ncu).
#   TAG, END_S.   bash bench/device/s32a.sh (carry .whl)
source bench/device/env.sh
: "${END_S:=400}"
TAG=${TAG:--s32a}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 150 python3 -m pytest -q tests/test_pair_cuda.py \
  -k "(rows_mma and (3-16 or 4-16)) or (rows_kernel and 3-16 and (1-cfg0 or 4-cfg14)) or signatures or instances or half_outputs or linear" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -4
echo "=== table $SECONDS s"
timeout 200 python3 bench/pair_gemv.py --quick --no-sass --ks 3,4 --ms 1,2,4,8 \
  --shapes 8192x8192,gate --tag="$TAG" 2>&1 \
  | tee "$OUT/table$TAG.log" | grep -v Warn | cut -c1-260
cp "bench/results/pair_gemv-cuda$TAG.json" "$OUT/" 2>/dev/null
echo "=== ncu stalls $SECONDS s"
M=$(stall_metrics)
ncu_decode "$OUT/ncu-stalls$TAG.txt" '^pair_rows_mma$' "$M" --k 3 --m 4 --only pair_rows
echo "=== done $SECONDS s"
