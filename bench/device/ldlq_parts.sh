#!/usr/bin/env bash
# One device call for LDLQ in output-row parts on their own streams (TQBUILD_LDLQ_ROW_PARTS,
# stages/trellis.row_parts): the CUDA tests of the row parts and of the Viterbi, then mul1's
# L = 16 per-tensor conversions (down-like, then gate-like; k = 2, 4 — issue 16's gaps, then 3)
# with 1 and 2 parts alternating, the same machine. TAG, END_S, PARTS (default "1 2").
# bash bench/device/ldlq_parts.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
TAG=${TAG:--parts}
: "${END_S:=570}"  # the call's end (s), read by env.sh's left
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 120 python3 -m pytest -q tests/test_trellis.py -k "row_parts or cuda" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -3
for tensors in down-like gate-like; do
  for ks in 2,4 3; do
    for parts in ${PARTS:-1 2}; do
      [ "$(left)" -lt 60 ] && break 3
      echo "=== $tensors k=$ks parts=$parts $SECONDS s"
      TQBUILD_LDLQ_ROW_PARTS=$parts timeout "$(left)" python3 bench/viterbi_cuda.py --code mul1 \
        --ls 16 --no-old --skip-bare --ks $ks --tensors $tensors \
        --tag="$TAG-$tensors-k${ks/,/}-p$parts" 2>&1 | grep weights_per_s | cut -c1-200
      cp bench/results/viterbi_cuda-cuda"$TAG-$tensors-k${ks/,/}-p$parts".json "$OUT/" 2>/dev/null
    done
  done
done
echo "=== done $SECONDS s"
