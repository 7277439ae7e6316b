source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
timeout 100 python3 -c "
from concurrent.futures import ThreadPoolExecutor as P
from tqbuild.runtime import pair_cuda, trellis_cuda as tc
from tqbuild.kernels import nvcc
jobs = [lambda d=d: nvcc.build(pair_cuda.SOURCE, ['-DTQ_K=3', '-DTQ_L=16'] + ([f'-DTQ_PAIR_COLS_D={d}'] if d else [])) for d in (0, 2, 8)]
jobs += [lambda: tc.library(3, 12, 'mul1')]
with P(4) as ex: print(list(ex.map(lambda f: type(f()).__name__, jobs)))"
for d in 4 2 8; do
  f=""; [ $d != 4 ] && f="-DTQ_PAIR_COLS_D=$d"
  TQBUILD_PAIR_FLAGS="$f" timeout 60 python3 bench/pair_gemv.py --ks 3 --ms 1 --shapes down,down8b --tag=-s18d$d 2>&1 | grep '"shape"' | python3 -c "
import sys, json
for l in sys.stdin:
    c = json.loads(l); print('D=$d', c['shape'], 'mul1 %.1f pair %.1f' % (c['mul1_seconds']*1e6, c['pair_seconds']*1e6))"
  cp bench/results/pair_gemv-cuda-s18d$d.json $OUT/
done
