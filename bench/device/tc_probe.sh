#!/usr/bin/env bash
# One H200 call probing rows_tc: the int8 tests, the words-from-cache timing
# variant (TQ_TC_SAMEROWS) next to the default build at M = 1, 2, 4 (rows_tc
# forced), the kernels of 8192² side by side, and Nsight Compute stall sections
# of rows_tc (and quantize_x) and the dp4a kernel at M = 1 and 4.
set -o pipefail
pip install -q --no-deps .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TQBUILD_KERNEL_CACHE=/tmp/tqk OUT=${OUT:-/tmp/out}
bash bench/device/gemv.sh build tests
timeout "${SWEEP_S:-200}" python bench/trellis_gemv.py --ks 3 --ms 1,2,4 --shapes 8192x8192 \
  --no-sweep "--variants=${TC_VARIANTS:--DTQ_TC_SAMEROWS}" '--variant-cfg={"tc": true}' \
  "--tag=${TAG:--tc4}" 2>&1 | tail -30
cp bench/results/trellis_gemv-cuda"${TAG:--tc4}"*.json "$OUT/"
for m in 1 4; do
  timeout "${NCU_S:-100}" ncu --clock-control none -k 'regex:rows_tc|quantize_x|rows_fused' \
    --launch-skip 4 --launch-count 4 --section SpeedOfLight --section WarpStateStats \
    --section SourceCounters --section SchedulerStats --section Occupancy \
    --section InstructionStats --section MemoryWorkloadAnalysis \
    python bench/device/ncu_gemv.py $m rows '{"tc": true}' > "$OUT/ncu-tc-m$m.txt" 2>&1
  tail -3 "$OUT/ncu-tc-m$m.txt"
done
timeout "${NCU_S:-100}" ncu --clock-control none -k 'regex:rows_fused' --launch-skip 2 \
  --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SourceCounters \
  --section SchedulerStats python bench/device/ncu_gemv.py 1 rows > "$OUT/ncu-dp4a-m1.txt" 2>&1
tail -3 "$OUT/ncu-dp4a-m1.txt"
echo "=== done $(date +%T)"
