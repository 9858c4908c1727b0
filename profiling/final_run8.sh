#!/usr/bin/env bash
# Eighth session's closing device runs (H200):
#   STEP=tests:    the whole GPU suite
#   STEP=sanitize: compute-sanitizer memcheck / synccheck of the streaming GEMV (sanitize_stream.py) and
#                  memcheck of sanitize_driver.py (every family, dequant + cuBLAS with the tiled dequantize)
#   STEP=bench MS=1,2,4,8,16 TAG=final14a: the dense table with the dispatched matmul
#   OUT=/tmp/out STEP=tests bash profiling/final_run8.sh
. profiling/run_env.sh
case "${STEP:-tests}" in
tests)
  python3 profiling/warm_cache.py 2>&1 | tail -1
  python3 -m pytest -q -m gpu tests/ > "$OUT/tests.log" 2>&1; tail -2 "$OUT/tests.log" ;;
sanitize)
  for tool in memcheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 3 python3 profiling/sanitize_stream.py > "$OUT/sanitize_stream_$tool.txt" 2>&1
    echo "stream $tool: exit $? ($(grep -c 'rel err' "$OUT/sanitize_stream_$tool.txt") checks; $(grep -E 'ERROR SUMMARY|BAD:' "$OUT/sanitize_stream_$tool.txt" | tr '\n' ' '))"
  done
  compute-sanitizer --tool memcheck --error-exitcode 3 python3 profiling/sanitize_driver.py > "$OUT/sanitize_driver_memcheck.txt" 2>&1
  echo "driver memcheck: exit $? ($(grep -E 'ERROR SUMMARY|BAD' "$OUT/sanitize_driver_memcheck.txt" | tr '\n' ' '))" ;;
bench)
  python3 profiling/bench.py --out "$OUT" --M ${MS:-1,2,4,8,16} --k 2,3,4,5 \
      --columns GEMV,STREAM,GEMM,WGMMA,dq+cuBLAS,matmul,matmul+PDL --reps 15 --tag ${TAG:-final14a} > "$OUT/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$OUT/bench.log" ;;
esac
