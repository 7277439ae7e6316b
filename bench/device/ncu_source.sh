#!/usr/bin/env bash
# Nsight Compute per-SASS-instruction counts and stall samples, pipe use and
# stall reasons of the M = 1 rows kernels (8192², k = 3): dp4a (rows_fused),
# rows_tc and quantize_x -> $OUT/ncu-src-*.csv, $OUT/ncu-pipes-*.txt
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TQBUILD_KERNEL_CACHE=${TQBUILD_KERNEL_CACHE:-/tmp/tqk}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
M=${M:-1}
PIPES=smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_fmaheavy.sum,smsp__inst_executed_pipe_fmalite.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_pipe_tensor.sum,smsp__inst_executed_pipe_uniform.sum,smsp__inst_executed.sum,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,gpc__cycles_elapsed.max,smsp__issue_active.avg.pct_of_peak_sustained_active
for kind in ${KINDS:-dp4a tc}; do
  cfg=$([ $kind = tc ] && echo '{"tc": true}' || echo null)
  re=$([ $kind = tc ] && echo 'regex:rows_tc' || echo 'regex:rows_fused')
  [ -n "$NO_SRC" ] || timeout 90 ncu --clock-control none -k "$re" --launch-skip 2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
    python bench/device/ncu_gemv.py $M rows "$cfg" > "$OUT/ncu-src-$kind-m$M.csv" 2>&1
  echo "$kind src rc $? $(wc -l < "$OUT/ncu-src-$kind-m$M.csv") lines"
  timeout 90 ncu --clock-control none -k "$re" --launch-skip 2 --launch-count 1 \
    --metrics "$PIPES,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    python bench/device/ncu_gemv.py $M rows "$cfg" > "$OUT/ncu-pipes-$kind-m$M.txt" 2>&1
  echo "$kind pipes rc $?"; grep -E "pipe|issue_active|cycles" "$OUT/ncu-pipes-$kind-m$M.txt" | head -20
done
