#!/usr/bin/env bash
# Ninth session's closing device runs (H200); everything under $OUT packed into one tarball.
#   STEP=tests: the whole GPU suite, then compute-sanitizer memcheck / synccheck of the streaming GEMV
#   STEP=bench: the dense table at M = 8..64 with the dispatched matmul (re-tuned H200 tables)
#   OUT=/tmp/out STEP=tests bash profiling/final_run9.sh
. profiling/run_env.sh
W=$OUT/work; mkdir -p $W
case "${STEP:-tests}" in
tests)
  python3 profiling/warm_cache.py 2>&1 | tail -1
  python3 -m pytest -q -m gpu tests/ > "$W/gpu_tests.log" 2>&1; tail -2 "$W/gpu_tests.log"
  for tool in memcheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 3 python3 profiling/sanitize_stream.py > "$W/sanitize_stream_$tool.txt" 2>&1
    echo "stream $tool: exit $? ($(grep -c 'rel err' "$W/sanitize_stream_$tool.txt") checks; $(grep -E 'ERROR SUMMARY|BAD:' "$W/sanitize_stream_$tool.txt" | tr '\n' ' '))"
  done ;;
bench)
  python3 profiling/warm_cache.py 2>&1 | tail -1
  python3 profiling/bench.py --out "$W" --M ${MS:-8,16,32,64} --k ${KS:-2,3,4,5} \
      --columns GEMV,STREAM,WGMMA,dq+cuBLAS,matmul,matmul+PDL --reps 15 --tag ${TAG:-final16} > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log" ;;
esac
tar -czf "$OUT/final9_${STEP:-tests}.tgz" -C "$W" . && rm -rf "$W"
