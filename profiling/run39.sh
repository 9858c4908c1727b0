#!/usr/bin/env bash
# Thirty-second session (2026-11-27).  From the repo root:  OUT=/tmp/out STEP=dn bash profiling/run39.sh
#   (kind nvidia-h100-x1)
. profiling/run_env.sh
start_run dn
RUN=39
# STEP=dn: issue 5's per-projection down at 1..4 tokens (k = 4, default launch 1.73-1.81x fp16, target 2x).
#   10 experts run one 10-warp block per SM (gpb 10 x 1 warp: each warp 4 of K = 512's steps in series) where 8
#   experts run two 8-warp blocks (gpb 4 x 2 warps: 2 steps a warp) and are 0.2 us / 5 % nearer their SOL.  The
#   nineteenth session found every other split of 10 experts slower -- at 128 registers, where two 10-warp blocks do
#   not fit an SM's registers (20 x 32 x 128 > 64K), so gpb 5 x 2 warps ran in two waves.  At the 96-register cap
#   (the slw kernel's, no spills at k = 4) they fit.  Variants (the slices kernel at -DKBIT_GROUPED_SL_MAXNREG=96):
#   - r96: the current plans at 96 registers (control: the cap alone);
#   - g5w2: gpb 5 x 2 warps (10 experts: 26 blocks a slot, 260 blocks = two per SM, 2 steps a warp);
#   - g2w2: gpb 2 x 2 warps (4-warp blocks, 8 / 10 experts: 512 / 640 blocks, four / five per SM).
#   Expect: 10 experts g5w2 / g2w2 0.2-0.5 us faster than new at 1 and 4 tokens; 8 experts g2w2 within +-0.1 (the
#   same warps and steps per SM, twice the table builds).
if [ "$STEP" = dn ]; then
  SHAPES=moe_dn KS=4 MS=1,4 ES=8,10 MOE_MMA=0 \
    MOE_VARIANTS="r96:-DKBIT_GROUPED_SL_MAXNREG=96;g5w2:-DKBIT_GROUPED_SL_MAXNREG=96 +gpb=5 +warps=2;g2w2:-DKBIT_GROUPED_SL_MAXNREG=96 +gpb=2 +warps=2" \
    moe_ab_twice dn39 200
fi
# STEP=wg: issue 5's prefill (32 / 64 tokens a expert, at least fp16): down at 64 tokens 0.99x / 1.00x (8 / 10
#   experts, moe-final50), gate/up fused 1.01x / 1.19x.  The grouped wgmma plan's token tile, split count, stages and
#   split-K sum (cluster / workspace) were last swept in the twenty-second session, before the TMA stages (27th).
#   Prints the package's plans, then the same-run columns.  Expect: one of the overrides 0.1-0.5 us faster on down
#   at 64 tokens, or none (the plan stays).
if [ "$STEP" = wg ] || [ "$STEP" = dn ]; then
  python3 - <<'EOF' 2>&1 | tee "$W/wg_plans39.log"
from kbitcupy import wgmma as WG
for E in (8, 10):
    for M in (32, 64):
        for name, N, K in (("moe_dn", 2048, 512), ("moe_gu_fused", 1024, 2048)):
            print(name, E, M, WG.grouped_plan(N, K, 4, "float16", 0, E, M))
EOF
  MS=32,64 ES=8,10 SHAPES=moe_dn,moe_gu_fused \
    moe_wg "$W/moe_wg39.log" 300 "wg:;t32:+tok=32;ks1:+ks=1;ks2:+ks=2;ks4:+ks=4;st4:+stages=4;cl0:+cluster=0;cl1:+cluster=1"
fi
#   Got (run39_dn.tgz: moe_dn39_{1,2}.log, moe_wg39.log, wg_plans39.log; git 090a921):
#   - dn, two passes: 10 experts g5w2 5.38 / 5.38 (1 token), 5.52 / 5.45 (4) against new 5.52 / 5.52, 5.68 / 5.65
#     (-0.14..-0.2 us, 1.77x -> 1.82x fp16 bmm); r96 (the cap alone) +0.07; g2w2 +0.2.  8 experts: new best (g5w2
#     5.23, g2w2 5.51 against 4.55).  Kept as grouped_plan's share-10 rule (k = 4, K of 4 steps, <= 4 tokens).
#   - wg (one pass): the plans fill 2 CTAs per SM (down 8 experts: 2 splits on 256 CTAs; gate/up fused 8 experts: 4
#     on 256).  down 8 experts 1 split (128 CTAs) 7.48 / 8.16 us at 32 / 64 tokens against 7.76 / 8.68 (64 tokens:
#     0.98x -> 1.04x fp16 bmm); gate/up fused 8 experts 64 tokens 2 splits 13.30 against 14.34; but at 32 tokens 4
#     splits (11.41) beat 2 (12.06); 10 experts: the plans' counts best (down 1 split, gate/up fused 3).  Stages 4,
#     TOK 32, cluster on / off: no gain.  -> wgmma.grouped_splits (one CTA per SM at TOK >= 64 or where a split
#     would hold < 8 K tiles), to be confirmed over more cells (STEP=confirm).
# STEP=confirm: the two plan rules against the old plans, same run.
#   - GEMV, 10 experts' down at 1 / 2 / 4 / 8 tokens, default and stable launch: new (the package: the share-10 rule
#     at <= 4 tokens) against old (+gpb=10 +warps=1), two passes; g5w2 at 8 tokens (the rule stops at 4).  Expect new
#     0.1-0.2 us faster at 1..4 tokens in both launches.
#   - wgmma, grouped_splits against the old split count (+oldks=1): k = 2 / 4 / 5, 16 / 32 / 64 tokens, 4 / 8 / 10 / 16
#     experts, gate/up (unfused: 32 K tiles on 4 strips), gate/up fused, down.  Expect the changed cells (CPU plan
#     diff: 4 / 8 / 16 experts, and gate/up unfused at 6 / 8 / 10 / 16) equal or faster, the unchanged ones equal
#     (the noise).
if [ "$STEP" = confirm ]; then
  for pass in 1 2; do
    SHAPES=moe_dn KS=4 MS=1,2,4,8 ES=10 MOE_MMA=0 \
      MOE_VARIANTS="old:+gpb=10 +warps=1;news:+stable=1;olds:+gpb=10 +warps=1 +stable=1;g5w2:-DKBIT_GROUPED_SL_MAXNREG=96 +gpb=5 +warps=2" \
      timeout 150 python3 profiling/moe_ab.py --out "$W" > "$W/moe_dn39c_$pass.log" 2>&1
    echo "## pass $pass"; grep -vE "^\s*$" "$W/moe_dn39c_$pass.log" | cut -c1-200 | grep "^moe_dn"
  done
  KS=2,4,5 MS=16,32,64 ES=4,8,10,16 SHAPES=moe_gu,moe_gu_fused,moe_dn \
    moe_wg "$W/moe_wg39c.log" 400 "wg:;old:+oldks=1" > /dev/null
  grep -E "^moe_|^TOTAL" "$W/moe_wg39c.log"
fi
#   Got (run39_confirm.tgz: moe_dn39c_{1,2}.log, moe_wg39c.log; git a1244ec):
#   - GEMV, 10 experts' down, two passes (new / old): default 1 / 2 / 4 tokens 5.45 / 5.42 / 5.50 against 5.56 / 5.53
#     / 5.65 us, stable 4.81 / 4.78 / 4.92 against 5.11 / 5.08 / 5.21 (1.92x -> 2.05x fp16 bmm at 1 token); 8 tokens
#     g5w2 6.17 against 6.12: the rule stays at <= 4 tokens.
#   - wgmma, one pass: the first rule (one CTA per SM at TOK >= 64 or splits under 8 K tiles) faster at 32 / 64
#     tokens almost everywhere it changed the plan (k = 4: down 4 experts 7.76 -> 6.45 / 10.45 -> 7.22, gate/up 8
#     experts 13.66 -> 11.17 at 64 tokens, ...), but slower at 16 tokens (TOK 16: gate/up 8 / 10 experts +0.2 / +0.6),
#     where a CTA took the whole K (gate/up fused 16 experts 64 tokens 17.54 -> 20.26) and in two k = 5 cells (its
#     table-copies plans; the +oldks column is not the old plan where those apply).  Revised (grouped_splits): k <= 4,
#     TOK >= 32, at most 16 K tiles a CTA.
# STEP=close: the revised split rule's second pass (k = 2 / 4, 32 / 64 tokens), the grouped GPU tests (the new
#   10-experts test among them), memcheck over sanitize_grouped_lb.py (now with 10 experts' down), and the MoE
#   closing table (8 / 10 experts, 1..64 tokens).  Expect: the changed cells as in confirm; tests pass; 0 errors;
#   moe_dn 10 experts 1..4 tokens ~1.8x, 64 tokens down 8 experts ~1.04x.
if [ "$STEP" = close ]; then
  KS=2,4 MS=32,64 ES=4,8,10,16 SHAPES=moe_gu,moe_gu_fused,moe_dn \
    moe_wg "$W/moe_wg39d.log" 200 "wg:;old:+oldks=1" > /dev/null
  grep -E "^moe_|^TOTAL" "$W/moe_wg39d.log"
  gpu_tests "$W/gpu_tests_grouped39.log" 250 tests/test_grouped_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_grouped39.log" | head
  sanitize memcheck "$W/memcheck_glb39.log" 200 profiling/sanitize_grouped_lb.py
  moe_closing moe-final60 150
fi
#   Got (run39_close.tgz; git a23550f): the split rule's second pass as the first (k = 4, 64 tokens: down 4 / 8
#   experts 10.45 -> 7.21 / 8.61 -> 8.12 us, gate/up 8 experts 13.60 -> 11.20, gate/up fused 8 experts 14.49 -> 13.42;
#   k = 2 alike; 10 / 16 experts and 32 tokens at 8 / 10 / 16 experts unchanged, within 0.1); memcheck over
#   sanitize_grouped_lb.py 52 checks, 0 errors; moe-final60 (k = 4): down 10 experts 1 / 4 tokens 1.82x / 1.79x
#   (stable 2.06x / 2.00x), 64 tokens down 8 experts 1.04x (0.99x before), gate/up fused 8 experts 1.10x (1.01x);
#   moe_forward 1 / 4 tokens 2.05x / 1.98x (8 experts), 2.10x / 2.07x (10).  The grouped GPU tests ran out of the
#   call's 250 s (cold kernel cache) after ~127 passed, none failed: STEP=tests.
# STEP=tests: the kernel caches warmed in parallel, then the grouped GPU tests whole.
if [ "$STEP" = tests ]; then
  timeout 150 python3 profiling/warm_cache.py gemv wgmma grouped 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_grouped39b.log" 400 tests/test_grouped_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_grouped39b.log" | head
fi
#   Got (run39_tests.tgz, gpu_tests_grouped39b.log; git 971fddc): 144 passed in 140 s.
# STEP=rep: a replicate of the MoE closing table (moe-final60b), and racecheck / synccheck over the 10 experts' down
#   part of sanitize_grouped_lb.py (GLB_ONLY10=1: the new block shape's shared-memory reduction and barriers).
#   Expect: the table within ~1 % of moe-final60; 0 hazards, 0 errors.
if [ "$STEP" = rep ]; then
  moe_closing moe-final60b 150
  GLB_ONLY10=1 sanitize racecheck "$W/racecheck_glb10_39.log" 150 profiling/sanitize_grouped_lb.py
  GLB_ONLY10=1 sanitize synccheck "$W/synccheck_glb10_39.log" 120 profiling/sanitize_grouped_lb.py
fi
#   Got (run39_rep.tgz; git abf0f68): moe-final60b within ~1.5 % of moe-final60 (down 10 experts 1 / 4 tokens 1.79x /
#   1.77x, 64 tokens down 8 / 10 experts 1.03x / 1.00x, gate/up fused 8 experts 1.10x; moe_forward 1 / 4 tokens 2.04x
#   / 1.97x at 8 experts, 2.08x / 2.06x at 10); racecheck 0 hazards, synccheck 0 errors (the 10-experts part).
# STEP=h200: the two plan rules on the H200 (kind nvidia-h200; measured on the H100 only so far): the 10 experts'
#   down A/B (two passes) and the split rule against +oldks (k = 4, 32 / 64 tokens, 4 / 8 / 10 / 16 experts), then
#   the MoE closing table moe-final61.  Expect the same signs as on the H100.
if [ "$STEP" = h200 ]; then
  for pass in 1 2; do
    SHAPES=moe_dn KS=4 MS=1,4 ES=10 MOE_MMA=0 MOE_VARIANTS="old:+gpb=10 +warps=1;news:+stable=1;olds:+gpb=10 +warps=1 +stable=1" \
      timeout 120 python3 profiling/moe_ab.py --out "$W" > "$W/moe_dn39h_$pass.log" 2>&1
    echo "## pass $pass"; grep -E "^moe_dn" "$W/moe_dn39h_$pass.log"
  done
  KS=4 MS=32,64 ES=4,8,10,16 SHAPES=moe_gu,moe_gu_fused,moe_dn \
    moe_wg "$W/moe_wg39h.log" 200 "wg:;old:+oldks=1" > /dev/null
  grep -E "^moe_|^TOTAL" "$W/moe_wg39h.log"
  moe_closing moe-final61 150
fi
#   Got (run39_h200.tgz; git 3a10887): the call ran on the warm H100 (kind nvidia-h200 may take one; the H200 only for
#   work that does not fit an H100), so a third H100 pass: 10 experts' down new / old 5.37-5.42 / 5.52-5.53 us (1 token),
#   5.52 / 5.65-5.67 (4), stable 4.76-4.77 / 5.08-5.09; the split rule's cells as in confirm / close (k = 4 64 tokens:
#   down 4 / 8 experts 10.38 -> 7.08 / 8.52 -> 8.04, gate/up 8 experts 13.56 -> 11.24); moe-final61 (H100) as
#   moe-final60 (down 10 experts 1 token 1.83x; moe_forward 1 / 4 tokens 2.05x / 1.97x at 8 experts, 2.10x / 2.08x at
#   10).  The H200 was not measured this session.
# STEP=m8: issue 4's "the fused kernel reaches at least 60 % of SOL at M = 8 on gate/up and down" has no table on
#   today's tree (the closing dense tables start at M = 16).  The dense M = 8 table, k = 4, every kernel column:
#   GEMV (the mma.sync decode GEMV, dispatched at M = 8), GEMM (kbit_gemm, mma.sync), WGMMA, STREAM, the dispatched
#   matmul.  Expect GEMV ~60-70 % of SOL on gate/up / down, kbit_gemm below 50 %.
if [ "$STEP" = m8 ]; then
  timeout 150 python3 profiling/bench.py --out "$W" --M 8 --k 4 --columns GEMV,GEMM,WGMMA,STREAM,matmul,matmul+PDL \
    --reps 15 --tag m8-39 > "$W/bench_m8.log" 2>&1
  grep -E "^\| (gateup|down|Q|O|KV|lin_key|lin_value|TOTAL) " "$W/bench_m8.log"
fi
#   Got (run39_m8.tgz, nvidia-h100-80gb-hbm3_2026-11-27_m8-39.md; git c8fbee6): M = 8, k = 4, % of SOL: GEMV (the
#   mma.sync decode GEMV, dispatched) gate/up 58, down 62, Q 66, O 64, KV 61, linear key 72, linear value 67; kbit_gemm
#   gate/up 40, down 29; TOTAL (dispatched) 26.06 us, 1.80x fp16 (target 1.5x).  Gate/up's 320 16-column groups sit 3 / 2
#   blocks per SM (2.42 a SM); the 8-column groups that balance it at M = 1 need M <= 4 (their token columns carry the
#   second K half), and at M = 8 a block's staged A (32 KB) and table leave three blocks per SM.
# STEP=sl20: the grouped gate/up fused with more warps per SM at the 96-register cap (the 10 experts' down lesson):
#   8 experts' plan is two blocks of 2 groups x 4 warps (16 warps an SM, 4 of K = 2048's 16 steps a warp), 10 experts'
#   one block of 5 x 3 (15 warps, 5-6 steps).  Variants at -DKBIT_GROUPED_SL_MAXNREG=96: g2w5 (two blocks of 2 x 5
#   warps: 20 warps an SM, 3-4 steps), g5w4 (10 experts: one block of 5 x 4 = 20 warps, 640 threads; KBIT_SL20=1 lets
#   the plan past its 16-warp check), r96 (the plans as they are, at the cap).  Expect 0.1-0.3 us faster at 1 / 4
#   tokens if the warps' chains (not bytes) bound it; 8 experts at 4 tokens is at 1.98-2.00x.
if [ "$STEP" = sl20 ]; then
  for pass in 1 2; do
    KBIT_SL20=1 SHAPES=moe_gu_fused KS=4 MS=1,4 ES=8,10 MOE_MMA=0 \
      MOE_VARIANTS="r96:-DKBIT_GROUPED_SL_MAXNREG=96;g2w5:-DKBIT_GROUPED_SL_MAXNREG=96 +gpb=2 +warps=5;g5w4:-DKBIT_GROUPED_SL_MAXNREG=96 +gpb=5 +warps=4" \
      timeout 150 python3 profiling/moe_ab.py --out "$W" > "$W/moe_sl20_39_$pass.log" 2>&1
    echo "## pass $pass"; grep -E "^moe_|CHECK" "$W/moe_sl20_39_$pass.log"
  done
fi
#   Got (run39_sl20.tgz, moe_sl20_39_{1,2}.log; git c8fbee6 + the KBIT_SL20 hook in the working tree, reverted after):
#   no gain.  8 experts new / r96 / g2w5: 1 token 6.87-6.90 / 6.99-7.02 / 6.89-6.91 us, 4 tokens 6.91-6.93 / 7.04-7.05 /
#   6.99-7.00; 10 experts new / g5w4: 7.90-7.92 / 8.08, 4 tokens 7.96-8.00 / 8.16-8.19.  Unlike down (2 or 4 steps a
#   warp), gate/up fused's warps already have 4-6 steps each and more warps did not shorten them; the plans stay.
# STEP=guess: issue 5's default-launch down (1.76-1.83x at 1..4 tokens): after its wait the LB kernel reads the ids
#   (~600 ns) and only then requests the weights.  Hook -DKBIT_GROUPED_GUESS=1 (kbit_gemv.cu, off): the slot's expert
#   id read relaxed before the wait names the weights whose first ring step is L2-prefetched right after the wait,
#   beside the ids' real read (now at L2, ld.global.cg); the result uses the real ids.  The twenty-ninth session's
#   prefetch-only guess (before the LB launch) gained 0.16 us on down.  SASS of the default kernels identical.  Expect
#   -0.1..-0.2 us on down and gate/up fused at 1..8 tokens; k = 2 / 4, 8 / 10 experts, two passes.
if [ "$STEP" = guess ]; then
  for pass in 1 2; do
    SHAPES=moe_gu_fused,moe_dn KS=2,4 MS=1,4,8 ES=8,10 MOE_MMA=0 MOE_VARIANTS="guess:-DKBIT_GROUPED_GUESS=1" \
      timeout 200 python3 profiling/moe_ab.py --out "$W" > "$W/moe_guess39_$pass.log" 2>&1
    echo "## pass $pass"; grep -E "^moe_|CHECK|^TOTAL" "$W/moe_guess39_$pass.log"
  done
fi
#   Got (run39_guess.tgz, moe_guess39_{1,2}.log; git 0e4e8a0): slower in every cell, both passes, results correct:
#   k = 4 down 8 / 10 experts 1 token 4.52 -> 4.71 / 5.37 -> 6.30 us, gate/up fused 6.86 -> 6.93 / 7.88 -> 8.62; k = 2
#   TOTAL +0.6..+1.5 us.  The relaxed read before the wait and the ids' read at L2 after it cost more than the early
#   prefetch saves (10 experts, whose blocks fill the SMs' registers, lost most).  Removed from the source; the hook is
#   kept as profiling/patches/session32-grouped-guess.patch.
# STEP=dual: a second accumulator chain in the grouped GEMV (hook -DKBIT_GROUPED_DUAL=true, off; the dense kernel's
#   DUAL).  Its warps run 2 (down) to 4-6 (gate/up fused) steps of 16 pairs with one MMA chain each (4 HMMA a step);
#   two chains halve the dependent HMMA sequence.  NVRTC: the LB kernels at k = 4 107 -> 124 registers, no spills.
#   Expect -0.05..-0.15 us on gate/up fused, less on down; k = 2 / 4, 8 / 10 experts, 1 / 4 tokens, two passes,
#   default launch (and stable, +stable=1).
if [ "$STEP" = dual ]; then
  for pass in 1 2; do
    SHAPES=moe_gu_fused,moe_dn KS=2,4 MS=1,4 ES=8,10 MOE_MMA=0 \
      MOE_VARIANTS="dual:-DKBIT_GROUPED_DUAL=true;news:+stable=1;duals:-DKBIT_GROUPED_DUAL=true +stable=1" \
      timeout 200 python3 profiling/moe_ab.py --out "$W" > "$W/moe_dual39_$pass.log" 2>&1
    echo "## pass $pass"; grep -E "^moe_|CHECK|^TOTAL" "$W/moe_dual39_$pass.log"
  done
fi
#   Got (run39_dual.tgz, moe_dual39_{1,2}.log; git 37d2cd6): within +-1 %, no gain to keep.  k = 4 default launch,
#   new / dual: gate/up fused 8 experts 6.83-6.86 / 6.81-6.84 (1 token), 6.92-6.94 / 6.87-6.88 (4), 10 experts
#   7.88-7.90 / 7.84-7.85; down 8 experts 4.46-4.47 / 4.54-4.55 (slower), 10 experts equal; k = 2 10 experts -0.05..-0.1
#   TOTAL, 8 experts +0.03..+0.1.  The hook removed again (a one-line template argument).
finish_run run39
