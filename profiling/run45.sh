#!/usr/bin/env bash
# Thirty-eighth session (2026-11-27).  From the repo root:  OUT=/tmp/out STEP=smem bash profiling/run45.sh
. profiling/run_env.sh
start_run smem
RUN=45
# The wgmma kernels' workspace split-K sum (splitk_fixup, NV > 4: TOK >= 64).  The last CTA of a tile loads every split's
#   slot from L2 with CHUNK float4 loads in flight a thread (registers): TOK = 128 one slot (64 KB) a round trip, 3 rounds
#   at gate/up M = 128 (the H100 trace: the last CTA's store + sum 3.7 us against 2.5 for the others); TOK = 64 (the
#   grouped kernel at two CTAs an SM, 4 loads a thread) two round trips a 32 KB slot, 2 x ks rounds (the grouped gate/up
#   at 64 tokens: ~25 % of its warp samples in the fixup, sixteenth session).  Hook -DKBIT_FIXUP_SMEM=1: the slots come
#   into the idle stage buffers by cp.async, as many at once as fit (2 at TOK = 128, k = 4), each thread reading back
#   its own pieces; the same adds in the same order (bit-identical).
# Expect: the workspace cells faster by about a round trip per slot beyond the first pair: gate/up M = 128 -0.3..-1 us,
#   the grouped wgmma at 32 / 64 tokens -0.3..-1 us; cluster cells (down / O at M = 128, Q) unchanged; no cell slower.
wg_tests() {  # NAME OPTS T_DENSE [T_GROUPED]: the wgmma GPU tests (and with T_GROUPED the grouped-wgmma ones) built with
  # KBIT_WGMMA_OPTS=OPTS into $W/gpu_tests_NAME.log (NAMEg.log)
  (export KBIT_WGMMA_OPTS=$2
   gpu_tests "$W/gpu_tests_$1.log" "$3" tests/test_wgmma_gpu.py
   grep -E "^E  |FAILED" "$W/gpu_tests_$1.log" | head -10
   if [ -n "${4:-}" ]; then
     gpu_tests "$W/gpu_tests_$1g.log" "$4" tests/test_grouped_gpu.py -k "wgmma or split or cluster"
     grep -E "^E  |FAILED" "$W/gpu_tests_$1g.log" | head -10
   fi)
}
wg_plans() {  # the dense wgmma plans (split count, cluster) at M = $1 on the five shapes
  python3 - "$1" <<'EOF'
import sys, cupy as cp
from kbitcupy import wgmma as WG
from kbitcupy.bench import DENSE_SHAPES
for M in [int(x) for x in sys.argv[1].split(",")]:
    for name in ("gateup", "down", "Q", "O", "KV"):
        K, N = DENSE_SHAPES[name]
        print(f"M={M:4d} {name:7s} {WG.plan(M, N, K, 4, 'float16', 0, cbd=True)}")
EOF
}
moe_wg_arm() {  # TAG OPTS: bench.py's g-WGMMA column (k = 4, 8 / 10 experts, 16 / 32 / 64 tokens) built with OPTS
  KBIT_WGMMA_OPTS="$2" timeout 150 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M ${MOE_MS:-16,32,64} \
    --experts 8,10 --columns g-WGMMA --reps 15 --tag "$1" > "$W/bench_$1.log" 2>&1
  echo "## $1"; grep -E "^### |^\| (moe_gu_fused|moe_dn) " "$W/bench_$1.log" | awk -F'|' '{printf "%s%s%s%s", $2, $3, $4, $5} /###/{print ""} END{print ""}'
}
if [ "$STEP" = smem ]; then
  H="-DKBIT_FIXUP_SMEM=1"
  wg_tests smem45 "$H" 150 150
  wg_plans 64,128,256 > "$W/wg_plans45.log" 2>&1; cat "$W/wg_plans45.log"
  MS=64,128,256 ab_passes smem "$H"
fi
# Result (smem, H100, `bench_smem45-{base,smem}-{1,2}`, two alternations, dense k = 4 WGMMA column): TOK = 64 faster
#   where the plan sums through the workspace -- M = 64 TOTAL 49.03 / 48.88 -> 48.13 / 48.15 us (down, 8 splits, 12.12 ->
#   11.67; Q -0.2, gate/up -0.15); TOK = 128 unchanged (gate/up M = 128, 3 splits: 14.47 / 14.45 -> 14.47 / 14.58; M = 256
#   down / O at 4 workspace splits -0.1..-0.2): the one-CTA-an-SM sum is not bound by its round trips.  The grouped
#   wgmma GPU tests with the hook: 29 passed; the dense ones were cut by the 150 s timeout after 30 passed (the hook's
#   first NVRTC build on a bare machine), rerun in STEP=smemoe.
if [ "$STEP" = smemoe ]; then
  wg_tests smem45b -DKBIT_FIXUP_SMEM=1 300
  for pass in 1 2; do
    moe_wg_arm "smem45moe-base-$pass" ""
    moe_wg_arm "smem45moe-smem-$pass" "-DKBIT_FIXUP_SMEM=1"
  done
fi
# Result (smemoe, H100, two alternations, g-WGMMA column, k = 4, 16 / 32 / 64 tokens): within +-0.1 us everywhere
#   but gate/up fused 10 experts x 64 tokens 15.67 / 15.63 -> 15.25 / 15.27 us; the dense wgmma GPU tests with the hook
#   36 passed.  Kept as the default (KBIT_FIXUP_SMEM=1; -DKBIT_FIXUP_SMEM=0 the A/B).
# STEP=nv2: the same staged sum for TOK = 16 / 32 (NV = 2 / 4 float4 a thread; the register path batches 4 / 2 slots
#   of all NV loads, one round trip a batch: 2..4 rounds at 8 splits), hook -DKBIT_FIXUP_SMEM_MIN_NV=2 against the
#   default (NV >= 8).  Expect: the 8-split workspace cells at M = 16 / 32 and the grouped wgmma at 16 / 32 tokens
#   -0.1..-0.3 us; cells whose stage area holds fewer slots than the register path's batch no faster.
if [ "$STEP" = nv2 ]; then
  MS=16,32 ab_passes nv2 "-DKBIT_FIXUP_SMEM_MIN_NV=2"
  for pass in 1 2; do
    MOE_MS=16,32 moe_wg_arm "nv2_45moe-base-$pass" ""
    MOE_MS=16,32 moe_wg_arm "nv2_45moe-nv2-$pass" "-DKBIT_FIXUP_SMEM_MIN_NV=2"
  done
fi
# Result (nv2, H100, two alternations): TOK = 32 faster, TOK = 16 slower -- dense M = 32 TOTAL 43.87 / 44.05 -> 42.98 /
#   43.12 us (down 10.57 -> 10.10, O 9.59 -> 9.12), M = 16 39.37 / 39.43 -> 40.37 / 40.45 (gate/up, down, Q, O +0.2..+0.3);
#   grouped gate/up fused at 16 tokens 10.23 / 10.10 -> 10.49 / 10.45 (8 experts), 32 tokens and down within noise.
#   Default now NV >= 4 (KBIT_FIXUP_SMEM_MIN_NV=4).
# STEP=spread (its hook is in profiling/patches/session38-wg-spread.patch now): the dense wgmma kernel's workspace sum at TOK >= 128 spread over the tile's CTAs (hook -DKBIT_WG_SPREAD=1,
#   kbit_common.cuh splitk_spread: a counter a split-K chunk, each CTA stores and arrives chunk by chunk from its own,
#   rotating, and sums / writes only the chunks it was last on).  The H100 trace of gate/up M = 128 (3 workspace splits):
#   the others' partial store 2.5 us, the last CTA's store + sum 3.7, then its C store 1.2.  Expect: where the CTAs
#   finish together, each sums a third: gate/up M = 128 -0.8..-1.5 us; M = 256 down / O (4 workspace splits) alike;
#   cluster cells unchanged.  Registers 138 -> 167 (TOK = 128), 161 -> 216 (192), no spills (NVRTC 12.9).
if [ "$STEP" = spread ]; then
  wg_tests spread45 -DKBIT_WG_SPREAD=1 300
  MS=128,256 ab_passes spread "-DKBIT_WG_SPREAD=1"
fi
# Result (spread, ran on an H200: the machine came back as one; two alternations): correct (36 wgmma GPU tests passed
#   with the hook, the cluster-vs-workspace bit-exact test among them) but slower -- gate/up M = 128 13.92 / 13.91 ->
#   15.80 / 15.81 us, M = 256 down 19.45 -> 21.73, O 17.33 -> 19.46; the cluster cells +0.1 (the epilogue's registers).
#   The chunk-by-chunk stores and arrivals (a barrier and a release each) cost more than the spread sum saves.
#   Removed; the code is profiling/patches/session38-wg-spread.patch.
# STEP=h200: the kept change (the staged sum, NV >= 4) on the H200: the default build's wgmma and grouped-wgmma GPU
#   tests, then the dense M = 32 / 64 WGMMA column against -DKBIT_FIXUP_SMEM=0 (two alternations).  Expect: as the H100
#   (M = 32 down / O -0.4..-0.5 us, M = 64 down -0.4), nothing slower.
if [ "$STEP" = h200 ]; then
  wg_tests h200_45 "" 240 120
  MS=32,64 ab_passes smemdef "" "-DKBIT_FIXUP_SMEM=0"
fi
# Result (h200, H200, git 7222328): wgmma GPU tests 36 passed, grouped-wgmma 29 passed (the default build: the staged
#   sum at NV >= 4).  Dense WGMMA k = 4, against -DKBIT_FIXUP_SMEM=0, two alternations: M = 32 TOTAL 44.40 / 44.40 ->
#   43.50 / 43.51 us (down 10.73 -> 10.20, O 9.76 -> 9.27, gate/up 9.79 -> 9.88), M = 64 48.96 / 48.99 -> 48.03 / 48.09
#   (gate/up -0.26, down -0.53, Q -0.16).  Gate/up at M = 32 (3 splits) slower staged on both GPUs (+0.07..+0.09): the
#   staged sum at NV = 4 now from 5 splits on.
# STEP=h200b: that rule, M = 32, against -DKBIT_FIXUP_SMEM=0 (two alternations).  Expect gate/up equal, down / O as above.
if [ "$STEP" = h200b ]; then
  MS=32 ab_passes smemdef2 "" "-DKBIT_FIXUP_SMEM=0"
fi
# Result (h200b, H200, two alternations): gate/up M = 32 still 9.79 -> 9.91 / 9.93 and Q 8.71 -> 8.80 / 8.81 with their
#   sums on the register path: the cost is the staged code in the TOK = 32 kernels, not the path taken; down / O 10.73 ->
#   10.23, 9.80 -> 9.32.  The H200 dispatch serves gate/up at M = 32 by this kernel and down / O by the streaming GEMV,
#   so the TOK = 32 change would cost the dispatched TOTAL ~0.1 us without a retune.  Back to TOK >= 64 only
#   (KBIT_FIXUP_SMEM_MIN_NV=8: the TOK <= 32 kernels' staged branch is compiled out).
# STEP=final: the kept rule on this machine, M = 32 / 64 against -DKBIT_FIXUP_SMEM=0 (two alternations).  Expect M = 32
#   equal (the same kernels), M = 64 as in h200 (-0.9 us TOTAL).
if [ "$STEP" = final ]; then
  MS=32,64 ab_passes smemfin "" "-DKBIT_FIXUP_SMEM=0"
fi
# Result (final, H200, two alternations): M = 32 44.39 / 44.43 vs 44.42 / 44.45 us (the same kernels), M = 64 48.98 /
#   49.03 -> 48.03 / 48.08.  Then (H100, the final tree): memcheck over sanitize_tma.py 96 checks 0 errors, racecheck
#   (SAN_QUICK) 24 checks 0 hazards (`..._memcheck_tma45.log`, `..._racecheck_tma45_quick.log`).
# STEP=close (prepared, not run: no device time left): the dense and MoE closing tables on the final tree (k = 4; the
#   dispatched matmul at M = 16..128 and the grouped calls at 1..64 tokens), for the issues' numbers with this change.
if [ "$STEP" = close ]; then
  dense_closing close45 150
  moe_closing close45-moe 200
fi
finish_run run45
