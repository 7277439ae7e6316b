#!/usr/bin/env bash
# Session 32's fourth call: pair_rows_mma with its run of periods a lane as an instance
# (pp 1, 2, 4: s32b's ncu put the kernel's global-load wavefronts at 7× the int8 kernel's, from
# 4-byte loads over 8 rows an instruction). (1) GPU tests: every pp at k = 3, 4 (L = 16), the
# int8 default instances, half outputs, the linear layer; (2) the table: 8192² and gate, the
# int8 default and each pp (--quick) beside bf16 cuBLAS, one run a TABLES entry (ks:ms);
# (3) ncu: the L1's wavefronts of pp = 4 at M = 4.   TAG, END_S, TESTS, TABLES.
#   bash bench/device/s32d.sh (carry .whl); cut to ~150 s of command:
#   TESTS="(rows_mma and 3-16) or signatures or instances or (half_outputs and dtype0) or linear" \
#     TABLES="3:4,2,8 4:4,2" END_S=150 bash bench/device/s32d.sh
source bench/device/env.sh
: "${END_S:=230}"
TAG=${TAG:--s32d}
: "${TESTS:=(rows_mma and (3-16 or 4-16)) or (rows_kernel and 3-16 and (1-cfg0 or 4-cfg14)) or signatures or instances or half_outputs or linear}"
: "${TABLES:=3,4:1,2,4,8}"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout "${TEST_S:-200}" python3 -m pytest -q -x tests/test_pair_cuda.py -k "$TESTS" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -4
for t in $TABLES; do
  ks=${t%%:*} ms=${t#*:} tg="$TAG-k${ks//,/}"
  echo "=== table k $ks M $ms $SECONDS s"
  timeout 100 python3 bench/pair_gemv.py --quick --no-sass --ks "$ks" --ms "$ms" \
    --shapes 8192x8192,gate --tag="$tg" 2>&1 | grep -v Warn | python3 bench/device/brief.py \
    | tee -a "$OUT/table$TAG.log"
  cp "bench/results/pair_gemv-cuda$tg.json" "$OUT/" 2>/dev/null
done
M=$(stall_metrics l1tex__data_pipe_lsu_wavefronts.sum l1tex__data_pipe_lsu_wavefronts_mem_shared.sum \
  l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum l1tex__throughput.avg.pct_of_peak_sustained_active)
echo "=== ncu $SECONDS s"
TQ_NCU_PP=4 ncu_decode "$OUT/ncu$TAG.txt" '^pair_rows_mma' "$M" --k 3 --m 4 --only pair_rows_mma
echo "=== done $SECONDS s"
