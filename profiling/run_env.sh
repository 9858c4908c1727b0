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
