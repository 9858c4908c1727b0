#!/usr/bin/env bash
# Prepared at the end of the fifteenth session (no device time left to run it): what that session
# could not measure.
#   STEP=verify: the clustered launch's shared-memory cap (07f2adc) timed: same-run A/B of the WGMMA
#     column, M = 16 / 32, k = 2..5, every dense shape, and the grouped wgmma at 16..64 tokens, against
#     84d9c7a (ab_prev = git archive 84d9c7a kbitcupy cuda_src profiling | tar -x -C ab_prev, without
#     profiling/results; carried).  Expected: Q / linear value / gate/up at M = 16, k = 2 / 3 back to their
#     92d331c times (8.2-8.6 us against 9.5-10.0), every other cell unchanged (the k = 4 / 5 kernels and the
#     grouped ones launch as before).  Then the wgmma + grouped GPU tests.  ~5 min.
#   STEP=suite: the whole GPU suite (it took more than 330 s in the fifteenth session) and memcheck over
#     sanitize_driver.py and sanitize_cluster.py.  ~8 min.
#   STEP=h200 (on an H200): dense M = 1..16 and 32..128 tables with matmul, and the MoE table, for the H200
#     dispatch re-tune (stale since the fourteenth session); TAG default h200-final22.
#   OUT=/tmp/out STEP=verify bash profiling/run16.sh
. profiling/run_env.sh
start_run verify
if [ "$STEP" = verify ]; then
  OUT=$W PREV_TREE=ab_prev AB_TAG=capab16 WARM=wgmma AB_TIMEOUT=150 \
      AB_ARGS="--M 16,32 --k 2,3,4,5 --columns WGMMA --reps 15" bash profiling/tree_ab.sh 2>&1 | tail -12
  OUT=$W PREV_TREE=ab_prev AB_TAG=capmoe16 WARM=wgmma AB_TIMEOUT=150 \
      AB_ARGS="--shapes moe --k 2,4 --moe-M 16,32,64 --columns g-WGMMA --reps 15" bash profiling/tree_ab.sh 2>&1 | tail -8
  gpu_tests "$W/gpu_tests.log" 200 tests/test_wgmma_gpu.py tests/test_grouped_gpu.py -k wgmma
fi
if [ "$STEP" = suite ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests.log" 560 tests/
  memcheck "$W/memcheck.txt"
  timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 python3 profiling/sanitize_cluster.py > "$W/memcheck_cluster.txt" 2>&1
  echo "memcheck (cluster): exit $? $(grep -E 'ERROR SUMMARY|BAD' $W/memcheck_cluster.txt | tr '\n' ' ')"
fi
if [ "$STEP" = h200 ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma grouped quant 2>&1 | tail -1
  timeout 250 python3 profiling/bench.py --out "$W" --M 1,2,4,8,16 --k 2,3,4,5 \
      --columns GEMV,STREAM,WGMMA,matmul,matmul+PDL --reps 15 --tag ${TAG:-h200-final22} > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log"
  timeout 150 python3 profiling/bench.py --out "$W" --M 32,64,128 --k 4,5 \
      --columns STREAM,WGMMA,dq+cuBLAS,matmul,matmul+PDL --reps 15 --tag ${TAG:-h200-final22}b > "$W/bench_b.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_b.log"
  timeout 150 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 \
      --columns Grouped,g-WGMMA,Grouped+PDL --reps 15 --tag moe-${TAG:-h200-final22} > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | head -20
fi
tar -czf "$OUT/run16_$STEP.tgz" -C "$W" . && rm -rf "$W"
