# Sourced by the device scripts (run from the repository root): strict pipes, the carried
# wheels (.whl: packages the device image lacks) on PYTHONPATH, unbuffered output, one
# kernel cache, $OUT (the folder that comes back) made, and `left`: the seconds before END_S
# (the call's planned end, default 560; a script may set its own).
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TQBUILD_KERNEL_CACHE=${TQBUILD_KERNEL_CACHE:-/tmp/tqk}
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit
fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
left() { echo $(( ${END_S:-560} - SECONDS )); }
# ncu's per-reason warp-stall metrics (cycles an issued instruction) and the issue, occupancy,
# instruction, time and DRAM counters beside them, comma-joined, then any metrics passed
stall_metrics() {
  local m="" r
  for r in long_scoreboard short_scoreboard mio_throttle lg_throttle math_pipe_throttle barrier \
      wait not_selected selected no_instruction dispatch_stall drain membar branch_resolving \
      sleeping tex_throttle; do m="$m,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
  m="$m,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.per_cycle_active"
  m="$m,smsp__inst_executed.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
  local e; for e in "$@"; do m="$m,$e"; done
  echo "${m#,}"
}
# ncu over one bench/ncu_decode.py run (if more than 30 s are left, ending 5 s before END_S):
# the first launch of each kernel matching REGEX, METRICS (stall_metrics' list), its report at
# FILE; prints the report's kernel, stall, issue, instruction, time, DRAM and L1 lines but zeros
ncu_decode() {  # FILE REGEX METRICS ncu_decode.py's arguments...
  local f=$1 re=$2 m=$3; shift 3
  [ "$(left)" -gt 30 ] || return 0
  timeout "$(( $(left) - 5 ))" ncu --clock-control none -k "regex:$re" --launch-count 1 \
    --metrics "$m" python3 bench/ncu_decode.py "$@" > "$f" 2>&1
  grep -E "pair_|stalled|issue_active|warps_active|inst_executed|duration|dram|l1tex|lts|lsu" "$f" \
    | sed 's/smsp__average_warps_issue_stalled_//' | grep -v " 0$" | cut -c1-150 | head -60
}
