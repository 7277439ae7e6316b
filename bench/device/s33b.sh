#!/usr/bin/env bash
# Session 33's second call: the runs of periods by k as the default (pair_cuda.ROWS_MMA_PP:
# k = 3 → 4, k = 4 → 2, k = 2 → 4). The three L = 16 libraries built at once first; (1) GPU
# tests: pair_rows_mma at k = 2, 4 (k = 3 passed in s33a), the linear layer through the
# default dispatch (M = 5 on the tensor cores); (2) the table at M = 1–4 (int8 default and
# each pp) on 8192² and gate, k = 3, 4: whether the mma kernel now wins below M = 4.
#   bash bench/device/s33b.sh (carry .whl; ~300 s)      TAG, END_S
source bench/device/env.sh
: "${END_S:=300}"
TAG=${TAG:--s33b}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
for k in 2 3 4; do
  python3 -c "from tqbuild.runtime import pair_cuda; assert pair_cuda.library($k, 16)" &
done
wait
echo "=== built $SECONDS s"
timeout 100 python3 -m pytest -q tests/test_pair_cuda.py \
  -k "(rows_mma and (2-16 or 4-16)) or signatures or linear" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -4
for k in 3 4; do
  echo "=== table k $k $SECONDS s"
  timeout "$(( $(left) - 5 ))" python3 bench/pair_gemv.py --quick --no-sass --ks "$k" \
    --ms 1,2,3,4 --shapes 8192x8192,gate --tag="$TAG-k$k" 2>&1 | grep -v Warn \
    | python3 bench/device/brief.py | tee -a "$OUT/table$TAG.log"
  cp "bench/results/pair_gemv-cuda$TAG-k$k.json" "$OUT/" 2>/dev/null
done
echo "=== done $SECONDS s"
