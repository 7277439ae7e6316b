set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TQBUILD_KERNEL_CACHE=/tmp/tqk
mkdir -p $OUT; T0=$(date +%s)
F="-DTQ_AFF_MINB=3 -DTQ_AFF_PDL=1"
echo "=== affine tests $F"; TQBUILD_AFFINE_FLAGS="$F" timeout 80 python3 -m pytest -q -x tests/test_affine_kernel.py 2>&1 | tail -2
echo "=== affine variants $(( $(date +%s) - T0 ))"; timeout 150 python3 bench/affine_gemv.py --variants "-DTQ_AFF_MINB=3;-DTQ_AFF_PDL=1;$F;-DTQ_AFF_WARPS=4 -DTQ_AFF_DEPTH=8" --shapes qkv,q,kv,gate,lm_head8 --ms 1,4 --tag=-s15 2>&1 | python3 -c "
import sys,json
for l in sys.stdin:
    try: d=json.loads(l)
    except Exception: print(l.rstrip()[:200]); continue
    print(d['shape'], d['M'], ' '.join('%s=%.2f'%(k[:22],v['us']) for k,v in d.items() if isinstance(v,dict)))
"; cp bench/results/affine_gemv-cuda-s15-variants.json $OUT/
echo "=== ldlq tests $(( $(date +%s) - T0 ))"; timeout 120 python3 -m pytest -q tests/test_viterbi_cuda.py tests/test_trellis.py -k "ldlq" 2>&1 | tail -2
echo "=== viterbi $(( $(date +%s) - T0 ))"; timeout 150 python3 bench/viterbi_cuda.py --ls 16 --skip-bare --no-old --tag=-s15lazy 2>&1 | grep weights_per_s | cut -c1-200; cp bench/results/viterbi_cuda-cuda-s15lazy.json $OUT/
echo "=== decode $(( $(date +%s) - T0 ))"; timeout 190 python3 bench/decode_8b.py --compile --no-eager --only bf16,q3-fused-cu-lm8-qkv --tag=-s15 2>&1 | grep -i "tok\|error" | cut -c1-200; cp bench/results/decode_8b-cuda-s15.json $OUT/
echo "=== decode flags $(( $(date +%s) - T0 ))"; TQBUILD_AFFINE_FLAGS="$F" timeout 100 python3 bench/decode_8b.py --compile --no-eager --only q3-fused-cu-lm8-qkv --tag=-s15f 2>&1 | grep -i "tok\|error" | cut -c1-200; cp bench/results/decode_8b-cuda-s15f.json $OUT/
echo "=== end $(( $(date +%s) - T0 ))"
