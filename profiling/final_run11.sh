#!/usr/bin/env bash
# Eleventh session's closing device runs (H200); every output packed into $OUT/run11_$STEP.tgz.
#   STEP=tests: the whole GPU suite (pytest -m gpu tests/) and the grouped wgmma trace at 16 / 64 tokens
#   STEP=close: memcheck, the MoE table (moe-final15) and dense k = 4 / 5 at M = 32, 64, 128 (final18)
#   STEP=wgtune: WGMMA / WGMMA+PDL at M = 16..128, all k (tag wg-tune11), overlaid on the dispatch sweeps
#   STEP=moest: grouped wgmma stages 4 / 6 / 8 (moe_ab.py) and the re-tuned dispatch at M = 64 / 128 (final18b)
#   STEP=h100: the same checks and sweeps on the H100 (wgmma tests, wg-tune11, final18, moe-final15)
#   OUT=/tmp/out STEP=tests bash profiling/final_run11.sh
. profiling/run_env.sh
W=$OUT/work; mkdir -p $W
GPU=$(python3 -c "import cupy as c; print(c.cuda.runtime.getDeviceProperties(0)['name'].decode())")
case "${STEP:-tests}" in
tests)
  python3 profiling/warm_cache.py 2>&1 | tail -1
  echo "# $GPU, $(date -I): pytest -q -m gpu tests/" > "$W/gpu_tests.log"
  timeout 420 python3 -m pytest -q -m gpu tests/ >> "$W/gpu_tests.log" 2>&1
  tail -1 "$W/gpu_tests.log"
  KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE CASES="g:1024,2048,8,16;g:2048,512,8,16;g:1024,2048,8,64;g:2048,512,8,64" \
      timeout 100 python3 profiling/wgmma_trace.py > "$W/wg_trace_grouped.log" 2>&1
  grep -v "^entry\|^exit" "$W/wg_trace_grouped.log" ;;
close)  # what the device time left allows: memcheck, the MoE table, dense k = 4 / 5 at M = 32..128
  python3 profiling/warm_cache.py 2>&1 | tail -1
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 python3 profiling/sanitize_driver.py > "$W/sanitize_driver_memcheck.txt" 2>&1
  echo "memcheck: exit $? ($(grep -c 'rel err' "$W/sanitize_driver_memcheck.txt") checks; $(grep -E 'BAD|ERROR SUMMARY' "$W/sanitize_driver_memcheck.txt" | tr '\n' ' '))"
  timeout 170 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 \
      --columns Grouped,g-WGMMA,Grouped+PDL --moe-layer --layer-T 1,8,32 --reps 15 --tag moe-final15 > "$W/bench_moe.log" 2>&1
  grep -E "^\| TOTAL|^\| [0-9]+ \| 4" "$W/bench_moe.log"
  timeout 200 python3 profiling/bench.py --out "$W" --M 32,64,128 --k 4,5 \
      --columns STREAM,WGMMA,dq+cuBLAS,matmul --reps 15 --tag final18 > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log" ;;
wgtune)  # the changed kernel's columns for the dispatch overlay (retune_tables.py "+wg-tune11")
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  timeout 400 python3 profiling/bench.py --out "$W" --M 16,24,32,48,64,128 --k 2,3,4,5 \
      --columns WGMMA,WGMMA+PDL --reps 15 --tag wg-tune11 > "$W/bench_wgtune.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_wgtune.log" ;;
moest)  # grouped wgmma pipeline depth (GROUPED_MAX_STAGES = 4 dates from before the swizzle), and the
         # re-tuned dense dispatch at M = 64 / 128, k = 4 / 5 (tag final18b) with the dispatch GPU tests
  python3 profiling/warm_cache.py wgmma grouped gemv_stream 2>&1 | tail -1
  MOE_GEMV=0 MOE_MMA=1 MS=16,32,64 ES=8,10 MOE_WG="wg:;st6:+stages=6;st8:+stages=8;ks2:+ks_div=2" \
      timeout 200 python3 profiling/moe_ab.py > "$W/moe_stages.log" 2>&1
  grep -E "^#|^TOTAL" "$W/moe_stages.log"
  timeout 120 python3 profiling/bench.py --out "$W" --M 64,128 --k 4,5 \
      --columns STREAM,WGMMA,dq+cuBLAS,matmul --reps 15 --tag final18b > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log"
  echo "# $GPU, $(date -I): pytest -q -m gpu tests/test_dispatch.py" > "$W/gpu_tests_dispatch.log"
  timeout 100 python3 -m pytest -q -m gpu tests/test_dispatch.py >> "$W/gpu_tests_dispatch.log" 2>&1
  tail -1 "$W/gpu_tests_dispatch.log" ;;
h100)  # the H100: wgmma tests, the WGMMA / WGMMA+PDL sweep (wg-tune11), dense k = 4 / 5 at M = 32..128
         # (final18) and the MoE table (moe-final15)
  python3 profiling/warm_cache.py 2>&1 | tail -1
  echo "# $GPU, $(date -I): pytest -q tests/test_wgmma_gpu.py tests/test_grouped_gpu.py -k wgmma" > "$W/gpu_tests_wgmma.log"
  timeout 150 python3 -m pytest -q tests/test_wgmma_gpu.py tests/test_grouped_gpu.py -k wgmma >> "$W/gpu_tests_wgmma.log" 2>&1
  tail -1 "$W/gpu_tests_wgmma.log"
  timeout 150 python3 profiling/bench.py --out "$W" --M 16,24,32,48,64,128 --k 2,3,4,5 \
      --columns WGMMA,WGMMA+PDL --reps 15 --tag wg-tune11 > "$W/bench_wgtune.log" 2>&1
  timeout 100 python3 profiling/bench.py --out "$W" --M 32,64,128 --k 4,5 \
      --columns STREAM,WGMMA,dq+cuBLAS,matmul --reps 15 --tag final18 > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log"
  timeout 120 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 \
      --columns Grouped,g-WGMMA,Grouped+PDL --reps 15 --tag moe-final15 > "$W/bench_moe.log" 2>&1
  grep -E "^\| TOTAL" "$W/bench_moe.log" ;;
esac
tar -czf "$OUT/run11_${STEP:-tests}.tgz" -C "$W" . && rm -rf "$W"
