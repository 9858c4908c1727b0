# Sourced by the profiling/*_run*.sh device scripts: output folder, import path, CuPy cache.
set -u
OUT=${OUT:-/tmp/kbit_out}
mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
# gpu_tests LOG TIMEOUT [pytest args]: GPU tests into LOG, headed by GPU, date and command; prints the summary.
gpu_tests() {
  local log=$1 t=$2; shift 2
  echo "# $GPU, $(date -I): pytest -q -m gpu $*" > "$log"
  timeout "$t" python3 -m pytest -q -m gpu "$@" >> "$log" 2>&1
  tail -1 "$log"
}
# memcheck FILE: compute-sanitizer memcheck over profiling/sanitize_driver.py into FILE; prints the verdict.
memcheck() {
  compute-sanitizer --tool memcheck --error-exitcode 3 python3 profiling/sanitize_driver.py > "$1" 2>&1
  echo "memcheck: exit $? ($(grep -c 'rel err' "$1") checks; $(grep -E 'ERROR SUMMARY|BAD' "$1" | tr '\n' ' '))"
}
# start_run DEFAULT_STEP: W (work folder under $OUT), GPU (its name), STEP (default DEFAULT_STEP); prints
# and keeps the run's header (GPU, date, git revision from .git_rev, step).
start_run() {
  W=$OUT/work; mkdir -p "$W"
  GPU=$(python3 -c "import cupy as c; print(c.cuda.runtime.getDeviceProperties(0)['name'].decode())")
  STEP=${STEP:-$1}
  echo "# $GPU, $(date -I), git $(cat .git_rev 2>/dev/null || echo '?'), STEP=$STEP" | tee "$W/header.txt"
}
