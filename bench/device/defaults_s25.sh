#!/usr/bin/env bash
# One device call checking session 25's two new defaults on one machine: split-KV flash
# decoding on in tq_sdpa (TQBUILD_DECODE_ATTN, now default 1) and LDLQ in 4 output-row parts
# (TQBUILD_LDLQ_ROW_PARTS, now default 4 for mul1 at L = 16). Their CUDA tests; mul1 and pair
# L = 16 per tensor at PARTS (default "4 1"), mul1 at L = 12 likewise; the attention alone
# (graph-timed); then the 8B-shaped decode of bf16, affine-4 and pair gate/up + mul1 down at
# a 4096-slot cache, the attention kernel on, then off. TAG, END_S, PARTS.
# bash bench/device/defaults_s25.sh
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
TAG=${TAG:--s25d}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 150 python3 -m pytest -q tests/test_decode_attention.py tests/test_gqa_attention.py \
  "tests/test_trellis.py::test_ldlq_in_row_parts_codes_as_one_pass" 2>&1 \
  | tee "$OUT/tests$TAG.log" | tail -3
for parts in ${PARTS:-4 1}; do
  for code in mul1 pair; do
    [ "$(left)" -lt 200 ] && break 2
    echo "=== $code parts=$parts $SECONDS s"
    TQBUILD_LDLQ_ROW_PARTS=$parts timeout 120 python3 bench/viterbi_cuda.py --code $code \
      --ls 16 --no-old --skip-bare --ks 2,3,4 --tag="$TAG-$code-p$parts" 2>&1 \
      | grep -o '"tensor": "[a-z-]*"\|"k": [0-9]\|"weights_per_s": [0-9.]*' | paste -sd' '
    cp bench/results/viterbi_cuda-cuda"$TAG-$code-p$parts".json "$OUT/" 2>/dev/null
  done
done
for parts in ${PARTS:-4 1}; do  # L = 12 (the recipes' default; one part by default until timed)
  echo "=== mul1 L=12 parts=$parts $SECONDS s"
  TQBUILD_LDLQ_ROW_PARTS=$parts timeout 60 python3 bench/viterbi_cuda.py --code mul1 --ls 12 \
    --no-old --skip-bare --ks 2,3,4 --tag="$TAG-l12-p$parts" 2>&1 \
    | grep -o '"tensor": "[a-z-]*"\|"k": [0-9]\|"weights_per_s": [0-9.]*' | paste -sd' '
  cp bench/results/viterbi_cuda-cuda"$TAG-l12-p$parts".json "$OUT/" 2>/dev/null
done
[ "$(left)" -gt 200 ] && timeout 90 python3 bench/gqa_attention.py --dtype bfloat16 \
  --lengths 128,4096,16384 --splits 0 --tag="$TAG" 2>&1 | cut -c1-300 \
  && cp bench/results/gqa_attention-cuda"$TAG".json "$OUT/"
run() {  # name, TQBUILD_DECODE_ATTN, variants
  echo "=== decode $1 $SECONDS s"
  TQBUILD_DECODE_ATTN=$2 timeout "$(( $(left) - 5 ))" python3 bench/decode_8b.py --compile \
    --no-eager --attn tq_sdpa --only "$3" --cache-len 4096 --tag="$TAG-$1" 2>&1 \
    | grep -E "compile \{|Error" | cut -c1-160
  cp "bench/results/decode_8b-cuda$TAG-$1.json" "$OUT/" 2>/dev/null
}
run ctx-on 1 bf16,affine4-cu-lm4-qkv,p3g-fused-cu-lm4-qkv
[ "$(left)" -gt 90 ] && run ctx-off 0 bf16,p3g-fused-cu-lm4-qkv
echo "=== done $SECONDS s"
