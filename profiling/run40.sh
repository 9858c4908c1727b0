#!/usr/bin/env bash
# Thirty-third session (2026-11-27).  From the repo root:  OUT=/tmp/out STEP=ps bash profiling/run40.sh
#   (kind nvidia-h100-x1; carry ab_prev/ for the old-source column)
. profiling/run_env.sh
start_run ps
RUN=40
# STEP=ps: issue 3's M = 1 k = 4 gate/up (80-82 % of SOL, needs 4.63 -> 4.43 us).  A warp's step after its weights
#   land is ~210 issued instructions for 64 weights a lane (SASS, kbit_gemv<4, ..., C8>), with five warps a scheduler:
#   instruction count, not DRAM, is what the step after the wait costs.  Three cuts, each exact or more accurate:
#   - e4m4_decode as (code << 19) * 2^116 (2 instructions instead of 8; all 256 codes bit-identical, numpy);
#   - pair_keys / quad_keys as single LOP3 bit-selects (ptxas had made two of each: -18 a step in SASS);
#   - PS (C8 at M = 1, +ps=1): the block scale after the MMA -- each of the MMA's 8 token columns sums one block
#     (the idle columns of M = 1), 4 FFMA a step instead of 32 HMUL2 (the thirty-first session's PS could not be
#     right: one column summed four blocks).  SASS: a step 275 -> 257 lines, 96 registers (five blocks per SM kept).
#   Columns: old = 053588e's source (ab_prev/gemv_053588e.cu) on today's plans, new = this tree (decode + keys),
#   ps / ps1 = new with PS (two / one MMA chains).  Expect: new 0.02-0.05 us under old a cell, ps another
#   0.05-0.12 us on the C8 cells (gate/up, down, O, KV at k = 4; KV at every k), err of ps <= new's; Q / linear value
#   (not C8) ps = new within noise.
if [ "$STEP" = ps ]; then
  SHAPES=gateup,down,Q,O,KV KS=4 MS=1 AB_VARIANTS="old:src=ab_prev/gemv_053588e.cu;ps:+ps=1;ps1:+ps=1 +dual=0" \
    CUT=230 gemv_ab_twice ps40 240
  SHAPES=gateup,down,O,KV KS=2,3,5 MS=1 AB_VARIANTS="old:src=ab_prev/gemv_053588e.cu;ps:+ps=1" \
    CUT=230 gemv_ab_twice ps40k 240
fi
# Result (ps40_1 / ps40_2, H100): old -> new k = 4 M = 1 TOTAL 18.51 / 18.46 -> 17.85 / 17.80 us (gate/up 4.68 -> 4.35,
#   down 4.36 -> 4.25, O 3.81 -> 3.69, Q 3.72 -> 3.65, KV 1.94 -> 1.91): the decode and key cuts are worth much more
#   than their share of a step's instructions.  PS slower than new on every C8 cell (gate/up 4.41, down 4.45, KV 2.02;
#   ps1 wrong on down: the slot's scale read after its refill) -- removed (profiling/patches/session33-gemv-ps.patch).
#   The k = 5 lookup then made one PRMT (the GEMM's / wgmma's form; a k = 5 step 451 -> 326 SASS lines).
# (ab_trees: profiling/run_env.sh; ab_prev/tree holds 053588e's tree here)
# STEP=ab1: the whole tree against 053588e's at M = 1 / 4 (every k, issue 3) and on the MoE shapes (k = 4, issue 5:
#   the grouped GEMV runs the same gemv_block, the same keys and decode).  Expect: M = 1 TOTAL k = 4 -0.5..-0.7 us
#   (gemv_ab above), k = 5 more (its lookups: -1 PRMT and -1 shift-or a pair), k = 2 / 3 less (the quad keys, the
#   decode only); MoE 1..4 tokens -0.1..-0.3 us a kernel.
if [ "$STEP" = ab1 ]; then
  ab_trees ab40m1 gemv --M 1,4 --k 2,3,4,5 --columns matmul --reps 15
  ab_trees ab40moe "gemv grouped" --shapes moe --k 4 --moe-M 1,4,16,32,64 --experts 8,10 \
    --columns Grouped,Grouped:stable --reps 15
fi
# STEP=ab2: the same for the dense M = 16..128 table (k = 4; the streaming GEMV's consumers run block_pair_mma; the wgmma
#   and GEMM dequantize with pair_keys / e4m4_decode).  Expect: M = 16 / 32 -1..-3 % (STREAM), M >= 64 within noise.
if [ "$STEP" = ab2 ]; then
  AB_TIMEOUT=200 ab_trees ab40d "gemv_stream wgmma gemv quant" --M 16,32,64,128 --k 4 \
    --columns STREAM,WGMMA,dq+cuBLAS,matmul --reps 15
fi
# STEP=tests1 / tests2: the GPU tests of every family on this tree (e4m4_decode and pair_keys are shared by all of
#   them; the dequantize / quantize kernels too), in two calls.  Expect: all pass.
if [ "$STEP" = tests1 ] || [ "$STEP" = ab2 ]; then
  python3 profiling/warm_cache.py gemv gemv_stream quant gemm 2>&1 | tail -1
  gpu_tests "$W/gpu_tests40a.log" 280 tests/test_gemv_gpu.py tests/test_gemv_stream_gpu.py tests/test_quantize_gpu.py \
    tests/test_gemm_gpu.py tests/test_checks_gpu.py tests/test_launch_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests40a.log" | head
fi
if [ "$STEP" = tests2 ]; then
  python3 profiling/warm_cache.py gemv grouped wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests40b.log" 420 tests/test_grouped_gpu.py tests/test_wgmma_gpu.py tests/test_pdl_gpu.py \
    tests/test_layers_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests40b.log" | head
  sanitize memcheck "$W/memcheck_c8_40.log" 100 profiling/sanitize_c8.py
fi
# STEP=r256: the decode GEMV family's k <= 4 pair tables in 256-byte rows (hook KBIT_GEMV_ROW256=1024 in the
#   environment: one PRMT makes a lookup's whole offset and the LDS takes the table's base as its immediate (sm_90:
#   the dynamic shared memory starts at 0x400; the kernel traps otherwise); a k = 4 step 268 -> 233 SASS lines (-32
#   IMAD).  Tables 64 KB at k = 4, so gate/up's five 8-column blocks per SM become three (expected slower there).
#   Two alternations, process-level (the package's plans): dense M = 1 k = 3 / 4, MoE k = 4 1 / 4 tokens.
#   Expect: down / Q / O / KV -2..-6 % at M = 1, gate/up slower; MoE down -0.1..-0.3 us.
# Result (r256_{off,on}{1,2}.log, H100, two alternations): k = 3 M = 1 TOTAL 18.52 / 18.53 -> 18.10 / 18.09 us; k = 4
#   slower: gate/up 4.32 -> 6.44 (three blocks per SM), Q 3.62 -> 3.70, O 3.62 -> 3.67, down equal, KV 1.82 -> 1.78; MoE
#   down 8 experts 1 / 4 tokens 4.33 / 4.51 -> 4.49 / 4.68 (the 64 KB build per block), 10 experts equal.  Only k = 3
#   gains, and only with the base hard-coded: not kept (profiling/patches/session33-gemv-row256.patch).
if [ "$STEP" = r256 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  KBIT_GEMV_ROW256=1024 python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  env_ab KBIT_GEMV_ROW256 1024 r256 3,4
fi
# STEP=h200: the same tree's M = 1 / 4 table (every k) and the MoE k = 4 table at 1 / 4 / 64 tokens on an H200
#   (issue 3's targets are stated for it; last measured at 6fc2bea / a later tree: k = 4 M = 1 2.23x, 74-82 % of SOL).
#   Expect: the H100's gain or more (the H200's kernels are further from their SOL, latency / issue bound).
if [ "$STEP" = h200 ]; then
  python3 profiling/warm_cache.py gemv grouped 2>&1 | tail -1
  timeout 150 python3 profiling/bench.py --out "$W" --M 1,4 --k 2,3,4,5 --columns matmul --reps 15 --tag final60-m1 \
    > "$W/bench_final60.log" 2>&1
  grep -E "^### M|^\| (gateup|down|Q|O|KV|lin_value|TOTAL) \| 4 \||^\| TOTAL" "$W/bench_final60.log"
  timeout 150 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,64 --experts 8,10 \
    --columns Grouped,Grouped:stable --reps 15 --tag moe-final60h > "$W/bench_moe60h.log" 2>&1
  grep -E "^### MoE|^\| moe_dn|as moe_forward" "$W/bench_moe60h.log" | cut -c1-150
fi
# STEP=dnplan: issue 5's down at 1 / 4 tokens (default launch 1.82-1.91x after ab1; 2x needs 8 experts 1 token 4.31 ->
#   4.07 us).  The grouped plans were tuned when a step cost ~15 % more instructions; a cheaper step may favour fewer
#   warps a group (each more steps) or more.  Plan overrides of the package kernels (no new source), two passes.
#   Expect: one of them 0.1-0.2 us faster on 8 or 10 experts, or none (the plans stay).
if [ "$STEP" = dnplan ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  SHAPES=moe_dn KS=4 MS=1,4 ES=8,10 MOE_MMA=0 CUT=230 \
    MOE_VARIANTS="g4w1:+gpb=4 +warps=1;g8w1:+gpb=8 +warps=1;g4w4:+gpb=4 +warps=4;g2w2:+gpb=2 +warps=2;g5w1:+gpb=5 +warps=1;g10w1:+gpb=10 +warps=1;g5w4:+gpb=5 +warps=4" \
    moe_ab_twice dnplan40 200
fi
# STEP=kv4: KV (N = 512) at M = 4, k = 2: 2.28 us against 1.72 at M = 1 (1.33x; issue 3: at most 1.3x) since M = 1
#   got faster.  Plan overrides (8-column groups of 8 warps now): 4 / 16 warps, one chain, the late fill, 16-column
#   groups.  Expect: one of them <= 2.2 us, or none (then the ratio is reported as it is).
if [ "$STEP" = kv4 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  SHAPES=KV KS=2,3,4 MS=2,4 AB_PLANS="w4:warps=4;w16:warps=16,c8=1;d0:dual=0;l1:late=1;c16:c8=0" CUT=200 gemv_ab_twice kv4_40 100
fi
# Result (gemv_kv4_40_{1,2}.log): w16 faster at M = 4 for k = 2 / 3 / 4 by 0.04-0.07 us in both passes; at M = 2 mixed.
#   Kept (gemv.plan: M = 4, one group per SM, 16 warps).
# STEP=kv4c: the dense GEMV's GPU tests on that plan and the KV rows of the M = 1 / 4 table (k = 2..5).
if [ "$STEP" = kv4c ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests40c.log" 200 tests/test_gemv_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests40c.log" | head
  timeout 100 python3 profiling/bench.py --out "$W" --M 1,4 --k 2,3,4,5 --columns matmul --shapes KV --reps 15 \
    --tag kv4c-m1 > "$W/bench_kv4c.log" 2>&1
  grep -E "^### M|^\| KV \|" "$W/bench_kv4c.log"
fi
# STEP=final: the closing M = 1 / 4 table of the final tree (KV's 16-warp plan in), with the PDL column, as a replicate
#   of ab40m1-new.  Expect: k = 4 gate/up / down / Q / O / linear value >= 85 % of SOL again, TOTAL k = 4 ~2.68x.
if [ "$STEP" = final ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  m1_table final61
fi
finish_run run40
