#!/usr/bin/env bash
# Session 32's second call: pair_rows_mma's knobs, each a library of that kernel alone
# (-DTQ_PAIR_MMA_ONLY): mma chains an item (ACC 1, 2, 4), items in flight (D 2, 3, 4), 1024
# threads (D 2: 64 registers, 48 bytes spilled), two adjacent periods a lane (PP 2: their words
# in 8- or 16-byte loads); 8192² and gate at k = 3, 4, M = 1, 4, 8;
# then ncu: stalls and the L1's wavefronts (shared and global) of the mma kernel (M = 1, 4)
# and the int8 kernel (M = 1, ROWS_CFG's), 8192², k = 3.   TAG, END_S.
#   bash bench/device/s32b.sh (carry .whl; as run at 6a68112: PP is now an instance, pp of
#   the rows cfg (0, pp, 512), not a knob — its two PP sets here build pp = 1 only)
source bench/device/env.sh
: "${END_S:=420}"
TAG=${TAG:--s32b}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
for v in "ACC=1 D=3" "ACC=2 D=3" "ACC=4 D=3" "ACC=2 D=2" "ACC=2 D=4" "ACC=2 D=2 NTH=1024" \
    "ACC=2 D=2 PP=2" "ACC=2 D=3 PP=2"; do
  f="-DTQ_PAIR_MMA_ONLY"; t="$TAG"
  for kv in $v; do f="$f -DTQ_PAIR_MMA_$kv"; t="$t-${kv/=/}"; done
  echo "=== $v $SECONDS s"
  [ "$(left)" -gt 120 ] && TQBUILD_PAIR_FLAGS="$f" timeout 60 python3 bench/pair_gemv.py --mma-only \
    --no-sass --ks 3,4 --ms 1,4,8 --shapes 8192x8192,gate --tag="$t" 2>&1 | grep -v Warn \
    | python3 bench/device/brief.py
  cp "bench/results/pair_gemv-cuda$t.json" "$OUT/" 2>/dev/null
done
M=$(stall_metrics l1tex__data_pipe_lsu_wavefronts.sum l1tex__data_pipe_lsu_wavefronts_mem_shared.sum \
  l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum \
  l1tex__throughput.avg.pct_of_peak_sustained_active l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum \
  sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active lts__t_sectors_srcunit_tex_op_read.sum)
for run in "pair_rows_mma 1" "pair_rows_mma 4" "pair_rows_int8 1"; do
  set -- $run
  echo "=== ncu $run $SECONDS s"
  ncu_decode "$OUT/ncu$TAG-$1-$2.txt" '^pair_rows' "$M" --k 3 --m "$2" --only "$1"
done
echo "=== done $SECONDS s"
