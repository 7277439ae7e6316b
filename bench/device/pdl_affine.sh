#!/usr/bin/env bash
# One device call (session 19): the pair kernels under programmatic dependent launch and the
# affine kernel's 4-blocks-an-SM launch (AFF_FLAGS) — builds the libraries in parallel, runs
# the compiled-chain PDL tests, the 8B-shaped decode (bf16, Q3, pair gate/up + mul1 down)
# with AFF_FLAGS, then the affine kernel's default against AFF_FLAGS on every bench shape;
# within END_S. bash bench/device/pdl_affine.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
TAG=${TAG:--s19f}
AFF_FLAGS=${AFF_FLAGS:--DTQ_AFF_DEPTH=2 -DTQ_AFF_MINB=4}
: "${END_S:=420}"  # the call's end (s), read by env.sh's left
nvidia-smi --query-gpu=name --format=csv,noheader
cat > /tmp/build.py <<PY
import time
from concurrent.futures import ThreadPoolExecutor as P
from tqbuild.kernels import nvcc
from tqbuild.runtime import affine_cuda, pair_cuda, trellis_cuda as tc
t = time.time()
aff = "$AFF_FLAGS".split()
jobs = [(pair_cuda.SOURCE, ["-DTQ_K=3", "-DTQ_L=16", "-DTQ_PDL_IN=1"]),
        (tc.SOURCE, ["-DTQ_K=3", "-DTQ_L=12", f"-DTQ_CODE={tc.CODE_IDS['mul1']}", "-DTQ_PDL_IN=1"]),
        (affine_cuda.SOURCE, ["-DTQ_AFF_PDL=1"]), (affine_cuda.SOURCE, aff + ["-DTQ_AFF_PDL=1"]),
        (affine_cuda.SOURCE, []), (affine_cuda.SOURCE, aff)]
with P(8) as ex:
    print([type(r).__name__ for r in ex.map(lambda j: nvcc.build(*j), jobs)])
print("built", len(jobs), "in", round(time.time() - t, 1), "s")
PY
timeout 240 python3 /tmp/build.py 2>&1 | tail -2
timeout 150 python3 -m pytest -q -x tests/test_pdl_chain.py 2>&1 | tee "$OUT/pdl-chain$TAG.log" | tail -3
TQBUILD_AFFINE_FLAGS="$AFF_FLAGS" TORCHINDUCTOR_ENABLE_PDL=1 timeout "$(( $(left) - 50 ))" \
  python3 bench/decode_8b.py --compile --no-eager \
  --only "${DECODE_ONLY:-bf16,q3-fused-cu-lm8-qkv,p3g-fused-cu-lm8-qkv}" --tag="$TAG" 2>&1 \
  | grep -E "compile \{|Error|error" | cut -c1-200
cp bench/results/decode_8b-cuda$TAG.json "$OUT/" 2>/dev/null
timeout "$(left)" python3 bench/affine_gemv.py --variants "$AFF_FLAGS" \
  --shapes q,qkv,kv,gate,down,lm_head8 --ms 1,4 --tag="$TAG" 2>&1 | python3 -c "
import sys, json
for l in sys.stdin:
    if l.startswith('{'):
        c = json.loads(l); print(c['shape'], 'M', c['M'], {k: round(v['us'], 2) for k, v in c.items() if isinstance(v, dict)})"
cp bench/results/affine_gemv-cuda$TAG-variants.json "$OUT/" 2>/dev/null
echo "=== done $SECONDS s"
