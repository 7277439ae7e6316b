#!/usr/bin/env bash
# Session 32's third call (it stopped at once on an nvcc front-end error, since fixed; its
# variants now as the knobs stand): pair_rows_mma's knobs in one process
# (bench/pair_mma_variants.py) — items in flight (D), mma chains (ACC), each at every run of
# periods a lane (pp 1, 2, 4: fewer, wider loads of the words — s32b's ncu put the kernel's
# global-load wavefronts at 7× the int8 kernel's); 8192² and gate, k = 3, 4, M = 1, 4, 8,
# beside bf16 cuBLAS and the int8 default.
#   TAG.   bash bench/device/s32c.sh (carry .whl)
source bench/device/env.sh
TAG=${TAG:--s32c}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 330 python3 bench/pair_mma_variants.py --tag="$TAG" --ks 3,4 --ms 1,4,8 \
  --variants "D=2;D=3;D=2 ACC=1;D=2 ACC=4" 2>&1 \
  | grep -v Warn | tee "$OUT/variants$TAG.log"
cp "bench/results/pair_mma_variants$TAG.json" "$OUT/" 2>/dev/null
echo "=== done $SECONDS s"
