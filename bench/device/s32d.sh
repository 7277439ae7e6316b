#!/usr/bin/env bash
# Session 32's fourth call: pair_rows_mma with its run of periods a lane as an instance
# (pp 1, 2, 4: s32b's ncu put the kernel's global-load wavefronts at 7× the int8 kernel's, from
# 4-byte loads over 8 rows an instruction). (1) GPU tests: every pp at k = 3, 4 (L = 16), the
# int8 default instances, half outputs, the linear layer; (2) the table: 8192² and gate at
# k = 3, 4, M = 1, 2, 4, 8, the int8 default and each pp (--quick), beside bf16 cuBLAS, one run;
# (3) ncu: the L1's wavefronts of pp = 4 at M = 4.   TAG, END_S.
#   bash bench/device/s32d.sh (carry .whl)
source bench/device/env.sh
: "${END_S:=230}"
TAG=${TAG:--s32d}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 150 python3 -m pytest -q tests/test_pair_cuda.py \
  -k "(rows_mma and (3-16 or 4-16)) or (rows_kernel and 3-16 and (1-cfg0 or 4-cfg14)) or signatures or instances or half_outputs or linear" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -4
echo "=== table $SECONDS s"
timeout 100 python3 bench/pair_gemv.py --quick --no-sass --ks 3,4 --ms 1,2,4,8 \
  --shapes 8192x8192,gate --tag="$TAG" 2>&1 | grep -v Warn | python3 -c "import sys,json
for l in sys.stdin:
    if l.startswith('{\"shape'):
        c=json.loads(l); print(c['shape'],c['k'],c['M'],'bf16',round(c['bf16_seconds']*1e6,2),{k:round(v*1e6,2) for k,v in c['pair_tried'].items()},round(c['pair_speedup_vs_bf16'],2))
    elif l.strip() != '{}': print(l.rstrip()[:200])" | tee "$OUT/table$TAG.log"
cp "bench/results/pair_gemv-cuda$TAG.json" "$OUT/" 2>/dev/null
M=$(stall_metrics l1tex__data_pipe_lsu_wavefronts.sum l1tex__data_pipe_lsu_wavefronts_mem_shared.sum \
  l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum l1tex__throughput.avg.pct_of_peak_sustained_active)
echo "=== ncu $SECONDS s"
[ "$(left)" -gt 30 ] && TQ_NCU_PP=4 timeout "$(( $(left) - 5 ))" ncu --clock-control none -k regex:'^pair_rows_mma' \
  --launch-count 1 --metrics "$M" python3 bench/ncu_decode.py --k 3 --m 4 --only pair_rows_mma \
  > "$OUT/ncu$TAG.txt" 2>&1
grep -E "pair_|stalled|issue_active|inst_executed|duration|dram|l1tex" "$OUT/ncu$TAG.txt" \
  | sed 's/smsp__average_warps_issue_stalled_//' | grep -v " 0$" | cut -c1-120 | head -30
echo "=== done $SECONDS s"
