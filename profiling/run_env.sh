# Sourced by the profiling/*_run*.sh device scripts: output folder, import path, CuPy cache.
set -u
OUT=${OUT:-/tmp/kbit_out}
mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
