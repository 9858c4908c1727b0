#!/usr/bin/env bash
# Forty-ninth session (2026-11-29).  From the repo root:  OUT=/tmp/out STEP=parts bash profiling/run56.sh  (carry .git_rev)
. profiling/run_env.sh
start_run parts
# STEP=parts: where the dense wgmma kernel's time at M = 128 / 256 goes in the bench's own setting (graph replay,
#   safe PDL), by taking parts out (diagnostic hooks, results wrong by design: bench marks the cells '!'):
#   -DKBIT_WG_NO_TABLES (no pair / scale table build), -DKBIT_WG_NO_SUM (no split-K sum: every split stores its own
#   partial as C), both.  Why: the H200 trace (wgmma_trace33, cold single launches) has gate/up M = 128 at tables
#   1.2 us + tile 0 0.5-0.8 + main loop 5.7-6.3 + split-K wait and sum 3.6-4.2 (last CTA; 3 workspace splits) +
#   epilogue 1.1-1.4 of a 10-13.5 us CTA life, and the probes of the last two sessions priced only the loop.
#   Issue 4's 0.87x at M = 128 needs -6.3 us of the 58.8 us TOTAL.
# Expect: NO_SUM -2..-4 us on gate/up (3 workspace splits), -1..-2 us on down / Q / O (cluster sums), ~0 at M = 256
#   where one split runs; NO_TABLES -0.3..-1 us a shape where the build is on the path (one CTA an SM, so the next
#   launch's CTAs start on an SM only when this one's left).  A part worth >= 3 us of the M = 128 TOTAL is the next
#   target; under 1 us, not.
if [ "$STEP" = parts ]; then
  for pass in 1 2; do
    for arm in base notab nosum both; do
      case $arm in
        base) h="" ;; notab) h="-DKBIT_WG_NO_TABLES" ;; nosum) h="-DKBIT_WG_NO_SUM" ;;
        both) h="-DKBIT_WG_NO_TABLES -DKBIT_WG_NO_SUM" ;;
      esac
      [ "$pass" = 2 ] && [ "$arm" = both ] && continue
      wg_arm "parts56-$arm-$pass" "$h" 128,256 "## $arm pass $pass"
    done
  done
  finish_run run56
fi
# Result (parts, H200, `nvidia-h200_2026-11-29_{bench_parts56-*,parts56-*}`; two alternations within 0.1 us): the split-K
#   sums are the part.  k = 4 WGMMA TOTAL M = 128 base 58.68 / 58.75 us, NO_TABLES 58.33 / 58.37 (-0.6 %), NO_SUM 44.97 /
#   44.96 (-23 %), both 44.72; M = 256 80.06 / 80.09, 79.36 / 79.44, 66.22 / 66.32 (-17 %).  NO_SUM per shape at M = 128:
#   gate/up 13.97 -> 9.66 (3 workspace splits), down 13.88 -> 11.27 (6 cluster splits), Q 12.11 -> 9.70 (3 cluster), O
#   12.30 -> 9.75 (6 cluster), KV 6.43 -> 4.60 (TOK 64, 8 cluster); M = 256 down 19.52 -> 14.62, O 17.41 -> 12.47, Q 14.41
#   -> 12.55, KV 7.68 -> 5.61, gate/up unchanged (one split).  Without its sums M = 128 would be 0.98x fp16 (45.7 us);
#   the 0.87x target needs -6.3 us, i.e. the sums at half their cost.  The table build is not on the path.
# STEP=probe: profiling/reduce_probe.py -- the split-K exchange alone, DSMEM pull (the kernel's cluster sum) against an
#   L2 exchange (partials to a global workspace, the cluster barrier, shares read from L2), S = 2 / 3 / 6, one CTA an SM.
# Expect: if DSMEM's per-SM rate (~27 GB/s from the trace: 64 KB in ~2.4 us) is the limit, the L2 form's share sum
#   ~3x faster (the workspace sum read ~110 GB/s an SM, eleventh session) and its write + barrier ~0.6-1 us: the
#   whole exchange ~1.5 us against ~2.7; if not, no form of the exchange is worth building into the kernel.
if [ "$STEP" = probe ]; then
  timeout 200 python3 profiling/reduce_probe.py > "$W/reduce56${TAG:-}.log" 2>&1
  cat "$W"/reduce56*.log
  finish_run run56
fi
# Result (probe, H200, `nvidia-h200_2026-11-29_reduce56{a,b,c,d,}.log`: the probe as it grew over four runs, then once whole):
#   every way of exchanging a 64 KB partial among 2 / 3 / 6 CTAs, one an SM, 32-120 CTAs at once, costs ~2-3 us
#   (write + barrier + share sum, p50): DSMEM pull 2.0-2.6 (J = 1, 2, 4 alike: more loads in flight only lengthen each
#   round trip), pull with the own share read locally the same (so not the remote bytes alone), push by
#   st.shared::cluster 1.5-2.7 + 0.35-0.5 local sum, push by TMA bulk copies 1.0-2.5 + 1.2-1.6 (the closing barrier
#   waits for the slowest peer), the L2 exchange 2.0-2.7 (write + barrier) + 1.1-1.7 (read), written by one TMA bulk
#   store 1.6-2.0 + 0.9-1.3, half over DSMEM and half through L2 1.4-2.0 + 0.9-1.3.  Per SM that is ~20-30 GB/s out
#   whichever path, and the paths do not add up.  So no exchange form halves the kernel's ~2.4-4.3 us sums: the
#   kernel's pull (~2.4 incl. 0.3 staging) is within ~0.3-0.5 us of the best form (push from registers, S <= 3; at S = 6
#   push is slower).
# STEP=cl: profiling/cluster_probe.py at M = 128 (and 256): per split count, the workspace sum, the cluster sum, and the
#   cluster sum launched spread (one CTA an SM), with cuOccupancyMaxActiveClusters.  Why: parts56 put the split-K sums
#   at 13.7 of the 58.7 us M = 128 TOTAL, and the probe (reduce56) at ~2-3 us for any exchange of a 64 KB partial (the
#   fabric's ~25-30 GB/s an SM), so the cheapest sum is the one with the fewest bytes per SM and no L2 round trip:
#   gate/up runs 3 workspace splits (its sum 4.3 us) because 40 clusters of 3 were not resident at once.
# Expect: gate/up cl+sp at ks = 3 ~2 us under ws if the H200 holds 40 clusters of 3 one an SM (mac >= 40); else the
#   clustered launch runs in two waves and loses.
if [ "$STEP" = cl ]; then
  SHAPES_=gateup,Q,down,O,KV MS=${MS:-128,256} KSL=d,2,3,4,6,8 timeout 400 python3 profiling/cluster_probe.py \
    > "$W/cl56.log" 2>&1
  cat "$W/cl56.log"
  finish_run run56
fi
# Result (cl, H200, `nvidia-h200_2026-11-29_cl56{a,}.log`; cl56a: M = 128 / 256, its residency query printed 0 -- the
#   probe queried above the kernel's shared-memory limit; fixed to wgmma.cluster_capacity, cl56: M = 128): one an SM
#   the H200 holds 132 CTAs in clusters of 2, 117 in clusters of 3 (39 clusters), 120 of 4, 102 of 6, 120 of 8.  So
#   gate/up's 40 tiles x 3 splits (120 CTAs) cannot sum over clusters of 3 (cl 23.5 us, a second wave, against 14.0
#   through the workspace), nor Q over clusters of 4 (19.7 vs 13.0 ws) or down / O at M = 256 (32.4 / 28.0 vs 19.5 /
#   17.3).  The plan's picks are the fastest cells (gate/up 3 ws, Q 3 cl, down / O 6 cl at M = 128).  One tile short:
#   with 39 clusters of 3 resident, gate/up's cluster sum would be ~Q's (12.1 us against 14.0).
# STEP=sweep: the dense wgmma plan's split count at M = 128 on the H200 (run48.sh's sweep was M = 32 only; the model
#   TILE_US / WS_SPLIT_US was fitted on the H100): gemm_probe's wgmma at its plan and at ks = 1..8, each with the
#   cluster and the workspace sum, TOK 64 / 128.
# Expect: the plan within ~3 % of the best; gate/up (3 workspace splits) is the cell most likely to gain (2 clustered
#   splits, or 4).
if [ "$STEP" = sweep ]; then
  GEMM=0 DQ=0 WG=1 WGNOCL=1 WGSPLITS=1,2,3,4,5,6,8 WGTOKS=64,128 KS=4 MS=${MS:-128} \
    SHAPES_=${SHAPES_:-gateup,Q,down,O,KV} timeout 400 python3 profiling/gemm_probe.py > "$W/ksweep56.log" 2>&1
  tail -3 "$W/ksweep56.log"
  ksweep_summary "$W/ksweep56.log"
  finish_run run56
fi
# Result (sweep, H200, `nvidia-h200_2026-11-29_ksweep56.log`): the plan is the fastest cell or within 0.7 % at M = 128 on
#   all five shapes (ks = 1..8, cluster / workspace, TOK 64 / 128); TOK = 64 at M = 128 (every weight tile dequantized
#   twice, 32 KB partials) no faster (Q 11.96 vs 12.05, down 15.68 vs 13.73, O 13.69 vs 12.25).  gate/up with one split
#   (40 CTAs, no sum) 20.44 us: ~0.55 us a K tile.
# STEP=lut: the decode GEMV at M = 1 without its pair / quad table build (-DKBIT_EXPERIMENT_NO_LUT, results wrong by
#   design), k = 4 and 2, the five TOTAL shapes, two passes (gemv_ab, +cap=1: the blocks-an-SM cap as the plan).  Why:
#   nocomp48 put gate/up k = 4's compute at 1.25 us over its loads against ~0.6 on down / Q / O, though gate/up and down
#   stream the same weights an SM; gate/up runs ~5 four-warp blocks an SM, each building its own 32 KB table (~0.65 us of
#   an SM's shared-memory stores a launch, against ~0.26 for down's two blocks).  The twenty-second session found the
#   build hidden (lut22: TOTAL 19.36 vs 19.12), on a kernel ~10 % slower than today's.
# Expect: if the build is now on the path, gate/up -0.3..-0.6 us and the others -0.1; then one table an SM (the C8
#   groups as slices of one block) is worth building.  If not, no change, as in lut22.
if [ "$STEP" = lut ]; then
  AB_NOBASE=1 KS=4,2 MS=1 SHAPES=gateup,down,Q,O,KV AB_VARIANTS="nolut:-DKBIT_EXPERIMENT_NO_LUT +cap=1" \
    CUT=200 gemv_ab_twice lut56 200
  finish_run run56
fi
# Result (lut, H200, `nvidia-h200_2026-11-29_gemv_lut56_{1,2}.log`): k = 4 the build stays hidden -- TOTAL 17.16 / 17.19
#   -> 17.10 / 17.13 us (-0.3 %; gate/up 4.26 -> 4.31, i.e. not where gate/up's extra compute is); k = 2 (the 32 KB quad
#   table) 14.93 / 14.94 -> 14.52 / 14.52 (-2.7 %; Q 3.02 -> 2.86, down 3.58 -> 3.48, gate/up 3.46 -> 3.41).  Even no
#   table at all leaves k = 2 short of the 3x target (13.6 us, -9 %) and k = 4 of 2.5x (16.3 us).  (Some nolut cells
#   came out right: each block found the previous launch's table in place in its shared memory.)
