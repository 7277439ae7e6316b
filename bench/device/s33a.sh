#!/usr/bin/env bash
# Session 33's first call: (1) GPU tests of pair_rows_mma as it stands (two chains, cp.async
# staging, runs of pp = 1, 2, 4 periods a lane: emulator-tested only so far), the int8 default
# instances, half outputs, the linear layer; (2) the tile knob timed in one process
# (pair_mma_variants: 16-row tiles, the default, against 8-row tiles, blocks' shares of whole
# tiles even to within half as much; every pp) at M = 4 and 8, k = 3, 4, on 8192² and gate,
# beside bf16 cuBLAS and the int8 default; (3) the 8-row tiles' GPU test (its variant library).
#   bash bench/device/s33a.sh (carry .whl; ~400 s)      TAG, END_S, VARIANTS
# (the TR knob was removed after this call, measured slower: a rerun times TR=8 as the default)
source bench/device/env.sh
: "${END_S:=400}"
TAG=${TAG:--s33a}
: "${VARIANTS:=ACC=2;TR=8;TR=8 D=4}"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 150 python3 -m pytest -q -x tests/test_pair_cuda.py \
  -k "(rows_mma and 3-16) or signatures or instances or (half_outputs and dtype0) or linear" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -4
echo "=== variants $SECONDS s"
timeout "$(( $(left) - 60 ))" python3 bench/pair_mma_variants.py --variants "$VARIANTS" \
  --ks 3,4 --ms 4,8 --shapes gate,8192x8192 --tag="$TAG" 2>&1 | grep -v Warn \
  | tee "$OUT/variants$TAG.log"
cp "bench/results/pair_mma_variants$TAG.json" "$OUT/" 2>/dev/null
echo "=== TR=8 tests $SECONDS s"
TQBUILD_PAIR_FLAGS="-DTQ_PAIR_MMA_ONLY -DTQ_PAIR_MMA_TR=8" timeout "$(( $(left) - 5 ))" \
  python3 -m pytest -q -x tests/test_pair_cuda.py -k "rows_mma and 3-16" 2>&1 \
  | tee "$OUT/tests-tr8$TAG.log" | tail -4
echo "=== done $SECONDS s"
