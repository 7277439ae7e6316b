#!/usr/bin/env bash
# One device call: session 21's decode levers on the 8B-shaped model under tq_sdpa.
# (1) the CUDA tests of the pair SiLU rows kernel (tests/test_fused_mlp.py); (2) process A:
# bf16, pair gate/up + mul1 down (p3g) and the same with the rows kernel writing silu·up
# (p3s), lm_head 4-bit, every kernel as it ships (first weights asked for before
# griddepcontrol.wait: TQ_AFF_EARLY, TQ_COLS_EARLY); (3) process B: ONLY_B with those two
# off (the loads where ptxas put them); (4) the PDL chain and affine / mul1 CUDA tests in
# the time left. TAG, END_S, ONLY_A, ONLY_B, DECODE_ARGS, TESTS. bash bench/device/decode_levers.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
TAG=${TAG:--levers}
left() { echo $(( ${END_S:-570} - SECONDS )); }
nvidia-smi --query-gpu=name --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 150 python3 -m pytest -q tests/test_fused_mlp.py 2>&1 | tee "$OUT/tests-mlp$TAG.log" | tail -2
decode() {  # tag suffix, variants
  timeout "$(left)" python3 bench/decode_8b.py --compile --no-eager --attn tq_sdpa --only "$2" \
    $DECODE_ARGS --tag="$TAG-$1" 2>&1 | grep -E "compile \{|Error" | cut -c1-200
  cp "bench/results/decode_8b-cuda$TAG-$1.json" "$OUT/" 2>/dev/null
}
decode A "${ONLY_A:-bf16,p3g-fused-cu-lm4-qkv,p3s-fused-cu-lm4-qkv}"
echo "=== A done $SECONDS s"
TQBUILD_GEMV_FLAGS=-DTQ_COLS_EARLY=0 TQBUILD_AFFINE_FLAGS=-DTQ_AFF_EARLY=0 \
  decode B "${ONLY_B:-p3s-fused-cu-lm4-qkv}"
echo "=== B done $SECONDS s"
[ "$(left)" -gt 30 ] && timeout "$(left)" python3 -m pytest -q -x ${TESTS:-tests/test_pdl_chain.py \
  tests/test_affine_cuda.py} 2>&1 | tee "$OUT/tests-chain$TAG.log" | tail -2
echo "=== done $SECONDS s"
