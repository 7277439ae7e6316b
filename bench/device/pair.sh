#!/usr/bin/env bash
# One device call for the pair code: bash bench/device/pair.sh — builds its libraries in
# parallel, runs tests/test_pair_cuda.py (TESTS_S; 0 skips), bench/pair_gemv.py
# (PAIR_ARGS), bench/viterbi_cuda.py --code pair at L = 16 (VIT_CODES; empty skips) and,
# DECODE=1 and time left, the 8B-shaped decode with the pair code's MLP, within END_S;
# results tagged TAG (default -s18).
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
: "${END_S:=540}"  # the call's end (s), read by env.sh's left
timeout 200 python3 -c "
import time; from concurrent.futures import ThreadPoolExecutor as P
t = time.time()
from tqbuild.runtime import pair_cuda, trellis_cuda as tc
from tqbuild.kernels import pair_viterbi_cuda as pv, nvcc
jobs = [lambda k=k, L=L: pair_cuda.library(k, L) for k, L in ((2, 16), (3, 16), (4, 16), (3, 12))]
jobs += [lambda: nvcc.build(pv.SOURCE, ['-fmad=false'])]
jobs += [lambda k=k: tc.library(k, 12, 'mul1') for k in (2, 3, 4)]
with P(8) as ex: print([type(r).__name__ for r in ex.map(lambda f: f(), jobs)])
print('built', round(time.time() - t, 1), 's')" 2>&1 | tail -3
TAG=${TAG:--s18}
if [ "${TESTS_S:-150}" -gt 0 ]; then
  sel=(); [ -n "${TESTS_K:-}" ] && sel=(-k "$TESTS_K")
  timeout "${TESTS_S:-150}" python3 -m pytest -q -x tests/test_pair_cuda.py "${sel[@]}" 2>&1 \
    | tee "$OUT/pair-pytest$TAG.log" | tail -6
fi
timeout "$(( $(left) / 2 ))" python3 bench/pair_gemv.py ${PAIR_ARGS:---ks 3} --tag="$TAG" 2>&1 \
  | tee "$OUT/pair-gemv$TAG.log" | cut -c1-330
cp bench/results/pair_gemv-cuda$TAG.json "$OUT/" 2>/dev/null
for code in ${VIT_CODES-}; do
  timeout "$(left)" python3 bench/viterbi_cuda.py --code $code --ls 16 --no-old --tag="$TAG$code" \
    2>&1 | tee "$OUT/vit-$code.log" | cut -c1-250
  cp bench/results/viterbi_cuda-cuda$TAG$code.json "$OUT/" 2>/dev/null
done
if [ "${DECODE:-0}" = 1 ] && [ "$(left)" -gt 120 ]; then  # the 8B-shaped decode, pair MLP, PDL on
  TORCHINDUCTOR_ENABLE_PDL=1 timeout "$(left)" python3 bench/decode_8b.py --compile --no-eager \
    --only bf16,q3-fused-cu-lm8-qkv,p3-fused-cu-lm8-qkv,p3g-fused-cu-lm8-qkv --tag="${TAG}p" 2>&1 | tail -8 | cut -c1-300
  cp bench/results/decode_8b-cuda${TAG}p.json "$OUT/" 2>/dev/null
fi
echo "=== done $SECONDS s"
