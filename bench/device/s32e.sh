#!/usr/bin/env bash
# Session 32's last call, cut to the device time left: s32d's GPU tests at k = 3 (every pp),
# then the table at k = 3, 4, M = 4, 2 (and k = 3 M = 8) on 8192² and gate: the int8 default
# and each pp beside bf16 cuBLAS, one run.   TAG.   bash bench/device/s32e.sh (carry .whl)
source bench/device/env.sh
TAG=${TAG:--s32e}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 90 python3 -m pytest -q -x tests/test_pair_cuda.py \
  -k "(rows_mma and 3-16) or signatures or instances or (half_outputs and dtype0) or linear" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -3
echo "=== table $SECONDS s"
for ks in "3 4,2,8" "4 4,2"; do set -- $ks
timeout 75 python3 bench/pair_gemv.py --quick --no-sass --ks $1 --ms $2 \
  --shapes 8192x8192,gate --tag="$TAG-k$1" 2>&1 | grep -v Warn | python3 -c "import sys,json
for l in sys.stdin:
    if l.startswith('{\"shape'):
        c=json.loads(l); print(c['shape'],c['k'],c['M'],'bf16',round(c['bf16_seconds']*1e6,2),{k:round(v*1e6,2) for k,v in c['pair_tried'].items()},round(c['pair_speedup_vs_bf16'],2))
    elif l.strip() != '{}': print(l.rstrip()[:200])" | tee -a "$OUT/table$TAG.log"
cp "bench/results/pair_gemv-cuda$TAG-k$1.json" "$OUT/" 2>/dev/null
done
echo "=== done $SECONDS s"
