#!/usr/bin/env bash
# Fortieth session (2026-11-28).  From the repo root:  OUT=/tmp/out STEP=cap bash profiling/run47.sh
. profiling/run_env.sh
start_run cap
RUN=47
# env_arm TAG ENV COLUMNS MS LABEL: bench.py (k = 4, the five dense shapes, M = MS, the given columns) with the
# environment assignments ENV, tagged TAG; prints LABEL, then each M's shape times on one line.
env_arm() {
  env $2 timeout 150 python3 profiling/bench.py --out "$W" --M "$4" --k 4 --columns "$3" \
    --shapes gateup,down,Q,O,KV --reps 15 --tag "$1" > "$W/bench_$1.log" 2>&1
  echo "$5"; grep -E "^### M|^\| (gateup|down|Q|O|KV|TOTAL) \| [2-5] " "$W/bench_$1.log" | cut -d'|' -f2-5 | tr -d ' ' | \
    awk '/###/{printf "\n%s ", $0; next} {printf "%s ", $0} END{print ""}'
}
# STEP=cap: do the M = 16..64 kernels' programmatic dependents pair up on the SMs the previous grid left empty (the
#   decode GEMV's finding of the thirty-ninth session)?  The dense wgmma grids are at most one CTA an SM (gate/up M =
#   32: 40 strips x 3 splits = 120 CTAs on 132 SMs) at an occupancy of two; the streaming GEMV is 132 CTAs.  Arm cap:
#   KBIT_WG_CAP=1 and KBIT_STREAM_CAP=1 launch them with one CTA's worth of an SM's shared memory (no pairing, but
#   also no overlap with the previous grid's CTAs in this same-kernel chain).  Then the decode GEMV's whole ring
#   requested before the prologue (KBIT_EXPERIMENT_RING_EARLY) on the H200 (measured on the H100 only, 3 % slower).
# Expect: if pairing costs, the cap arm faster on the 120-CTA wgmma shapes (gate/up) by more than the lost prologue
#   overlap (~0.3-0.5 us); the stream GEMV (132 CTAs) about equal or slower.  RING_EARLY: within +-1 %.
if [ "$STEP" = cap ]; then
  for pass in 1 2; do
    env_arm cap47-base-$pass "KBIT_WG_CAP=0" WGMMA,STREAM 16,32,64 "## base pass $pass"
    env_arm cap47-cap-$pass "KBIT_WG_CAP=1 KBIT_STREAM_CAP=1" WGMMA,STREAM 16,32,64 "## cap pass $pass"
  done
  AB_NOBASE=1 KS=4,2 MS=1 AB_VARIANTS="early:-DKBIT_EXPERIMENT_RING_EARLY" CUT=200 gemv_ab_twice early47 200
  finish_run run47
fi
# Result (cap, H200, two passes each; `nvidia-h200_2026-11-28_{cap47-*,bench_cap47-*,gemv_early47_*}`):
#   - WGMMA TOTAL (gate/up, down, Q, O, KV) base / cap: M = 16 39.55 / 39.55 -> 38.93 / 38.94 us (-1.6 %: gate/up 9.00
#     -> 8.80, Q 7.78 -> 7.59, down 9.13 -> 9.02, O 8.25 -> 8.14), M = 32 43.78 / 43.80 -> 43.81 / 43.85 (equal),
#     M = 64 48.03 / 48.02 -> 48.11 / 48.12 (equal).  STREAM TOTAL within 0.05 us at every M.  So the CTAs pairing up
#     is not what holds M = 32 / 64 (where these kernels serve); at M = 16 the WGMMA column is not dispatched on the
#     H200 (the GEMV / streaming GEMV are faster there).  Not kept: profiling/patches/session40-wg-stream-cap.patch.
#   - RING_EARLY (M = 1): k = 4 TOTAL 17.14 / 17.26 -> 20.21 / 20.36 us (+18 %: Q, O, linear value +1.1 us each),
#     k = 2 14.94 / 15.06 -> 16.35 / 16.50.  Requesting step 1 before the prologue is much slower on the H200 too.
# STEP=close: the H200 closing tables on this tree (dense k = 4 M = 16..128, MoE 1..64 tokens per expert), last run on
#   the H200 on the tree of 2026-11-27 (final47, dclose43h-moe).  Expect: as final47 / dclose43h-moe (the kernels of
#   M >= 16 and MoE changed since only by the thirty-eighth session's staged sum: M = 64 -1..-2 %).
if [ "$STEP" = close ]; then
  dense_closing close47h 200
  moe_closing close47h-moe 200
  finish_run run47
fi
# Result (close, H200, `nvidia-h200_2026-11-28_close47h{,-moe}.{md,json}`): dense k = 4 TOTAL M = 16 / 32 / 64 / 128
#   25.41 / 43.11 / 48.05 / 58.81 us = 1.62x / 0.96x / 0.87x / 0.78x fp16 (final47: 1.19x at M = 16 before the
#   thirty-sixth session's staged A, 0.97x / 0.86x / 0.76x).  MoE default launch 1 / 4 tokens down 1.52x / 1.51x (8
#   experts), gate/up fused 1.71x / 1.67x; as moe_forward 1 / 4 tokens 1.70x / 1.66x (8), 1.74x / 1.74x (10); 16
#   tokens moe_dn 0.96x (8 experts), 1.00x (10); 32 / 64 tokens TOTAL 0.92x / 0.84x (8), 0.94x / 0.84x (10).
# moe_arm TAG OPTS MS LABEL: bench.py's MoE Grouped column (k = 4, 8 / 10 experts, MS tokens an expert) built with
# KBIT_WGMMA_OPTS=OPTS, tagged TAG; prints LABEL and the moe_gu_fused / moe_dn / TOTAL rows.
moe_arm() {
  KBIT_WGMMA_OPTS="$2" timeout 150 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M "$3" --experts 8,10 \
    --columns Grouped,Grouped:stable --reps 15 --tag "$1" > "$W/bench_$1.log" 2>&1
  echo "$4"; grep -E "^### MoE|^\| (moe_gu_fused|moe_dn|TOTAL) " "$W/bench_$1.log" | cut -d'|' -f2-7 | tr -d ' ' | \
    awk '/###/{printf "\n%s ", $0; next} {printf "%s ", $0} END{print ""}'
}
# STEP=tab: the grouped wgmma's default launch (pdl 1: ids may come from the previous grid, so it waits at entry)
#   building the default codebook's tables (k >= 4: 64 KB pair table + scale table) before that wait, as its stable
#   mode and the grouped GEMV's mode 1 do (hook -DKBIT_WG_WAIT_TABLES_EARLY=1).  Measured 0.3-1.9 % slower on the
#   H100 on 2026-11-26 (before TMA, row256 tables, the staged sum); the H200's default-vs-stable gap at 32 / 64 tokens
#   is ~1 us (moe_dn 8 experts 7.52 / 8.25 vs 6.57 / 7.16 in close47h-moe).  Expect: the Grouped column at 16..64
#   tokens (where the grouped wgmma serves) 0.2-0.8 us faster a projection; Grouped:stable unchanged; the grouped
#   wgmma GPU tests pass with the hook.
if [ "$STEP" = tab ]; then
  (export KBIT_WGMMA_OPTS=-DKBIT_WG_WAIT_TABLES_EARLY=1
   gpu_tests "$W/gpu_tests_tab47.log" 200 tests/test_grouped_gpu.py -k "wgmma or split or cluster"
   grep -E "^E  |FAILED" "$W/gpu_tests_tab47.log" | head -10)
  for pass in 1 2; do
    moe_arm tab47-base-$pass "" 16,32,64 "## base pass $pass"
    moe_arm tab47-tab-$pass "-DKBIT_WG_WAIT_TABLES_EARLY=1" 16,32,64 "## tab pass $pass"
  done
  finish_run run47
fi
# Result (tab, H200, two alternations, `nvidia-h200_2026-11-28_{tab47-*,bench_tab47-*,gpu_tests_tab47}`): correct (29
#   grouped wgmma / split / cluster GPU tests passed with the hook).  Grouped (default launch) moe_dn 32 tokens 7.48 /
#   7.53 -> 7.37 / 7.42 us (8 experts), 9.42 / 9.44 -> 9.18 / 9.21 (10); 64 tokens 8.18 / 8.23 -> 8.02 / 8.05, 10.39 /
#   10.42 -> 10.23 / 10.27; gate/up fused and 16 tokens equal (+-0.06).  But Grouped:stable (what moe_forward runs for
#   down) got slower where it never takes the new branch: moe_dn 16 tokens 6.50 / 6.54 -> 6.74 / 6.78, 32 tokens 6.56 /
#   6.60 -> 6.65 / 6.70 (the kernel's code moved).  -0.1..-0.25 us on the default down at 32 / 64 tokens moves no
#   target (0.84x -> 0.86x at 64); not kept (profiling/patches/session40-wg-grouped-tables-early.patch).
# STEP=suite: the whole GPU test suite on the final tree (its kernels byte-identical to 20e3732's).
if [ "$STEP" = suite ]; then
  gpu_tests "$W/gpu_tests_suite47.log" 590
  grep -E "^E  |FAILED" "$W/gpu_tests_suite47.log" | head -10
  finish_run run47
fi
# Result (suite, H200, `nvidia-h200_2026-11-28_gpu_tests_suite47{,w}.log`): ~542 tests passed, 0 failed, before the
#   590 s limit cut the run at 94 % (before tests/test_wgmma_gpu.py); that file run alone: 36 passed in 252.79 s.
