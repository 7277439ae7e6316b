source bench/device/env.sh
export TORCHINDUCTOR_ENABLE_PDL=1
timeout 70 python3 -m pytest -q tests/test_pair_cuda.py -k "tc and 3-16 and (300-1024 or 34000)" 2>&1 | grep -E "passed|failed|FAILED" | cut -c1-120 | tee $OUT/diag-tests.log
which compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer
CS=$(which compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer | head -1)
timeout 90 $CS --tool racecheck --racecheck-report hazard python3 -m pytest -q -x tests/test_pair_cuda.py -k "tc and 300-1024-256-4-512-1-3-16" 2>&1 | grep -vE "^\s*$" | head -40 | cut -c1-200 | tee $OUT/diag-race.log
