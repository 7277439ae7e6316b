#!/usr/bin/env bash
# Session 30's second call: (1) the rows kernel at M = 2, 4 with every instance (not --quick)
# on 8192² and gate at k = 3, 4, beside the same rows in packed fp16 (--ab-source: session
# 28's cc3dec6 applied to every rows instance, written by bench/device/fp16_rows_variant.py)
# — 8192² at M = 4 is the shape short of 2× bf16; (2) what its warps stall on (ncu's
# per-reason stall metrics; the sections gave no breakdown in call 1); (3) the 8B-shaped
# decode, bf16 / affine-4 / p3 / p3g in one process at the 128-slot cache.   TAG, END_S.
# KS, MS: the table's k and M (s30d.sh: 3 and 4).   bash bench/device/s30c.sh (carry .whl)
source bench/device/env.sh
: "${END_S:=540}"
TAG=${TAG:--s30c}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
export TORCHINDUCTOR_ENABLE_PDL=1
python3 bench/device/fp16_rows_variant.py tqbuild/runtime/pair_gemv_s30fp16rows.cu || exit
timeout 200 python3 bench/pair_gemv.py --ks "${KS:-3,4}" --ms "${MS:-4,2}" --shapes 8192x8192,gate \
  --ab-source tqbuild/runtime/pair_gemv_s30fp16rows.cu --tag="$TAG-rows" 2>&1 \
  | tee "$OUT/rows$TAG.log" | grep -v Warn | cut -c1-700
cp "bench/results/pair_gemv-cuda$TAG-rows.json" "$OUT/" 2>/dev/null
echo "=== ncu stalls $SECONDS s"
S=smsp__average_warps_issue_stalled
M=""
for r in long_scoreboard short_scoreboard mio_throttle lg_throttle math_pipe_throttle barrier \
    wait not_selected selected no_instruction dispatch_stall drain membar branch_resolving \
    sleeping tex_throttle; do M="$M,${S}_${r}_per_issue_active.ratio"; done
M="${M#,},smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.per_cycle_active,smsp__inst_executed.sum,gpu__time_duration.sum"
timeout 100 ncu --clock-control none -k regex:'pair_rows|pair_cols' --launch-count 6 --metrics "$M" \
  python3 bench/ncu_decode.py --k 3 --m 4 > "$OUT/ncu-stalls$TAG.txt" 2>&1
grep -E "pair_|stalled|issue_active|warps_active|inst_executed|duration" "$OUT/ncu-stalls$TAG.txt" \
  | sed 's/smsp__average_warps_issue_stalled_//' | cut -c1-150 | head -70
echo "=== decode $SECONDS s"
[ "$(left)" -gt 200 ] && timeout "$(( $(left) - 5 ))" python3 bench/decode_8b.py --compile \
  --no-eager --attn tq_sdpa --cache-len 128 \
  --only bf16,affine4-cu-lm4-qkv,p3-fused-cu-lm4-qkv,p3g-fused-cu-lm4-qkv \
  --tag="$TAG-dec128" 2>&1 | grep -E "compile \{|Error" | cut -c1-200
cp "bench/results/decode_8b-cuda$TAG-dec128.json" "$OUT/" 2>/dev/null
echo "=== done $SECONDS s"
