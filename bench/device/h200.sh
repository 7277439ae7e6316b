#!/usr/bin/env bash
# One H200 call of the issue-5/9 measurements: bash bench/device/h200.sh STEP...
# Steps: tests (CUDA kernel tests), matvec (bench/trellis_matvec.py), stash (keep
# carried artifact parts in /tmp/parts), verify (reassemble + tq-build verify
# --device cuda), decode (bench/trellis_decode.py), dist (CUDA distributed test).
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
for step in "$@"; do
  echo "=== $step $(date +%T)"
  case $step in
    tests) timeout 200 python -m pytest -q -x tests/test_runtime_torch.py -k "kernel or cuda" \
             2>&1 | tee "$OUT/pytest.log" | tail -30 ;;
    matvec) timeout "${MATVEC_S:-330}" python bench/trellis_matvec.py 2>&1 | tee "$OUT/matvec.log" \
             | grep -v '^{"cfg' | cut -c1-400
            cp bench/results/trellis_matvec-cuda.json "$OUT/" ;;
    stash) mkdir -p /tmp/parts && cp out/dev/art.part.* /tmp/parts/ && ls -la /tmp/parts ;;
    verify) cp out/dev/art.part.* /tmp/parts/ 2>/dev/null
            mkdir -p out && cat /tmp/parts/art.part.* | tar xf - -C out && \
            timeout 200 python -m tqbuild verify out/smollm2-trellis-k3 --device cuda \
              2>&1 | tee "$OUT/verify.log" | tail -40 ;;
    decode) timeout "${DECODE_S:-240}" python bench/trellis_decode.py 2>&1 | tee "$OUT/decode.log" | tail -30
            cp bench/results/trellis_decode-cuda.json "$OUT/" ;;
    dist) timeout 200 python -m pytest -q tests/test_distributed.py -k cuda 2>&1 | tee "$OUT/dist.log" | tail -15 ;;
  esac
done
echo "=== done $(date +%T)"
