#!/usr/bin/env bash
# Thirty-seventh session (2026-11-27).  From the repo root:  OUT=/tmp/out STEP=gsweep bash profiling/run44.sh
. profiling/run_env.sh
start_run gsweep
RUN=44
# PF1: the pf1 build of the clus / row / deep / probe steps: the early step's hooks on (they became the defaults since, and
# the hooks were removed: these steps rebuild the measured tree only at its commit).
PF1="-DKBIT_GEMM_SUM_ALL=1 -DKBIT_GEMM_HALF=1 -DKBIT_GEMM_PROBE_DEFCB=1 -DKBIT_GEMM_EARLY=1 -DKBIT_GEMM_PF=1"
# STEP=gsweep: issue 4's "kbit_gemm at 60 % of SOL at M = 8" (H100 m8-39: gate/up 9.33 us = 40 %, down 13.04 = 29 %;
#   the decode GEMV 6.49 / 6.12).  Where does the fused kernel's time go at M = 8?  Plans: the default (gate/up TILE_N
#   128, 6 splits of 16 K steps, 240 CTAs; down 128, 16 splits of 40, 256 CTAs) against fewer splits and TILE_N = 64.
#   Probes (profiling/gemm_ab.py variants): sum = the split-K sum with every slot's load before the adds (the current
#   loop is a runtime-count chain of dependent L2 loads: 16 slots x ~0.6 us on down if not overlapped); defcb = the
#   default codebook as immediates (no global load before the table build); nocomp = no dequantize / MMA (results
#   wrong: the pipeline's and the fixup's own time); nofix = no count / sum / C store (results wrong: the fixup's cost).
#   Expect: sum -1..-3 us on down (16 slots), -0.5..-1 on gate/up (6); defcb -0.1..-0.3; nocomp shows whether the
#   dequantize + MMA chain or the memory / fixup skeleton is the bigger share; fewer splits at TILE_N = 64 may beat
#   the default on down (less to sum, 4 warps more an SM).
if [ "$STEP" = gsweep ]; then
  SHAPES=gateup,down KS=4 MS=8 \
    GAB_PLANS="t128k2:tile_n=128,ks=2;t128k4:tile_n=128,ks=4;t128k8:tile_n=128,ks=8;t64k1:tile_n=64,ks=1;t64k2:tile_n=64,ks=2;t64k4:tile_n=64,ks=4;t64k8:tile_n=64,ks=8" \
    GAB_VARIANTS="sum:-DKBIT_GEMM_SUM_ALL=1;defcb:-DKBIT_GEMM_PROBE_DEFCB=1;nocomp:-DKBIT_GEMM_PROBE_NOCOMP=1;nofix:-DKBIT_GEMM_PROBE_NOFIX=1" \
    gemm_ab_log gsweep44 400
fi
# Result (gemm_ab_gsweep44.log, H100, one pass): the split-K sum is the largest cost.  Default plans: gate/up TILE_N
#   128, 8 splits (320 CTAs), down 128 x 20 splits.  gate/up cur 9.33 -> sum 8.0 (nofix 5.93); down 12.90 -> sum 9.01
#   (nofix 5.72); best plans with sum: gate/up t128k4 7.50, down t128k8 7.17 (4-5 K steps a split).  defcb -0.35 us at
#   the default plans; nocomp (the pipeline without the dequantize / MMA) 6.1-7.8: the kernel is not bound by its math.
#   TILE_N = 64 slower at every split count (t64k8 down 8.09 with sum).
# STEP=early: the fixup and the prologue, on top of sum (kept as the default if it wins): half = M <= 8 partials as
#   8-byte halves (rows g + 8 are past M: half the workspace bytes and the sum's loads); early = the default codebook's
#   pair table and the scale table built before the PDL wait (shared memory only; defcb probe for the codebook);
#   pf1 / pf2 / pfall = the first 1 / 2 / all K steps of the CTA's weights L2-prefetched before the wait (the decode
#   GEMV's safe-mode prefetch).  Expect: half -0.1..-0.4 us (down's 8..20 slots), early -0.3..-0.5 (defcb's 0.35 plus
#   the table build), pf -0.3..-1 (a CTA's whole weight read is 2-5 steps: the stream could start under the
#   previous kernel's tail; the GEMV lost with all its steps prefetched).  Target: 60 % of SOL = 5.65 / 5.95 us.
if [ "$STEP" = early ]; then
  B="-DKBIT_GEMM_SUM_ALL=1"; H="$B -DKBIT_GEMM_HALF=1"; E="$H -DKBIT_GEMM_PROBE_DEFCB=1 -DKBIT_GEMM_EARLY=1"
  SHAPES=gateup,down KS=4 MS=8 \
    GAB_PLANS="t128k4:tile_n=128,ks=4;t128k8:tile_n=128,ks=8;t128k10:tile_n=128,ks=10;t64k8:tile_n=64,ks=8" \
    GAB_VARIANTS="sum:$B;half:$H;early:$E;pf1:$E -DKBIT_GEMM_PF=1;pf2:$E -DKBIT_GEMM_PF=2;pfall:$E -DKBIT_GEMM_PF=8" \
    gemm_ab_log early44 400
fi
# Result (gemm_ab_early44.log, H100, one pass), us, default plan / t128k8: gate/up sum 8.01 / 8.00, half 7.24 / 7.26,
#   early 6.92 / 6.90, pf1 6.26 / 6.09 (55-56 %); down (default 20 splits) sum 9.11, half 8.01, early 7.68, pf1 7.11;
#   t128k8 6.85 half, 6.47 pf1 (56 %).  pf2 / pfall = pf1 within noise.  All four kept as candidates (bit-identical
#   results except the probes); 60 % needs ~0.4 us more: the last CTA's fence + count + slot loads.
# STEP=clus: the split-K sum over a thread block cluster (kbit_gemm's new cluster path: every CTA sums 1 / ks of
#   the tile over DSMEM, no fence / count / workspace; the wgmma kernel's scheme), with the pf1 prologue, at M = 8 on
#   every dense shape.  Expect: -0.3..-0.6 us against pf1's workspace sum at the same plan (two cluster barriers
#   ~0.5 us against the fence + count round trip and the last CTA's slot loads ~1.2 us).
#   First call (clus44a): every cluster plan refused (the compute-capability lookup read a missing attribute: fixed),
#   and the source with the cluster path took ptxas to 72-82 registers where it had 127-128 (TILE_N = 128, M_BLOCKS = 1):
#   the low-occupancy plans slowed by 1-3 us (down t128k4 cur 10.5 -> 13.5).  pf1nc = the same without the cluster
#   code (-DKBIT_GEMM_NOCLUSTER), to tell the register change from the sum.
#   Second call (clus44b): pf1nc on the cluster plans ran the workspace path into out (no workspace): illegal address at
#   down c128k6.  Before it: gate/up c128k8 pf1 (72 registers) 57 % of SOL against t128k8 pf1 53 %: the cluster sum
#   -0.4 us.  Now the barrier-and-sum part is out of line (__noinline__ cluster_sum_c): 128 registers and the 532-
#   instruction K step again (nvcc SASS), pf1nc dropped.
if [ "$STEP" = clus ]; then
  SHAPES=gateup,down,Q,O,KV,lin_key,lin_value KS=4 MS=8 \
    GAB_PLANS="t128k8:tile_n=128,ks=8;c128k4:tile_n=128,ks=4,cl=1;c128k6:tile_n=128,ks=6,cl=1;c128k8:tile_n=128,ks=8,cl=1;c64k8:tile_n=64,ks=8,cl=1" \
    GAB_VARIANTS="pf1:$PF1" gemm_ab_log clus44 400
fi
# Result (clus44, H100, one pass, pf1 = E, us): the cluster sum at 8 splits vs the workspace sum at 8: gate/up 6.13 vs
#   6.21, Q 5.66 vs 6.00, linear value 5.62 vs 5.93, KV (TILE_N 64) 3.31 vs 3.75 -- but down 7.60 vs 6.49 and O 6.54 vs
#   5.76 (128 CTAs: a clustered grid packs CTAs onto fewer SMs); 4 / 6 splits on clusters slower everywhere.  Best per
#   shape: gate/up 56 %, down 56 %, Q 57 %, O 56 %, KV 53 %, linear key 55 %, linear value 58 %.  Short of 60 %: the K
#   step is 532 SASS instructions a thread (nvcc), ~130 of them load_stage's copies and ~64 the table lookups' IMADs.
# STEP=row: the 256-byte pair-table rows (k = 4: 64 copies, 64 KB; -DKBIT_GEMM_K4_ROW256=1): one PRMT a lookup's
#   offset, 532 -> 474 SASS instructions a K step (nvcc), at the cost of the third CTA an SM (104 KB).  Expect -0.2..-0.4
#   us where the grid fits two CTAs an SM (t128k6 on gate/up, t128k8 on down / O), worse at 320 CTAs.
if [ "$STEP" = row ]; then
  SHAPES=gateup,down,Q,O,KV,lin_key,lin_value KS=4 MS=8 \
    GAB_PLANS="t128k6:tile_n=128,ks=6;t128k8:tile_n=128,ks=8;c128k6:tile_n=128,ks=6,cl=1;c128k8:tile_n=128,ks=8,cl=1;c64k8:tile_n=64,ks=8,cl=1" \
    GAB_VARIANTS="pf1:$PF1;row:$PF1 -DKBIT_GEMM_K4_ROW256=1" gemm_ab_log row44 400
fi
# Result (row44, H100, one pass, us): no gain where it counts -- down t128k8 6.49 -> 6.45, O 5.70 -> 5.70, linear
#   key 4.23 -> 4.22; gate/up's best falls (t128k8 6.17 -> 9.74: 320 CTAs no longer resident at two an SM; t128k6 6.38);
#   linear value t128k8 5.94 -> 5.45.  11 % fewer instructions and no time: the K step at one CTA an SM is not
#   issue-bound.  Down's time grows ~0.5 us a K step a CTA (t128k8 / k6 / k4: 5 / 6.7 / 10 steps), of which the
#   nocomp probe put ~0.27 us on the dequantize + MMA: the rest is the pipeline waiting for its data, and the plan
#   keeps 3 stages (the depth for 3 CTAs an SM) where the grid has one CTA an SM.  Row256 not kept.
# STEP=deep: deep_stages (gemm.plan): the deepest pipeline (up to 8 stages, at most a split's steps + 1) at which
#   every SM still holds its share of the grid.  Down / O t128k8 (128 CTAs, 5 / 4 steps): 3 -> 6 / 5 stages, every
#   copy of a CTA in flight at once.  Expect down / O -0.5..-1 us; gate/up at 8 splits unchanged (2 steps: 3 stages
#   already); gate/up at 3 / 4 splits (120 / 160 CTAs, 5-6 / 4 steps) may then beat 8.  st3 = the old depth.
if [ "$STEP" = deep ]; then
  SHAPES=gateup,down,Q,O,KV,lin_key,lin_value KS=4 MS=8 \
    GAB_PLANS="t128k8st3:tile_n=128,ks=8,st=3;t128k8:tile_n=128,ks=8;t128k3:tile_n=128,ks=3;t128k4:tile_n=128,ks=4;t128k6:tile_n=128,ks=6;c128k8:tile_n=128,ks=8,cl=1;c128k4:tile_n=128,ks=4,cl=1" \
    GAB_VARIANTS="pf1:$PF1" gemm_ab_log deep44 400
fi
# Result (deep44, H100, one pass, us): deeper is slower -- down t128k8 3 -> 6 stages 6.57 -> 7.04, O 5.90 -> 6.10, gate/up
#   at 3 / 4 splits (7 / 5 stages) 7.59 / 7.09 against 6.15 at 8; every copy in flight at once delays step 0 (the decode
#   GEMV found the same).  deep_stages dropped; the plan keeps a forced `stages` (A/B).  Best per shape so far (pf1):
#   gate/up c128k8 6.02 (57 %), down t128k8 6.57 (55 %), Q c128k8 5.70 (57 %), O t128k8 5.90, KV c128k8 3.43, linear
#   key t128k8 4.36, linear value t128k4 5.70.
# STEP=probe: where gate/up's and down's remaining time is, on top of pf1 at t128k8: nofix (partials stored, no count /
#   sum / C: the fixup's share), nocomp (no dequantize / MMA), both; and t128k8 at 2 stages.
if [ "$STEP" = probe ]; then
  SHAPES=gateup,down KS=4 MS=8 GAB_PLANS="t128k8:tile_n=128,ks=8;t128k8st2:tile_n=128,ks=8,st=2" \
    GAB_VARIANTS="pf1:$PF1;nofix:$PF1 -DKBIT_GEMM_PROBE_NOFIX=1;nocomp:$PF1 -DKBIT_GEMM_PROBE_NOCOMP=1;none:$PF1 -DKBIT_GEMM_PROBE_NOFIX=1 -DKBIT_GEMM_PROBE_NOCOMP=1" \
    gemm_ab_log probe44 400
fi
# Result (probe44, H100, one pass; deep_stages was still on: down t128k8 ran 6 stages), us: gate/up pf1 6.07, nofix
#   6.36, nocomp 5.55, none 5.42 -- the skeleton alone (launch, prologue, copies) is 5.4 us = 63 % of SOL, the
#   dequantize + MMA ~0.5 us, the cluster-free fixup ~0.  Down (1 CTA an SM, 5 steps) pf1 7.03, nocomp 5.40, none 5.22:
#   the K steps' dequantize + MMA ~1.6 us, latency-bound at four warps an SM.  So: more warps on the same tile.
# STEP=kg: kbit_gemm with two warp groups splitting each CTA's K (KG = 2, 256 threads, M <= 16; the groups' sums
#   added in shared memory), the probes folded into the kernel (slot sum, M <= 8 halves, pair table before the wait
#   for the default codebook, one stage L2-prefetched, cluster sum option).  kg2 plans count splits in stages of two
#   K steps.  Expect down / O at g2k8 (128 CTAs, 8 warps an SM) -0.5..-1 us against t128k8; gate/up g2k4 (160 CTAs)
#   about t128k8's 6.1 or better (half the CTAs' prologues).
if [ "$STEP" = kg ]; then
  SHAPES=gateup,down,Q,O,KV,lin_key,lin_value KS=4 MS=8 \
    GAB_PLANS="t128k8:tile_n=128,ks=8;c128k8:tile_n=128,ks=8,cl=1;g2k4:tile_n=128,ks=4,kg=2;g2k5:tile_n=128,ks=5,kg=2;g2k8:tile_n=128,ks=8,kg=2;g2k4c:tile_n=128,ks=4,kg=2,cl=1;g2k8c:tile_n=128,ks=8,kg=2,cl=1;g64k8c:tile_n=64,ks=8,kg=2,cl=1" \
    gemm_ab_log kg44 400
fi
# Result (kg44, H100, one pass, us): KG = 2 is no general win -- down g2k8 6.83 vs t128k8 6.86, O 5.86 vs 6.11, Q g2k4
#   5.57 vs 6.05, linear value g2k4 5.53 vs 5.95, gate/up g2k4 6.78 vs 6.21 (c128k8 6.16).  Down at 8 warps an SM is
#   no faster than at 4: its K steps are not latency-bound either.  KG = 1 itself ran ~0.1-0.3 us slower than the
#   probes' build (ptxas: 96 registers where the probe build had 128; the K step's address math 532 -> 563 SASS).
# (The nomma / nodeq hooks were removed after this step, in the review commit: this step needs the tree before it.)
# STEP=probe2: what the K step is bound by at one CTA an SM (down t128k8 / g2k8) and at 2.4 (gate/up t128k8):
#   nomma (no MMA), nodeq (no table lookup / scale), nocomp (neither, nor the key build), nofix.
if [ "$STEP" = probe2 ]; then
  SHAPES=gateup,down KS=4 MS=8 GAB_PLANS="t128k8:tile_n=128,ks=8;g2k8:tile_n=128,ks=8,kg=2" \
    GAB_VARIANTS="nomma:-DKBIT_GEMM_PROBE_NOMMA=1;nodeq:-DKBIT_GEMM_PROBE_NODEQ=1;nocomp:-DKBIT_GEMM_PROBE_NOCOMP=1;nofix:-DKBIT_GEMM_PROBE_NOFIX=1" \
    gemm_ab_log probe2_44 400
fi
# Result (probe2_44, H100, one pass, us; the probes built alone, cur in the package's group): gate/up t128k8 cur 6.24,
#   nomma 6.32, nodeq 5.89, nocomp 5.56, nofix 4.72; down t128k8 cur 6.86, nomma 7.47, nodeq 6.41, nocomp 5.73, nofix
#   5.44.  The fixup (count, the last CTA's slot loads, C) is ~1.5 us of both: the largest share.  (The earlier probe's
#   nofix sat in the full-tile path only, so at M = 8 it measured nothing.)  The slot loads ran in two dependent rounds
#   at 8 splits (a runtime loop unrolled by 4): now 8 predicated loads at once for the 8-byte halves.  Also found: the
#   out-of-line cluster sum shared by a group's kernels set the TILE_N = 128 kernel's registers (96 vs 127): now one
#   copy a kernel.
# STEP=fix: the 8-at-once slot loads (package build) at M = 8 / 12 / 16, every dense shape; cluster and KG = 2 plans
#   beside.  Expect M = 8 gate/up / down t128k8 -0.3..-0.6 us (one L2 round instead of two).
#   First call (fix44_1): slower, gate/up t128k8 6.24 -> 6.60, down 6.86 -> 7.38 -- the group build's TILE_N = 128 kernel
#   at 96 registers again.  Now the whole epilogue (fixup + C) is out of line (gemm_epilogue, the sums handed over in
#   shared memory): the loop's registers no longer follow the epilogue's code (127 / 108 for KG = 1 / 2 with
#   __launch_bounds__(threads, 1); 537 SASS a K step).  The 8-at-once slot loads are an A/B variant (s8).
FIXRUN=${FIXRUN:-2}
if [ "$STEP" = fix ]; then
  SHAPES=gateup,down,Q,O,KV,lin_key,lin_value KS=4 MS=8,16 \
    GAB_PLANS="t128k4:tile_n=128,ks=4;t128k8:tile_n=128,ks=8;c128k8:tile_n=128,ks=8,cl=1;g2k4:tile_n=128,ks=4,kg=2;g2k8:tile_n=128,ks=8,kg=2;g2k4c:tile_n=128,ks=4,kg=2,cl=1;g2k8c:tile_n=128,ks=8,kg=2,cl=1" \
    GAB_VARIANTS="s8:-DKBIT_GEMM_SLOTS8=1;nofix:-DKBIT_GEMM_PROBE_NOFIX=1" gemm_ab_log fix44_$FIXRUN 400
fi
# Result (fix44_2, H100, one pass; package build with the epilogue out of line), us: s8 (8 slot loads at once) = the
#   unroll-4 loop within noise everywhere: not kept.  M = 8 best per shape: gate/up c128k8 6.24, down t128k8 6.72, Q
#   g2k4 5.46 / t128k4 5.64 / c128k8 5.80, O g2k8 5.79, KV c128k8 3.53, linear key t128k8 4.60, linear value g2k4 5.47 /
#   t128k4 5.68 / c128k8 5.83; nofix (no count / sum / C) 1.3-1.5 us under each.  KG = 2 wins 0.2-0.3 us on three
#   shapes and loses elsewhere: removed (the plan keeps one warp group).  The plan rule (small_m_plan): sm_90, M <= 16:
#   TILE_N 128, 8 splits, the cluster sum where the grid is >= 1.9 or <= 0.5 CTAs an SM.
# STEP=check: kbit_gemm's GPU tests, memcheck over profiling/sanitize_gemm.py (half / full slots, cluster sum, both
#   codebook paths, K tails), racecheck over its small part, and the M = 8 / 16 default plans on every dense shape.
if [ "$STEP" = check ]; then
  gpu_tests "$W/gpu_tests_gemm44.log" 240 tests/test_gemm_gpu.py
  compute-sanitizer --tool memcheck --error-exitcode 3 python3 profiling/sanitize_gemm.py > "$W/memcheck_gemm44.log" 2>&1
  echo "memcheck: exit $? ($(grep -c 'rel err' "$W/memcheck_gemm44.log") checks; $(grep -E 'ERROR SUMMARY|BAD' "$W/memcheck_gemm44.log" | tr '\n' ' '))"
  SAN_SMALL=1 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 3 python3 profiling/sanitize_gemm.py > "$W/racecheck_gemm44.log" 2>&1
  echo "racecheck: exit $? ($(grep -c 'rel err' "$W/racecheck_gemm44.log") checks; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|BAD' "$W/racecheck_gemm44.log" | tr '\n' ' '))"
  SHAPES=gateup,down,Q,O,KV,lin_key,lin_value KS=4 MS=8,16 gemm_ab_log check44 200
fi
# Result (check, H100, git 7afb5ea + this tree = 57c822d): tests/test_gemm_gpu.py 49 passed; memcheck over
#   sanitize_gemm.py 840 checks, 0 errors; racecheck (SAN_SMALL) 120 checks, 0 hazards.  Default plans, M = 8 / 16, us:
#   gate/up 6.22 / 6.58, down 6.74 / 7.31, Q 5.80 / 6.18, O 6.01 / 6.56, KV 3.65 / 3.79, linear key 4.66 / 5.21, linear
#   value 5.83 / 6.19 (gemm_ab's SOL read).  NVRTC cubins: only the 16 gemm groups changed (cubin_diff44).
# STEP=final: the harness table (bench.py: its own SOL read, fp16 cuBLAS) at M = 8 / 16, k = 4, GEMV / GEMM / matmul.
#   TAG names the run (gemm44 on the H100, gemm44h on the H200).
if [ "$STEP" = final ]; then
  timeout 400 python3 profiling/bench.py --out "$W" --M 8,16 --k 4 --columns GEMV,GEMM,matmul --reps 15 \
    --tag "${TAG:-gemm44}" > "$W/bench_${TAG:-gemm44}.log" 2>&1
  grep -E "^### M|^\| (gateup|down|TOTAL)" "$W/bench_${TAG:-gemm44}.log"; ls "$W"
fi
# Result (gemm44, H100, bench.py: its SOL read, git 2813976): M = 8 GEMM gate/up 6.21 us = 60.4 % of SOL (3.75), down
#   6.70 = 56.3 % (3.77) -- was 9.33 / 13.04 (40 % / 29 %, m8-39); Q 5.67, O 5.92, KV 3.58, linear key 4.57, linear value
#   5.69; TOTAL 28.08 (was 48.09).  M = 16 gate/up 6.53, down 7.30.  The GEMV still serves M = 8 / 16 (5.60 / 5.39).
# STEP=flags: the fixup's chain for the last CTA (store, fence, count, slot loads: ~1.4 us of down's 6.7) against
#   -DKBIT_GEMM_FLAGS=1: count first (relaxed), the last CTA keeps its partial in registers and waits on the others'
#   release flags, which they set after storing.  Expect -0.2..-0.5 us where one split finishes late, ~0 otherwise.
if [ "$STEP" = flags ]; then
  for pass in 1 2; do
    SHAPES=gateup,down,Q,O,KV,lin_key,lin_value KS=4 MS=8,16 GAB_VARIANTS="flags:-DKBIT_GEMM_FLAGS=1" \
      gemm_ab_log flags44_$pass 200
  done
fi
# Result (flags44_{1,2}, H100, two passes): slower -- down 6.75 / 6.80 -> 7.76 / 7.81, O 6.04 -> 6.96, linear key 4.58 ->
#   5.48 (+0.9..+1 us on every workspace plan; cluster plans unchanged).  The acquire spin on the others' release flags
#   costs more than the fence + count it saves.  Removed (the code stays in this commit's history: 2813976..).
# STEP=h200: the same tree on the H200: kbit_gemm's GPU tests, the harness table (TAG=gemm44h) and the M = 8 plans beside
#   the default (does small_m_plan's split / cluster choice hold with the H200's bandwidth?).
if [ "$STEP" = h200 ]; then
  gpu_tests "$W/gpu_tests_gemm44h.log" 200 tests/test_gemm_gpu.py
  timeout 200 python3 profiling/bench.py --out "$W" --M 8,16 --k 4 --columns GEMV,GEMM,matmul --reps 15 \
    --tag gemm44h > "$W/bench_gemm44h.log" 2>&1
  grep -E "^### M|^\| (gateup|down|TOTAL)" "$W/bench_gemm44h.log"
  SHAPES=gateup,down,Q,O,KV KS=4 MS=8 \
    GAB_PLANS="t128k8:tile_n=128,ks=8,cl=0;c128k8:tile_n=128,ks=8,cl=1;t128k4:tile_n=128,ks=4,cl=0;c128k4:tile_n=128,ks=4,cl=1" \
    gemm_ab_log h200_44 150
fi
# STEP=spread: the 128-CTA grids (down, O, linear key at M = 8) on clusters launched with the shared memory of one CTA an
#   SM (plan spread=True; the wgmma kernel's launch_smem), against the workspace sum at the same split count.  Expect:
#   the cluster sum's ~0.3 us gain at >= 1.9 CTAs an SM (gate/up, Q) here too, if the loss at 128 CTAs was the packing.
if [ "$STEP" = spread ]; then
  for pass in 1 2; do
    SHAPES=down,O,lin_key,gateup KS=4 MS=8,16 \
      GAB_PLANS="t128k8:tile_n=128,ks=8,cl=0;c128k8:tile_n=128,ks=8,cl=1;c128k8sp:tile_n=128,ks=8,cl=1,sp=1;t128k8sp:tile_n=128,ks=8,cl=0,sp=1" \
      gemm_ab_log spread44_$pass 200
  done
fi
# Result (spread44_{1,2}, H100, two passes): clusters launched at one CTA an SM 10.7-13 us (the clustered grid no longer
#   fits at once: waves); the workspace sum at one CTA an SM = the default (6.78 vs 6.74-6.83 on down).  So the cluster
#   sum's loss at 128 CTAs is not packing that the launch could undo.  spread removed from gemm.plan (this step needs the
#   commit before that removal to run).
# STEP=tests2: the other GPU tests that launch kbit_gemm (PDL chains, the dispatched matmul, argument checks, launches).
if [ "$STEP" = tests2 ]; then
  gpu_tests "$W/gpu_tests2_44.log" 420 tests/test_pdl_gpu.py tests/test_checks_gpu.py tests/test_launch_gpu.py -k "gemm or matmul or check or launch"
fi
# Result (gpu_tests2_44, H100, git e009278): 41 passed, 67 deselected.
# Result (h200, second call, on an H200, git fbdf2a6): tests/test_gemm_gpu.py 49 passed; harness (gemm44h, H200) M = 8 GEMM
#   gate/up 6.08 us = 55 % of SOL (3.35), down 6.69 = 50 % (3.37); TOTAL 27.75 (GEMV 22.70); small_m_plan's choice the
#   best plan or within 0.03 us on all five shapes (gemm_ab_plans44).
finish_run run$RUN
