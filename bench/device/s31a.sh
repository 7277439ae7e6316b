#!/usr/bin/env bash
# Session 31's call: pair_rows with x group-major in shared memory (a period's M groups one
# address plus constant offsets, their M scales one 16-byte load at M = 4). (1) GPU tests of
# the rows kernel (every instance, k = 2, 3, 4, L = 12/16, both layouts); (2) every rows
# instance at M = 4, 2 on 8192² and gate, k = 3, 4, each also with 43fcdb1's source (x
# row-major: --ab-source --ab-all), in the same run; (3) ncu's per-reason stall metrics of
# the default M = 4 rows instance.   TAG, END_S.
#   git show 43fcdb1:tqbuild/runtime/pair_gemv.cu > bench/device/pair_gemv_s31ab.cu (untracked)
#   bash bench/device/s31a.sh (carry .whl)
source bench/device/env.sh
: "${END_S:=540}"
TAG=${TAG:--s31}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
cp bench/device/pair_gemv_s31ab.cu tqbuild/runtime/pair_gemv_s31ab.cu  # its headers beside it
timeout 170 python3 -m pytest -q tests/test_pair_cuda.py \
  -k "rows_kernel or instances or signatures or half_outputs or misaligned or linear" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -3
echo "=== table $SECONDS s"
timeout 230 python3 bench/pair_gemv.py --no-mul1 --ks 3,4 --ms 4,2 --shapes 8192x8192,gate \
  --ab-source tqbuild/runtime/pair_gemv_s31ab.cu --ab-all --tag="$TAG" 2>&1 \
  | tee "$OUT/table$TAG.log" | grep -v Warn | cut -c1-900
cp "bench/results/pair_gemv-cuda$TAG.json" "$OUT/" 2>/dev/null
echo "=== ncu stalls $SECONDS s"
M=$(stall_metrics l1tex__data_pipe_lsu_wavefronts_mem_shared.sum l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum)
[ "$(left)" -gt 40 ] && timeout "$(( $(left) - 5 ))" ncu --clock-control none -k regex:'^pair_rows$' \
  --metrics "$M" python3 bench/ncu_decode.py --k 3 --m 4 --only pair_rows > "$OUT/ncu-stalls$TAG.txt" 2>&1
grep -E "pair_|stalled|issue_active|warps_active|inst_executed|duration|dram|l1tex" "$OUT/ncu-stalls$TAG.txt" \
  | sed 's/smsp__average_warps_issue_stalled_//' | cut -c1-150 | head -60
echo "=== done $SECONDS s"
