#!/usr/bin/env bash
# One device call that reads the decode kernels: bash bench/device/probe.sh — builds the
# libraries (and, VAR_FLAGS set, the pair libraries with those flags), runs
# tests/test_pair_cuda.py (TESTS_S seconds, 0 skips; TESTS_K selects; under VAR_FLAGS where
# TESTS_VAR=1), bench/pair_gemv.py (PAIR_ARGS; again under VAR_FLAGS with VAR_ARGS), the pair
# cols ring depths in COLS_D (e.g. "8"), DECODE=1 the 8B-shaped decode (DECODE_ONLY, pair
# flags DECODE_FLAGS), the affine kernel under AFF_VARIANTS (';'-separated define sets),
# and Nsight Compute over bench/ncu_decode.py (NCU=1; NCU_FLAGS: the
# pair flags) — within END_S.
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TQBUILD_KERNEL_CACHE=/tmp/tqk
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit
fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TAG=${TAG:--s19}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
left() { echo $(( ${END_S:-540} - SECONDS )); }
timeout 240 python3 -c "
import time; from concurrent.futures import ThreadPoolExecutor as P
t = time.time()
from tqbuild.runtime import pair_cuda, trellis_cuda as tc, affine_cuda
from tqbuild.kernels import nvcc
kl = ((2, 16), (3, 16), (4, 16), (3, 12))
jobs = [lambda k=k, L=L: pair_cuda.library(k, L) for k, L in kl]
jobs += [lambda k=k, L=L: nvcc.build(pair_cuda.SOURCE, [f'-DTQ_K={k}', f'-DTQ_L={L}'] + '${VAR_FLAGS:-}'.split()) for k, L in (kl if '${VAR_FLAGS:-}' else ())]
jobs += [lambda k=k: tc.library(k, 12, 'mul1') for k in (2, 3, 4)]
jobs += [lambda d=d: nvcc.build(pair_cuda.SOURCE, ['-DTQ_K=3', '-DTQ_L=16', f'-DTQ_PAIR_COLS_D={d}']) for d in '${COLS_D:-}'.split()]
jobs += [affine_cuda._library]
jobs += [lambda f=f: nvcc.build(affine_cuda.SOURCE, f.split()) for f in '${AFF_VARIANTS:-}'.split(';') if f]
with P(12) as ex: print([type(r).__name__ for r in ex.map(lambda f: f(), jobs)])
print('built', round(time.time() - t, 1), 's')" 2>&1 | tail -3
if [ "${TESTS_S:-120}" -gt 0 ]; then
  sel=(); [ -n "${TESTS_K:-}" ] && sel=(-k "$TESTS_K")
  tf=""; [ "${TESTS_VAR:-0}" = 1 ] && tf="${VAR_FLAGS:-}"
  TQBUILD_PAIR_FLAGS="$tf" timeout "${TESTS_S:-120}" python3 -m pytest -q -x \
    tests/test_pair_cuda.py "${sel[@]}" 2>&1 | tee "$OUT/pair-pytest$TAG.log" | tail -4
fi
summ() { grep '"shape"' | python3 -c "
import sys, json
for l in sys.stdin:
    c = json.loads(l); print('$1', c['shape'], 'k', c['k'], 'M', c['M'], 'bf16 %.1f mul1 %.1f pair %.1f' % (c['bf16_seconds']*1e6, c['mul1_seconds']*1e6, c['pair_seconds']*1e6), c['pair_cfg'], {a: round(b*1e6, 1) for a, b in c['pair_tried'].items()})"; }
if [ -n "${PAIR_ARGS:-}" ]; then
  timeout "$(( $(left) / 3 ))" python3 bench/pair_gemv.py $PAIR_ARGS --tag="$TAG" 2>&1 \
    | tee "$OUT/pair-gemv$TAG.log" | summ base
  cp bench/results/pair_gemv-cuda$TAG.json "$OUT/" 2>/dev/null
fi
if [ -n "${VAR_ARGS:-}" ]; then
  TQBUILD_PAIR_FLAGS="$VAR_FLAGS" timeout "$(( $(left) / 3 ))" python3 bench/pair_gemv.py \
    $VAR_ARGS --tag="$TAG-var" 2>&1 | tee "$OUT/pair-gemv$TAG-var.log" | summ var
  cp bench/results/pair_gemv-cuda$TAG-var.json "$OUT/" 2>/dev/null
fi
for d in ${COLS_D:-}; do
  TQBUILD_PAIR_FLAGS="-DTQ_PAIR_COLS_D=$d" timeout 90 python3 bench/pair_gemv.py --ks 3 --ms 1 \
    --shapes down,down8b --tag="$TAG-d$d" 2>&1 | summ "D=$d"
  cp bench/results/pair_gemv-cuda$TAG-d$d.json "$OUT/" 2>/dev/null
done
if [ -n "${AFF_VARIANTS:-}" ]; then  # the affine kernel under define sets (q/k/v and q shapes)
  timeout "$(( $(left) / 3 ))" python3 bench/affine_gemv.py --variants "$AFF_VARIANTS" \
    --shapes qkv,q --ms 1 --tag="$TAG" 2>&1 | tail -12 | cut -c1-250
  cp bench/results/affine_gemv-cuda$TAG-variants.json "$OUT/" 2>/dev/null
fi
if [ "${DECODE:-0}" = 1 ] && [ "$(left)" -gt 120 ]; then
  TQBUILD_PAIR_FLAGS="${DECODE_FLAGS:-}" TORCHINDUCTOR_ENABLE_PDL=1 timeout "$(left)" \
    python3 bench/decode_8b.py --compile --no-eager \
    --only "${DECODE_ONLY:-bf16,q3-fused-cu-lm8-qkv,p3g-fused-cu-lm8-qkv}" --tag="${TAG}p" 2>&1 \
    | tail -8 | cut -c1-300
  cp bench/results/decode_8b-cuda${TAG}p.json "$OUT/" 2>/dev/null
fi
if [ "${NCU:-0}" = 1 ] && [ "$(left)" -gt 40 ]; then
  TQBUILD_PAIR_FLAGS="${NCU_FLAGS:-}" timeout "$(left)" ncu --clock-control none \
    -k 'regex:pair_|rows_|cols_|affine_mma|quantize_x|sum_splits' --section SpeedOfLight \
    --section Occupancy --section LaunchStats \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    python3 bench/ncu_decode.py > "$OUT/ncu$TAG.txt" 2>&1
  echo "ncu rc $? $(wc -l < "$OUT/ncu$TAG.txt") lines"
fi
echo "=== done $SECONDS s"
