#!/bin/bash
# Fifty-sixth session (2026-11-29): the decode GEMV with its weights by 2-D TMA tensor copies (issue 3, H200).
# Usage on the GPU machine: STEP=<step> bash profiling/run63.sh   (results under $OUT/work)
cd "$(dirname "$0")/.." || exit 1
source profiling/run_env.sh
start_run tma

# STEP=tma (nvidia-h200): kbit_gemv_tma (-DKBIT_GEMV_TMA=1; profiling/gemv_tma_probe.py) against the package's GEMV,
# M = 1, k = 4, every dense shape, two passes.  Why: the register-ring GEMV's timeline (forty-first session, gate/up
# k = 4: step 0 landed 1.53 us, step 1 -- requested only then -- landed 2.41, computed 2.79, exit 3.37) pays a second
# DRAM round trip, and any earlier request of step 1 from the warps measured slower (late = 0 +8 %, staggered +5 %):
# a warp issuing loads the memory system paces cannot compute what has landed.  With one thread issuing every stage
# of a group as a TMA box right after the wait, nothing in the warps waits on issue, and the copies of all SMs go out
# in stage order; the step also loses ~50 of its ~290 SASS (load address math, predication, reloaded parameters).
# Costs: the planes read back from shared memory (2 LDS.128 a step, 2-way conflicted: +16 wavefronts on ~36), an
# SM's groups in one block (one table; gate/up 5 x 4 warps).
# Expect: gate/up 4.26 -> ~3.8-4.0 us, down / Q / O -5..-10 %, KV about equal; if no faster, the second round trip is
#   not what holds the step-1 tail.
if [ "$STEP" = tma ]; then
  KS=4 PASSES=2 TMA_FORMS="auto;auto:1;auto:4" timeout 540 python3 profiling/gemv_tma_probe.py > "$W/gemv_tma63.log" 2>&1
  cat "$W/gemv_tma63.log"
  finish_run run63
fi
# Result (tma, H200, cc0430e + the probe, `nvidia-h200_2026-11-29_gemv_tma63.log`): gate/up correct (err 3e-4) and
#   slower: 4.98 / 5.16 / 5.33 us at 2 / 1 / 4 stages against the GEMV's 4.29 (+16 %); down then faulted
#   (misaligned address) before any timing.

# STEP=tma2 (nvidia-h200): where the slowdown comes from, and down's fault.  compute-sanitizer memcheck over one
# launch of down's forms (the faulting instruction); then gate/up forms that keep more than one block an SM (the
# slices form's 640-thread block holds an SM's whole register file: the next launch's blocks cannot start on the SM
# until it exits -- the GEMV's 128-thread blocks free their resources one by one): 5 x 2 warps (two blocks an SM fit),
# 2 x 4 (320 blocks of 256 threads), 1 x 4 (the GEMV's plan shape, 4 blocks an SM by shared memory: 1.2 waves).
# Expect: memcheck names the misaligned access; if the forms with several blocks an SM close most of the +16 %, the
#   single block is what costs, else the TMA path itself (issue or landing order).
if [ "$STEP" = tma2 ]; then
  CHECK_ONLY=1 SHAPES=down KS=4 TMA_FORMS="auto;2x4x2" timeout 200 compute-sanitizer --tool memcheck --show-backtrace no \
    python3 profiling/gemv_tma_probe.py > "$W/gemv_tma63_memcheck.log" 2>&1
  grep -v "^=========     " "$W/gemv_tma63_memcheck.log" | head -40
  SHAPES=gateup,down KS=4 PASSES=2 TMA_FORMS="5x4x2;5x2x2;2x4x2;1x4x2" TMA_FORMS_down="auto;2x4x2;1x8x2" timeout 300 python3 profiling/gemv_tma_probe.py \
    > "$W/gemv_tma63b.log" 2>&1
  cat "$W/gemv_tma63b.log"
  finish_run run63
fi
# Result (tma2, H200): memcheck over down's two forms: 0 errors, both right (err 3.4e-4) -- the first run's fault did
#   not repeat under the sanitizer.  The timing part failed at launch (CUresult 1): the probe set the one module's
#   max dynamic shared memory to each form's in turn, so the largest form launched over its attribute (fixed: the
#   attribute takes the largest).

# STEP=tma3 (nvidia-h200): tma2's timing part again with the probe fixed.
if [ "$STEP" = tma3 ]; then
  SHAPES=gateup,down KS=4 PASSES=2 TMA_FORMS="5x4x2;5x2x2;2x4x2;1x4x2" TMA_FORMS_down="auto;2x4x2;1x8x2" timeout 400 \
    python3 profiling/gemv_tma_probe.py > "$W/gemv_tma63c.log" 2>&1
  cat "$W/gemv_tma63c.log"
  finish_run run63
fi
# Result (tma3, H200, `nvidia-h200_2026-11-29_gemv_tma63c.log`): every form slower.  gate/up: GEMV 4.27 us; TMA
#   5 x 4 x 2 4.97, 5 x 2 x 2 5.00, 2 x 4 x 2 5.09, 1 x 4 x 2 6.97 (1.2 waves); down: GEMV 4.20; 2 x 5 x 2 5.23, 2 x 4 x 2
#   5.17, 1 x 8 x 2 6.53.  Forms with several blocks an SM are no better: the single block is not the cost.  The down
#   fault did not repeat (both runs' errors 3e-4).

# STEP=tma4 (nvidia-h200): the TMA path without its compute (-DKBIT_EXPERIMENT_NO_COMPUTE; results wrong, timing only)
# against the same GEMV (the forty-first session's GEMV without compute: gate/up 2.99, down 3.49 us = the SOL read).
# Expect: if the TMA loads alone take ~4.5-5 us, the copies (not the compute from shared memory) are what is slow.
if [ "$STEP" = tma4 ]; then
  SHAPES=gateup,down KS=4 PASSES=2 TMA_FORMS="5x4x2;5x4x1" TMA_FORMS_down="2x5x2;2x5x1" \
    TMA_EXTRA="-DKBIT_EXPERIMENT_NO_COMPUTE" timeout 300 python3 profiling/gemv_tma_probe.py > "$W/gemv_tma63d.log" 2>&1
  cat "$W/gemv_tma63d.log"
  finish_run run63
fi
# Result (tma4, H200, `nvidia-h200_2026-11-29_gemv_tma63d.log`): without its compute the TMA path is at the SOL read --
#   gate/up 3.15 us (SOL 3.15; GEMV with compute 4.28), down 3.35 (3.15; 4.20); one stage 3.48 / 3.48.  So the copies
#   are not what is slow: the compute from shared memory adds 1.8 us on gate/up where the register GEMV's adds ~1.3
#   (forty-first session: 4.28 vs 2.99 without compute).  The TMA step has ~18 % fewer SASS (237 vs 290) but +18
#   shared-memory wavefronts (two 2-way conflicted LDS.128 and two LDS.U8 a step on ~36): consistent with a compute
#   burst bound by shared-memory wavefronts, not issue slots -- the probe is removed (patch
#   `profiling/patches/session56-gemv-tma.patch`) and the next step tests that reading directly.

# STEP=lds (nvidia-h200): is the GEMV step's burst bound by shared-memory wavefronts?  Hook -DKBIT_EXP_LDS_FREE (results
# wrong, timing only): the pair lookups' LDS replaced by one LOP3 on the same address -- =1 chunks r = 1, 3 (16 of 32
# lookups a step), =2 all -- so the SASS count is the base's exactly (nvcc 13, gate/up k = 4 C8: 1472 lines in all
# three; LDS 144 / 112 / 80), only the wavefronts go.  Beside it KBIT_EXP_NO_LUT (no address, no LDS: fewer
# instructions too; forty-second session -6.5 % TOTAL).  k = 4, M = 1, five shapes, two passes (gemv_ab).
# Expect: if wavefronts bind, `all` ~ -6 % or more of TOTAL (like nolut) and `half` about half of it -- then a step
#   with fewer lookups (some pairs decoded in registers) is the lever; if `all` ~ 0, the lookups' instructions or
#   their latency bind and wavefront cuts cannot move M = 1.
if [ "$STEP" = lds ]; then
  AB_NOBASE=1 KS=4 MS=1 SHAPES=gateup,down,Q,O,KV CUT=240 \
    AB_VARIANTS="half:-DKBIT_EXP_LDS_FREE=1;all:-DKBIT_EXP_LDS_FREE=2;nolut:-DKBIT_EXP_NO_LUT" gemv_ab_twice lds63 200
  finish_run run63
fi
# Result (lds, H200, `nvidia-h200_2026-11-29_gemv_lds63_{1,2}.log`): TOTAL k = 4 M = 1 17.31 -> half 17.24, all 17.23
#   (both passes), nolut 16.18 / 16.16.  Removing every lookup's wavefront while keeping its instruction changes
#   nothing (-0.5 %): the step is bound by its instructions (or their dependent chain), not by shared memory -- the
#   forty-second session's reading, now measured directly.  (Also tried on the CPU and dropped before any GPU run: the
#   lookup offset from one PRMT with the table base left to the LDS as [R + UR] -- ptxas kept the base in a regular
#   register and added it a lookup, so the IMAD it was to save came back as an IADD; nvcc 13 SASS 1472 -> 1504 lines.)

# STEP=trim (nvidia-h200): two instruction cuts in the decode GEMV's step, hooks off by default: KBIT_GEMV_KEEP_LANE (the
# lane's table and A addresses made opaque once, so ptxas keeps them instead of recomputing them from S2R / the shared
# window base every step: nvcc 13 gate/up k = 4 C8 1472 -> 1448 SASS lines, 79 registers) and KBIT_GEMV_ACLAMP (C8
# lanes past M read row M - 1 unpredicated -- their token columns are never read -- instead of a zero-filled
# predicated LDS.128: 1472 -> 1456, 92 registers), and both (1432, 93).  k = 2 / 3 / 4, M = 1 / 2, seven shapes, two
# passes (gemv_ab AB_VARIANTS).
# Expect: by NO_LUT's slope (-9 % SASS -> -6.5 %), `both` -1.5..-2 % of M = 1 TOTAL; worth keeping at >= 1.5 % in both
#   passes (the 2.5x target needs -4.7 %: these alone will not reach it).
if [ "$STEP" = trim ]; then
  AB_NOBASE=1 KS=2,3,4 MS=1,2 SHAPES=gateup,down,Q,O,KV,lin_key,lin_value CUT=240 \
    AB_VARIANTS="keep:-DKBIT_GEMV_KEEP_LANE;clamp:-DKBIT_GEMV_ACLAMP;both:-DKBIT_GEMV_KEEP_LANE -DKBIT_GEMV_ACLAMP" \
    gemv_ab_twice trim63 280
  finish_run run63
fi
# Result (trim, H200, `nvidia-h200_2026-11-29_gemv_trim63_{1,2}.log`): both cuts slower, both passes alike -- k = 4 M = 1
#   TOTAL 17.21 / 17.31 -> keep 17.38 / 17.46, clamp 17.78 / 17.82, both 17.81 / 17.86; k = 3 M = 1 clamp +2.5 %; k = 2
#   within 0.5 %.  (clamp's 92 registers: O / linear key / KV +3..+6 %.)  Fewer SASS lines by themselves do not make
#   the step faster; neither hook is kept.

# STEP=ttrace (nvidia-h200): does the TMA form's data land in stage order?  The chain timeline (profiling/chain_trace.py's
# table, trace builds of kbit_gemv_tma with the session56 patch applied) of gate/up 5 x 4 at 2 and 4 stages and down
# 2 x 5 x 2, beside the package GEMV's own chain trace (MODES=safe).  Per warp: when its step 0 / step 1 weights landed
# (after the stage's mbarrier) and were computed.
# Expect: if stage 0 lands well before stage 1 (~half the transfer earlier), the TMA form's loss is its compute (the
#   +0.5 us over the register GEMV's) and not the order; if both land together near the end, no stage split can put
#   compute under the transfer at these sizes.
if [ "$STEP" = ttrace ]; then
  git apply profiling/patches/session56-gemv-tma.patch 2>/dev/null || echo "(patch already applied)"
  TRACE=1 SHAPES=gateup,down KS=4 TMA_FORMS="5x4x2;5x4x4" TMA_FORMS_down="2x5x2" timeout 240 \
    python3 profiling/gemv_tma_probe.py > "$W/gemv_tma63_trace.log" 2>&1
  cat "$W/gemv_tma63_trace.log"
  SHAPES=gateup,down KS=4 MODES=safe timeout 200 python3 profiling/chain_trace.py > "$W/gemv_chain63.log" 2>&1
  cat "$W/gemv_chain63.log"
  finish_run run63
fi
# Result (ttrace, H200, `nvidia-h200_2026-11-29_{gemv_tma63_trace,gemv_chain63}.log`; ns after launch n-2's last exit,
#   p50): the TMA stages land in order, ~1 us apart (gate/up 2 stages: wait 1040, stage 0 2433, stage 1 3466; 4 stages
#   alike), but the form's one 640-thread block an SM enters only once the previous launch's block has left (entry -32
#   against the GEMV's -480), so its wait passes later (1040 vs 672) and its prologue ends later (1877 vs 1372); its first
#   stage lands later than the GEMV's step 0 (2433 vs 1586) and each step still computes ~0.6 us after landing.  The
#   GEMV's own chain: wait 672, step 0 landed 1586 / computed 2140, step 1 landed 2447 / computed 2810, exit 3968 (max
#   4832: an exit tail of 0.77 us).  The TMA form is not kept (patch `profiling/patches/session56-gemv-tma.patch`).

# STEP=gtrace (nvidia-h200): the grouped decode GEMV's launch in its chain (profiling/grouped_trace.py), k = 4, 1 token,
# 8 / 10 experts, down (stable: moe_forward's launch) and gate/up fused (wait-first: its default).  Why: the TMA form's
# trace (ttrace) showed what a grid whose blocks fill an SM's registers pays -- the next launch's blocks enter only as the
# previous ones leave, so their pre-wait prologue overlaps nothing.  The grouped plans' blocks (256-480 threads at ~96-123
# registers, two an SM) may fill the register file the same way, where the dense gate/up's five 128-thread blocks leave
# room for a sixth.  Read: entry -> wait passed (the dense GEMV's chain: ~1.15 us at p50).
# Expect: if the grouped blocks' entry -> wait is near zero, their prologue is on the path (the fiftieth session's
#   unexplained 0.5 us over the dense GEMV on the same bytes), and a plan that leaves an SM room for one more block is
#   the lever to try.
if [ "$STEP" = gtrace ]; then
  for e in 8 10; do
    SHAPE=moe_dn E=$e M=1 MODES=stable,wait timeout 120 python3 profiling/grouped_trace.py
    SHAPE=moe_gu_fused E=$e M=1 MODES=wait timeout 120 python3 profiling/grouped_trace.py
  done > "$W/moe_gtrace63.log" 2>&1
  cat "$W/moe_gtrace63.log"
  finish_run run63
fi
# Result (gtrace, H200, `nvidia-h200_2026-11-29_moe_gtrace63.log`; grouped_trace.py fixed: it read the trace buffer of
#   one built instantiation, and grouped_gemv now builds two): no late entry -- entry -> wait passed p50 ~1.0 us (down
#   8 / 10 experts stable 992 / 1056 ns, wait-first 640 / 800; gate/up fused 896 / 592), like the dense GEMV's.  What
#   differs is after the wait: the first step-0 weights land 1.47 / 1.56 us after it (down, stable; wait-first 2.2-2.4,
#   gate/up fused 2.3-2.4) against the dense gate/up's 0.87 us (gemv_chain63), and the loads (with A's copies) are
#   requested only ~0.5 us after it (stable; 1.0-1.2 wait-first).

# STEP=gkeep (nvidia-h200): the same trace with the grouped stable mode's first word offsets computed before its wait
# (the existing hook -DKBIT_GROUPED_KEEP_ADDR=true, as the dense kernel's KEEP), down 8 / 10 experts, 1 token.  The
# fifty-third session timed the hook (+2.2..+2.8 % on down) without a timeline.
# Expect: if the post-wait set-up is what delays the first weights, they land ~0.3-0.5 us earlier with the hook; if the
#   launch is still no faster, the tail after the first weights (not their request) is what holds the grouped kernel.
if [ "$STEP" = gkeep ]; then
  for e in 8 10; do
    SHAPE=moe_dn E=$e M=1 MODES=stable timeout 120 python3 profiling/grouped_trace.py
    OPTS="-DKBIT_GROUPED_KEEP_ADDR=true" SHAPE=moe_dn E=$e M=1 MODES=stable timeout 120 python3 profiling/grouped_trace.py
  done > "$W/moe_gkeep63.log" 2>&1
  cat "$W/moe_gkeep63.log"
  finish_run run63
fi
# Result (gkeep, H200, `nvidia-h200_2026-11-29_moe_gkeep63.log`): slower again and the first weights later, not earlier
#   -- down 8 experts 4.49 -> 4.88 us a launch (trace builds), first step-0 weights 1506 -> 1658 ns after the wait; 10
#   experts 4.95 -> 5.38, 1680 -> 1688.  The post-wait offset set-up is not what delays the grouped kernel's first
#   weights.  What fills the ~0.5 us from the wait to its loads and A's copies being requested is not measured here
#   (likely the issue of loads the memory system paces, every block requesting at the wait; the dense kernel's
#   prologue spans 0.7 us to A staged the same way).

# STEP=check (nvidia-h200): chain_trace.py after its replay / report helpers were split out (shared with the probe's
# TRACE mode), and the probe's TRACE mode with the patch applied, one shape each.  Expect: both print the chain table.
if [ "$STEP" = check ]; then
  SHAPES=gateup KS=4 MODES=safe timeout 120 python3 profiling/chain_trace.py > "$W/chain_check63.log" 2>&1
  tail -8 "$W/chain_check63.log"
  rm -rf /tmp/tma_tree && mkdir -p /tmp/tma_tree && cp -r cuda_src kbitcupy profiling /tmp/tma_tree/ \
    && (cd /tmp/tma_tree && patch -p1 -s < profiling/patches/session56-gemv-tma.patch) \
    && (cd /tmp/tma_tree && PYTHONPATH=/tmp/tma_tree TRACE=1 SHAPES=gateup KS=4 TMA_FORMS="5x4x2" timeout 120 \
        python3 profiling/gemv_tma_probe.py) > "$W/tma_check63.log" 2>&1
  tail -8 "$W/tma_check63.log"
  finish_run run63
fi
# Result (check, H200, c0c05c4): both print their chain tables (chain_trace.py gate/up safe 5.00 us a launch in its
#   trace build; the probe's TRACE mode on a copy of the tree with the patch applied by `patch -p1`, 5.61).

# STEP=gtrace2 (nvidia-h200): where the grouped kernel's ~0.5 us from its wait to its load requests goes.  A new trace slot
# (49, trace builds only): thread 0's clock once its first weight loads have issued (in-order issue: a load the memory
# system holds back holds the clock read too).  grouped_trace.py (down, 8 experts, 1 token, stable and wait-first) and
# chain_trace.py (dense gate/up, safe) print it.
# Expect: if the first weights are requested within ~0.1 us of the wait and still land ~1.5 us after it, the grouped
#   kernel's step 0 is not served from L2 the way the dense kernel's prefetched step 0 is (its prefetch is issued only
#   once the ids have arrived, ~0.25 us before the wait); if the request itself comes ~0.5 us late, the issue is held.
if [ "$STEP" = gtrace2 ]; then
  { SHAPE=moe_dn E=8 M=1 MODES=stable,wait timeout 120 python3 profiling/grouped_trace.py
    SHAPES=gateup KS=4 MODES=safe timeout 120 python3 profiling/chain_trace.py; } > "$W/moe_gtrace63b.log" 2>&1
  cat "$W/moe_gtrace63b.log"
  finish_run run63
fi
# Result (gtrace2, H200, 88f52f7, `nvidia-h200_2026-11-29_moe_gtrace63b.log`): the request is not late -- the grouped
#   stable launch requests its first weights 38 ns after its wait (p50; wait-first 388), and they land 1.51 us after it;
#   the dense gate/up requests its at about its wait and they land ~1.0 us later.  The difference is the L2 prefetch's
#   timing: the dense kernel prefetches step 0 at block entry (~1.6 us before its wait), the grouped one only once its
#   ids have arrived (~0.25 us before the wait: the ids load takes ~0.7 us under the previous kernel's traffic), so its
#   step 0 still comes from DRAM after the wait.  That is most of the fiftieth session's 0.5 us.

# STEP=routepf (nvidia-h200): the routing kernel prefetching the chosen experts' weights into L2 (kbit_moe_route_warp_pf,
# kbitcupy.moe.ROUTE_PREFETCH; decode steps of <= 32 choices).  Why: gtrace2 -- the grouped kernels can request an
# expert's weights only once they have read its id after their wait, so their first weights come from DRAM (down's
# stable launch: 1.51 us after the wait, where the dense GEMV's prefetched step 0 lands ~1.0 us after its request).  The
# routing kernel knows the experts first; a grid of 132 one-warp blocks issues prefetch.global.L2 for every 128-byte
# line of the chosen experts' gate/up planes + scales, then down's (~12 MB at 8 experts: ~23 prefetches a thread).
# GPU tests first (the new grid's routing arrays bit-identical to the one-warp and one-block kernels', every PDL mode;
# moe_forward bit-identical with and without the prefetch, eager and in a graph), then the layer step A/B
# (profiling/moe_route_pf.py: moe_forward in a graph over the layer bench's cold-L2 draws, off / on alternating, two
# passes; T = 1 / 2 / 3 at top-10 of 512).
# Expect: T = 1 17.4 -> ~16 us (gate/up's and down's first weights from L2: -0.5..-1 us each); if no faster, the
#   prefetch traffic lands too late or crowds the kernels' own reads, and ROUTE_PREFETCH goes back off.
if [ "$STEP" = routepf ]; then
  gpu_tests "$W/gpu_tests_routepf63.log" 300 tests/test_grouped_gpu.py \
    -k "route_warp_matches or route_prefetch_bit_identical or test_moe_forward_gpu or fused_gemv_matches"
  grep -E "^E  |FAILED" "$W/gpu_tests_routepf63.log" | head -10
  gpu_tests "$W/gpu_tests_routepf63b.log" 200 tests/test_pdl_gpu.py -k "route"
  TS=1,2,3 KS=4 PASSES=2 timeout 300 python3 profiling/moe_route_pf.py > "$W/moe_route_pf63.log" 2>&1
  cat "$W/moe_route_pf63.log"
  finish_run run63
fi
# Result (routepf, H200, 0ab753a, `nvidia-h200_2026-11-29_{gpu_tests_routepf63,moe_route_pf63}.log`): slower.  moe_forward
#   T = 1 / 2 / 3 17.59 / 29.88 / 37.59 -> 21.43 / 36.53 / 48.14 us (+22..28 %), both passes alike; outputs
#   bit-identical.  Prefetching whole experts (~12 MB at 10 experts) holds the routing grid until its prefetches have
#   issued, and the grouped kernels wait for that grid.  Tests: 18 passed, 1 failed -- the routing test's launch
#   without PDL went through CuPy's launcher, which cannot pass kbitcupy._launch.DevPtr (the null region pointers):
#   now numpy.uint64(0).  PDL routing tests 3 passed.

# STEP=routepf2 (nvidia-h200): the same with only each expert's first lines (ROUTE_PREFETCH_PARTS: the shares of gate/up
# and down prefetched from each expert's start -- its first K tiles, which the grouped kernels' first ring steps read):
# 0 / 0 (the 132-block grid alone), 1/4 / 0, 1/4 / 1/2, 1 / 1, against off; T = 1 / 3; and the failed test again.
# Expect: if 0 / 0 costs about nothing and 1/4 / 0 gains on gate/up (its first weights from L2), a partial prefetch
#   pays; if 0 / 0 already costs, the grid's launch is the cost and the prefetch cannot pay from the routing kernel.
if [ "$STEP" = routepf2 ]; then
  gpu_tests "$W/gpu_tests_routepf63c.log" 300 tests/test_grouped_gpu.py -k "route_warp_matches or route_prefetch_bit_identical"
  grep -E "^E  |FAILED" "$W/gpu_tests_routepf63c.log" | head -10
  TS=1,3 KS=4 PASSES=2 PARTS="0,0;0.25,0;0.25,0.5;1,1" timeout 400 python3 profiling/moe_route_pf.py \
    > "$W/moe_route_pf63b.log" 2>&1
  cat "$W/moe_route_pf63b.log"
  finish_run run63
fi
# Result (routepf2, H200, 06ae6d2, `nvidia-h200_2026-11-29_{gpu_tests_routepf63c,moe_route_pf63b}.log`): tests 5 passed.
#   The 132-block routing grid alone (no lines prefetched) already costs T = 1 17.61 -> 19.63 us (+11.5 %), T = 3 37.57
#   -> 43.06 (+14.6 %), and every share of prefetch adds to it (1/4 of gate/up 20.50, + 1/2 of down 21.28, all 21.43;
#   T = 3 45.25 / 47.47 / 48.13).  The routing kernel cannot pay for a prefetch: the grouped kernels wait for its whole
#   grid.  Removed (`profiling/patches/session56-moe-route-prefetch.patch`: the kernel, moe.py's ROUTE_PREFETCH, the
#   tests and profiling/moe_route_pf.py).

# STEP=check2 (nvidia-h200): after the review's tidy-up of gemv_tma_probe.py (form_smem / form_args shared by the timing
# and TRACE modes; TRACE no longer builds and launches the timing forms first): both modes once on gate/up, on a copy of
# the tree with the patch applied.  Expect: the timing row (TMA slower than the GEMV, err 3e-4) and the chain table.
if [ "$STEP" = check2 ]; then
  rm -rf /tmp/tma_tree && mkdir -p /tmp/tma_tree && cp -r cuda_src kbitcupy profiling /tmp/tma_tree/ \
    && (cd /tmp/tma_tree && patch -p1 -s < profiling/patches/session56-gemv-tma.patch) \
    && (cd /tmp/tma_tree && export PYTHONPATH=/tmp/tma_tree && SHAPES=gateup KS=4 PASSES=1 TMA_FORMS="5x4x2" \
        timeout 120 python3 profiling/gemv_tma_probe.py && TRACE=1 SHAPES=gateup KS=4 TMA_FORMS="5x4x2" timeout 120 \
        python3 profiling/gemv_tma_probe.py) > "$W/tma_check63b.log" 2>&1
  grep -E "^gateup|^summary|Error|Traceback" "$W/tma_check63b.log" | cut -c1-220
  finish_run run63
fi
# Result (check2, H200, 6f77a70): both modes run -- gate/up GEMV 4.25 us, TMA 5 x 4 x 2 4.95 (err 3e-4, as tma3), and the
#   trace build's chain table (5.61 us a launch, as ttrace).
