#!/usr/bin/env bash
# One device call that reads the decode kernels: bash bench/device/probe.sh — builds the
# libraries, runs tests/test_pair_cuda.py (TESTS_S seconds, 0 skips; TESTS_K selects; pair
# flags TEST_FLAGS), bench/pair_gemv.py (PAIR_ARGS), the 8B-shaped decode (DECODE=1;
# DECODE_ONLY, pair flags DECODE_FLAGS), bench/pair_gemv.py again under each ';'-separated
# pair flag set of VAR_SETS (VAR_ARGS), the affine kernel under AFF_VARIANTS (';'-separated
# define sets), and Nsight Compute over bench/ncu_decode.py (NCU=1; pair flags NCU_FLAGS) —
# within END_S; results tagged TAG.
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
TAG=${TAG:--s19}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
: "${END_S:=540}"  # the call's end (s), read by env.sh's left
timeout 300 python3 -c "
import time; from concurrent.futures import ThreadPoolExecutor as P
t = time.time()
from tqbuild.runtime import pair_cuda, trellis_cuda as tc, affine_cuda
from tqbuild.kernels import nvcc
pair = lambda k, L, f: nvcc.build(pair_cuda.SOURCE, [f'-DTQ_K={k}', f'-DTQ_L={L}'] + f.split())
keys = {(k, L, ' '.join('${TEST_FLAGS:-}'.split())) for k, L in ((2, 16), (3, 16), (4, 16), (3, 12))}
keys |= {(k, 16, ' '.join(f.split())) for k in (3, 4) for f in ['', '${DECODE_FLAGS:-}'] + '${VAR_SETS:-}'.split(';')}
jobs = [lambda c=c: pair(*c) for c in sorted(keys)]
jobs += [lambda k=k: tc.library(k, 12, 'mul1') for k in (2, 3, 4)]
jobs += [affine_cuda._library]
jobs += [lambda f=f: nvcc.build(affine_cuda.SOURCE, f.split()) for f in '${AFF_VARIANTS:-}'.split(';') if f]
if '${DECODE:-0}' == '1':  # the decode's: launched with PDL behind inductor's kernels
    jobs += [lambda k=k: nvcc.build(tc.SOURCE, [f'-DTQ_K={k}', '-DTQ_L=12', f'-DTQ_CODE={tc.CODE_IDS[\"mul1\"]}', '-DTQ_PDL_IN=1']) for k in (3,)]
    jobs += [lambda: nvcc.build(affine_cuda.SOURCE, ['-DTQ_AFF_PDL=1'])]
with P(16) as ex: print([type(r).__name__ for r in ex.map(lambda f: f(), jobs)])
print('built', len(jobs), 'in', round(time.time() - t, 1), 's')" 2>&1 | tail -3
if [ "${TESTS_S:-120}" -gt 0 ]; then
  sel=(); [ -n "${TESTS_K:-}" ] && sel=(-k "$TESTS_K")
  TQBUILD_PAIR_FLAGS="${TEST_FLAGS:-}" timeout "${TESTS_S:-120}" python3 -m pytest -q -x \
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
if [ "${DECODE:-0}" = 1 ] && [ "$(left)" -gt 120 ]; then
  TQBUILD_PAIR_FLAGS="${DECODE_FLAGS:-}" TORCHINDUCTOR_ENABLE_PDL=1 timeout "$(( $(left) - 60 ))" \
    python3 bench/decode_8b.py --compile --no-eager \
    --only "${DECODE_ONLY:-bf16,q3-fused-cu-lm8-qkv,p3g-fused-cu-lm8-qkv}" --tag="${TAG}p" 2>&1 \
    | tail -8 | cut -c1-300
  cp bench/results/decode_8b-cuda${TAG}p.json "$OUT/" 2>/dev/null
fi
i=0
IFS=';' read -ra sets <<< "${VAR_SETS:-}"
for f in "${sets[@]}"; do
  i=$((i + 1)); [ "$(left)" -gt 30 ] || break
  TQBUILD_PAIR_FLAGS="$f" timeout "$(( $(left) / 2 ))" python3 bench/pair_gemv.py ${VAR_ARGS:---ks 3 --ms 1} \
    --tag="$TAG-v$i" 2>&1 | tee "$OUT/pair-gemv$TAG-v$i.log" | summ "v$i [$f]"
  cp bench/results/pair_gemv-cuda$TAG-v$i.json "$OUT/" 2>/dev/null
done
if [ -n "${AFF_VARIANTS:-}" ] && [ "$(left)" -gt 30 ]; then
  timeout "$(left)" python3 bench/affine_gemv.py --variants "$AFF_VARIANTS" \
    --shapes qkv,q --ms 1 --tag="$TAG" 2>&1 | tail -4 | cut -c1-400
  cp bench/results/affine_gemv-cuda$TAG-variants.json "$OUT/" 2>/dev/null
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
