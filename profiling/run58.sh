#!/usr/bin/env bash
# Fifty-first session (2026-11-29).  From the repo root:  OUT=/tmp/out STEP=c8 bash profiling/run58.sh  (carry .git_rev)
. profiling/run_env.sh
start_run c8
# STEP=c8: the decode GEMV's 8-column groups (plan c8) re-checked on the H200 at M = 1 / 2 / 4, k = 2 / 3 / 4, on the
#   seven dense shapes, both ways (c8=1 / c8=0 against the plan).  Why: the c8 rule (gemv.plan) was fitted on the H100
#   (nineteenth session, c8ab22); on the H200 only k = 4 M = 1 plans were re-checked (thirty-ninth session, `plans`).
#   m1k57 shows k = 3 gate/up at M = 1 slower than k = 4 (4.39 vs 4.25 us, 64 % of SOL) on 16-column groups: 320
#   groups are 2.4 an SM, so a third of the SMs carry a third group; the 640 8-column groups of k = 4 are 4.85 an SM.
# Expect: k = 3 gate/up M = 1 4.39 -> ~4.0-4.1 with c8 (k = 4's c8 gain on the H100 was -6 %); gate/up M = 2 / 4 at
#   k = 3 / 4 -3..-5 %; k = 2 (quad table), Q / linear value (256 groups, even already) and the 128-group shapes at
#   k = 2 equal or slower, as on the H100.  A cell >= 3 % faster in both passes changes the plan rule.
if [ "$STEP" = c8 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  AB_NOBASE=1 KS=2,3,4 MS=1,2,4 SHAPES=gateup,down,Q,O,KV,lin_key,lin_value AB_PLANS="c8:c8=1;n8:c8=0" CUT=220 \
    gemv_ab_twice c8_58 260
  finish_run run58
fi
# Result (c8, H200, `gemv_c8_58_{1,2}.log`, two passes): k = 3 gate/up M = 1 4.38 / 4.40 -> 4.17 / 4.19 us with c8,
#   M = 2 4.43 / 4.46 -> 4.26 / 4.28, M = 4 4.68 / 4.69 -> 4.78 / 4.72: kept (gemv.plan: gate/up-wide k = 3 at M <= 2).
#   Under the 3 % bar, both passes alike: k = 4 gate/up M = 2 4.61 / 4.66 -> 4.54 / 4.56, k = 4 linear key M = 1 2.72 ->
#   2.66; k = 3 down / O / linear key at M = 2 -1..-3 %.  k = 2: c8 slower everywhere (gate/up M = 1 3.44 -> 3.77), as
#   on the H100.  The 16-column alternative (n8) slower wherever the plan has c8 (KV 1.81 -> 2.07).
# STEP=knobs: the rest of the decode GEMV's plan knobs fitted on the H100 (accumulator chains, the late ring fill,
#   the safe-mode prefetch depth, warps) against the plan on the H200, k = 2 / 3 / 4, M = 1 / 2 / 4, seven shapes, two
#   passes.  The forced warps also switch off c8 (plan), so on c8 cells they compare 16-column forms.
# Expect: the plan within ~2 % of the best column in most cells (the thirty-ninth session found k = 4 M = 1 settled);
#   a knob >= 3 % faster in both passes over a family of cells (a k, an M, a group count) changes the rule.
if [ "$STEP" = knobs ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  AB_NOBASE=1 KS=2,3,4 MS=1,2,4 SHAPES=gateup,down,Q,O,KV,lin_key,lin_value CUT=260 \
    AB_PLANS="d0:dual=0;d1:dual=1;l0:late=0;l1:late=1;pf1:pf=1;pf2:pf=2;w4:warps=4;w8:warps=8;w16:warps=16" \
    gemv_ab_twice knobs58 280
  finish_run run58
fi
# Result (knobs, H200, `gemv_knobs58_{1,2}.log`, two passes; the plan of 7c24e2e, c8 at k = 3 gate/up included):
#   late = 1 on gate/up k = 4 M = 2 4.63 / 4.66 -> 4.41 / 4.41 us (-5 %), M = 4 4.80 / 4.78 -> 4.61 / 4.61 (-4 %): kept
#   (gemv.plan: the late fill at M = 2..4 whatever the blocks per SM; k = 3 M = 4 -0.6 / -1.9 %).  Under the 3 % bar,
#   both passes: the prefetch of one ring step (pf = 1) on down at M = 2..4, k = 3 / 4 (-2..-3 %; on the H100 the
#   other way, pf23da, and safe_prefetch_steps has no GPU argument), one accumulator chain (dual = 0) on down / O
#   at k = 2 (-1.6..-3 %), late on KV / linear key k = 2 M = 2 / 4 (-1.5..-2 %).  Forced warps (16-column forms) and
#   late = 0 slower everywhere; every other cell within 1.5 % of the plan.
# STEP=confirm: the two plan changes on the changed tree -- gate/up k = 3 / 4, M = 1 / 2 / 3 / 4 / 8 against late = 0 /
#   1 and c8 = 0 / 1 (two passes; M = 3 and 8 not measured before, M = 8 keeps late = 0); then issue 3's table (M = 1..4,
#   k = 2..5, matmul and matmul+PDL; m1k57's form) and the decode GEMV's GPU tests.
# Expect: gate/up k = 3 M = 1 ~4.18, k = 4 M = 2 ~4.41, M = 4 ~4.61 as the plan's own column; TOTAL k = 3 M = 1 17.09 ->
#   ~16.9 us (2.41x), k = 4 M = 2 / 4 -0.2 us; the GPU tests pass.
if [ "$STEP" = confirm ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  AB_NOBASE=1 KS=3,4 MS=1,2,3,4,8 SHAPES=gateup CUT=200 AB_PLANS="l0:late=0;l1:late=1;c0:c8=0;c1:c8=1" \
    gemv_ab_twice confirm58 120
  timeout 250 python3 profiling/bench.py --out "$W" --M 1,2,3,4 --k 2,3,4,5 --columns matmul,matmul+PDL --reps 15 \
    --tag m1k58 > "$W/bench_m1k58.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_m1k58.log"
  gpu_tests "$W/gpu_tests_gemv58.log" 280 tests/test_gemv_gpu.py tests/test_launch_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_gemv58.log" | head -10
  finish_run run58
fi
# Result (confirm, H200, `gemv_confirm58_{1,2}.log`, `m1k58`, `gpu_tests_gemv58.log`): as the plan's own column gate/up
#   k = 4 M = 2 / 3 / 4 4.41 / 4.49-4.53 / 4.60 us (late = 0: 4.65 / 4.73 / 4.80), k = 3 M = 1 4.22-4.25 (16 columns
#   4.42-4.45); M = 8 keeps late = 0 (late 5.65 vs 5.53).  But k = 3 M = 2: c8 4.54 / 4.57 against 16 columns with the
#   late fill 4.37 / 4.39 on this machine (c8's 4.26 / 4.28 in c8 / knobs was against 16 columns without it).  m1k58
#   (bench): TOTAL k = 3 M = 1 17.09 -> 16.88 us (2.42x), k = 4 M = 2 17.98 -> 17.66 (2.30x), M = 4 19.03 -> 18.77;
#   gate/up k = 4 M = 2 / 3 / 4 4.60 / 4.82 / 4.78 -> 4.33 / 4.55 / 4.56.  GEMV + launch GPU tests: 136 passed.
# STEP=k3m2: gate/up k = 3 M = 1 / 2 (and k = 4 M = 2) c8 against 16 columns with and without the late fill, three
#   passes, to settle k = 3 M = 2.
# Expect: if c8 wins k = 3 M = 2 only against the 16 columns without late (confirm's reading), c8 goes back to M = 1.
if [ "$STEP" = k3m2 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  for pass in 1 2 3; do
    AB_NOBASE=1 KS=3,4 MS=1,2 SHAPES=gateup AB_PLANS="c8:c8=1;n8l:c8=0,late=1;n8:c8=0,late=0" \
      timeout 100 python3 profiling/gemv_ab.py --out "$W" > "$W/gemv_k3m2_58_$pass.log" 2>&1
    grep -E "^gateup" "$W/gemv_k3m2_58_$pass.log" | cut -c1-160
  done
  finish_run run58
fi
# Result (k3m2, H200, `gemv_k3m2_58_{1,2,3}.log`, three passes): the gain at k = 3 is the late fill, not c8 -- gate/up
#   k = 3 M = 1 c8 4.23-4.24 us = 16 columns with late 4.22-4.25 (without 4.42-4.44); M = 2 c8 4.54-4.57, 16 columns with
#   late 4.37-4.38, without 4.50-4.52; k = 4 M = 1 c8 4.26-4.27 (late 16 columns 4.29-4.30), M = 2 late 16 columns
#   4.34-4.37 (c8 4.60-4.63).  So c8's rule is back as it was (k = 3 gate/up: 16 columns) and the late fill covers gate/up
#   at M = 1..4 (gemv.plan; test_late_fill_plan).
# STEP=final: the final plan rule -- issue 3's table (M = 1..4, k = 2..5, matmul and matmul+PDL; m1k57's form), the plan
#   against c8 / late = 0 on gate/up (one pass), the decode GEMV + launch GPU tests.
# Expect: TOTAL M = 1 k = 3 ~16.9 us (2.42x), k = 2 / 4 / 5 as m1k57; M = 2 k = 3 ~17.5, k = 4 ~17.7; tests pass.
if [ "$STEP" = final ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  timeout 250 python3 profiling/bench.py --out "$W" --M 1,2,3,4 --k 2,3,4,5 --columns matmul,matmul+PDL --reps 15 \
    --tag m1k58b > "$W/bench_m1k58b.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_m1k58b.log"
  AB_NOBASE=1 KS=3,4 MS=1,2,3,4 SHAPES=gateup AB_PLANS="c8:c8=1;l0:late=0" \
    timeout 100 python3 profiling/gemv_ab.py --out "$W" > "$W/gemv_final58.log" 2>&1
  grep -E "^gateup" "$W/gemv_final58.log" | cut -c1-160
  gpu_tests "$W/gpu_tests_gemv58b.log" 280 tests/test_gemv_gpu.py tests/test_launch_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_gemv58b.log" | head -10
  finish_run run58
fi
# Result (final, H200, `m1k58b`, `gemv_final58.log`, `gpu_tests_gemv58b.log`): TOTAL M = 1 k = 2 / 3 / 4 / 5 14.93 /
#   16.93 / 17.10 / 22.92 us = 2.74x / 2.42x / 2.39x / 1.79x (m1k57: 14.92 / 17.09 / 17.11 / 22.89); M = 2 k = 3 / 4 17.58 /
#   17.67 (17.77 / 17.98), M = 3 18.33 / 18.36 (18.58 / 18.72), M = 4 18.89 / 18.75 (19.07 / 19.03).  Gate/up: the plan
#   the fastest of plan / c8 / late = 0 in all eight cells (k = 3 M = 2 4.37 vs c8 4.54; k = 4 M = 3 4.55 vs late = 0
#   4.75).  GEMV + launch GPU tests 136 passed.
# STEP=knobs2: the same knob sweep at M = 6 / 8 / 12 / 16 (one and two token tiles; issue 4's M = 5..16, where the
#   dispatch runs the decode GEMV), k = 2 / 4, seven shapes, plus the slices' groups a block (gpb), two passes.
# Expect: the plan within ~2 % of the best column in most cells (the thirty-fifth / thirty-sixth sessions fitted
#   M = 9..16 on both GPUs); a knob >= 3 % faster in both passes over a family of cells changes the rule.
if [ "$STEP" = knobs2 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  AB_NOBASE=1 KS=2,4 MS=6,8,12,16 SHAPES=gateup,down,Q,O,KV,lin_key,lin_value CUT=300 \
    AB_PLANS="d0:dual=0;d1:dual=1;l0:late=0;l1:late=1;pf1:pf=1;pf2:pf=2;w4:warps=4;w8:warps=8;w16:warps=16;g1:gpb=1;g2:gpb=2;g3:gpb=3" \
    gemv_ab_twice knobs2_58 280
  finish_run run58
fi
# Result (knobs2, H200, `gemv_knobs2_58_{1,2}.log`): kept two changes.  (1) One ring step L2-prefetched before the wait
#   (pf = 1) at M <= 8 on the H200 but on gate/up-wide shapes (gemv.safe_prefetch_steps(..., family)): with knobs, every
#   cell where the plan prefetched the whole ring is -0.6..-3 % with one step (down k = 4 M = 2 4.37 / 4.39 -> 4.26 /
#   4.28 us; Q / O / linear value k = 4 M = 6 -2..-3 %, M = 8 -1.5..-2.4 %), none slower than +1.3 % (KV noise); gate/up
#   +3..+5 %, M = 12 / 16 slower.  (2) 8 warps (two steps each) for two token tiles on linear key (128 groups, 16 steps):
#   M = 16 k = 2 / 4 3.65 / 3.84 -> 3.49 / 3.67, M = 12 k = 4 3.64 -> 3.53; down +2..+4 %, O -1 %, one tile slower.
#   Under the bar: dual = 0 on O / down / linear key (-1.6..-2.7 %).
# STEP=final2: both changes checked -- issue 3's table again (m1k58c), the dense table at M = 6 / 8 / 12 / 16 (k = 2 /
#   4, matmul), the plans against the old choices (pf = 2, 16 warps) in one pass, and the GEMV / launch / PDL GPU tests.
# Expect: TOTAL k = 4 M = 2 17.67 -> ~17.55 us, M = 8 -0.2 us, linear key M = 16 -0.17 us; the old choices slower or
#   equal in every cell; tests pass.
if [ "$STEP" = final2 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  timeout 250 python3 profiling/bench.py --out "$W" --M 1,2,3,4 --k 2,3,4,5 --columns matmul,matmul+PDL --reps 15 \
    --tag m1k58c > "$W/bench_m1k58c.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_m1k58c.log"
  timeout 200 python3 profiling/bench.py --out "$W" --M 6,8,12,16 --k 2,4 --columns GEMV,matmul --reps 15 \
    --tag mid58 > "$W/bench_mid58.log" 2>&1
  grep -E "^### M|TOTAL|lin_key" "$W/bench_mid58.log"
  AB_NOBASE=1 KS=2,3,4 MS=2,4,6,8,12,16 SHAPES=down,Q,O,lin_key,lin_value AB_PLANS="pf2:pf=2;w16:warps=16" \
    timeout 150 python3 profiling/gemv_ab.py --out "$W" > "$W/gemv_final2_58.log" 2>&1
  grep -E "^TOTAL" "$W/gemv_final2_58.log"
  gpu_tests "$W/gpu_tests_gemv58c.log" 280 tests/test_gemv_gpu.py tests/test_launch_gpu.py tests/test_pdl_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_gemv58c.log" | head -10
  finish_run run58
fi
# Result (final2, H200, `m1k58c`, `mid58`, `gemv_final2_58.log`, `gpu_tests_gemv58c.log`): TOTAL k = 4 M = 1 / 2 / 3 / 4
#   17.02 / 17.48 / 18.22 / 18.65 us = 2.40x / 2.32x / 2.22x / 2.17x (m1k57: 17.11 / 17.98 / 18.72 / 19.03); k = 3 M = 1
#   16.83 (2.42x), k = 2 14.82 (2.75x); M = 8 k = 4 22.03 (allm57 22.35), M = 16 25.26 (25.31); linear key M = 12 / 16
#   k = 4 3.48 / 3.64 (knobs2 3.64 / 3.85).  The old choices (pf = 2; 16 warps) slower or equal in every cell of
#   gemv_final2 (TOTAL of down + Q + O k = 4 M = 2 11.48 vs 11.89).  GEMV + launch + PDL GPU tests: 227 passed.
# STEP=gshare: the grouped decode GEMV where an SM's share of all slots' groups is 2 (moe gate/up 5..8 experts, gate/up
#   fused 3..4, down 2): gplan57 found moe_gu at 8 experts, 1 token, stable ids 4.23 -> 3.93 us with the dense plan's
#   shape (one group a block, 8 warps, 256 blocks two an SM) against the plan's 2 x 8 warps (128 blocks one an SM), and
#   left it.  Here the same form (default and stable launch) at 1 / 2 / 4 tokens, 2..8 experts, one pass.
# Expect: g1w8 -5..-8 % wherever the share is 2 and the grid is one wave at two blocks an SM; slower where the share
#   is 3 or more (gplan57).  A consistent gain over the share-2 cells changes grouped_plan.
if [ "$STEP" = gshare ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  SHAPES=moe_gu,moe_gu_fused,moe_dn ES=2,4,6,8 MS=1,2,4 KS=4 MOE_MMA=0 \
    MOE_VARIANTS="g1w8:+gpb=1 +warps=8;st:+stable=1;g1w8st:+gpb=1 +warps=8 +stable=1" \
    timeout 400 python3 profiling/moe_ab.py --out "$W" > "$W/moe_gshare58.log" 2>&1
  grep -vE "^\s*$" "$W/moe_gshare58.log" | cut -c1-200 | tail -50
  finish_run run58
fi
# Result (gshare, H200, `moe_gshare58.log`, one pass): the dense plan's shape (one group a block, 8 warps) gains only
#   with stable ids and only on gate/up-like banks (K of 16 steps): moe_gu 6 / 8 experts 3.97 / 4.25 -> 3.62 / 3.93 us,
#   gate/up fused 4 experts 4.27 -> 3.97, 2..4 experts -3..-5 %; in the default launch (ids read after the wait, as
#   moe_forward's gate/up runs) within +-1 %; on down (K of 4 steps: 8 warps for 4 steps) +19 % at 2 experts, and 1.5-2.7x
#   slower wherever the share is 3 or more.  moe_forward's own calls would not gain (its stable call is down), so
#   grouped_plan is unchanged; noted.
# STEP=suite: the GPU tests that run the decode GEMV's default plans through matmul and were not in final2 (checks,
#   layers, torch ops, bench) on the final tree.
if [ "$STEP" = suite ]; then
  python3 profiling/warm_cache.py gemv quant grouped 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_suite58.log" 330 tests/test_checks_gpu.py tests/test_layers_gpu.py tests/test_torch_ops.py \
    tests/test_bench.py --durations=5
  grep -E "^E  |FAILED" "$W/gpu_tests_suite58.log" | head -10
  finish_run run58
fi
# Result (suite, H200, `gpu_tests_suite58.log`): 34 passed (checks, layers, torch ops, bench smoke).
# STEP=h100 (prepared; no H100 was lent this session): the three plan changes on the H100, where the late fill's rule
#   came from (plans22, an older kernel: gate/up k = 3 / 4 at M = 1 slower with it).  The plan against late = 0 on gate/up
#   (k = 3 / 4, M = 1..4), the H100 keeping the ring prefetch on down at M = 2..8 against pf = 1 (safe_prefetch_steps is
#   H200-only there), linear key at two tiles against 16 warps; two passes.
# Expect: if late = 0 is >= 3 % faster on the H100 in both passes, the late rule takes a GPU family as the prefetch does.
if [ "$STEP" = h100 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  AB_NOBASE=1 KS=3,4 MS=1,2,3,4,6,8,12,16 SHAPES=gateup,down,Q,O,lin_key CUT=220 \
    AB_PLANS="l0:late=0;pf1:pf=1;pf2:pf=2;w16:warps=16" gemv_ab_twice h100_58 280
  finish_run run58
fi
# STEP=gpf: the grouped decode GEMV's stable-mode L2 prefetch before the wait (KBIT_GROUPED_PF_STEPS, one ring step
#   since the H100's stable23b) re-checked on the H200 -- the dense kernel's gate/up-wide shapes prefer the whole ring
#   there (knobs).  moe_forward runs down in this mode at decode sizes.  none / one step / the ring, stable ids, 8 / 10
#   experts, 1 / 4 tokens, two passes.
# Expect: within ~2 % (the H100's 10.48 -> 10.30 us); a form >= 3 % faster in both passes on down changes the default.
if [ "$STEP" = gpf ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  SHAPES=moe_gu_fused,moe_dn ES=8,10 MS=1,4 KS=4 MOE_MMA=0 CUT=160 \
    MOE_VARIANTS="st:+stable=1;st_pf0:-DKBIT_GROUPED_PF_STEPS=0 +stable=1;st_pf2:-DKBIT_GROUPED_PF_STEPS=2 +stable=1" \
    moe_ab_twice gpf58 200
  finish_run run58
fi
# Result (gpf, H200, `moe_gpf58_{1,2}.log`): the one-step prefetch stands.  Stable ids, down 8 / 10 experts 1 token: one
#   step 3.91-3.92 / 4.51-4.52 us, none 3.90-3.91 / 4.51, the ring 4.08 / 4.62-4.63; gate/up fused alike (the ring
#   +0.1 us, none within +-0.1).  No change.
