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
