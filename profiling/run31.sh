#!/usr/bin/env bash
# Prepared in the twenty-seventh session (2026-11-27) for the next one: the dense wgmma kernel's plan re-measured for
# its TMA stages (the stage and split rules were tuned on the cp.async path).  Run from the repo root:
#   OUT=/tmp/out STEP=stages bash profiling/run31.sh     (then STEP=minb)
. profiling/run_env.sh
start_run stages
# STEP=stages (~4 min on a bare machine): forced pipeline depths 4 / 6 / 8 against the plan's (choose_stages: the
#   deepest that fits at the most CTAs per SM, up to 8 at TOK = 128), k = 4, M = 64 / 128, the five dense shapes.
#   Why: with TMA a stage costs one thread three copy instructions, so a deeper prefetch is free in issue; with
#   cp.async more stages also meant a longer wait switch.  Expected: equal within ~1 % if the loop is issue-bound
#   (the twenty-first session's model), faster at 8 only if the copies still arrive late (the per-iteration
#   timeline, profiling/wgmma_trace.py, would then show the mbarrier wait > 0.1 us a tile).
if [ "$STEP" = stages ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  GEMM=0 DQ=0 WG=1 WGSTAGES=4,6,8 KS=4 MS=64,128 SHAPES_=gateup,down,Q,O,KV timeout 200 python3 profiling/gemm_probe.py \
    2>&1 | tee "$W/stages31.log" | tail -40
fi
# STEP=minb: a second CTA per SM for the TMA kernel (-DKBIT_WG_MINB=2: TOK = 128 at 128 registers, no spills under
#   nvcc 13; TOK = 64 is at 95 already) with forced split counts 2..8 (dense_splits aims at one CTA per SM, so the
#   second slot only fills with more splits).  The cp.async kernel measured no gain from two CTAs per SM (twelfth
#   session); with one thread issuing the copies the two CTAs' dequantize and MMA may overlap better.  Expected: M = 128
#   gate/up / Q (40 / 32 strips) -3..-8 % if the loop is latency-bound per warp, nothing if it is issue-bound per SM.
if [ "$STEP" = minb ]; then
  for o in "" "-DKBIT_WG_MINB=2"; do
    echo "## KBIT_WGMMA_OPTS='$o'"
    KBIT_WGMMA_OPTS="$o" GEMM=0 DQ=0 WG=1 WGSPLITS=2,3,4,6,8 KS=4 MS=128 SHAPES_=gateup,down,Q,O \
      timeout 200 python3 profiling/gemm_probe.py 2>&1 | tee "$W/minb31${o:+_2}.log" | tail -30
  done
fi
# STEP=quick (the twenty-seventh session's last ~250 device seconds): both at M = 128 only, fewer variants.
if [ "$STEP" = quick ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  GEMM=0 DQ=0 WG=1 WGSTAGES=4,6,8 KS=4 MS=128 SHAPES_=gateup,down,Q,O,KV timeout 70 python3 profiling/gemm_probe.py \
    2>&1 | tee "$W/stages31q.log" | tail -12
  for o in "" "-DKBIT_WG_MINB=2"; do
    echo "## KBIT_WGMMA_OPTS='$o'"
    KBIT_WGMMA_OPTS="$o" GEMM=0 DQ=0 WG=1 WGSPLITS=2,4,8 KS=4 MS=128 SHAPES_=gateup,Q \
      timeout 60 python3 profiling/gemm_probe.py 2>&1 | tee "$W/minb31q${o:+_2}.log" | tail -6
  done
fi
# Measured (STEP=quick, H100, 2026-11-27): stages 6 = 8 within ~0.2 us, 4 slower by 0.4-1.1 us; MINB=2 leaves
#   occ = 1 at TOK = 128 (shared memory: ~120 KB a CTA), gate/up / Q equal.  STEP=stages / minb need not run as written.
finish_run run31
