#!/usr/bin/env bash
# Fiftieth session (2026-11-29).  From the repo root:  OUT=/tmp/out STEP=allm bash profiling/run57.sh  (carry .git_rev)
. profiling/run_env.sh
start_run allm
# No kernel change since 105e847 (wgmma cubins byte-identical to 0bb630b; only Python review changes since).  This
# session's runs are the closing evidence on one tree, in the form the issues ask for.
# STEP=allm: issue 4's table in one run -- k = 4, every dense shape, M = 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, every
#   kbit column (GEMV, STREAM, GEMM, WGMMA, dq+cuBLAS) beside the dispatched matmul, fp16 cuBLAS and SOL, with the plot.
#   The earlier tables split these M over several runs and trees (final33-m1 / dclose43h / close52h / close53h2 /
#   final14b).
# Expect: the closing numbers of the forty-ninth session within noise (k = 4 TOTAL M = 1 17.1 us 2.38x, M = 8 1.79x,
#   M = 16 1.61x, M = 32 1.04x, M = 64 0.90x, M = 128 0.77x, M = 256 ~0.6-0.68x); matmul within 5 % of Best per cell.
if [ "$STEP" = allm ]; then
  python3 profiling/warm_cache.py quant gemv gemm wgmma gemv_stream 2>&1 | tail -1
  timeout 520 python3 profiling/bench.py --out "$W" --M 1,2,4,8,16,32,64,128,256,512 --k 4 \
    --columns GEMV,STREAM,GEMM,WGMMA,dq+cuBLAS,matmul --reps 15 --plot --tag allm57 > "$W/bench_allm57.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_allm57.log"
  finish_run run57
fi
# STEP=every: issue 3's M = 1..4 x k = 2..5 (dispatched matmul, default and full PDL) and issue 5's MoE table (k = 4,
#   8 / 10 experts, 1..64 tokens an expert; Grouped, Grouped:stable, Grouped:chained), same tree.
# Expect: M = 1 k = 4 2.38x, k = 2 2.74x; MoE 1..4 tokens 1.5-1.7x a projection, chained 64 tokens ~1.0x / ~0.97x.
if [ "$STEP" = every ]; then
  timeout 250 python3 profiling/bench.py --out "$W" --M 1,2,3,4 --k 2,3,4,5 --columns matmul,matmul+PDL --reps 15 \
    --tag m1k57 > "$W/bench_m1k57.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_m1k57.log"
  timeout 300 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,2,4,8,16,32,64 --experts 8,10 \
    --columns Grouped,Grouped:stable,Grouped:chained --reps 15 --tag moe57 > "$W/bench_moe57.log" 2>&1
  grep -E "^### MoE|TOTAL" "$W/bench_moe57.log"
  finish_run run57
fi
# STEP=suite: the GPU tests of the Python the last sessions touched (gemv's row check, dispatch, checks, quantize,
#   mma GEMM) on this tree.
if [ "$STEP" = suite ]; then
  python3 profiling/warm_cache.py gemv gemm quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_suite57.log" 540 tests/test_gemv_gpu.py tests/test_checks_gpu.py tests/test_gemm_gpu.py \
    tests/test_quantize_gpu.py --durations=8
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_suite57.log" | head -20
  finish_run run57
fi
# STEP=suite2 / suite3 (run as inline commands of this form): the other GPU test files, and memcheck over
#   sanitize_driver.py.
if [ "$STEP" = suite2 ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_suite57b.log" 560 tests/test_wgmma_gpu.py tests/test_grouped_gpu.py tests/test_pdl_gpu.py \
    tests/test_layers_gpu.py tests/test_launch_gpu.py tests/test_gemv_stream_gpu.py --durations=8
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_suite57b.log" | head
  finish_run run57
fi
if [ "$STEP" = suite3 ]; then
  gpu_tests "$W/gpu_tests_suite57c.log" 200 tests/test_bench.py tests/test_torch_ops.py
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_suite57c.log" | head
  sanitize memcheck "$W/sanitize_memcheck57.txt" 380 profiling/sanitize_driver.py
  finish_run run57
fi
# Result (allm / every / suite / suite2 / suite3, H200, git fa0b48d, `nvidia-h200_2026-11-29_{allm57,m1k57,moe57}.md`,
#   `..._gpu_tests_suite57{,b,c}.log`, `..._sanitize_memcheck57.txt`): k = 4 TOTAL M = 1 / 2 / 4 / 8 / 16 / 32 / 64 / 128 /
#   256 / 512 = 2.39x / 2.23x / 2.13x / 1.82x / 1.62x / 1.04x / 0.90x / 0.77x / 0.64x / 0.71x fp16, as the forty-ninth
#   session's; matmul within 3 % of the fastest kernel in every cell but O at M = 256 (WGMMA 17.38 us, dq + cuBLAS
#   16.18: 7.4 % over).  M = 1 k = 2 / 3 / 4 / 5 2.74x / 2.39x / 2.39x / 1.78x.  MoE k = 4 per projection TOTAL 8 / 10
#   experts 1 token 1.65x / 1.70x, as moe_forward 1.71x / 1.76x; 64 tokens chained 1.02x / 0.98x.  The whole GPU suite
#   passed (206 + 401 + 10) and memcheck over sanitize_driver.py is clean (286 checks).
# STEP=disp: the H200 table with allm57 overlaid (O at M = 256 to dq + cuBLAS, down's wgmma band to 256), checked in
#   two more runs of the M = 192 / 256 cells: WGMMA, dq+cuBLAS and the dispatched matmul.
# Expect: O dq faster than WGMMA at 256 in both runs (else the flip is noise and is undone); matmul = the faster.
if [ "$STEP" = disp ]; then
  for pass in 1 2; do
    timeout 200 python3 profiling/bench.py --out "$W" --M 192,256 --k 4 --shapes gateup,down,Q,O,KV \
      --columns WGMMA,dq+cuBLAS,matmul --reps 15 --tag disp57-$pass > "$W/bench_disp57-$pass.log" 2>&1
    grep -E "^### M|^\| (gateup|down|Q|O|KV|TOTAL) \| 4 " "$W/bench_disp57-$pass.log"
  done
  finish_run run57
fi
# Result (disp, H200, `nvidia-h200_2026-11-29_{disp57-1,disp57-2}.md`): O at M = 256 WGMMA 17.28 / 17.35 us against dq +
#   cuBLAS 18.26 / 18.03 (allm57's 16.18 was the outlier), down WGMMA 19.49 / 19.51 against 20.43 / 19.91.  The table
#   takes allm57 + both: down's wgmma band to 256, O's to 512; every cell of the three files within 4.2 %.
# STEP=gplan: the grouped decode GEMV (issue 5, 1 token an expert) against the dense one on the same bytes.  moe gate/up
#   over 8 experts (8 x 512 columns x 2048) streams what dense Q does (4096 x 2048) and fp16 takes the same time for both
#   (7.0 vs 7.1 us), yet the grouped GEMV takes 4.25 us with stable ids against the dense GEMV's 3.43 -- at 3.43 moe
#   gate/up would be 2.0x.  The plans differ: dense Q runs 256 blocks of one 16-column group on 8 warps (two an SM), the
#   grouped plan 128 blocks of two groups side by side (one an SM, 4 SMs idle).  Variants (stable ids, moe_ab.py):
#   the dense plan's shape (gpb 1 x 8 warps), 1 x 4, 2 x 4, 4 x 2; the dense GEMV on Q / gate/up in the same run.
# Expect: if the plan is the gap, g1w8 on moe_gu 8 experts ~3.5-3.7 us; if every plan stays >= 4.1, the gap is the
#   grouped kernel's own path (ids -> expert-dependent set-up -> first loads) and no plan change is worth making.
if [ "$STEP" = gplan ]; then
  timeout 100 python3 profiling/bench.py --out "$W" --M 1 --k 4 --shapes Q,gateup,down --columns GEMV --reps 15 \
    --tag gplan57-dense > "$W/bench_gplan57-dense.log" 2>&1
  grep -E "^\| (Q|gateup|down) \| 4 " "$W/bench_gplan57-dense.log"
  MOE_MMA=0 KS=4 MS=1 ES=8,10 SHAPES=moe_gu,moe_gu_fused,moe_dn \
    MOE_VARIANTS="st:+stable=1;g1w8:+gpb=1 +warps=8 +stable=1;g1w4:+gpb=1 +warps=4 +stable=1;g2w4:+gpb=2 +warps=4 +stable=1;g4w2:+gpb=4 +warps=2 +stable=1" \
    timeout 300 python3 profiling/moe_ab.py --out "$W" > "$W/moe_gplan57.log" 2>&1
  grep -vE "^\s*$" "$W/moe_gplan57.log" | tail -24
  finish_run run57
fi
# Result (gplan, H200, `nvidia-h200_2026-11-29_{gplan57-dense.md,moe_gplan57.log}`): dense GEMV Q 3.42 us, gate/up 4.23,
#   down 4.07.  Grouped, 1 token, stable ids: moe_gu 8 experts 4.23 (plan) -> 3.93 with the dense plan's shape (gpb 1 x 8
#   warps, 256 blocks two an SM), other plans 4.45-6.67; everywhere else the plan is the fastest (or equal) and the other
#   shapes 1.3-3.2x slower where 256-thread blocks of one group run past one wave (moe_gu 10 experts 7.76, moe_dn 8
#   experts 11.71).  So the plan holds 0.3 of moe gate/up's 0.8 us gap to dense Q, in the one cell where one group a
#   block fits one wave (unfused gate/up at 8 experts; moe_forward runs the fused gate/up at 10); the other 0.5 us are the
#   grouped kernel's own path.  No plan change.
# STEP=review (an inline command of this form): after the review commit (the GEMV's row check once a launch key),
#   test_gemv_gpu.py, test_checks_gpu.py and test_launch_gpu.py.  Result (H200, git 73ccaab,
#   `nvidia-h200_2026-11-29_gpu_tests_review57.log`): 141 passed.
