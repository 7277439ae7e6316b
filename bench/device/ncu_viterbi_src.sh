#!/usr/bin/env bash
# Nsight Compute per-SASS-instruction stall samples of the L = 16 Viterbi kernels
# (k = NCU_KS, bench/device/ncu_viterbi.py): $OUT/ncu-vsrc-k*.csv — which lines the
# warps wait at (the step's barrier, the backtrack's global reads, the shared-memory loads)
export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1 TQBUILD_KERNEL_CACHE=${TQBUILD_KERNEL_CACHE:-/tmp/tqk}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for k in ${NCU_KS:-3 4}; do
  timeout "${NCU_S:-120}" ncu --clock-control none -k regex:viterbi_tailbiting --launch-count 1 \
    --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
    python bench/device/ncu_viterbi.py "$k" > "$OUT/ncu-vsrc-k$k.csv" 2>&1
  echo "k $k src rc $? $(wc -l < "$OUT/ncu-vsrc-k$k.csv") lines"
done
