#!/usr/bin/env bash
# Forty-first session (2026-11-28).  From the repo root:  OUT=/tmp/out STEP=sweep bash profiling/run48.sh
. profiling/run_env.sh
start_run sweep
# STEP=sweep: the dense wgmma plan's split-K rule (wgmma.dense_splits: TILE_US / WS_SPLIT_US) and token tile were
#   fitted on the H100 (run25.sh ksweep, 2026-11-26) and never swept on the H200, where issue 4's M = 32 is 0.96x
#   (close47h: 43.11 vs fp16 41.59 us; gate/up 9.68 vs 8.13, Q 8.51 vs 7.18 lose).  gemm_probe's wgmma at its plan,
#   at ks = 1..8 (each also with the workspace sum, /ws) and TOK = 16 / 32 / 64, M = 32, k = 4, seven shapes.
# Expect: the plan's pick within ~3 % of the fastest split count in most cells (as on the H100); if some cell's best
#   is 5 % or more under the plan, a rule change there is worth a bench A/B (gate/up / Q at M = 32 would need ~-0.75 us
#   each for the TOTAL to reach 1.0x, which a split count alone is unlikely to give).
if [ "$STEP" = sweep ]; then
  GEMM=0 DQ=0 WG=1 WGNOCL=1 WGSPLITS=1,2,3,4,5,6,8 WGTOKS=16,32,64 KS=4 MS=${MS:-32} \
    SHAPES_=${SHAPES_:-gateup,Q,down,O,KV,lin_key,lin_value} timeout 320 python3 profiling/gemm_probe.py \
    > "$W/ksweep48.log" 2>&1
  tail -3 "$W/ksweep48.log"
  ksweep_summary "$W/ksweep48.log"
  # The grouped kernels at 16 tokens an expert on the H200, where issue 5's "never slower than fp16 at <= 16" fails
  # (close47h-moe: moe_dn 8 experts 0.96x, moe_gu 10 experts 9.41 vs fp16 7.98 us, its stable launch 8.21): the
  # grouped GEMV (new), the mma kernel, and the wgmma kernel at its plan, at ks = 1..6, TOK = 16, the workspace sum,
  # and ids_stable.  Expect: some split / kernel within the default launch near fp16 on moe_gu 10 x 16 (the grouped
  # split rule was fitted on the H100, run25.sh ksweep_moe).
  MOE_MMA=1 MOE_WG="d:;ks1:+ks=1;ks2:+ks=2;ks3:+ks=3;ks4:+ks=4;ks6:+ks=6;t16:+tok=16;cl0:+cluster=0;st:+stable=1" \
    KS=4 MS=12,16 ES=8,10 SHAPES=moe_gu,moe_gu_fused,moe_dn timeout 230 python3 profiling/moe_ab.py --out "$W" \
    > "$W/moe_sweep48.log" 2>&1
  grep -vE "^\s*$" "$W/moe_sweep48.log" | tail -20
  finish_run run48
fi
# Result (sweep, H200, `nvidia-h200_2026-11-28_{ksweep48,moe_sweep48}.log`): the H100-fitted rules hold on the H200.
#   Dense wgmma M = 32, plan vs the best of ks = 1..8 x {cluster, workspace} x TOK 16 / 32 / 64: gate/up 9.90 vs 9.62
#   (ks 5, -2.8 %), O 9.65 vs 9.28 (ks 6, -3.8 %; O is the streaming GEMV's, 9.40), Q -0.8 %, down / KV / lin_key /
#   lin_value the plan is the best.  No split count moves the TOTAL by more than ~0.3 us (1.0x needs -1.5 us).
#   Grouped, 12 / 16 tokens: the wgmma plan's split count is the fastest at every cell (ks 1..6 slower); the default
#   launch of every kernel loses to fp16 bmm on moe_gu 10 experts (16 tokens: GEMV 9.12, wgmma 9.35, mma 12.53 vs
#   fp16 8.03 us; 12 tokens GEMV 8.28 vs 7.99) and moe_dn 8 experts 16 tokens (GEMV 6.80 vs 6.57); the ids_stable
#   launch is 0.25-1.15 us faster (moe_gu 10 x 16: 8.20), still 2 % over fp16 there.  The gap is the wait-first
#   order (ids after the wait, then the weights from DRAM), not the plan.
# STEP=chain: two consecutive launches of the dense decode GEMV inside the graph of back-to-back launches
#   (profiling/chain_trace.py: two trace builds alternating, so one replay leaves launch n-2 and n-1), k = 4 M = 1,
#   gate/up, down, Q, in the safe (default), full-PDL and plain launch.  Why: the H200's M = 1 is ~0.9 us over the SOL
#   read a shape and neither full PDL nor the early ring moved it (thirty-ninth / fortieth sessions).
# Expect: in the safe launch the gap from launch n-2's last exit to launch n-1's waits passing ~0.5-1 us, and the
#   post-wait path (A staged ~0.6 us, weights, compute, exit) the rest; full PDL the same post-wait path minus the
#   weights' DRAM latency.  Which of them holds the launch decides what is worth trying next.
if [ "$STEP" = chain ]; then
  SHAPES=gateup,down,Q KS=4 MODES=${MODES:-safe,full,plain} VARIANTS="${VARIANTS:-}" timeout 400 \
    python3 profiling/chain_trace.py > "$W/chain48${TAG:-}.log" 2>&1
  grep -E "^## |^summary" "$W/chain48${TAG:-}.log"
  finish_run run48
fi
# Result (chain, H200, `nvidia-h200_2026-11-28_chain48{a,b,c,d}.log`; the trace builds run ~18 % slower than the kernel,
#   gate/up 5.0 vs 4.24 us; clock64 intervals read at the nominal 1.98 GHz, ~14 % short of the globaltimer's, so the
#   SM ran at ~1.74 GHz; globaltimer medians step by 256 ns).  Gate/up k = 4, safe launch, ns from launch n-2's last
#   block exit (p50): waits pass 512 (the grid-completion -> dependent release latency, min 448-480 in every shape and
#   mode), prologue done (A staged) 1313, step 0 landed 1526, step 0 computed 2100, step 1 landed 2411 (requested at
#   step 0's landing: one more round trip), step 1 computed 2793, warp loop done 2938, block exit 3372 (clock) / 3968
#   (globaltimer; max 4608: the next launch's waits pass ~0.5 us after that).  Full PDL: A staged ~0.3 us after the
#   wait instead of ~0.8-1.1 and step 0 landed 1176, but the launch only 3 % shorter (4.86 vs 5.01: the compute bursts,
#   step 1's round trip and the reduction stay).  Down and Q alike (Q: waits 704, step 0 1280, exit 3296).  The ring
#   before the prologue (safe+early, chain48b): gate/up 5.03 -> 5.25, down 4.59 -> 5.17, Q 3.77 -> 4.34 us (step 0
#   lands later).  Plain launch: 6.37 / 5.51 / 4.70 us (a ~1 us gap instead of 0.5).
#   A read by every block as an L2 hot spot after the wait (chain48d, -DKBIT_EXP_A_COPIES=16 / 128: block b reads copy
#   b % n): gate/up 5.04 -> 5.02 / 5.03, down 4.53 -> 4.64 / 4.64, Q 3.78 -> 3.82 / 3.82 -- not a hot spot.
# STEP=late: the chain trace (chain48c, gate/up k = 4 safe) has step 1's weights landing ~0.9 us after step 0's (LATE: step
#   1 requested once step 0 landed) and each step's compute 0.4-0.6 us on the path.  The plan's late / safe-prefetch
#   choices were measured on the H100 (c8ab22, pf23h); on the H200 only pf23 (all steps prefetched: slower).  gemv_ab
#   with plan overrides late = 0 (step 1 requested with step 0), pf = 2 (both steps L2-prefetched before the wait) and
#   both, k = 4 / 2, M = 1, two passes.
# Expect: late = 0 faster on gate/up / Q (one step 1 round trip less on the path) unless step 0 then lands later by as
#   much; pf = 2 alone slower (pf23).
if [ "$STEP" = late ]; then
  AB_NOBASE=1 KS=4,2 MS=1 SHAPES=gateup,down,Q,O AB_PLANS="late0:late=0;pf2:pf=2;both:late=0,pf=2" CUT=230 \
    gemv_ab_twice late48 200
  finish_run run48
fi
# Result (late, H200, two passes, `nvidia-h200_2026-11-28_gemv_late48_{1,2}.log`): k = 4 M = 1 TOTAL (gate/up, down, Q,
#   O) 15.37 / 15.34 (plan) -> late = 0 16.63 / 16.62 (+8 %), pf = 2 15.64 / 15.67 (+2 %), both 16.25 / 16.26; k = 2 13.21
#   / 13.24 -> 14.27 / 14.28, 13.26 / 13.26, 13.91 / 13.92.  Every shape slower with step 1 requested early (gate/up
#   4.27 -> 4.41, down 4.12 -> 4.49, Q 3.46 -> 3.82): requesting it with step 0 delays step 0 more than it saves.  The
#   plan stands.
# STEP=nocomp: is the compute on the M = 1 path?  The chain trace shows each step's compute 0.4-0.6 us after its
#   weights land, but the thirty-ninth session's -30 instructions a step moved k = 4 by only 0.5-1 %.  gemv_ab with the
#   kernel's no-compute hook (-DKBIT_EXPERIMENT_NO_COMPUTE: the loads kept alive, no lookups / MMA; results wrong) and
#   the chain trace of it, k = 4 / 2, M = 1.
# Expect: if the compute bursts are on the path, gate/up / down 0.5-1 us faster without them; if ~0.1-0.2, the path
#   is the memory chain and fewer instructions a weight cannot move M = 1 on the H200.
if [ "$STEP" = nocomp ]; then
  AB_NOBASE=1 KS=4,2 MS=1 SHAPES=gateup,down,Q,O AB_VARIANTS="nocomp:-DKBIT_EXPERIMENT_NO_COMPUTE" CUT=200 \
    gemv_ab_twice nocomp48 200
  SHAPES=gateup,down KS=4 MODES=safe VARIANTS="nocomp:-DKBIT_EXPERIMENT_NO_COMPUTE" timeout 200 \
    python3 profiling/chain_trace.py > "$W/chain48e.log" 2>&1
  grep -E "^## |^summary|^step|^block exit|^prologue" "$W/chain48e.log"
  finish_run run48
fi
# Result (nocomp, H200, two passes, `nvidia-h200_2026-11-28_{gemv_nocomp48_{1,2},chain48e}.log`): without the lookups /
#   MMA the kernel runs at the SOL read: k = 4 gate/up 4.28 -> 2.99 us (SOL 2.98), down 4.12 -> 3.49, Q 3.45 -> 2.86,
#   O 3.54 -> 2.93; TOTAL (4 shapes) 15.4 -> 12.3 (-20 %), k = 2 13.24 -> 10.15.  The compute is on the path: the
#   chain trace's step computes (0.4-0.6 us each) are bursts of every warp of an SM at once (5 blocks x 4 warps x ~190
#   instructions a step: ~1 us of issue an SM a launch at ~1.74 GHz), and step 1's compute plus the reduction come
#   after the last data.  So instructions a step do pay on the H200 (the thirty-ninth session's split keys, -30 a
#   step, measured only 0.5-1 % there for k = 4: to be re-read).
# STEP=sa: the block scales applied after the MMAs (-DKBIT_GEMV_SCALE_AFTER, kbit_pairlut.cuh block_pair_mma_sa): the
#   pair levels into the MMA unscaled, two zero-based fp32 chains a call, then 8 FFMA by the rows' scales where the
#   scaled lookups took 32 HMUL2.  SASS (nvcc 13, gate/up k = 4 C8): a step 187 -> 157 instructions (-16 %);
#   registers +8 (gate/up k = 4 80 -> 88, still 5 blocks an SM), no spills.  Why now: nocomp48 put the compute on
#   the M = 1 path (gate/up k = 4 4.28 -> 2.99 us without it = the SOL read).
# Expect: k = 4 M = 1 gate/up / down -0.1..-0.2 us, TOTAL -2..-4 %; M = 4 alike or less; errors equal or smaller.
if [ "$STEP" = sa ]; then
  AB_NOBASE=1 KS=${KS:-4,2,3,5} MS=${MS:-1,4} SHAPES=gateup,down,Q,O,KV AB_VARIANTS="sa:-DKBIT_GEMV_SCALE_AFTER" \
    CUT=200 gemv_ab_twice sa48 280
  finish_run run48
fi
# Result (sa, H200, `nvidia-h200_2026-11-28_gemv_sa48_{1,2}.log`): WRONG results (relative error 2e-01 in every cell),
#   so no timing of it means anything (the variant also ran without the blocks-an-SM cap).  Why it cannot work: a
#   lane owns a whole quantization block (its K plane words, 32 weights), and an m16n8k16's k16 slice of one row takes
#   its elements from the 4 lanes t of that row's lane group -- 4 different blocks with 4 scales.  The scale is not
#   constant along the MMA's K, so it cannot leave the MMA; a layout with one block a row across the 4 lanes would need
#   every lane to read all k plane words of the block (4x the loads, or shuffles).  Reverted
#   (profiling/patches/session41-gemv-scale-after.patch).
