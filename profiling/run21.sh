#!/usr/bin/env bash
# Eighteenth session, second device run (2026-11-25): the loads hoisted above griddepcontrol.wait.
#   STEP=late: the late-writer tests (a kernel that lets its dependents launch at once and writes their
#     ids / weights ~60 us later) on this tree, the kbit_gemm and mma grouped GPU tests (their wait-first
#     loads now ld_after_wait), then the same late-writer tests on ab_old (7f09f61, before the fix; carried:
#     git archive 7f09f61 kbitcupy cuda_src tests | tar -x -C ab_old, with this tree's test_pdl_gpu.py),
#     where the grouped GEMV / mma cases are expected to fail.
#   OUT=/tmp/out STEP=late bash profiling/run21.sh
. profiling/run_env.sh
start_run late
if [ "$STEP" = late ]; then
  python3 profiling/warm_cache.py gemv grouped gemm gemv_stream quant wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_late.log" 150 tests/test_pdl_gpu.py -k "late_writer"
  gpu_tests "$W/gpu_tests_gemm.log" 200 tests/test_gemm_gpu.py tests/test_grouped_gpu.py -k "gemm or mma or uneven or tokens_per_expert"
  (cd ab_old && export PYTHONPATH=$(pwd) KBITCUPY_CACHE_DIR=/tmp/kbit_cache_old && \
     echo "# $GPU, $(date -I): 7f09f61 + this tree's test_pdl_gpu.py: pytest -q -m gpu tests/test_pdl_gpu.py -k late_writer" > "$W/gpu_tests_late_old.log" && \
     timeout 150 python3 -m pytest -q -m gpu tests/test_pdl_gpu.py -k late_writer >> "$W/gpu_tests_late_old.log" 2>&1; \
     grep -E "passed|failed|FAILED" "$W/gpu_tests_late_old.log" | tail -8)
fi
# STEP=final: the closing dense (M = 16..128, k = 4) and MoE (1..64 tokens) tables on this tree (the mma grouped
#   kernel, which serves MoE down at 9..16 tokens, and kbit_gemm changed after final24), tag final25.
if [ "${STEP:-}" = final ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  final_tables final25
fi
# STEP=plans: the decode GEMV's plan overrides in the default launch (safe PDL with the L2 prefetch and the
#   early pair table, which the plan rule was not tuned with): warps 4 / 16, late / dual on / off, two groups
#   per block; k = 2 / 4 / 5, M = 1 / 4, the five block shapes.
if [ "${STEP:-}" = plans ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  P="w4:warps=4;w16:warps=16;l0:late=0;l1:late=1;d0:dual=0;d1:dual=1;g2:gpb=2"
  AB_PLANS="$P" KS=2,4,5 MS=1,4 SHAPES=gateup,down,Q,O,KV timeout 240 python3 profiling/gemv_ab.py --out "$W" > "$W/plans21.log" 2>&1
  grep -v "^#" "$W/plans21.log" | tail -40
fi
# STEP=dual: the GEMV plan's second accumulator chain at k <= 3 where two blocks per SM hold every group
#   (plans21: k = 2 Q 3.82 -> 3.31 us): the GEMV GPU tests, the A/B at k = 2 / 3 on Q and linear value
#   (new = the rule, d0 / d1 forced), then the closing M = 1 / 4 table, every k (final25-m1).
if [ "${STEP:-}" = dual ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_dual.log" 150 tests/test_gemv_gpu.py
  AB_PLANS="d0:dual=0;d1:dual=1" KS=2,3,4 MS=1,2,4 SHAPES=Q,lin_value timeout 100 python3 profiling/gemv_ab.py --out "$W" > "$W/dual21.log" 2>&1
  grep -v "^#" "$W/dual21.log" | tail -24
  timeout 150 python3 profiling/bench.py --out "$W" --M 1,4 --k 2,3,4,5 --columns matmul,matmul:plain,matmul+PDL \
      --reps 15 --tag final25-m1 > "$W/bench_m1.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_m1.log"
fi
# STEP=plans2: the plan's late / dual choices on the other shapes at M = 1 / 2 / 4, k = 2..4, twice (replicate):
#   plans21 hinted at late=1 on k = 2 gate/up (-0.1 us) and dual=0 on k = 2 O at M = 4 (-0.2).
if [ "${STEP:-}" = plans2 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  for r in a b; do
    AB_PLANS="l1:late=1;d0:dual=0;d0l1:dual=0,late=1" KS=2,3,4 MS=1,2,4 SHAPES=gateup,down,O,KV \
        timeout 120 python3 profiling/gemv_ab.py > "$W/plans22$r.log" 2>&1
    grep "^TOTAL" "$W/plans22$r.log"
  done
fi
# STEP=dual2: the k = 2 plan rule from plans22 (dual off in 512-thread blocks, late on): GEMV GPU tests and the
#   closing M = 1 / 4 table, every k (final26-m1).
if [ "${STEP:-}" = dual2 ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_dual2.log" 150 tests/test_gemv_gpu.py tests/test_pdl_gpu.py
  timeout 150 python3 profiling/bench.py --out "$W" --M 1,4 --k 2,3,4,5 --columns matmul,matmul:plain,matmul+PDL \
      --reps 15 --tag final26-m1 > "$W/bench_m1.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_m1.log"
fi
# STEP=icache: why the grouped GEMV with the default codebook compiled in (CBD) was slower at k = 4, plain
#   launches too (fix20).  Hypothesis: instruction fetch -- the CBD kernel's plain path jumps over its
#   early table build (~2.4 KB of code) at entry, with the instructions cold after the L2 rotation.  Three
#   trees, MoE k = 4 at 1 / 4 tokens: . (k = 4 loads the codebook), ab_b (CBD at every k, build inline),
#   ab_c (ab_b with the early build out of line, __noinline__).  If ab_c matches . and ab_b is slower, the
#   prologue's code layout matters.  Trees (git-ignored, carried): ab_b = this tree with
#   profiling/patches/session18-icache.patch's gemv.py hunk (GROUPED_CBD_KS = (2, 3, 4, 5)), ab_c = ab_b plus its
#   kbit_gemv.cu hunk (tar -c --exclude=profiling/results kbitcupy cuda_src profiling | tar -x -C ab_b; patch -p1).
#   Not run in the eighteenth session (its device time was spent).
if [ "${STEP:-}" = icache ]; then
  for t in main:. ab_b:ab_b ab_c:ab_c; do
    WARM="gemv grouped" AB_TIMEOUT=60 tree_bench ${t#*:} ${t%%:*} "$W" ic --shapes moe --k 4 --moe-M 1,4 \
        --columns Grouped,Grouped:plain --reps 15
    echo "== ${t%%:*}"; grep -E "^\| (moe_dn|moe_gu_fused|TOTAL) " "$W/ic_${t%%:*}.log"
  done
fi
finish_run run21
