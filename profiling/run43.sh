#!/usr/bin/env bash
# Thirty-sixth session (2026-11-27).  From the repo root:  OUT=/tmp/out STEP=probe bash profiling/run43.sh
. profiling/run_env.sh
start_run probe
RUN=43
# STEP=probe: how much of the decode GEMV's time at M = 4..16 is the staged A's L2 traffic, and what a thread block
#   cluster costs it.  Every block stages all of A (down M = 16: 160 KB an SM, 21 MB from L2 over 128 SMs, four times
#   the weights); the H200 table's down time grows ~0.18 us a row from M = 5 to 16 (sweep42hb / dclose42hf: 4.87 ->
#   7.34 us), ~7 TB/s of A.  Sharing A between the two CTAs of a cluster (TMA multicast) would halve that traffic.
#   Probes (gemv_ab variants, results wrong where half of A is staged): cl2 = the kernel launched in clusters of 2
#   (the launch's own cost); half = every other step of A staged (-DKBIT_GEMV_PROBE_HALF_A: the traffic's share);
#   clbar = clusters of 2 with a cluster barrier before A's staging and one at the exit (-DKBIT_GEMV_PROBE_CLBAR: the
#   multicast design's synchronisation); clhalf = both (the design's time without its copy mechanics).
#   Expect: half -0.6..-1.4 us on down / O at M = 16 (-0.3..-0.7 at M = 8); cl2 and clbar +0..+1 us (the 35th
#   session's cluster K split lost ~1 us on KV); go on with multicast only if clhalf beats the default by > 0.4 us.
if [ "$STEP" = probe ]; then
  SHAPES=down,O,lin_key KS=4 MS=4,8,16 AB_NOBASE=1 \
    AB_VARIANTS="cl2:+cluster=2;half:-DKBIT_GEMV_PROBE_HALF_A;clbar:-DKBIT_GEMV_PROBE_CLBAR +cluster=2;clhalf:-DKBIT_GEMV_PROBE_HALF_A -DKBIT_GEMV_PROBE_CLBAR +cluster=2" \
    CUT=230 gemv_ab_twice probe43 280
fi
# Result (probe43_{1,2}.log, H200, two passes, k = 4): cl2 (the launch alone) +0.0..+0.1 us; clbar +0.5..+0.6 us at every
#   cell (the two cluster barriers); half SLOWER, down M = 4 / 8 / 16 4.55 / 5.43 / 7.38 -> 4.76 / 5.73 / 8.08 us (its
#   results right: the unstaged chunks held the previous launch's A) -- so A's L2 traffic is not what grows with M.
#   SASS (nvcc, down M = 16): stage_A's linear loop is ~40 instructions a 16-byte chunk (row stepping, 64-bit address
#   math, a zero-store branch, BSSY / BSYNC), 20 chunks a thread at M = 16: ~800 instructions a thread, 16 warps, all
#   between the wait and the first MMA -- the probe's extra test on every chunk made it slower.  Multicast dropped.
# STEP=rows: A staged row by row at fixed chunk columns (-DKBIT_GEMV_STAGE_ROWS=1, stage_A; KBIT_GEMV_OPTS carries it to
#   the package's kernels): zero-filling cp.async, the swizzle bits a thread's own, both addresses stepping by constants;
#   the inner loop 14 SASS instructions a chunk (3 of them the cp.async idiom's dead LDS), no branch.  Expect: down / O
#   M = 16 -0.4..-0.9 us, Q / gate/up / linear -0.2..-0.4, M = 8 about half that, M = 1 / 4 within +-0.1; grouped
#   16 tokens -0.2..-0.5 (gate/up fused's SwiGLU staging, AMODE 2, keeps the linear loop), 1 / 4 tokens +-0.1.
if [ "$STEP" = rows ]; then
  SHAPES=gateup,down,Q,O,KV,lin_key,lin_value KS=4 MS=1,4,8,12,16 AB_NOBASE=1 \
    AB_VARIANTS="rows:-DKBIT_GEMV_STAGE_ROWS=1" CUT=200 gemv_ab_twice rows43 200
  SHAPES=moe_gu_fused,moe_dn KS=4 MS=1,4,16 ES=8,10 MOE_MMA=0 MOE_VARIANTS="rows:-DKBIT_GEMV_STAGE_ROWS=1" CUT=200 \
    moe_ab_twice rows43 150
fi
# Result (rows43_{1,2}, moe_rows43_{1,2}, H200, two passes): dense k = 4 GEMV TOTAL (gate/up, down, Q, O, KV) M = 1 / 4 /
#   8 / 12 / 16 17.36 / 19.18 / 22.75 / 26.39 / 28.77 -> 17.54 / 18.85 / 21.39 / 24.19 / 25.36 us: M = 16 -12 % (down
#   7.32 -> 6.17, gate/up 6.65 -> 5.90, O 6.38 -> 5.47, Q 5.62 -> 5.16, lin_key 4.37 -> 3.83, KV 2.78 -> 2.62); M = 1 +1 % (gate/up 4.29 -> 4.38,
#   Q / O / lin_key +0.04..+0.06).  Grouped: 16 tokens faster (gate/up fused 11.20 -> 9.63, down 7.11 -> 6.80 at 8 experts), 1 / 4
#   tokens slower (down 4.27 -> 4.58, gate/up fused 6.18 -> 6.54): the new form's set-up where a thread has one chunk,
#   and the SwiGLU staging's chunks on a quarter of the threads.
# STEP=rows2: the rows form only where a thread has two chunks or more (M x chunks a row >= 2 x threads), AMODE 2
#   always linear.  Expect: M = 1 and grouped 1 / 4 tokens as the default; M >= 4 and 16 tokens as rows.
if [ "$STEP" = rows2 ]; then
  SHAPES=gateup,down,Q,O,KV,lin_key,lin_value KS=4 MS=1,2,4,8,12,16 AB_NOBASE=1 \
    AB_VARIANTS="rows:-DKBIT_GEMV_STAGE_ROWS=1" CUT=200 gemv_ab_twice rows2_43 200
  SHAPES=moe_gu_fused,moe_dn KS=4 MS=1,4,8,16 ES=8,10 MOE_MMA=0 MOE_VARIANTS="rows:-DKBIT_GEMV_STAGE_ROWS=1" CUT=200 \
    moe_ab_twice rows2_43 150
fi
# Result (rows2_43_{1,2}, H200, two passes): M = 4 / 8 / 12 / 16 TOTAL 19.20 / 22.76 / 26.34 / 28.74 -> 18.96 / 21.37 /
#   24.25 / 25.40 us, but M = 1 / 2 17.36 / 18.14 -> 17.60 / 18.33: where the linear loop still ran (KV, Q, linear key at
#   M = 1) +0.01..+0.05 us -- the runtime test between the wait and A's copies -- and where a thread had two chunks
#   (O, gate/up at M = 1 / 2; KV, linear key at M = 4) the row form no faster.  Grouped 1 / 4 tokens +0.04..+0.07 us,
#   8 tokens 10 experts +0.12, 16 tokens -1.8 / -2.3 us a pair (8 / 10 experts).
# STEP=rows3: the row form from four chunks a thread, the test and the form's set-up (P, m0, q0) before the wait, kept
#   opaque.  Expect: M = 1 / 2 and grouped 1..8 tokens within +-0.02 us of the default; M >= 4 as rows2.
if [ "$STEP" = rows3 ]; then
  SHAPES=gateup,down,Q,O,KV,lin_key,lin_value KS=2,4 MS=1,2,4,8,16 AB_NOBASE=1 \
    AB_VARIANTS="rows:-DKBIT_GEMV_STAGE_ROWS=1" CUT=200 gemv_ab_twice rows3_43 240
  SHAPES=moe_gu_fused,moe_dn KS=4 MS=1,4,8,16 ES=8,10 MOE_MMA=0 MOE_VARIANTS="rows:-DKBIT_GEMV_STAGE_ROWS=1" CUT=200 \
    moe_ab_twice rows3_43 150
fi
# Result (rows3_43_{1,2}, H200, two passes): slower where the row form is not used -- k = 2 M = 1 15.00 -> 15.88 us,
#   k = 4 M = 2 18.18 -> 18.57, grouped 1 / 4 tokens +0.6 us a pair: the five set-up values held opaque across the
#   prologue and the wait cost the one-tile kernels more than the test they saved.  M = 8 / 16 as rows2.  Dropped.
# STEP=rows4 (the row form the default, KBIT_GEMV_STAGE_ROWS=1): compile-time, at two token tiles (MT = 2, M >= 9) and in
#   the token split's CTAs (KV from M = 5), no runtime test; the one-tile kernels' SASS is the old one (nvcc, names
#   normalised: all 108 dense MT = 1 and 72 grouped MT = 1 instantiations, fp16).  A/B against
#   -DKBIT_GEMV_STAGE_ROWS=0, then the GEMV family's GPU tests and memcheck over sanitize_fsw.py (two-tile plans, K tails,
#   N % 16 != 0, the token split, grouped uneven slots).  Expect: M = 9..16 as rows2 (k = 4 TOTAL M = 16 ~-3.3 us),
#   KV M = 5 / 8 -0.02..-0.05, grouped 12 / 16 tokens -1..-3 us a pair; tests and memcheck clean.
if [ "$STEP" = rows4 ]; then
  SHAPES=gateup,down,Q,O,KV,lin_key,lin_value KS=2,4,5 MS=5,8,9,12,16 AB_NOBASE=1 \
    AB_VARIANTS="old:-DKBIT_GEMV_STAGE_ROWS=0" CUT=200 gemv_ab_twice rows4_43 200
  SHAPES=moe_gu_fused,moe_dn KS=4 MS=12,16 ES=8,10 MOE_MMA=0 MOE_VARIANTS="old:-DKBIT_GEMV_STAGE_ROWS=0" CUT=200 \
    moe_ab_twice rows4_43 100
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests43.log" 240 -x tests/test_gemv_gpu.py tests/test_grouped_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests43.log" | head -10
  sanitize memcheck "$W/memcheck_rows43.log" 120 profiling/sanitize_fsw.py
fi
# Result (rows4_43_{1,2}, H200, two passes; the hook =0 the old loop): k = 4 GEMV TOTAL M = 9 / 12 / 16 24.96 / 26.38 /
#   28.74 -> 23.55 / 24.19 / 25.25 us (M = 16: gate/up 6.67 -> 5.88, down 7.33 -> 6.18, Q 5.64 -> 5.15, O 6.34 -> 5.37, KV
#   2.79 -> 2.71); k = 2 M = 16 27.96 -> 24.22, k = 5 43.5 -> 37.2; M = 5 / 8 -0.01..-0.09 (KV's token split).  Grouped
#   k = 4 gate/up fused + down 12 / 16 tokens 16.24 / 18.40 -> 15.29 / 16.44 us (8 experts), 21.05 / 23.89 -> 19.86 /
#   21.43 (10).  252 GPU tests passed (test_gemv_gpu, test_grouped_gpu); memcheck over sanitize_fsw.py 200 checks, 0
#   errors.  Kept (the default).
# STEP=h200sweep (H200): the dispatch bands at M = 9..16 (k = 2..5; GEMV, STREAM, matmul) for retune_tables.py
#   +sweep43h, and the grouped kernels at 9 / 12 / 16 tokens (g-GEMV, g-MMA, g-WGMMA, the dispatched Grouped) for
#   choose_impl.  Expect: the GEMV the fastest dense column at every (shape, k <= 4) to 16 (k = 5 maybe from 9 on
#   some shapes); the grouped GEMV faster than the mma / wgmma kernels at 12..16 tokens on gate/up fused (9.65 vs
#   ~10.2 us at 16) and near them on down.
if [ "$STEP" = h200sweep ]; then
  python3 profiling/warm_cache.py gemv gemv_stream 2>&1 | tail -1
  timeout 330 python3 profiling/bench.py --out "$W" --M 9,10,11,12,13,14,15,16 --k 2,3,4,5 \
    --columns GEMV,STREAM,matmul --reps 15 --tag sweep43h > "$W/bench_sweep43h.log" 2>&1
  grep -E "^### M|^\| TOTAL" "$W/bench_sweep43h.log"
  timeout 150 python3 profiling/bench.py --out "$W" --shapes moe --k 2,4 --moe-M 9,12,16 --experts 8,10 \
    --columns Grouped,g-GEMV,g-MMA,g-WGMMA --reps 15 --tag moe-sweep43h > "$W/bench_moe_sweep43h.log" 2>&1
  grep -E "^### |^\| moe" "$W/bench_moe_sweep43h.log"
fi
# Result (sweep43h, moe-sweep43h, H200): k = 4 GEMV TOTAL M = 9..16 23.5-25.5 us, the fastest column at every M (M = 16
#   1.58x fp16); retune_tables.py +sweep43h moved two H200 bands (k = 3 down: the GEMV at 16; k = 5 O: the GEMV to 16).
#   Grouped at 9..16 tokens: the grouped GEMV the fastest kernel or within 1 % on every MoE shape at 8 experts and at 10 x
#   9 / 12 tokens (k = 4 16 tokens 8 experts: gate/up fused 9.69 vs wgmma 10.41 us, down 6.81 vs mma 7.11), the wgmma /
#   mma kernels 1-7 % ahead at 10 x 16: choose_impl takes the GEMV where slots x tokens <= 128 (default launch).
# STEP=final (TAG=dclose43h on the H200 / dclose43 on the H100): the dense table M = 1, 5, 8, 12, 16 (k = 4; GEMV,
#   STREAM, matmul) and the MoE table (k = 4, 8 / 10 experts, 1 / 4 / 9 / 12 / 16 tokens; Grouped, Grouped:stable), this
#   tree's dispatch; the GEMV family's and the MoE GPU tests.  SWEEP=1 (the H100) first the M = 9..16 sweep (sweep43).
if [ "$STEP" = final ]; then
  python3 profiling/warm_cache.py gemv gemv_stream grouped 2>&1 | tail -1
  if [ "${SWEEP:-0}" = 1 ]; then
    timeout 200 python3 profiling/bench.py --out "$W" --M 9,10,11,12,13,14,15,16 --k 2,3,4,5 \
      --columns GEMV,STREAM,matmul --reps 15 --tag sweep43 > "$W/bench_sweep43.log" 2>&1
    grep -E "^### M|^\| TOTAL" "$W/bench_sweep43.log"
  fi
  timeout 150 python3 profiling/bench.py --out "$W" --M 1,5,8,12,16 --k 4 --columns GEMV,STREAM,matmul --reps 15 \
    --tag "$TAG" > "$W/bench_$TAG.log" 2>&1
  grep -E "^### M|^\| TOTAL" "$W/bench_$TAG.log"
  timeout 120 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,9,12,16 --experts 8,10 \
    --columns Grouped,Grouped:stable --reps 15 --tag "$TAG-moe" > "$W/bench_$TAG-moe.log" 2>&1
  grep -E "^### |^\| (moe_dn|moe_gu_fused|TOTAL)" "$W/bench_$TAG-moe.log"
  gpu_tests "$W/gpu_tests_$TAG.log" ${TEST_T:-200} tests/test_grouped_gpu.py tests/test_gemv_gpu.py -k "${TESTS_K:-moe_forward or choose or grouped_gemv or two_tiles or token_split}"
  grep -E "^E  |FAILED" "$W/gpu_tests_$TAG.log" | head -10
fi
# Result (H200 dclose43h, H100 dclose43 + sweep43, this tree): k = 4 TOTAL matmul M = 1 / 5 / 8 / 12 / 16 H200 17.36 /
#   20.66 / 22.65 / 24.24 / 25.51 us = 2.36x / 1.97x / 1.79x / 1.69x / 1.61x fp16; H100 17.76 / 20.39 / 22.31 / 24.62 /
#   25.82 = 2.64x / 2.29x / 2.09x / 1.91x / 1.82x.  MoE k = 4 (Grouped, default launch): 9..16 tokens TOTAL H200 1.02x-
#   1.15x, H100 1.34x-1.50x; 1 / 4 tokens as before (down H100 1.86x-1.92x, H200 1.50x-1.62x).  The H100 sweep showed
#   stale k = 5 bands at M = 9..16 (matmul 40.5 us on the wgmma kernel against 32.4-34.1 for the best column) and k = 3
#   down at 16 on the stream: retune_tables.py +sweep43 (six H100 shapes).  GPU tests: 36 selected on each GPU passed
#   after the _gemv_runs fix (the H200 run caught its missing default: 6 failed there, fixed in eb6be56).
#   Retune (CPU): tune_dispatch's "+" overlays drop the cells no earlier file measured, so the sweeps' M = 9..15 never
#   reached the bands (k = 5 Q on the H100 went to the stream from M = 9, 6 % over the GEMV there); the new "~" form adds
#   them: ~sweep43 / ~sweep43h.  Every sweep cell on both GPUs now dispatches within 1.3 % of its best measured column.
# STEP=check (H100): the retuned k = 3 / 5 bands at M = 9 / 10 / 16 (matmul against GEMV / STREAM), then the whole
#   test_gemv_gpu.py and test_grouped_gpu.py.  Expect matmul within 5 % of the best column; all tests pass.
if [ "$STEP" = check ]; then
  python3 profiling/warm_cache.py gemv gemv_stream grouped 2>&1 | tail -1
  timeout 60 python3 profiling/bench.py --out "$W" --M 9,10,16 --k 3,5 --columns GEMV,STREAM,matmul --reps 15 \
    --tag check43 > "$W/bench_check43.log" 2>&1
  grep -E "^### M|^\| TOTAL" "$W/bench_check43.log"
  gpu_tests "$W/gpu_tests_check43.log" 200 tests/test_gemv_gpu.py tests/test_grouped_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_check43.log" | head -10
fi
finish_run run43
