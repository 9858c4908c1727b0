#!/usr/bin/env bash
# Prepared in the twenty-seventh session (2026-11-27, no device time left) for the next one: the producer-dequant
# experiment kbit_wgmma_pd (env KBIT_WG_PD=1; compiled, no spills, never run).  From the repo root:
#   OUT=/tmp/out STEP=pd bash profiling/run32.sh
# Run in the twenty-eighth session (H200, results/nvidia-h200_2026-11-27_pd32.log): correct, TOTAL 1.5-1.9x slower
# (M = 128 59.4 -> 90.5 us, two producers 83.9); the kernel was then removed (it stays at commit 5c495ed, where this
# script runs as written).
. profiling/run_env.sh
start_run pd
# STEP=pd (~8 min on a bare machine):
#   1. GPU tests: bit-exact against the TMA kernel at the same TOK / splits (k = 2..5, fp16 / bf16, tails, two
#      codebooks) and graph replay (test_wgmma_gpu.py -k "pd or graph_and_new").  A hang in a lost mbarrier phase traps after ~2^22
#      tries (mbar_wait_or_trap), so a wrong hand-off fails the test instead of the machine.
#   2. memcheck over profiling/sanitize_tma.py (its "dense pd" lines).
#   3. The A/B, k = 4, M = 64 / 128, the five dense shapes, WGMMA column, KBIT_WG_PD=0 / 1, two passes.
#   Why: the consumers' K-tile chain is the dequantize (~175 ns) in series with the wgmma issue (~200 ns) of each
#   warp; moving the dequantize to a producer warpgroup leaves the consumers ~30 instructions a tile.  Expected
#   (NOTES, twenty-sixth / twenty-seventh sessions): bound by shared-memory bandwidth, ~100 KB a tile at TOK =
#   128 -> ~800 clocks (~440 ns) against ~730 ns now: gate/up M = 128 ~15.0 -> ~11-12 us, the TOTAL 59.4 ->
#   ~48-52 us (0.82x -> 0.94-1.0x on the H100) if it works as modelled; M = 64 (TOK = 64: half the MMA per
#   tile, the same dequantize) less.  If one producer warpgroup is too slow (its ~180 instructions a thread a
#   tile, one warp per scheduler), the third arm's two producer warpgroups (512 threads) halve each thread's.
if [ "$STEP" = pd ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_pd32.log" 240 tests/test_wgmma_gpu.py -k "pd or graph_and_new"
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_pd32.log" | head -20
  sanitize memcheck "$W/memcheck_pd32.log" 200 profiling/sanitize_tma.py
  grep -E "dense pd" "$W/memcheck_pd32.log" | head -4
  # the two-producer hook (-DKBIT_WG_PD_PRODUCERS=2: 512 threads, each producer thread half a row), k = 4 tests
  (export KBIT_WGMMA_OPTS=-DKBIT_WG_PD_PRODUCERS=2
   gpu_tests "$W/gpu_tests_pd2_32.log" 150 tests/test_wgmma_gpu.py -k "pd_matches and 4 or graph_and_new")
  for pass in 1 2; do
    for arm in 0 1 2; do  # 0: the TMA kernel, 1: kbit_wgmma_pd, 2: with two producer warpgroups
      KBIT_WG_PD=$((arm > 0)) KBIT_WGMMA_OPTS=$([ $arm = 2 ] && echo -DKBIT_WG_PD_PRODUCERS=2 || true) \
        timeout 60 python3 profiling/bench.py --out "$W" --M 64,128 --k 4 --columns WGMMA \
        --shapes gateup,down,Q,O,KV --reps 15 --tag "pd32-$arm-$pass" > "$W/bench_pd32_${arm}_$pass.log" 2>&1
      echo "## arm $arm pass $pass"; grep -E "^### M|^\| (gateup|down|Q|O|KV) \| 4|TOTAL" "$W/bench_pd32_${arm}_$pass.log"
    done
  done
fi
finish_run run32
