#!/usr/bin/env bash
# One device call for the cols (down_proj) kernel's split: the int8 kernel tests and the
# PDL chain (cols under both launch modes), bench/cols_splits.py (blocks an SM, rows a block,
# the 16-warp build, beside bf16 cuBLAS), then the 8B-shaped decode (tq_sdpa, lm_head 4-bit)
# of bf16, affine-4, Q3 and pair gate/up + mul1 down (ONLY), the last again at each of BPS
# (blocks an SM of the cols split, where given). TAG, END_S, BPS, KS, MS, SKIP_TESTS,
# SKIP_GEMV, SKIP_DECODE, ONLY; an exported TQBUILD_GEMV_FLAGS (e.g. the 8-warp block,
# "-DTQ_COLS_WARPS=8") builds the tests' and the decode's libraries (the sweep times both
# builds itself). bash bench/device/cols.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
TAG=${TAG:--cols}
: "${END_S:=570}"  # the call's end (s), read by env.sh's left
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
python3 -c "
from tqbuild.runtime import trellis_cuda as tc
tc.prebuild([(k, 12, 'mul1') for k in (2, 3, 4)])" 2>&1 | tail -2 &
if [ -z "$SKIP_TESTS" ]; then
  timeout 200 python3 -m pytest -q tests/test_trellis_int8.py tests/test_pdl_chain.py -k "cuda or pdl" \
    2>&1 | tee "$OUT/tests$TAG.log" | tail -3
fi
wait
echo "=== big splits $SECONDS s"  # explicit rows a block past 48 KB of shared memory
timeout 60 python3 -c "
import torch
from tqbuild.runtime import trellis_cuda as tc
lib = tc.library(2, 12, 'mul1')
w = torch.randint(-2**31, 2**31 - 1, (17408, 5120 * 2 // 32), dtype=torch.int32, device='cuda')
sc = torch.ones(17408, dtype=torch.half, device='cuda')
for m, per in ((4, 1344), (4, 2688), (1, 4352), (2, 2688)):
    x = torch.randn(m, 17408, device='cuda', dtype=torch.bfloat16)
    try:
        tc.matvec(x, w, sc, code='mul1', k=2, T=256, L=12, axis=0, out_features=5120,
                  in_features=17408, cfg={'per': per, 'tc': False}); torch.cuda.synchronize()
        print('M', m, 'per', per, 'smem', lib.tq_gemv_cols_smem(m, per), 'ok')
    except RuntimeError as e:
        print('M', m, 'per', per, 'smem', lib.tq_gemv_cols_smem(m, per), e)" 2>&1 | tail -5
echo "=== gemv $SECONDS s"
[ -z "$SKIP_GEMV" ] && timeout 240 python3 bench/cols_splits.py --ks "${KS:-2,3,4}" \
  --ms "${MS:-1}" --tag="$TAG" 2>&1 | cut -c1-330 | tee "$OUT/gemv$TAG.log" | \
  python3 -c "
import json, sys
for ln in sys.stdin:
    try: r = json.loads(ln)
    except ValueError: print(ln.rstrip()); continue
    if 'seconds' not in r: print(ln.rstrip()[:200]); continue
    print(r['shape'][:7], 'k', r['k'], 'M', r['M'], (r.get('flags') or '')[:16], r['cfg'], r['per'], r['blocks'],
          r['occupancy'], round(r['seconds'] * 1e6, 2), round(r['speedup_vs_bf16'], 3))"
cp bench/results/cols_splits-cuda$TAG.json "$OUT/" 2>/dev/null
echo "=== decode $SECONDS s"
[ -z "$SKIP_DECODE" ] && timeout "$(left)" python3 bench/decode_8b.py --compile --no-eager --attn tq_sdpa \
  --only "${ONLY:-bf16,affine4-cu-lm4-qkv,q3-fused-cu-lm4-qkv,p3g-fused-cu-lm4-qkv}" --cols-bps "${BPS:-}" --tag="$TAG" 2>&1 \
  | grep -E "compile \{|Error" | cut -c1-200
cp "bench/results/decode_8b-cuda$TAG.json" "$OUT/" 2>/dev/null
echo "=== done $SECONDS s"
