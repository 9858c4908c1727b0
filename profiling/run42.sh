#!/usr/bin/env bash
# Thirty-fifth session (2026-11-27).  From the repo root:  OUT=/tmp/out STEP=cl1 bash profiling/run42.sh
#   (kind nvidia-h100-x1)
. profiling/run_env.sh
start_run cl1
RUN=42
# STEP=cl1: the decode GEMV's column groups on thread block clusters (plan cl: the cluster's CTAs split K, each stages
#   only its own steps' A, the partial sums meet over DSMEM; kbit_gemv's CL).  KV (512 x 2048: 32 groups of 16
#   columns) runs on 32 of 132 SMs today, each staging all of A (64 KB at M = 16) and streaming 32 KB of weights with
#   16 warps of one step each: KV M = 16 4.00 us, M = 8 2.72, SOL 1.93 (dclose41).  With cl = 4 x 4 warps the same
#   steps run on 128 SMs, each staging a quarter of A.  Expect: KV M = 9..16 -0.8..-1.3 us, M = 5..8 -0.3..-0.5;
#   M = 1..4 (c8 plans at ~2.0-2.2 us, near the SOL read) no gain.  The GPU tests of the cluster plans first.
if [ "$STEP" = cl1 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests42a.log" 300 tests/test_gemv_gpu.py -k "cluster or graph_capture or torch_interop or plans_agree"
  grep -E "^E  |FAILED|Error" "$W/gpu_tests42a.log" | head -20
  SHAPES=KV KS=2,3,4,5 MS=1,4,5,8,9,12,16 \
    AB_PLANS="c2w4:cl=2,warps=4;c4w4:cl=4,warps=4;c4w2:cl=4,warps=2;c8w2:cl=8,warps=2;c8w1:cl=8,warps=1" \
    CUT=230 gemv_ab_twice cl42 250
fi
# Result (gemv_cl42_{1,2}.log, H100, two passes; 10 GPU tests of the cluster plans passed, gpu_tests42a.log): every
#   cluster plan slower at every cell, by a near-constant ~1.0-1.5 us -- KV k = 4 M = 16 3.95 -> 4.98 us (cl 4 x 4 warps,
#   the best), M = 8 2.75 -> 3.83, M = 1 1.85 -> 3.13; cl 2 / 8 and 1-2 warps a CTA slower still.  A fixed cost of the
#   clustered launch and its two cluster barriers (the wgmma cluster sum measured ~0.6 us for its first barrier,
#   twenty-fifth session; the fourteenth session's trace had already seen a K split "lose on cluster overhead"), not
#   recovered by a quarter of A per SM.  Reverted (commit after 17f29d9); cubin_diff.py keeps its --skip option.
# STEP=fsw: the full A swizzle at two token tiles (-DKBIT_GEMV_FSW=1: the t-conflict too; kbit_gemv.cu gemv_fsw).
#   With ASW's row parity a quarter-warp pass of the A loads is still 2-way (lanes t and t + 2 128 bytes apart): at
#   two tiles a step's eight LDS.128 are 8 x 8 = 64 wavefronts beside the 32 table lookups' 32.  FSW: 32 + 32, at
#   +4 instructions a step (three XORs a tile instead of ASW's second base; SASS registers equal or fewer, k = 4
#   dual 117 -> 103).  ASW's row half of it took the two-tile GEMV TOTAL 41.39 -> 35.87 us at M = 16 (run41 m816).
#   Expect: M = 9..16 GEMV -4..-8 % on the shapes it serves (down / Q / O / linear), KV less (one step a warp);
#   grouped 12 / 16 tokens -2..-5 %.
if [ "$STEP" = fsw ]; then
  SHAPES=gateup,down,Q,O,KV,lin_key,lin_value KS=2,3,4 MS=9,12,16 AB_VARIANTS="fsw:-DKBIT_GEMV_FSW=1" CUT=200 \
    gemv_ab_twice fsw42 250
  SHAPES=moe_gu_fused,moe_dn KS=4 MS=12,16 ES=8,10 MOE_MMA=0 MOE_VARIANTS="fsw:-DKBIT_GEMV_FSW=1" CUT=200 \
    moe_ab_twice fsw42 200
fi
# Result (gemv_fsw42_{1,2}.log, moe_fsw42_{1,2}.log, H100, two passes): faster at every cell, as expected.  Dense k = 4
#   GEMV M = 16 down 7.61 -> 7.23 us, Q 6.40 -> 6.10, O 6.61 -> 6.27, KV 3.98 -> 3.81, gate/up 10.66 -> 10.24; GEMV TOTAL
#   (gate/up, down, Q, O, KV) k = 2 / 3 / 4 M = 9 -1.2 / -1.5 / -1.4 %, M = 12 -2.3 / -2.5 / -1.9 %, M = 16 -5.2 / -5.0 /
#   -4.6 %; linear key / value alike.  Grouped k = 4 gate/up fused + down 12 tokens 16.25 / 21.50 -> 15.71 / 20.36 us
#   (8 / 10 experts), 16 tokens 19.21 / 24.93 -> 18.08 / 23.30.  Every variant cell's error as the default's (3e-4).
#   Made the default (KBIT_GEMV_FSW=1).
# STEP=fsw2 (FSW the default): the GEMV family's GPU tests, memcheck over the two-tile plans (sanitize_fsw.py: K tails,
#   N % 16 != 0, 1..16 warps, M = 9 / 13 / 16; grouped uneven slots, wait-first and stable) and the grouped LB kernels.
if [ "$STEP" = fsw2 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests42b.log" 420 tests/test_gemv_gpu.py tests/test_grouped_gpu.py tests/test_pdl_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests42b.log" | head -20
  sanitize memcheck "$W/memcheck_fsw42.log" 120 profiling/sanitize_fsw.py
  sanitize memcheck "$W/memcheck_glb42.log" 120 profiling/sanitize_grouped_lb.py
fi
# Result (H100): 330 GPU tests passed (gpu_tests42b: test_gemv_gpu, test_grouped_gpu, test_pdl_gpu); memcheck over
#   sanitize_fsw.py 132 checks and sanitize_grouped_lb.py 52 checks, 0 errors (memcheck_fsw42, memcheck_glb42).
# STEP=sweep: the H100 dispatch bands at M = 9..16 again (k = 2..4, the seven dense shapes; GEMV, STREAM, the dispatched
#   matmul): the faster two-tile GEMV may now beat the stream where the bands still say stream (k = 2 / 3 down and O
#   from 15, gate/up everywhere).  Expect: GEMV ahead on down / O / Q to 16 at every k; gate/up still on the stream.
if [ "$STEP" = sweep ]; then
  python3 profiling/warm_cache.py gemv gemv_stream 2>&1 | tail -1
  timeout 500 python3 profiling/bench.py --out "$W" --M 9,10,11,12,13,14,15,16 --k 2,3,4 --columns GEMV,STREAM,matmul \
    --reps 15 --tag sweep42 > "$W/bench_sweep42.log" 2>&1
  grep -E "^### M|^\| TOTAL" "$W/bench_sweep42.log"
fi
# Result (sweep42, H100): k = 4 TOTAL matmul M = 9 27.19 us (1.73x), 12 28.69 (1.64x), 14 29.91 (1.57x), 15 30.70
#   (1.53x), 16 31.14 (1.48x: this run's fp16 TOTAL 46.20, O 9.97 against 10.61-10.73 in earlier runs; 31.14 against
#   dclose41's fp16 47.06 would be 1.51x); retune_tables.py +sweep42: k = 2 down, k = 3 O / Q on the GEMV at M = 16.
# STEP=ts: KV's 32 column groups use 32 of 132 SMs; the token split (plan ts, kbit_gemv's TS) puts each group's rows on
#   several CTAs (8 rows each, or 4 with c8) instead, each staging only its rows and re-reading the group's weights
#   (mostly from L2).  Unlike the cluster split (cl1) no cross-CTA sum.  Expect: KV M = 9..16 3.8 -> ~2.8 us (two CTAs
#   of M = 8 work: 2.7 us), M = 5..8 2.5-2.7 -> ~2.2 (two c8 CTAs of M <= 4: 2.05-2.17); linear key / O less or slower.
if [ "$STEP" = ts ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests42c.log" 200 tests/test_gemv_gpu.py -k "token_split"
  grep -E "^E  |FAILED" "$W/gpu_tests42c.log" | head -20
  SHAPES=KV,lin_key,O KS=2,3,4,5 MS=5,8,9,12,16 \
    AB_PLANS="t8:ts=1;t8w8:ts=1,warps=8;t4:ts=1,c8=1;t4w8:ts=1,c8=1,warps=8;t4w4:ts=1,c8=1,warps=4" \
    CUT=230 gemv_ab_twice ts42 250
fi
# Result (gemv_ts42_{1,2}.log, H100, two passes; 4 GPU tests of the split passed, gpu_tests42c): KV faster at every k and
#   M -- k = 4 M = 5 / 8 2.47 / 2.70 -> 2.19 / 2.22 us (4-row c8 CTAs on 8 warps, t4w8), M = 9 / 12 / 16 3.17 / 3.34 /
#   3.76 -> 2.68 / 2.67 / 2.70 (8-row CTAs, t8); k = 2 M = 16 3.67 -> 2.93, k = 5 4.67 -> 3.13.  Linear key and O (128
#   groups) slower every way (linear key k = 4 M = 16 4.21 -> 4.51 at best).  Made the default for <= 64 groups of 16
#   from M = 5 (gemv.plan).
# STEP=close: the tree's GPU tests (the GEMV family, the cached-launch path), memcheck (sanitize_fsw.py, now with the
#   token split's default plans) and issue 4's M = 5..16 table at k = 4 with this tree's dispatch.  Expect: KV at M = 16
#   ~2.7 us, TOTAL ~30.0 us (1.5x+ fp16).
if [ "$STEP" = close ]; then
  python3 profiling/warm_cache.py gemv gemv_stream 2>&1 | tail -1
  timeout 150 python3 profiling/bench.py --out "$W" --M 5,8,12,16 --k 4 --columns GEMV,STREAM,matmul --reps 15 \
    --tag dclose42 > "$W/bench_dclose42.log" 2>&1
  grep -E "^### M|^\| (KV|TOTAL) " "$W/bench_dclose42.log"
  gpu_tests "$W/gpu_tests42d.log" 260 tests/test_gemv_gpu.py tests/test_launch_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests42d.log" | head -20
  sanitize memcheck "$W/memcheck_fsw42b.log" 120 profiling/sanitize_fsw.py
fi
# Result (dclose42, H100, this tree's dispatch): k = 4 TOTAL M = 5 20.47 us = 2.29x fp16, M = 8 22.34 = 2.09x, M = 12
#   27.95 = 1.68x, M = 16 30.00 = 1.57x (was 32.27 = 1.46x in dclose41; KV 2.72 us at M = 16, 2.23 at M = 8); matmul
#   within 0.3 % of the best column.  123 GPU tests passed (gpu_tests42d: test_gemv_gpu, test_launch_gpu); memcheck over
#   sanitize_fsw.py 164 checks, 0 errors (memcheck_fsw42b).
# Result (H200, the same step on the same code -- .git_rev said 72b8eff; the later commits are docs and results only):
#   k = 4 TOTAL matmul M = 5 / 8 / 12 / 16 20.68 / 24.24 / 29.67 / 32.28 us = 1.96x / 1.68x / 1.38x / 1.27x fp16, the best
#   column 20.59 / 22.77 / 28.40 / 30.60 (1.97x / 1.79x / 1.45x / 1.34x): the H200 bands are stale -- gate/up at M = 8 on
#   the stream (7.03 vs GEMV 5.56 us), down / Q / O at M = 16 on the stream (7.84 / 6.57 / 7.26 vs 7.37 / 6.25 / 6.36): over
#   the 5 % rule there; and even the best column is short of 1.5x on the H200 (its fp16 is ~13 % faster).  123 GPU tests
#   passed, memcheck 164 checks 0 errors (nvidia-h200_2026-11-27_gpu_tests42d.log, _memcheck_fsw42b.log).
# STEP=h200sweep (on an H200): the H200 bands at M = 5..16 (k = 2..5, the seven dense shapes; GEMV, STREAM, matmul) for
#   retune_tables.py, after the full swizzle and the token split.  Expect: the GEMV ahead of the stream on down / Q / O to
#   16 and on gate/up to 8 (close on the H200: gate/up M = 8 GEMV 5.56 vs stream 7.03 us).
if [ "$STEP" = h200sweep ]; then
  python3 profiling/warm_cache.py gemv gemv_stream 2>&1 | tail -1
  timeout 500 python3 profiling/bench.py --out "$W" --M 5,6,7,8,9,10,11,12,13,14,15,16 --k 2,3,4,5 \
    --columns GEMV,STREAM,matmul --reps 15 --tag sweep42h > "$W/bench_sweep42h.log" 2>&1
  grep -E "^### M|^\| TOTAL" "$W/bench_sweep42h.log"
fi
# Result (sweep42h, H200): retune_tables.py +sweep42h moved ten H200 shapes -- down / O / Q at k = 2..4 on the GEMV to
#   15 / 16 (the stream from 16 / 17), gate/up k = 2 on the GEMV to 16, k = 4 to 8.  The k = 5 two-tile GEMV is slow on
#   the H200 at M >= 11 (TOTAL 46-51 us against 37.6 at 10; not dispatched: the stream / wgmma serve k = 5 there).
# STEP=hclose (on an H200): the M = 5..16 table (k = 4) with the rebuilt H200 bands.  Expect: matmul = the best column.
if [ "$STEP" = hclose ]; then
  python3 profiling/warm_cache.py gemv gemv_stream 2>&1 | tail -1
  timeout 150 python3 profiling/bench.py --out "$W" --M 5,8,12,16 --k 4 --columns GEMV,STREAM,matmul --reps 15 \
    --tag dclose42h > "$W/bench_dclose42h.log" 2>&1
  grep -E "^### M|^\| TOTAL " "$W/bench_dclose42h.log"
fi
# Result (dclose42h, H200, the rebuilt bands): k = 4 TOTAL M = 5 / 8 / 12 / 16 20.65 / 22.70 / 28.38 / 30.50 us = 1.97x /
#   1.79x / 1.44x / 1.35x fp16; matmul = the best column (within 0.1 %).  At M = 16 gate/up 7.79 us (stream) = 1.02x, Q
#   6.25 = 1.14x: the kernels take about their H100 times while the H200's fp16 is ~13 % faster.
# STEP=sl2: two column groups side by side at two token tiles (plan gpb, SLICES; instantiated so far for k = 5 at one
#   tile only -- gemv_ab's variant columns build the expression).  At M = 16 a block stages all of A (64 KB at K = 2048,
#   160 KB at 5120) for 16 columns: on Q two blocks an SM read 128 KB of A from L2 for ~32 KB of weights.  gpb groups
#   over one staged A and one table: per SM half (gpb 2) of that traffic and of the table builds.  Expect: Q / O /
#   linear value M = 12 / 16 -5..-15 % if L2 -> SM traffic is what the two-tile GEMV waits on; gate/up maybe (fewer
#   blocks, 2.4 waves still); down (one 16-warp block an SM already, 213 KB) not.
if [ "$STEP" = sl2 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  SHAPES=gateup,down,Q,O,lin_value KS=2,4 MS=9,12,16 \
    AB_VARIANTS="s2w8:+gpb=2 +warps=8;s2w4:+gpb=2 +warps=4;s3w4:+gpb=3 +warps=4;s4w4:+gpb=4 +warps=4" \
    CUT=230 gemv_ab_twice sl2_42 280
fi
# Result (gemv_sl2_42_{1,2}.log, H200, two passes): the wide shapes much faster -- gate/up 3 groups x 4 warps (s3w4) k = 4
#   M = 9 / 12 / 16 8.75 / 9.48 / 10.56 -> 5.94 / 6.23 / 6.66 us (the stream: ~7.8), k = 2 M = 16 7.76 -> 6.37; Q / linear
#   value 2 x 8 warps (s2w8) k = 4 M = 16 6.27 -> 5.61, M = 12 5.65 -> 5.16, k = 2 M = 16 7.53 -> 5.34.  The 128-group
#   shapes (down, O: one 16-warp block an SM already) 20-30 % slower every way.
# STEP=sl3 (H100; slices at two tiles the default for > 132 groups at k <= 4: gate/up 3 x 4 warps, Q / linear value
#   2 x 8): the GPU tests of it, memcheck, and the A/B on the H100 -- new (the default) against the one-group plan
#   (g1) and other shapes of block, M = 8 (one tile: gate/up's slices, not instantiated) to 16.  Expect: the H200's gains.
if [ "$STEP" = sl3 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests42e.log" 300 tests/test_gemv_gpu.py -k "slices or dense_shapes or graph_capture or edge"
  grep -E "^E  |FAILED" "$W/gpu_tests42e.log" | head -20
  sanitize memcheck "$W/memcheck_fsw42c.log" 150 profiling/sanitize_fsw.py
  SHAPES=gateup,Q,lin_value KS=2,3,4 MS=8,9,12,16 \
    AB_VARIANTS="g1:+gpb=1;s2w8:+gpb=2 +warps=8;s3w4:+gpb=3 +warps=4;s4w4:+gpb=4 +warps=4;s5w3:+gpb=5 +warps=3" \
    CUT=230 gemv_ab_twice sl3_42 250
fi
# Result (gemv_sl3_42_{1,2}.log, H100, two passes; 87 GPU tests passed, gpu_tests42e; memcheck over sanitize_fsw.py with
#   the slices 200 checks, 0 errors): the defaults are the fastest block shapes -- gate/up k = 4 M = 9 / 12 / 16 8.51 /
#   9.26 / 10.17 -> 5.88 / 6.13 / 6.50 us (g1 = the one-group plan; the stream 7.66 at 16), Q 5.08 / 5.47 / 6.04 -> 4.83 /
#   5.00 / 5.41, linear value alike, k = 2 / 3 alike (k = 2 linear value M = 16 7.23 -> 5.17).  One tile (M = 8): gate/up
#   3 x 4 only at k = 2 a little faster (5.84 -> 5.58; not instantiated).
# STEP=sweep3 (TAG=sweep42b on the H100, sweep42hb on the H200): the M = 9..16 bands again (gate/up now on the GEMV?).
if [ "$STEP" = sweep3 ]; then
  python3 profiling/warm_cache.py gemv gemv_stream 2>&1 | tail -1
  timeout 500 python3 profiling/bench.py --out "$W" --M 9,10,11,12,13,14,15,16 --k 2,3,4 --columns GEMV,STREAM,matmul \
    --reps 15 --tag "$TAG" > "$W/bench_$TAG.log" 2>&1
  grep -E "^### M|^\| TOTAL" "$W/bench_$TAG.log"
fi
# Result (sweep42b, H100): k = 4 GEMV TOTAL M = 9 / 12 / 16 24.71 / 26.07 / 28.37 us (1.91x / 1.81x / 1.63x fp16; the old
#   bands' matmul 26.42 / 27.45 / 29.39: gate/up still on the stream); retune_tables.py +sweep42b: gate/up k = 2..4 and Q
#   k = 2 on the GEMV to 16.
# Result (sweep42hb -- asked for an H200, got the held H100: so the H100 again, with the rebuilt bands): k = 4 TOTAL matmul
#   M = 9 / 12 / 16 24.78 / 26.09 / 28.34 us = 1.89x / 1.80x / 1.63x fp16, matmul = the best column everywhere (gate/up
#   6.54 us at 16 on the GEMV).
# Result (sweep42hb, H200): k = 4 best column M = 9 / 12 / 13 / 14 / 16 1.65x / 1.56x / 1.51x / 1.49x / 1.41x fp16 (the old
#   bands' matmul 26.70 us at 9, 29.79 at 16); retune_tables.py +sweep42hb: gate/up k = 2..4, Q k = 2 / 3 on the GEMV to 16.
# STEP=final (TAG=dclose42f on the H100, dclose42hf on the H200): the final tree -- the M = 5..16 table (k = 4) with the
#   rebuilt bands, the MoE table at 1 / 4 / 16 tokens (TAG-moe), the GEMV family's and the launch path's GPU tests, memcheck.
if [ "$STEP" = final ]; then
  python3 profiling/warm_cache.py gemv gemv_stream grouped 2>&1 | tail -1
  timeout 150 python3 profiling/bench.py --out "$W" --M 5,8,12,16 --k 4 --columns GEMV,STREAM,matmul --reps 15 \
    --tag "$TAG" > "$W/bench_$TAG.log" 2>&1
  grep -E "^### M|^\| TOTAL " "$W/bench_$TAG.log"
  timeout 150 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16 --experts 8,10 \
    --columns Grouped,Grouped:stable --reps 15 --tag "$TAG-moe" > "$W/bench_$TAG-moe.log" 2>&1
  grep -E "^### MoE|^\| (moe_dn|TOTAL) " "$W/bench_$TAG-moe.log"
  gpu_tests "$W/gpu_tests_$TAG.log" 400 tests/test_gemv_gpu.py tests/test_grouped_gpu.py tests/test_launch_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_$TAG.log" | head -20
  sanitize memcheck "$W/memcheck_$TAG.log" 150 profiling/sanitize_fsw.py
fi
# Result (final, the same tree on both GPUs, this tree's dispatch; dclose42f / dclose42hf and their -moe tables):
#   H100 k = 4 TOTAL M = 5 / 8 / 12 / 16 20.51 / 22.36 / 26.10 / 28.37 us = 2.28x / 2.09x / 1.80x / 1.66x fp16; H200 20.59 /
#   22.68 / 26.33 / 28.73 = 1.97x / 1.79x / 1.56x / 1.43x; matmul = the best column within 0.4 % on both.  MoE (k = 4,
#   default launch) unchanged at 1 / 4 / 16 tokens: H100 down 1.88x / 1.96x at 1 token, 1.87x / 1.97x at 4 (8 / 10
#   experts); 16 tokens dispatch the wgmma / mma kernels (not the grouped GEMV).  270 GPU tests passed on each
#   (test_gemv_gpu, test_grouped_gpu, test_launch_gpu); memcheck over sanitize_fsw.py 200 checks, 0 errors on each.
# STEP=tests (the review's refactor of the plan tests into _check_plans): the GEMV tests that use it.
if [ "$STEP" = tests ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests42f.log" 300 tests/test_gemv_gpu.py -k "slices or token_split or plans_agree"
  grep -E "^E  |FAILED" "$W/gpu_tests42f.log" | head -20
fi
# Result (H100, 7465eff): 14 passed (gpu_tests42f).
finish_run gemv42
