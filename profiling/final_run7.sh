#!/usr/bin/env bash
# Seventh session's closing device runs (streaming GEMV dispatched on the H200):
#   STEP=tests: the whole GPU suite + compute-sanitizer memcheck / synccheck of the streaming GEMV
#   STEP=bench: the dense table with the dispatched matmul (M = 1..64, all k)
#   OUT=/tmp/out STEP=tests bash profiling/final_run7.sh
set -u
OUT=${OUT:-/tmp/kbit_out}
mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
python3 profiling/warm_cache.py 2>&1 | tail -1
if [ "${STEP:-tests}" = tests ]; then
  python3 -m pytest -q -m gpu tests/ > "$OUT/tests.log" 2>&1; tail -4 "$OUT/tests.log"
  for tool in memcheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 3 python3 profiling/sanitize_stream.py > "$OUT/sanitize_$tool.txt" 2>&1
    echo "compute-sanitizer $tool: exit $? ($(grep -c 'rel err' "$OUT/sanitize_$tool.txt") checks; $(grep -E 'ERROR SUMMARY|BAD:' "$OUT/sanitize_$tool.txt" | tr '\n' ' '))"
  done
else
  python3 profiling/bench.py --out "$OUT" --M ${MS:-1,4,8,16,32,64} --k 2,3,4,5 \
      --columns GEMV,STREAM,GEMM,WGMMA,dq+cuBLAS,matmul,matmul+PDL --reps 15 --tag ${TAG:-final11} > "$OUT/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$OUT/bench.log"
fi
