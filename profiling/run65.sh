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
# guard_checks TAG TIMEOUT: the GPU tests around the guards (grouped / MoE helpers, the checks, the cached plans, PDL
# late writers of the MoE helpers, the layer) into gpu_tests_TAG.log, then memcheck over sanitize_moe.py into
# sanitize_moe_TAG.log; prints failures and the memcheck verdict.
guard_checks() {
  gpu_tests "$W/gpu_tests_$1.log" "$2" tests/test_grouped_gpu.py tests/test_checks_gpu.py tests/test_launch_gpu.py \
    tests/test_pdl_gpu.py tests/test_layers_gpu.py \
    -k "hand_made or gather_rows or combine or moe_forward_gpu or pair_route or torch_graph or checks or overlapping or launch or moe_gpu_vs or pdl_moe"
  grep -E "^E  |FAILED" "$W/gpu_tests_$1.log" | head -20
  timeout 110 compute-sanitizer --tool memcheck --error-exitcode 3 python3 profiling/sanitize_moe.py \
    > "$W/sanitize_moe_$1.log" 2>&1
  echo "memcheck: exit $?"; grep -E "ERROR SUMMARY|BAD|MISSING|NOT FINITE|hand-made" "$W/sanitize_moe_$1.log"
}
if [ "$STEP" = guards ]; then  # (as run: the two logs were gpu_tests_guards65.log / sanitize_moe65.log)
  guard_checks guards65 250
  TS=1,4 PASSES=1 timeout 70 python3 profiling/moe_route_ab.py > "$W/moe_route_ab65.log" 2>&1
  tail -8 "$W/moe_route_ab65.log"
  finish_run run65
fi
# Result (guards, H200, 8503e0c -- the first form, with the bound check inside kbit_moe_combine;
#   `nvidia-h200_2026-11-30_{gpu_tests_guards65,sanitize_moe65,moe_route_ab65}.log`): the 250 s pytest timeout ended
#   the tests after 43 of 64, none failing -- test_grouped_gpu's 31 (test_hand_made_routing_rows_guarded_gpu x 4,
#   gather, combine, moe_forward, pair route, torch graph) and test_checks_gpu's 6 (test_out_overlapping_an_input_
#   refused_gpu: the CPU test's cases on CuPy, matmul's cached plan, the low-level entry points, torch) passed; 12
#   launch tests, the PDL and layer tests did not run.  memcheck 0 errors, the three hand-made routing lines 'flag
#   raised, output finite', 20 checks right.  Layer step NOT within noise: T = 1 sorted 18.86 / pairs 17.07 us
#   (57th session 17.39 / 15.54), T = 4 48.49 / 45.77 (46.76 / 44.24) -- both arms ~1.5 us slower, and at T = 1 the
#   graph runs no gather kernel, so the combine.  Its SASS (nvdisasm here): the original kernel issues a batch's
#   row loads back to back; with the bound check each load sat in its own branch with its conversion before the
#   next (a dependent L2 round trip per choice); a clamped-address form kept the loads unconditional in source but
#   ptxas still serialized them through one register.  So the combine kernel is back to 8de8412's (SASS
#   byte-identical, checked here) and a hand-made routing's pos is guarded by CuPy ops before it (moe._guard_pos:
#   out-of-range entries read row 0 with weight 0, ERR_ROWS; routings moe_route / pair_route / moe_forward built
#   skip it).  That final form has NOT run on a GPU (no device time left).

# STEP=verify, then STEP=verifyab (nvidia-h200; NOT RUN -- for the next session): the final form on the GPU.
# verify: the guard tests and the ones the guards step's timeout cut (the same selection, 420 s), memcheck over
# sanitize_moe.py (the combine's guard now CuPy ops).  verifyab: the layer step of the previous tree (8de8412 in the
# ignored ab_prev/, carried: `git archive 8de8412 kbitcupy cuda_src profiling/moe_route_ab.py | tar -x -C ab_prev`)
# and this one, T = 1 and 4, old / new / old / new.
# Expect: tests pass; memcheck 0 errors, the three lines 'raised' / 'finite'; the two trees within ~1 % (the T = 1
#   graph runs byte-identical kernels: the gather kernel, the only one changed, is fused away there).
if [ "$STEP" = verify ]; then  # (two device calls: verify, then verifyab)
  guard_checks verify65 420
  finish_run run65
fi
if [ "$STEP" = verifyab ]; then
  for t in old new old new; do
    d=.; [ $t = old ] && d=ab_prev
    (cd $d && PYTHONPATH=$(pwd) KBITCUPY_CACHE_DIR=/tmp/kc_$t TS=1,4 PASSES=1 timeout 60 \
       python3 profiling/moe_route_ab.py > "$W/moe_route_ab65_$t.log" 2>&1)
    echo "$t: $(grep 'pass 0' "$W/moe_route_ab65_$t.log" | tr '\n' ' ')"
    cat "$W/moe_route_ab65_$t.log" >> "$W/moe_route_ab65_verify.log"
  done
  finish_run run65
fi
