#!/usr/bin/env bash
# Thirty-first session (2026-11-27).  From the repo root:  OUT=/tmp/out STEP=ps bash profiling/run38.sh
#   (kind nvidia-h100-x1)
. profiling/run_env.sh
start_run ps
RUN=38
# close_checks NAME TABLE: the dense GEMV's GPU tests (gpu_tests_NAME.log), memcheck over sanitize_c8.py
# (memcheck_c8_NAME.log) and the closing M = 1 / 4 tables TABLE-m1 and TABLEb-m1.
close_checks() {
  dense_checks "$1" "c8_$1" 150 120
  m1_table "$2"
  m1_table "$2b"
}
# STEP=ps: the decode GEMV's per-step work (issue 3: k = 2 M = 1 TOTAL needs -0.44 us of 16.08; gate/up / down at
#   70 / 73 % of SOL at k = 2, 81 / 84 % at k = 4).  At k = 2 a step's compute is the same per weight as at k = 4
#   while its bytes are half, and a second accumulator chain had bought k = 2 Q 13 % (eighteenth session): the
#   lookup -> HMUL2 -> MMA chain, not DRAM, is the longer part there.  Two hooks (kbit_gemv.cu, block_mma):
#   - ps (-DKBIT_GEMV_PS=1): the block scales after the MMA (per step fresh fp32 partial sums, 4 FFMA), no HMUL2
#     per pair (-32 of a step's ~150 instructions, and the MMA chain no longer runs across steps);
#   - q2 (-DKBIT_GEMV_Q2=1): k = 2 quad table (8-bit key of four elements, LDS.64 of two pairs, 16 copies, 32 KB):
#     half the lookups (PRMT + LEA + LDS) at k = 2;  psq2: both.
#   Registers (NVRTC, the plan's kernels): equal or fewer (k = 2 gate/up 78 -> 74 / 66 / 71).
#   Expect: k = 2 gate/up / down / Q 0.1-0.3 us each faster with psq2, k = 4 less (ps only); err column unchanged
#   in order of magnitude (the product no longer rounded to fp16: if anything smaller).
if [ "$STEP" = ps ]; then
  SHAPES=gateup,down,Q,O,KV KS=2,4 MS=1,4 AB_VARIANTS="ps:-DKBIT_GEMV_PS=1;q2:-DKBIT_GEMV_Q2=1;psq2:-DKBIT_GEMV_PS=1 -DKBIT_GEMV_Q2=1" \
    timeout 400 python3 profiling/gemv_ab.py --out "$W" > "$W/gemv_ps38.log" 2>&1
  grep -vE "^\s*$" "$W/gemv_ps38.log" | cut -c1-230 | tail -30
fi
#   Got (first run, gemv_ps38a.log): every ps column and q2 on down wrong (err 0.1-0.2): block_mma read the ring
#   slot's scale after load_step had refilled it (fixed, 2nd commit); its times not usable.  k = 2 gate/up q2 4.05 ->
#   3.85 us and psq2 3.74 (those warps have no third step, so correct there).
#   Got (second run, gemv_ps38.log): ps still wrong everywhere (err 0.2) -- and it cannot be right: a lane's MMA
#   row sums k-slots of four lanes t, i.e. four quantization blocks with four scales, so no per-lane scale can be
#   applied after the MMA (the K permutation that lets each lane feed its own block rules it out).  Removed.  q2
#   correct (err 3e-4 as the pair table) and faster: k = 2 TOTAL M = 1 16.28 -> 15.70 us, M = 4 18.88 -> 18.48
#   (gate/up 4.08 -> 3.77, down 3.86 -> 3.73, Q 3.18 -> 3.10, O 3.32 -> 3.28, KV 1.84 -> 1.82); k = 4 untouched.
#   Made the default for the whole kbit_gemv.cu family at k = 2 (KBIT_GEMV_Q2=0 in the environment: the pair table).
# STEP=q2: the quad table as the default, against the pair table: dense (every shape, M = 1..16, the pair
#   column built with -DKBIT_GEMV_Q2=0) and the grouped GEMV (moe_ab's package column in processes with
#   KBIT_GEMV_Q2=0 / 1, two alternations; 8 / 10 / 32 experts: the 32 KB table costs the many-small-block plans
#   more build work and, at 4+ tokens, maybe a block per SM).  Expect: dense as the ps step; grouped k = 2 1 token
#   0.1-0.3 us faster per kernel at 8 / 10 experts, 32 experts unknown.  Then the dense GEMV GPU tests.
if [ "$STEP" = q2 ]; then
  SHAPES=gateup,down,Q,O,KV,lin_key,lin_value KS=2 MS=1,2,4,8,16 AB_VARIANTS="pair:-DKBIT_GEMV_Q2=0" \
    timeout 200 python3 profiling/gemv_ab.py --out "$W" > "$W/gemv_q2_38.log" 2>&1
  grep -vE "^\s*$" "$W/gemv_q2_38.log" | cut -c1-150 | tail -42
  for pass in 1 2; do
    for q in 0 1; do
      KBIT_GEMV_Q2=$q MOE_MMA=0 KS=2 MS=1,4,8,16 ES=8,10,32 timeout 150 python3 profiling/moe_ab.py --out "$W" \
        > "$W/moe_q2_38_q${q}_$pass.log" 2>&1
      echo "## KBIT_GEMV_Q2=$q pass $pass"; grep -E "^(shape|moe_|TOTAL)" "$W/moe_q2_38_q${q}_$pass.log" | cut -c1-110
    done
  done
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_q2_38.log" 200 tests/test_gemv_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_q2_38.log" | head
fi
#   Got (gemv_q2_38.log, moe_q2_38_q{0,1}_{1,2}.log, gpu_tests_q2_38.log): dense k = 2 TOTAL (pair -> quad) M = 1
#   16.28 -> 15.67 us, M = 2 16.95 -> 16.44, M = 4 18.75 -> 18.46, M = 8 23.95 -> 23.94, M = 16 38.98 -> 39.76 (gate/up
#   9.37 -> 12.25: with two token tiles the 64 KB of staged A plus the 32 KB table leave two blocks per SM, not
#   three).  Grouped k = 2 (two alternations agree): 8 / 10 experts gate/up fused + down 1 token 9.07 / 11.15 ->
#   8.85 / 10.63, 4 tokens 9.36 / 11.40 -> 9.23 / 10.87, 8 tokens 11.20 / 13.34 -> 10.93 / 12.81, 16 tokens 20.35 /
#   27.79 -> 20.93 / 27.96 (slower); 32 experts gate/up (slices, one wave) 1 token 15.85 -> 14.64 but down (4-warp
#   blocks, several waves: kbit_gemv_grouped_slw) 10.24 -> 10.89, 4 tokens 10.87 -> 12.45.  The dense GEMV GPU
#   tests: 101 passed (every kernel on the quad table at k = 2).
#   So: the quad table where a kernel has one token tile (gemv_quad), not in kbit_gemv_grouped_slw
#   (kbitcupy.gemv.table_bytes / _is_slw plan the same).  The SASS of every other kernel unchanged (k = 2 two-tile
#   and slw kernels included; nvdisasm against a89c8de).
# STEP=q2b: that rule: the GPU tests of the dense and grouped GEMV, memcheck over the dense and grouped drivers, and
#   the grouped A/B again where the rule differs from the all-quad run (16 tokens, 32 experts).  Expect: tests pass;
#   16 tokens and 32 experts' down as the pair table, the rest as the quad table.
if [ "$STEP" = q2b ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_q2b_38.log" 150 tests/test_gemv_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_q2b_38.log" | head
  gpu_tests "$W/gpu_tests_q2b_grouped38.log" 300 tests/test_grouped_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_q2b_grouped38.log" | head
  sanitize memcheck "$W/memcheck_c8_38.log" 100 profiling/sanitize_c8.py
  sanitize memcheck "$W/memcheck_glb38.log" 120 profiling/sanitize_grouped_lb.py
  for q in 0 1; do
    KBIT_GEMV_Q2=$q MOE_MMA=0 KS=2 MS=1,4,16 ES=8,32 timeout 100 python3 profiling/moe_ab.py --out "$W" \
      > "$W/moe_q2b_38_q$q.log" 2>&1
    echo "## KBIT_GEMV_Q2=$q"; grep -E "^(moe_|TOTAL)" "$W/moe_q2b_38_q$q.log" | cut -c1-110
  done
fi
#   Got (gpu_tests_q2b_38.log, gpu_tests_q2b_grouped38.log, memcheck_{c8,glb}38.log, moe_q2b_38_q{0,1}.log): dense
#   GEMV 101 passed, grouped GEMV 142 passed; memcheck sanitize_c8.py 108 checks (k = 2's default plans at M = 1 / 5 /
#   9 added), sanitize_grouped_lb.py 48, 0 errors.  Grouped k = 2 pair -> rule: 8 experts 1 / 4 / 16 tokens 9.17 /
#   9.45 / 20.53 -> 8.94 / 9.32 / 20.55 us, 32 experts 26.39 / 27.36 / 70.57 -> 25.06 / 26.07 / 70.46 (down now equal
#   or faster: its slw kernel keeps the pair table).
# STEP=close: the closing M = 1 / 4 tables (k = 2..5), twice (k = 2's 3x target is within ~1 % of the line).
if [ "$STEP" = close ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  m1_table final55
  m1_table final55b
fi
#   Got (final55-m1, final55b-m1; git 805cb65): k = 2 M = 1 TOTAL 15.60 / 15.57 us = 3.00x / 3.01x fp16 (46.78 /
#   46.84; the first 2.999x: at the line, not over it with margin); k = 3 / 4 / 5 2.46-2.47x / 2.55x / 1.79x
#   (unchanged kernels); M = 4 k = 2 2.55x.  k = 2 M = 1 per shape: gate/up 3.81 us (74 % of SOL), down 3.72 (75 %),
#   Q 3.03 (85 %), O 3.24 (80 %), KV 1.79.
# STEP=plans: the k = 2 plan rule was measured with the pair table; with half the lookups a step's compute is
#   shorter, so the block shapes that lost on compute (8-column groups at k = 2 gate/up: 4.18 -> 4.25 with the pair
#   table, a second chain in the 512-thread blocks) may win now.  Overrides of every shape's plan (gemv_ab AB_PLANS).
#   Expect: at most 0.1-0.2 us on gate/up / down; a plan rule change only where M = 1 and M = 4 agree or the rule
#   can tell them apart.
if [ "$STEP" = plans ]; then
  SHAPES=gateup,down,Q,O KS=2 MS=1,4 AB_PLANS="c8:c8=1;c8w8:c8=1,warps=8;dual:dual=1;single:dual=0;late0:late=0;w16:warps=16;w4:warps=4" \
    timeout 300 python3 profiling/gemv_ab.py --out "$W" > "$W/gemv_plans38.log" 2>&1
  grep -vE "^\s*$" "$W/gemv_plans38.log" | cut -c1-260 | tail -14
fi
#   Got (gemv_plans38.log): the plan stays best nearly everywhere (k = 2 M = 1 TOTAL of the four 13.87 us; 8-column
#   groups 14.64, one chain 14.38, no late fill 15.48, 16 / 4 warps 15.73 / 20.32; at M = 4 all slower).  Only a
#   second chain in the 512-thread blocks (down, O) was faster, by 0.02-0.08 us a cell (down M = 1 / 4 3.75 -> 3.72
#   / 4.35 -> 4.29, O 3.26 -> 3.21 / 3.78 -> 3.70); with the pair table it had been slower there (eighteenth
#   session).
# STEP=dual: that, twice, on every 512-thread k = 2 plan (down, O, linear key; KV at M = 8).  Expect: 0.03-0.08 us a
#   shape in both passes, or noise.
if [ "$STEP" = dual ]; then
  SHAPES=down,O,lin_key,KV KS=2 MS=1,2,4,8 AB_PLANS="dual:dual=1" CUT=120 gemv_ab_twice dual38 150
fi
#   Got (gemv_dual38_{1,2}.log): both passes, down M = 1 / 2 / 4 / 8 -0.02..-0.07 us, O -0.05..-0.14, linear key
#   +0.03..+0.16 (one step a warp), KV at M = 8 equal.  Kept for the 512-thread k = 2 plans with two or more steps a
#   warp (gemv.plan, with the quad table only).
# STEP=close2: the tree with that rule: the dense GEMV's GPU tests, memcheck over sanitize_c8.py, the closing M = 1 / 4
#   tables twice.
if [ "$STEP" = close2 ]; then
  close_checks close38 final56
fi
#   Got (gpu_tests_close38.log, memcheck_c8_close38.log, final56-m1, final56b-m1; git baf7663): 101 passed, memcheck
#   108 checks 0 errors; k = 2 M = 1 TOTAL 15.50 / 15.47 us = 3.02x / 3.02x fp16; k = 3 / 4 / 5 2.46x / 2.55x / 1.79x.
# STEP=h200 (kind nvidia-h200): the quad table's A/B on the H200 (the rule was measured on the H100 only), the M = 1 / 4
#   tables and the MoE table (k = 4; the H200's last are final33-m1 and moe-final50, older trees).
#   Expect: k = 2 dense 0.3-0.6 us faster at M = 1 as on the H100; k = 4 as final33-m1 or a little faster.
if [ "$STEP" = h200 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  SHAPES=gateup,down,Q,O,KV KS=2 MS=1,4 AB_VARIANTS="pair:-DKBIT_GEMV_Q2=0" timeout 120 python3 profiling/gemv_ab.py \
    --out "$W" > "$W/gemv_q2_h200_38.log" 2>&1
  grep -E "^TOTAL|^gateup|^down" "$W/gemv_q2_h200_38.log" | cut -c1-110
  m1_table final57
  timeout 200 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,2,4,8,16 --experts 8,10 \
      --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag moe-final57 > "$W/bench_moe57.log" 2>&1
  grep -E "TOTAL|as moe_forward" "$W/bench_moe57.log" | head -40
fi
#   Got (gemv_q2_h200_38.log, final57-m1, moe-final57; H200, git 6fc2bea): quad vs pair k = 2 TOTAL M = 1 16.29 -> 15.62
#   us, M = 4 19.06 -> 18.58; M = 1 k = 2 / 3 / 4 / 5 2.64x / 2.18x / 2.23x / 1.55x fp16 (fp16 40.95 us); MoE k = 4 as
#   moe_forward 1 / 2 / 4 tokens 1.61x / 1.61x / 1.53x (8 experts), 1.61x / 1.60x / 1.57x (10).
# STEP=d3: k = 4 down at M = 1 is 0.03 us short of 85 % of SOL (final56-m1: 4.49 us, SOL 3.79).  The twenty-ninth
#   session measured a register ring of depth 3 on down (every step of its warps in flight): k = 4 M = 1 4.52 -> 4.44,
#   k = 2 4.02 -> 3.94, but did not instantiate it (-0.08 us on one shape).  Now it would cross the line.  Depth 3 by
#   a plan override (gemv_ab formats the kernel; NVRTC: k = 4 down's kernel 95 -> 112 registers, no spills), two
#   passes, down / O / linear key (K >= 4096 or a warp with 2+ steps) at k = 2..5, M = 1 / 2 / 4.
#   Expect: down M = 1 -0.05..-0.1 us at k = 2..4, M = 4 slower (as then); O equal.
if [ "$STEP" = d3 ]; then
  SHAPES=down,O KS=2,3,4,5 MS=1,2,4 AB_VARIANTS="d3:+depth=3" CUT=100 gemv_ab_twice d3_38 200
fi
#   Got (gemv_d3_38_{1,2}.log): M = 1 faster in both passes on down k = 4 (4.46 / 4.49 -> 4.36 / 4.37 us), down k = 3
#   (4.64 / 4.65 -> 4.45 / 4.46) and O k = 3 (3.96 / 3.95 -> 3.86 / 3.84); equal or slower on down k = 2 / 5, O k = 2 / 4
#   / 5 and at M = 2 / 4 everywhere (down k = 4 M = 2 4.67 -> 5.00).  Kept for exactly those (gemv._depth3: M = 1, the
#   8-column plans of down at k = 3 / 4 and O at k = 3; 8 more instantiations, 112 registers, no spills).
# STEP=close3: the tree with the depth-3 rule: dense GEMV GPU tests, memcheck over sanitize_c8.py (now with the
#   depth-3 plans), the closing M = 1 / 4 tables twice.  Expect: k = 4 down at 85-87 % of SOL, k = 3 TOTAL -0.3 us.
if [ "$STEP" = close3 ]; then
  close_checks close3_38 final58
  grep -E "^\| (gateup|down|Q|O|KV|lin_value) \| 4 " "$W"/*final58-m1.md "$W"/*final58b-m1.md
fi
#   Got (gpu_tests_close3_38.log, memcheck_c8_close3_38.log, final58-m1, final58b-m1; git 9e6358b): 101 passed; memcheck
#   120 checks, 0 errors; M = 1 TOTAL k = 2 / 3 / 4 / 5 3.04x / 2.51x / 2.57x / 1.80x and 3.03x / 2.51x / 2.56x / 1.80x fp16;
#   k = 4 % of SOL: down 85 / 85 (4.38 / 4.39 us), gate/up 82 / 80, Q 90, O 90 / 89, linear value 91 / 90.
# STEP=gu4: what is left of issue 3 on the H100 is k = 4 gate/up at M = 1 (4.62 us, 80-82 % of SOL; 85 % = 4.45).  Its
#   plan (8-column groups, 4 warps, 2 steps a warp, two chains, late fill, both steps L2-prefetched before the wait)
#   was tuned before the safe-mode prefetch (twentieth session): with step 1 already in L2, the late fill's second
#   round trip may no longer pay.  Overrides: late=0, one chain, 16-column groups, one step prefetched, depth 3 (no
#   third step: control).  Two passes.  Expect: late=0 within +-0.1 us; the rest slower.
if [ "$STEP" = gu4 ]; then
  SHAPES=gateup KS=4 MS=1,2 AB_PLANS="late0:late=0;single:dual=0;c16:c8=0" AB_VARIANTS="pf1:+pf=1;late0pf1:+late=0 +pf=1" \
    gemv_ab_twice gu4_38 150
fi
#   Got (gemv_gu4_38_{1,2}.log): the plan is the fastest of these in both passes: M = 1 4.67 / 4.64 us, one chain 4.67 /
#   4.63 (equal), late=0 4.91 / 4.88, 16-column groups 4.92 / 4.87, one step prefetched 4.89 / 4.90, both 5.24.  Nothing
#   kept; gate/up stays at ~81 % of SOL.
# STEP=h200b (kind nvidia-h200): the final tree on the H200: the depth-3 rule's A/B there (measured on the H100 only)
#   and the M = 1 / 4 tables.  Expect: down k = 3 / 4 M = 1 0.05-0.2 us faster as on the H100.
if [ "$STEP" = h200b ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  SHAPES=down,O KS=3,4 MS=1 AB_VARIANTS="d2:+depth=2" CUT=100 gemv_ab_twice d3_h200_38 100
  m1_table final59
fi
#   Got (gemv_d3_h200_38_{1,2}.log, final59-m1; H200, git 22bad97): depth 3 against 2 there too: down k = 3 4.57 / 4.59 ->
#   4.45 / 4.47 us, k = 4 4.44 / 4.48 -> 4.29 / 4.31, O k = 3 equal; M = 1 TOTAL k = 2 / 3 / 4 / 5 2.64x / 2.19x / 2.23x /
#   1.54x fp16 (fp16 40.77 us); k = 4 % of SOL gate/up 74, down 78, Q 81, O 78, linear value 82.
# STEP=sq2 (after the closing tables; not a target shape): the quad table in the streaming GEMV at k = 2 (M = 8..64:
#   -DKBIT_STREAM_Q2 through the environment's KBIT_STREAM_Q2, the host plans its 32 KB), against the pair table, two
#   alternations of bench.py's STREAM column; then the streaming GEMV's GPU tests with it.  Expect: as the decode GEMV,
#   0.1-0.3 us a shape at M = 8..16, less at 32 / 64 (more per-unit MMA work there).
if [ "$STEP" = sq2 ]; then
  for pass in 1 2; do
    for q in 0 1; do
      KBIT_STREAM_Q2=$q timeout 60 python3 profiling/bench.py --out "$W" --M 8,16,32,64 --k 2 --columns STREAM \
        --shapes gateup,down,Q,O,KV --reps 15 --tag "sq2_$q-$pass" > "$W/bench_sq2_${q}_$pass.log" 2>&1
      echo "## KBIT_STREAM_Q2=$q pass $pass"; grep -E "^\| TOTAL" "$W/bench_sq2_${q}_$pass.log"
    done
  done
  [ -n "${SQ2_TESTS:-}" ] && KBIT_STREAM_Q2=1 gpu_tests "$W/gpu_tests_sq2_38.log" 100 tests/test_gemv_stream_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_sq2_38.log" | head
fi
#   Got (first call: bench refused --reps 10, the tests ran: gpu_tests_sq2_38.log, 68 passed with KBIT_STREAM_Q2=1;
#   second call bench_sq2_{0,1}_{1,2}.log): k = 2 TOTAL STREAM column, pair -> quad, two passes: M = 8 28.32 / 28.31 ->
#   28.01 / 28.04 us, M = 16 32.15 / 32.09 -> 32.08 / 32.03, M = 32 42.76 / 42.75 -> 42.77 / 42.86, M = 64 61.46 / 61.43 ->
#   61.51 / 61.72.  Faster only at M = 8, where the decode GEMV serves k = 2; the hook stays off.
finish_run run38
