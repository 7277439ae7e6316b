set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TQBUILD_KERNEL_CACHE=/tmp/tqk
mkdir -p $OUT; T0=$(date +%s)
python3 -c "import torch._inductor.config as c; print('inductor pdl', hasattr(c.triton,'enable_pdl'))"
export FG="-DTQ_PDL_IN=1" FA="-DTQ_AFF_PDL=1"
echo "=== tests"; TQBUILD_GEMV_FLAGS="$FG" TQBUILD_AFFINE_FLAGS="$FA" timeout 150 python3 -m pytest -q -x tests/test_pdl_chain.py tests/test_trellis_int8.py tests/test_affine_kernel.py 2>&1 | tail -3
echo "=== pdl chain, defaults $(( $(date +%s) - T0 ))"; timeout 60 python3 -m pytest -q -x tests/test_pdl_chain.py 2>&1 | tail -2
q=q3-fused-cu-lm8-qkv
echo "=== decode $(( $(date +%s) - T0 ))"; TORCHINDUCTOR_ENABLE_PDL=1 timeout 150 python3 bench/decode_8b.py --compile --no-eager --only bf16,$q --tag=-s15p 2>&1 | grep -i "tok\|error" | cut -c1-150; cp bench/results/decode_8b-cuda-s15p.json $OUT/
echo "=== decode ours $(( $(date +%s) - T0 ))"; TORCHINDUCTOR_ENABLE_PDL=1 TQBUILD_GEMV_FLAGS="$FG" TQBUILD_AFFINE_FLAGS="$FA" timeout 100 python3 bench/decode_8b.py --compile --no-eager --only $q --tag=-s15pp 2>&1 | grep -i "tok\|error" | cut -c1-150; cp bench/results/decode_8b-cuda-s15pp.json $OUT/
echo "=== decode ours, no inductor pdl $(( $(date +%s) - T0 ))"; TQBUILD_GEMV_FLAGS="$FG" TQBUILD_AFFINE_FLAGS="$FA" timeout 100 python3 bench/decode_8b.py --compile --no-eager --only $q --tag=-s15op 2>&1 | grep -i "tok\|error" | cut -c1-150; cp bench/results/decode_8b-cuda-s15op.json $OUT/
echo "=== end $(( $(date +%s) - T0 ))"
