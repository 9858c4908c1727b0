#!/usr/bin/env bash
# Twenty-seventh session (2026-11-27): run29.sh's exp / exp2 / exp3 (H200) found the stages by TMA + bulk copies
# (tokens by a tensor copy, weights and absmax by 1-D bulk copies, no cp.async) and m64n128 at TOK = 128 faster
# in every TOTAL (dense k = 4 M = 64 50.6 -> 49.0 us, M = 128 64.0 -> 59.4; grouped 2-5 %), so they are now the
# default code paths (kbit_wgmma_tma for the dense kernel, the grouped kernel TMA-only; env KBIT_WG_TMA=0: the
# cp.async dense kernel).  This script checks and measures that tree.
#   OUT=/tmp/out STEP=suite bash profiling/run30.sh      (then STEP=final)
. profiling/run_env.sh
start_run suite
# STEP=suite (~6 min): the whole GPU suite (only kbit_wgmma.cu changed, but matmul / grouped_matmul / layers reach
#   it), then compute-sanitizer memcheck over the TMA driver (dense every TOK, splits both ways, tails; grouped with
#   uneven / empty slots and extra token tiles).
if [ "$STEP" = suite ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_suite30.log" 330
  sanitize memcheck "$W/memcheck_tma30.log" 150 profiling/sanitize_tma.py
fi
# Measured (gpu_tests_suite30.log, H200): the suite ran out of its 330 s at test 498 of 522 (the whole of
#   test_gemm .. test_pdl_gpu and 15 of test_quantize_gpu passed, no failure); warm_cache 40 s, memcheck clean (96
#   checks).  So STEP=final first runs test_wgmma_gpu.py and test_quantize_gpu.py (the rest of the suite), and
#   measures the cp.async arm at low M only (the TMA arm is final46's WGMMA column, same run).
# STEP=final (~9 min): the low-M side of the change, which run29 did not measure (dense k = 4 M = 16 / 32, WGMMA
#   column, cp.async vs TMA; expected: equal or faster, the weight copies are most of a stage at TOK <= 32), then the
#   closing tables of the tree: dense M = 16..128 k = 4 (final46) and MoE k = 4 1..64 tokens (moe-final50).
if [ "$STEP" = final ]; then
  python3 profiling/warm_cache.py wgmma grouped gemv gemv_stream quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_suite30b.log" 200 tests/test_quantize_gpu.py tests/test_wgmma_gpu.py
  for t in 0; do
    KBIT_WG_TMA=$t timeout 50 python3 profiling/bench.py --out "$W" --M 16,32 --k 4 --columns WGMMA \
      --shapes gateup,down,Q,O,KV --reps 15 --tag "lowm30-tma$t" > "$W/bench_lowm30_$t.log" 2>&1
    echo "## KBIT_WG_TMA=$t"; grep -E "^### M|^\| (gateup|down|Q|O|KV) \| 4|TOTAL" "$W/bench_lowm30_$t.log"
  done
  dense_closing final46 125
  moe_closing moe-final50 125
fi
# Measured (H200, STEP=final, 74 s on the warm machine): test_quantize_gpu + test_wgmma_gpu 70 passed; the cp.async
#   arm at M = 16 / 32 39.68 / 44.42 us against TMA's 38.97 / 43.95 (final46's WGMMA column): TMA faster there too.
# STEP=h100 (on an H100, nvidia-h100-x1, where issues 3-5's targets were tracked): the closing tables of the tree
#   (M = 1 / 4 k = 2 / 4: final46-m1; dense final46; MoE moe-final50) and the cp.async arm at M = 16..128 (WGMMA
#   column, KBIT_WG_TMA=0) beside final46's.  Expected from the H200: k = 4 TOTAL M = 64 / 128 -3 / -7 %.
if [ "$STEP" = h100 ]; then
  python3 profiling/warm_cache.py wgmma grouped gemv gemv_stream quant 2>&1 | tail -1
  KBIT_WG_TMA=0 timeout 60 python3 profiling/bench.py --out "$W" --M 16,32,64,128 --k 4 --columns WGMMA \
    --shapes gateup,down,Q,O,KV --reps 15 --tag "cpasync30" > "$W/bench_cpasync30.log" 2>&1
  echo "## KBIT_WG_TMA=0"; grep -E "^### M|TOTAL" "$W/bench_cpasync30.log"
  dense_closing final46 125
  moe_closing moe-final50 125
  timeout 110 python3 profiling/bench.py --out "$W" --M 1,4 --k 2,4 --columns matmul,matmul+PDL --reps 15 \
    --tag final46-m1 > "$W/bench46m1.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench46m1.log"
fi
# STEP=tune (on an H100, then an H200 if device time is left): the dispatch tables after the TMA change -- the wgmma
#   columns at k = 2..5, M = 16..256 (wg-tune30; M = 256 is new to the wgmma sweeps: at M = 128 the kernel now beats
#   dq + cuBLAS by 18 us on the H100's TOTAL, so its band may reach past 128), overlaid on the family's files
#   (profiling/table_json.py -> KBITCUPY_DISPATCH_TABLE), then the dense k = 4 table M = 16..128 dispatched by it
#   (final47).  Expected: matmul = the fastest column everywhere; k = 4 TOTAL as final46 or better.
if [ "$STEP" = tune ]; then
  python3 profiling/warm_cache.py wgmma gemv_stream gemv quant 2>&1 | tail -1
  timeout 240 python3 profiling/bench.py --out "$W" --M 16,24,32,48,64,128,256 --k 2,3,4,5 --columns WGMMA,WGMMA+PDL \
    --reps 15 --tag wg-tune30 > "$W/wgtune30.log" 2>&1
  grep -E "^### M|TOTAL" "$W/wgtune30.log"
  FAM=$(python3 -c "from kbitcupy.dispatch import gpu_family; print(gpu_family())")
  cp "$W"/*_wg-tune30.json profiling/results/
  python3 profiling/retune_tables.py --extra +wg-tune30 "$FAM" "$FAM+PDL" > "$W/retune30.txt" 2>&1
  grep -vE "^  entry" "$W/retune30.txt" | head -40
  python3 profiling/table_json.py "$W/tables30.json" --extra +wg-tune30 "$FAM" "$FAM+PDL"
  KBITCUPY_DISPATCH_TABLE="$W/tables30.json" dense_closing final47 125
fi
# Measured (STEP=tune, H100 then H200): the rebuilt tables moved the wgmma bands to M = 256 on most shapes and
#   shortened the streaming GEMV's under PDL; final47 with them: H100 k = 4 TOTAL M = 16 / 32 / 64 / 128 33.88 /
#   42.52 / 48.66 / 59.13 us (1.39x / 1.11x / 0.99x / 0.84x fp16), H200 34.41 / 42.87 / 48.73 / 59.27.
# STEP=check (H100, the session's last device seconds): compute-sanitizer racecheck over the TMA driver (quick: dense
#   M = 70 at TOK = 16 / 128, splits by cluster and workspace; the grouped cases) -- the mbarrier pipeline, the
#   epilogue's staging through the stage buffers and the cluster sums -- then replicates of final47 and moe-final50
#   with the package's (now pasted) tables.
if [ "$STEP" = check ]; then
  python3 profiling/warm_cache.py wgmma grouped gemv gemv_stream quant 2>&1 | tail -1
  SAN_QUICK=1 sanitize racecheck "$W/racecheck_tma30.log" 170 profiling/sanitize_tma.py
  dense_closing final47rep 70
  moe_closing moe-final50rep 70
fi
finish_run run30
