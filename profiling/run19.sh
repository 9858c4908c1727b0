#!/usr/bin/env bash
# Eighteenth session's device run (prepared in the seventeenth, 2026-11-25, not yet run).
#   STEP=pf: the decode GEMV's safe-PDL L2 prefetch (kept in the seventeenth session on one A/B, pf18m: k = 4
#     M = 1 TOTAL 22.26 -> 20.53 us; the whole series with the streaming GEMV / wgmma parts is
#     profiling/patches/session17-safe-prefetch.patch): the GEMV and PDL GPU tests, memcheck over
#     sanitize_driver.py, then the M = 1 / 4 tables for every k (matmul, matmul:plain, matmul+PDL).
#   STEP=et (needs profiling/patches/session17-gemv-early-table.patch applied: git am; ab_prev = the tree before
#     it, git archive HEAD~1 kbitcupy cuda_src profiling | tar -x -C ab_prev --exclude=profiling/results, carried):
#     safe PDL with the default codebook builds the GEMV's pair table before the wait too.  The PDL GPU tests,
#     then the A/B at M = 1 / 4, every k (matmul; matmul:plain as the control, which must not move).
#     Expected: k = 5 gate/up / Q / linear value (64 KB tables, ~1.5 us on gate/up) -0.5..-1.5 us each, k = 2..4
#     -0.05..-0.2 us per shape.
#   STEP=h200 (on an H200): the tables in the new default (safe PDL) with matmul:plain and matmul+PDL beside
#     it, for the H200 dispatch re-tune and the closing numbers (H200 tables stale since the fourteenth session).
#   OUT=/tmp/out STEP=pf bash profiling/run19.sh
. profiling/run_env.sh
start_run pf
if [ "$STEP" = pf ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_gemv.log" 200 tests/test_gemv_gpu.py tests/test_pdl_gpu.py tests/test_pdl.py
  sanitize memcheck "$W/memcheck.txt" 120 profiling/sanitize_driver.py
  timeout 150 python3 profiling/bench.py --out "$W" --M 1,4 --k 2,3,4,5 --columns matmul,matmul:plain,matmul+PDL \
      --reps 15 --tag final24-m1 > "$W/bench_m1.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_m1.log"
fi
if [ "$STEP" = et ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_pdl.log" 150 tests/test_pdl_gpu.py tests/test_gemv_gpu.py -k "safe or codebook"
  OUT=$W PREV_TREE=ab_prev AB_TAG=et18 WARM=gemv AB_TIMEOUT=150 \
      AB_ARGS="--M 1,4 --k 2,3,4,5 --columns matmul,matmul:plain --reps 15" bash profiling/tree_ab.sh 2>&1 | tail -12
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
