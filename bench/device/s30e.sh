#!/usr/bin/env bash
# Session 30's last, short call (~320 s of device time were left): what the rows kernel's
# warps stall on at M = 4 on 8192² (the shape short of 2× bf16), by ncu's per-reason stall
# metrics, beside the pair cols fp16 walk at M = 4 (rows sharing a decode); one pair library
# built, no other kernel.   TAG, END_S.   bash bench/device/s30e.sh (carry .whl)
source bench/device/env.sh
: "${END_S:=150}"
TAG=${TAG:--s30e}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
M=$(stall_metrics)
timeout "$(( $(left) - 5 ))" ncu --clock-control none -k regex:'^pair_(rows|cols)$' --metrics "$M" \
  python3 bench/ncu_decode.py --k 3 --m 4 --only pair_rows,pair_cols_fp16 > "$OUT/ncu-stalls$TAG.txt" 2>&1
grep -E "pair_|stalled|issue_active|warps_active|inst_executed|duration|dram" "$OUT/ncu-stalls$TAG.txt" \
  | sed 's/smsp__average_warps_issue_stalled_//' | cut -c1-150 | head -90
echo "=== done $SECONDS s"
