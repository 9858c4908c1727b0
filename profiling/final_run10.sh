#!/usr/bin/env bash
# Tenth session's device runs; everything under $OUT packed into one tarball.
#   STEP=a (H200): GEMV / dispatch / launch / layer GPU tests, compute-sanitizer memcheck + racecheck of the
#     several-groups-per-block GEMV, and the k = 5 sweep at M = 1..8 for the dispatch tables (tag k5-gpb)
#   STEP=sweep (H100): the same sweep and the slices tests
#   STEP=final (H200): the dense table at M = 1, 2, 4, 8 with the re-tuned dispatch (tag final17)
#   OUT=/tmp/out STEP=a bash profiling/final_run10.sh
. profiling/run_env.sh
W=$OUT/work; mkdir -p $W
GPU=$(python3 -c "import cupy as c; print(c.cuda.runtime.getDeviceProperties(0)['name'].decode())")
sweep() {
  python3 profiling/bench.py --out "$W" --M 1,2,4,8 --k 5 --columns GEMV,STREAM,GEMV+PDL,STREAM+PDL,matmul,matmul+PDL \
      --reps 15 --tag ${TAG:-k5-gpb} > "$W/bench_k5.log" 2>&1
  grep -E "^### M|^\| (gateup|Q|lin_value|TOTAL) " "$W/bench_k5.log"
}
case "${STEP:-a}" in
a)
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm 2>&1 | tail -1
  echo "# $GPU, $(date -I): pytest -q -m gpu tests/test_gemv_gpu.py tests/test_dispatch.py tests/test_launch_gpu.py tests/test_layers_gpu.py" > "$W/gpu_tests.log"
  python3 -m pytest -q -m gpu tests/test_gemv_gpu.py tests/test_dispatch.py tests/test_launch_gpu.py tests/test_layers_gpu.py >> "$W/gpu_tests.log" 2>&1
  tail -1 "$W/gpu_tests.log"
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 3 python3 profiling/sanitize_slices.py > "$W/sanitize_slices_$tool.txt" 2>&1
    echo "slices $tool: exit $? ($(grep -E 'checks|ERROR SUMMARY' "$W/sanitize_slices_$tool.txt" | tr '\n' ' '))"
  done
  sweep ;;
sweep)
  python3 profiling/warm_cache.py gemv gemv_stream 2>&1 | tail -1
  echo "# $GPU, $(date -I): pytest -q -m gpu tests/test_gemv_gpu.py -k 'slices or plans'" > "$W/gpu_tests_slices.log"
  python3 -m pytest -q -m gpu tests/test_gemv_gpu.py -k "slices or plans" >> "$W/gpu_tests_slices.log" 2>&1
  tail -1 "$W/gpu_tests_slices.log"
  sweep ;;
final)
  python3 profiling/warm_cache.py 2>&1 | tail -1
  python3 profiling/bench.py --out "$W" --M ${MS:-1,2,4,8} --k ${KS:-2,3,4,5} \
      --columns GEMV,STREAM,WGMMA,matmul,matmul+PDL --reps 15 --tag ${TAG:-final17} > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL|^\| gateup \| 5" "$W/bench.log"
  echo "# $GPU, $(date -I): pytest -q -m gpu tests/test_dispatch.py tests/test_launch_gpu.py" > "$W/gpu_tests_dispatch.log"
  python3 -m pytest -q -m gpu tests/test_dispatch.py tests/test_launch_gpu.py >> "$W/gpu_tests_dispatch.log" 2>&1
  tail -1 "$W/gpu_tests_dispatch.log" ;;
esac
tar -czf "$OUT/final10_${STEP:-a}.tgz" -C "$W" . && rm -rf "$W"
