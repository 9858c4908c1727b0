#!/usr/bin/env bash
# Forty-eighth session (2026-11-29).  From the repo root:  OUT=/tmp/out STEP=ws bash profiling/run55.sh
# (carry .git_rev)  Steps ws, pp and pp2 use hooks that were reverted: apply
# profiling/patches/session48-wg-warp-specialized.patch first (`git apply`) to run them again.
. profiling/run_env.sh
start_run ws
# STEP=ws: the dense TMA wgmma kernel warp-specialized (hook -DKBIT_WG_WS=1, THREADS 288): a ninth warp issues each
#   stage's copies once the stage's "empty" mbarrier says the 8 consumer warps retired the wgmma group that read it, and
#   the consumers' K-tile loop has no block barrier at all (a warpgroup barrier between dequantize and wgmma) -- each
#   warpgroup runs at its own pace, and the prefetch lead is stages - 1 tiles (was stages - 2).  Differs from the
#   forty-seventh session's producer warp (`prod`), which only issued the copies and kept the per-tile __syncthreads.
#   Both arms with the workspace sum (KBIT_WG_CLUSTER=0: the producer exits before the epilogue's cluster barriers),
#   two alternations, k = 4, M = 32 / 64 / 128 / 256, WGMMA column (bench.py checks every cell against float64).
# Expect: if the per-tile block barrier (8 warps' dequantize chains in lock step, 2 warpgroups' wgmma serialized behind
#   it) is what holds the K tile at ~540 ns, the two warpgroups desynchronize and overlap one's dequantize with the
#   other's MMA: K tile -10..-25 %, M = 128 / 256 TOTAL -5..-12 %; if the tile is bound by the SM's shared-memory or
#   issue throughput, no change (or slower, as the prod step).
if [ "$STEP" = ws ]; then
  export KBIT_WG_CLUSTER=0
  MS=32,64,128,256 ab_passes ws "-DKBIT_WG_WS=1"
  finish_run run55
fi
# Result (ws, H200, `nvidia-h200_2026-11-29_{bench_ws55-*,ws55-*}`): correct (bench.py's float64 check passed in every
#   cell) and slower everywhere, both passes alike -- k = 4 WGMMA TOTAL, base / warp-specialized: M = 32 44.65 / 47.34 us,
#   M = 64 50.07 / 52.53, M = 128 65.08 / 69.12, M = 256 83.28 / 89.10 (gate/up M = 128 13.96 / 14.87).  The twenty-first
#   session's producer warpgroup with full / empty mbarriers (cp.async path) was slower too: with the lock step gone the
#   K tile does not shorten, so it is not the block barrier's coupling.  Reverted;
#   `profiling/patches/session48-wg-warp-specialized.patch` (the WS, ping-pong and WS=2 hooks of the steps below).
# STEP=lds: profiling/wgmma_lds_probe.py -- the K tile's loop (TOK = 128, one 256-thread CTA an SM, 6 rotating stages)
#   with nothing from DRAM: the MMA alone, the dequantize's shared-memory loads alone (planes LDS.128, pair lookups,
#   scale bytes), both, and with each kind of load taken out.
# Expect: the MMA alone ~280-300 ns a tile (the rate probe's ~90 % of peak); if the wgmma's B reads (32 KB a tile) and
#   the dequantize's ~290 LDS wavefronts share the shared-memory pipe, MMA + dequantize ~ their sum (~450-550 ns, near
#   the kernel's 540), and dropping the planes' LDS.128 (16 of the ~36 wavefronts a warp) moves it most; if they
#   overlap, ~ the larger of the two, and the kernel's remaining time is its copies / waits.
if [ "$STEP" = lds ]; then
  timeout 240 python3 profiling/wgmma_lds_probe.py > "$W/wgmma_lds55${ONLY:+_f16}.log" 2>&1
  cat "$W"/wgmma_lds55*.log
  finish_run run55
fi
# Result (lds, H200, `nvidia-h200_2026-11-29_wgmma_lds55.log`, the last of five runs as the probe grew, all alike;
#   ns a K tile, nothing from DRAM): MMA alone 288, the dequantize alone 213, both 441 -- additive, not the larger of
#   the two.  A light ALU dequantize (no loads, 116 alone) hides under the MMA (291), but neither taking out any one
#   kind of load (planes 384, lookups 426, scales 426), nor pipelining the dequantize so that no load sits between a
#   wgmma and the next tile's fragments (436), nor planes by LDG (493-500) or LDS.32 + SHFL (490), nor the register
#   decode (540-563; 499 without any load), nor two K tiles a wgmma group (451) gets near the MMA's time: while the
#   wgmma groups run, the warps' other work proceeds at ~30 % of its speed (tile ~ MMA + 0.7 x dequantize).  What
#   moved it in the probe: the warpgroups' groups issued in turn (ping-pong, FlashAttention-3's warp scheduler
#   barriers): 441 -> 417, with the pipelined dequantize 380 (-14 %).  A sixth run (ONLY=fp16: the MMA with fp16
#   accumulators, to test register-file traffic as the shared resource) hung at its first kernel and was cut by the
#   240 s timeout; that variant was removed from the probe.
# STEP=pp: the ping-pong in the dense kernel -- hooks -DKBIT_WG_WS=1 -DKBIT_WG_PINGPONG=1 (the warp-specialized loop,
#   whose warpgroup barrier becomes the ping-pong pair), against the plain kernel, workspace sums, two alternations.
# Expect: from the probe, the K tile -5 % (no pipelining yet) on top of WS's +5-7 % loss: about equal to the base; if
#   ping-pong pays more in the real loop (copies, waits), M = 128 / 256 TOTAL -3..-6 %.
if [ "$STEP" = pp ]; then
  export KBIT_WG_CLUSTER=0
  MS=64,128,256 ab_passes pp "-DKBIT_WG_WS=1 -DKBIT_WG_PINGPONG=1"
  finish_run run55
fi
# Result (pp, H200, `nvidia-h200_2026-11-29_{bench_pp55-*,pp55-*}`): correct, still slower than the plain kernel but
#   faster than WS alone -- k = 4 WGMMA TOTAL base / WS + ping-pong (WS alone, ws above): M = 64 49.86 / 51.72 (52.53),
#   M = 128 64.98 / 68.20 (69.11), M = 256 83.05 / 86.34 (89.07).  Ping-pong is worth ~1.5-3 %; the ninth warp's loop
#   costs ~6 %.
# STEP=pp2: the same loop with no ninth warp (-DKBIT_WG_WS=2): thread 0 issues each tile's copies after its wgmma
#   group, waiting on the buffer's empty mbarrier -- the plain kernel's copy issue, minus the block barrier, plus
#   ping-pong; clusters allowed again (no thread exits early).  Arms: base / WS=2 + ping-pong (two alternations), then
#   WS=2 without ping-pong (one pass).
# Expect: if the producer warp was the ~6 % cost, WS=2 + ping-pong ~2-3 % faster than the base at M = 128 / 256.
if [ "$STEP" = pp2 ]; then
  MS=64,128,256 ab_passes pp2 "-DKBIT_WG_WS=2 -DKBIT_WG_PINGPONG=1"
  wg_arm "pp2nopp-1" "-DKBIT_WG_WS=2" 64,128,256 "## WS=2 without ping-pong"
  finish_run run55
fi
# Result (pp2, H200, `nvidia-h200_2026-11-29_{bench_ppb55-*,ppb55-*,bench_ppbnopp55-1,ppbnopp55-1}`; the default
#   cluster sums in every arm): correct and much slower -- k = 4 WGMMA TOTAL base / WS=2 + ping-pong / WS=2 alone: M = 64
#   47.91 / 53.64 / 51.58 us, M = 128 58.55 / 64.69 / 62.50, M = 256 79.91 / 94.75 / 90.62.  Without the block barrier
#   the real loop loses 6-13 %, and ping-pong adds to the loss here: the probe's gain does not carry over once the
#   copies (thread 0 now waits on the empty mbarrier, i.e. on the other warpgroup) are in the loop.  All three hooks
#   reverted (cuda_src / kbitcupy back to 105e847).
# STEP=probes: the two probes after their common NVRTC set-up moved into wgmma_rate_probe.build (review): the rate probe
#   whole, the dequantize probe's first two variants.
# Expect: the rate probe's ~950-985 TFLOPS (twenty-first session) and the lds probe's 288 / 213 ns.
if [ "$STEP" = probes ]; then
  timeout 120 python3 profiling/wgmma_rate_probe.py > "$W/wgmma_rate55.log" 2>&1
  ONLY=only timeout 120 python3 profiling/wgmma_lds_probe.py >> "$W/wgmma_rate55.log" 2>&1
  cat "$W/wgmma_rate55.log"
  finish_run run55
fi
# Result (probes, H200, `nvidia-h200_2026-11-29_wgmma_rate55.log`): both run as before -- the rate probe 854-975 TFLOPS
#   (m64n128 x 2 warpgroups with random B, 6 stages, A rewritten: 874), the dequantize probe's variants within +-4 % of
#   the lds step's (MMA alone 291, dequantize alone 212).
# STEP=review: bench.py's GEMV column after the review (kbitcupy.gemv.fits now told the weight's layout, as matmul
#   asks it): O and KV, k = 4 / 5, M = 1 / 24 / 32 -- the GEMV where its plan fits, '-' past it (k = 5 past 16 rows, O's
#   staged A past 22 rows), times as in close53h2.
if [ "$STEP" = review ]; then
  timeout 200 python3 profiling/bench.py --out "$W" --M 1,24,32 --k 4,5 --shapes O,KV --columns GEMV,matmul --reps 15 \
    --tag review55 > "$W/bench_review55.log" 2>&1
  grep -E "^### M|^\| (O|KV) \|" "$W/bench_review55.log"
  finish_run run55
fi
# Result (review, H200, `nvidia-h200_2026-11-29_{bench_review55,review55}`): as expected -- the GEMV column runs O at
#   M = 1 (k = 4 3.53 us, as close53h2) and '-' at M = 24 / 32 (its staged A does not fit; matmul runs the next kernel),
#   KV on the token split at every M (k = 4 M = 32 3.11 us, k = 5 3.94); every cell passed the float64 check.
