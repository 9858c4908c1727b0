#!/usr/bin/env bash
# Forty-seventh session (2026-11-29).  From the repo root:  OUT=/tmp/out STEP=bal bash profiling/run54.sh
# (carry .git_rev, ab_prev)
. profiling/run_env.sh
start_run bal
# STEP=bal: balanced splits in the grouped wgmma kernel (grouped_plan's `whole`; kbit_wgmma_grouped's whole > 0 mapping).
#   moe down at 64 tokens an expert, 10 experts: 160 tiles of 8 K tiles on 132 SMs of two CTAs each -- one CTA a tile
#   (the plan before) leaves 28 SMs with two whole tiles (the chained call 8.48 us against 6.30 at 8 experts' 128 tiles,
#   fp16 bmm 8.09; moe_ks53).  Balanced: 56 tiles whole, 104 in halves, 264 CTAs, a whole tile beside a half.
#   (1) GPU tests of the mapping (every n, tails, understated max_tokens, graph) and the grouped wgmma tests around it.
#   (2) moe_ab: down at 64 tokens, 10 / 12 / 16 experts, k = 4 and 5, default and chained launch, balanced against
#   one CTA a tile (+whole=0).
# Expect: 10 experts chained 8.48 -> ~7.3-7.8 us (-8..-14 %: the busiest SMs 16 -> 12 K tiles, two CTAs an SM overlapping
#   partly, a workspace sum on the halves), default launch alike; 12 experts (192 tiles, 72 whole) a smaller gain; 16
#   experts (256 tiles, 248 whole) about equal.  Tests pass.
if [ "$STEP" = bal ]; then
  gpu_tests "$W/gpu_tests_bal54.log" 250 tests/test_grouped_gpu.py -k "balanced or forced_splits or wgmma_understated"
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_bal54.log" | head -20
  KS=4 MS=64 ES=10,12,16,8 SHAPES=moe_dn moe_wg "$W/moe_bal54.log" 150 "d:;d0:+whole=0;ch:+chained=1;ch0:+chained=1 +whole=0"
  KS=5 MS=64 ES=10 SHAPES=moe_dn moe_wg "$W/moe_bal54k5.log" 100 "d:;d0:+whole=0;ch:+chained=1;ch0:+chained=1 +whole=0"
  finish_run run54
fi
# Result (bal, H200, `nvidia-h200_2026-11-29_{gpu_tests_bal54,moe_bal54,moe_bal54k5}.log`): correct (10 GPU tests passed:
#   every n of whole tiles, k = 2..5, fp16 / bf16, K tails, understated max_tokens, graph replay), but not faster --
#   down 64 tokens k = 4, balanced / one CTA a tile: 10 experts chained 9.31 / 8.49 us, default 10.62 / 10.56; 12 experts
#   chained 9.45 / 8.67, default 10.51 / 10.66; 16 experts 9.80 / 9.84 (248 of 256 tiles whole: the same grid); k = 5 10
#   experts chained 10.47 / 9.72.  What it showed: the time follows the CTAs an SM holds, not their K tiles -- one CTA
#   an SM (8 experts) 6.34 us chained, two on 28 SMs (10 experts) 8.49, two on 124 SMs (16 experts) 9.84: a second CTA
#   costs an SM ~2-3.5 us of fixed work (its tables, pipeline fill, epilogue) whatever its K; the balanced grid put two
#   CTAs on every SM, plus a workspace sum on the halves.  Reverted; the change is
#   `profiling/patches/session47-wg-balanced-splits.patch` (kernel mapping, plan rule, tests, moe_ab +whole=).
# STEP=trace: where a second CTA on an SM spends its ~2-3.5 us (bal above): profiling/wgmma_trace.py (one launch, cold
#   L2, the trace build) of the grouped down at 64 tokens, 8 / 10 / 16 experts (one CTA on every SM / two on 28 / two
#   on 124).
# Expect: at 16 experts every phase a little longer (shared issue slots and shared memory), the main loop's K tiles the
#   most (two CTAs' dequantize chains on one SM's schedulers); at 10 experts the doubled SMs' CTAs the longest lives.
if [ "$STEP" = trace ]; then
  KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE CASES="g:2048,512,8,64;g:2048,512,10,64;g:2048,512,16,64" timeout 200 \
    python3 profiling/wgmma_trace.py > "$W/wgmma_trace54.log" 2>&1
  cat "$W/wgmma_trace54.log"
  finish_run run54
fi
# Result (trace, H200, `nvidia-h200_2026-11-29_wgmma_trace54.log`; one cold launch each, ns): the second CTA slows the
#   main loop, not the prologue or epilogue.  8 experts (one CTA an SM): tables 1059, tile 0 +400, main loop 4212 (8 K
#   tiles, 529 a tile: copy issue 208, dequantize 162, wgmma issue 60, mbarrier wait 53), epilogue 642, life 6316.
#   10 experts: the doubled SMs' main loops 6247-6413 (iterations 770-923), lives 8370-8587; 16 experts: main loop p50
#   5670 (iteration 707).  Two CTAs an SM do 16 K tiles in ~6.3 us (394 ns a tile) against one CTA's 8 in 4.2 (529):
#   the SM's throughput grows 1.35x, its K-tile chain (thread 0's copy issue ~40 % of it at TOK = 64) is shared.
# STEP=prod: the trace's lead -- the dense wgmma kernel with a ninth warp issuing the TMA copies (hook
#   -DKBIT_WG_PRODUCER=1; THREADS 288), so the eight consumer warps' K-tile chain loses the copy issue.  Both arms with
#   the workspace sum (KBIT_WG_CLUSTER=0: the hook's producer exits before the cluster barriers), two alternations,
#   k = 4, M = 64 / 128 / 256, WGMMA column (checked against float64 by bench.py).
# Expect: if the copy issue sits on the chain (twenty-eighth session: moving it to consumer warps 1 / 5 only moved the
#   time into their dequantize), the K tile -20..-35 % and M = 128 TOTAL -10..-20 %; if TMA issue stalls the whole SM's
#   shared-memory pipe, no change.
if [ "$STEP" = prod ]; then
  export KBIT_WG_CLUSTER=0
  MS=64,128,256 ab_passes prod "-DKBIT_WG_PRODUCER=1"
  finish_run run54
fi
# Result (prod, H200, `nvidia-h200_2026-11-29_{bench_prod54-*,prod54-*}`; the first call failed at launch: the producer
#   used the stage mbarriers before thread 0 had initialized them -- fixed by initializing them in the issuing thread,
#   `..._bench_prod54-first-fail.log`): correct (bench.py's float64 check passed in every cell) and slower everywhere,
#   both passes alike -- k = 4 WGMMA TOTAL, base / producer warp: M = 64 49.89 / 56.44 us, M = 128 65.20 / 74.90, M = 256
#   83.38 / 104.04 (gate/up M = 128 14.00 / 16.50).  Taking the copy issue off the consumers' chain does not shorten the
#   K tile: with the twenty-eighth session's four placements, five forms now say the tile is not bound by thread 0's
#   issue path.  Reverted; `profiling/patches/session47-wg-producer-warp.patch`.
