#!/usr/bin/env bash
# Forty-fourth session (2026-11-29).  From the repo root:  OUT=/tmp/out STEP=comb bash profiling/run51.sh
# (carry .git_rev and ab_prev/: ab_prev/tree = 6117fa0's kbitcupy / cuda_src / profiling, the tree before this session)
. profiling/run_env.sh
start_run comb
# STEP=comb: the MoE layer step's weighted combine fused into down's grouped GEMV where SwiGLU is (AMODE 3: the last
#   CTA of each column range sums the topk rows, moe_combine_sum; float32 weights).  The T = 1 layer step was 15.5-15.7
#   us of steps in the default launch against 10.9 us for moe_pair.py's gate/up -> down chain alone (close2): the
#   combine kernel and its two grid boundaries ~4.6 us.  Plus: the plan for T = 8 (74 slots planned for 8 rows, mean 1.1:
#   down's SwiGLU not fused there, 32 evaluations a thread) at KBIT_MOE_PLAN_TOKENS = 2 / 4.
# Expect: tests pass (the fused combine bit-identical to the kernel); layer step kbit steps T = 1 15.5 -> ~13 us
#   (one boundary and the combine's own ~1 us of L2 round trips gone, the tail's ~1 us added), T = 2 / 4 alike;
#   T = 8 unchanged by default (no fusion there); planned for 2 / 4 rows: smaller smem, SwiGLU + combine fused,
#   maybe -5..-10 %, or slower where an expert's third row costs a second pass.
if [ "$STEP" = comb ]; then
  gpu_tests "$W/gpu_tests_comb51.log" 300 tests/test_grouped_gpu.py \
    -k "combine or fused_gemv_matches or two_tile or gather_fused_only or moe_forward_gpu or graph_capture"
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_comb51.log" | head -20
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m pytest -q -m gpu tests/test_grouped_gpu.py \
    -k "combine_forms and 4" > "$W/memcheck_comb51.log" 2>&1
  echo "memcheck: exit $? $(grep -E 'ERROR SUMMARY|passed|failed' "$W/memcheck_comb51.log" | tr '\n' ' ')"
  WARM=none AB_TIMEOUT=200 ab_trees layer51 none --shapes none --moe-layer --k 4 --layer-T 1,2,4,8 --reps 15
  for v in new old; do echo "== layer $v"; grep -E "^\| [0-9]+ \| 4 " "$W/layer51_$v.log"; done
  for pt in 2 4; do
    KBIT_MOE_PLAN_TOKENS=$pt timeout 120 python3 profiling/bench.py --out "$W" --shapes none --moe-layer --k 4 \
      --layer-T 8 --reps 15 --tag layer51-pt$pt > "$W/bench_layer51_pt$pt.log" 2>&1
    echo "== planned for $pt"; grep -E "^\| [0-9]+ \| 4 " "$W/bench_layer51_pt$pt.log"
  done
  finish_run run51
fi
# Result (comb, H200, git eaa5160, `nvidia-h200_2026-11-29_{layer51-new,layer51-old,layer51-pt2,layer51-pt4}.md`,
#   `..._gpu_tests_comb51.log`, `..._memcheck_comb51.log`): correct -- 52 GPU tests passed (the fused combine
#   bit-identical to the kernel in every block form and PDL mode, Qwen shapes k = 2..5, graph capture), memcheck clean --
#   but not faster.  Layer step k = 4 (new / old, us): T = 1 steps 17.61 / 17.52, steps+PDL 15.74 / 15.60, moe_forward
#   (safe PDL) 18.36 / 18.60; T = 2 29.29 / 29.34; T = 4 47.43 / 45.17 (+2.3 us: 40 slots, the last CTA of each column
#   range sums 4 tokens x 10 choices in dependent L2 round trips at the grid's end, where the combine kernel spreads
#   them over the GPU); T = 8 equal (no fusion there).  The combine kernel's cost was not its launch (PDL already
#   overlaps that) but its L2 round trips, which the tail pays too.  Not kept (profiling/patches/session44-moe-combine-
#   fused.patch).  The premise was wrong as well: moe_pair's 10-expert chain is 12.97 us (not 10.9, the 8-expert one),
#   so the combine and its boundary were ~2.7 us of the T = 1 step, not 4.6.  Planned for 2 / 4 rows at T = 8
#   (KBIT_MOE_PLAN_TOKENS): steps 81.31 / 81.25 us against 74.49 planned for 8 (+9 %): the default stays.
# STEP=suite1 / suite2: the GPU test files the forty-first to forty-third sessions' Python touched (grouped plans,
#   chained wgmma calls, the fusions by size, the review refactor), whole, on this tree (kernels byte-identical to
#   7e1f65b): suite1 test_grouped_gpu.py; suite2 test_pdl_gpu.py, test_layers_gpu.py, test_checks_gpu.py,
#   test_launch_gpu.py.  --durations: the slowest tests, for splitting later calls.
# Expect: all pass.
if [ "$STEP" = suite1 ]; then
  gpu_tests "$W/gpu_tests_suite51a.log" 560 tests/test_grouped_gpu.py --durations=12
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_suite51a.log" | head -20
  finish_run run51
fi
if [ "$STEP" = suite2 ]; then
  gpu_tests "$W/gpu_tests_suite51b.log" 560 tests/test_pdl_gpu.py tests/test_layers_gpu.py tests/test_checks_gpu.py \
    tests/test_launch_gpu.py --durations=12
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_suite51b.log" | head -20
  finish_run run51
fi
# STEP=suite3 / suite4 (run as inline commands of the same form): the remaining GPU test files.
if [ "$STEP" = suite3 ]; then
  gpu_tests "$W/gpu_tests_suite51c.log" 470 tests/test_gemv_gpu.py tests/test_gemm_gpu.py tests/test_quantize_gpu.py \
    tests/test_gemv_stream_gpu.py --durations=8
  finish_run run51
fi
if [ "$STEP" = suite4 ]; then
  gpu_tests "$W/gpu_tests_suite51d.log" 400 tests/test_wgmma_gpu.py --durations=8
  finish_run run51
fi
# Result (suite1..4, H200, git 5e3c28a = 6117fa0's code, `nvidia-h200_2026-11-29_gpu_tests_suite51{a,b,c,d}.log`): the
#   whole GPU suite passed in four calls: 168 (grouped, 322 s), 133 (PDL, layers, checks, launch, 324 s), 262 (GEMV,
#   GEMM, quantize, streaming GEMV, 100 s), 36 (wgmma, 91 s) -- 599 tests.  Slowest single test 20 s
#   (test_grouped_gemv_slices[5]).
# STEP=route: the one-warp routing (kbit_moe_route_warp) for P <= 32 choices -- decode steps of 1..3 tokens at
#   top-10 -- instead of the one-block counting sort, whose 512-expert zeroing and scan (eight Hillis-Steele rounds of
#   two barriers) are most of its time at 10 choices (moe_route alone 2.62 us a call in layer50h).
# Expect: the arrays bit-identical to the block kernel (test); moe_route T = 1..3 2.6-2.7 -> ~1.8-2.0 us, moe_forward
#   lower by as much; the steps (routing precomputed) unchanged.
if [ "$STEP" = route ]; then
  gpu_tests "$W/gpu_tests_route51.log" 110 tests/test_grouped_gpu.py -k "route or moe_forward_gpu"
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_route51.log" | head -20
  WARM=none AB_TIMEOUT=90 ab_trees layer51r none --shapes none --moe-layer --k 4 --layer-T 1,2,3 --reps 15
  for v in new old; do echo "== layer $v"; grep -E "^\| [0-9]+ \| 4 " "$W/layer51r_$v.log"; done
  finish_run run51
fi
# Result (route, H200, git eca61e0, `nvidia-h200_2026-11-29_layer51r-{new,old}.md`, `..._gpu_tests_route51.log`): 11 GPU
#   tests passed (the warp kernel's arrays bit-identical to the block kernel's in 3 PDL modes x 8 sizes x distinct /
#   repeated / bad ids, and the reference's; moe_forward).  moe_route alone T = 1 / 2 / 3: 2.61 / 2.89 / 2.79 -> 1.75 /
#   2.12 / 2.15 us; moe_forward (k = 4, default launch) 18.41 / 30.42 / 38.43 -> 17.43 / 29.74 / 37.66 us (-5.3 / -2.2 /
#   -2.0 %); the steps with the routing given unchanged (17.46 / 29.05 / 35.98 vs 17.50 / 29.03 / 35.97).  Kept.
# STEP=route2: the review's fix of test_moe_route_warp_matches_block_kernel (it had read the patched module constant
#   back, so after its first case it compared the block kernel with itself), and moe_route's one launch for both
#   single-block kernels.
if [ "$STEP" = route2 ]; then
  gpu_tests "$W/gpu_tests_route51b.log" 150 tests/test_grouped_gpu.py -k "route or moe_forward_gpu or fused_gemv_matches"
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_route51b.log" | head -20
  finish_run run51
fi
# Result (route2, H200, git 232f38c, `nvidia-h200_2026-11-29_gpu_tests_route51b.log`): 17 passed -- the warp routing
#   now bit-identical to the block kernel in every case and mode for real, and the fused moe_forward tests at <= 32
#   choices on the new routing.
