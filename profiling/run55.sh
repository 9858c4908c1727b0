#!/usr/bin/env bash
# Forty-eighth session (2026-11-29).  From the repo root:  OUT=/tmp/out STEP=ws bash profiling/run55.sh
# (carry .git_rev)
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
