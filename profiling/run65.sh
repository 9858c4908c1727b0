#!/bin/bash
# Fifty-eighth session (2026-11-30): row guards for hand-made MoE routings, out= aliasing refused.
# Usage on the GPU machine: STEP=<step> bash profiling/run65.sh   (results under $OUT/work)
cd "$(dirname "$0")/.." || exit 1
source profiling/run_env.sh
start_run guards

# STEP=guards (nvidia-h200): kbit_gather_rows / kbit_moe_combine check their row indices (an index outside x /
# C_sorted: zeros / nothing added, the new ERR_ROWS flag; a hand-made MoeRouting used to read out of bounds), moe_forward
# takes hand-made routings through the gather kernel (routings it built keep the fused gather), host routings are
# checked before use; out= overlapping an input is refused by every entry point (matmul's cached plan included).
# GPU tests around the change (grouped / MoE helpers, the checks, the cached plans, PDL late writers of the MoE
# helpers, the layer), memcheck over profiling/sanitize_moe.py (now with routing rows outside both ways), then
# moe_forward per layer step (profiling/moe_route_ab.py, T = 1 / 4, one pass) for the combine's added compare.
# Expect: tests pass; memcheck 0 errors, the three ERR_ROWS lines 'raised' / 'finite'; layer step within noise of
#   the fifty-seventh session's (pairs T = 1 15.54 us, T = 4 44.24; sorted 17.39 / 46.76): one compare and select per
#   choice in a latency-bound kernel, nothing measurable.
if [ "$STEP" = guards ]; then
  gpu_tests "$W/gpu_tests_guards65.log" 250 tests/test_grouped_gpu.py tests/test_checks_gpu.py tests/test_launch_gpu.py \
    tests/test_pdl_gpu.py tests/test_layers_gpu.py \
    -k "hand_made or gather_rows or combine or moe_forward_gpu or pair_route or torch_graph or checks or overlapping or launch or moe_gpu_vs or pdl_moe"
  grep -E "^E  |FAILED" "$W/gpu_tests_guards65.log" | head -20
  timeout 110 compute-sanitizer --tool memcheck --error-exitcode 3 python3 profiling/sanitize_moe.py \
    > "$W/sanitize_moe65.log" 2>&1
  echo "memcheck: exit $?"; grep -E "ERROR SUMMARY|BAD|MISSING|NOT FINITE|hand-made" "$W/sanitize_moe65.log"
  TS=1,4 PASSES=1 timeout 70 python3 profiling/moe_route_ab.py > "$W/moe_route_ab65.log" 2>&1
  tail -8 "$W/moe_route_ab65.log"
  finish_run run65
fi

# STEP=ab (nvidia-h200): the guards step measured the layer step 1.5 us slower in BOTH arms than the fifty-seventh
# session (T = 1 pairs 15.54 -> 17.07, sorted 17.39 -> 18.86; another machine, one pass).  Same-process-kind A/B: the
# previous tree (8de8412, in the ignored ab_prev/, carried) and this one, with the combine's flag now raised once after
# its loads (the first version had the atomic between the batched loads), T = 1, old / new / old / new.
# Expect: within ~2 % of each other if the guard costs nothing; else the combine's flag placement is the cause.
if [ "$STEP" = ab ]; then
  for t in old new old new; do
    d=.; [ $t = old ] && d=ab_prev
    (cd $d && PYTHONPATH=$(pwd) KBITCUPY_CACHE_DIR=/tmp/kc_$t TS=1 PASSES=1 REPS=${REPS:-15} timeout 60 \
       python3 profiling/moe_route_ab.py > "$W/moe_route_ab65_$t.log" 2>&1)
    echo "$t: $(grep 'pass 0' "$W/moe_route_ab65_$t.log")"; cat "$W/moe_route_ab65_$t.log" >> "$W/moe_route_ab65_ab.log"
  done
  finish_run run65
fi
