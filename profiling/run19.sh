#!/usr/bin/env bash
# Eighteenth session's device run (prepared in the seventeenth, 2026-11-25, not yet run).
#   STEP=pf (needs profiling/patches/session17-safe-prefetch.patch applied: git am; and ab_prev = the tree
#     before it: git archive HEAD~1 kbitcupy cuda_src profiling | tar -x -C ab_prev --exclude=profiling/results,
#     carried): safe PDL (the default) with the first weight tiles prefetched into L2 before
#     griddepcontrol.wait (GEMV, streaming GEMV, wgmma).  (1) the PDL GPU tests (weights written by a kernel
#     right before each matmul, eager and in a poisoned graph: a stale read would fail them) and memcheck over
#     sanitize_driver.py; (2) same-run A/B against ab_prev, default launch mode in both: dense matmul at
#     M = 1 / 4, k = 2 / 4 / 5 and M = 16 / 32 / 64, k = 4.  Expected: about half of full PDL's gain over
#     safe (k = 4 TOTAL M = 1 22.1 -> 19.5-20.5 us: the first weights come from L2 after the wait instead of
#     DRAM), M = 16..64 -2..-5 %; matmul:plain unchanged.
#   STEP=h200 (on an H200): the tables in the new default (safe PDL) with matmul:plain and matmul+PDL beside
#     it, for the H200 dispatch re-tune and the closing numbers (H200 tables stale since the fourteenth session).
#   OUT=/tmp/out STEP=pf bash profiling/run19.sh
. profiling/run_env.sh
start_run pf
if [ "$STEP" = pf ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_pdl.log" 150 tests/test_pdl_gpu.py tests/test_pdl.py
  sanitize memcheck "$W/memcheck.txt" 120 profiling/sanitize_driver.py
  OUT=$W PREV_TREE=ab_prev AB_TAG=pf18 WARM="gemv gemv_stream wgmma" AB_TIMEOUT=120 \
      AB_ARGS="--M 1,4 --k 2,4,5 --columns matmul,matmul:plain --reps 15" bash profiling/tree_ab.sh 2>&1 | tail -10
  OUT=$W PREV_TREE=ab_prev AB_TAG=pf18b WARM="gemv_stream wgmma gemm" AB_TIMEOUT=100 \
      AB_ARGS="--M 16,32,64 --k 4 --columns matmul,matmul:plain --reps 15" bash profiling/tree_ab.sh 2>&1 | tail -8
fi
if [ "$STEP" = h200 ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma grouped quant dequant gemm 2>&1 | tail -1
  timeout 200 python3 profiling/bench.py --out "$W" --M 1,4,8,16 --k 2,3,4,5 \
      --columns GEMV,STREAM,WGMMA,matmul,matmul:plain,matmul+PDL --reps 15 --tag ${TAG:-h200-final23} > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log"
  timeout 120 python3 profiling/bench.py --out "$W" --M 32,64,128 --k 4 \
      --columns STREAM,WGMMA,dq+cuBLAS,matmul,matmul:plain,matmul+PDL --reps 15 --tag ${TAG:-h200-final23}b > "$W/bench_b.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_b.log"
  timeout 120 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 \
      --columns Grouped,Grouped:plain,Grouped+PDL --reps 15 --tag moe-${TAG:-h200-final23} > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | head -20
fi
tar -czf "$OUT/run19_$STEP.tgz" -C "$W" . && rm -rf "$W"
