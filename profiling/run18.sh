#!/usr/bin/env bash
# Seventeenth session's device run (2026-11-25), after run17 STEP=pair / safe (pairs not kept: slower in
# every cell; PDL's safe mode made the default).
#   STEP=suite: the whole GPU suite in the new default launch mode (safe PDL), then commit 3's A/B (the
#     wgmma kernels' K-split bounds in 32-bit arithmetic, fewer registers, no __cuda_sm20_div_s64 before the
#     first load) against 2f1eb8e (ab_prev = git archive 2f1eb8e kbitcupy cuda_src profiling, carried),
#     both plain-launched (KBITCUPY_PDL=0): WGMMA column, M = 16 / 64, k = 4 / 5.  Expected: M = 16 -1..-3 %
#     (ncu_src16_d16: ~20 % of the samples before the first load), M = 64 within noise.
#   STEP=tables: host overhead (the default now launches through cuLaunchKernelEx), then the closing tables
#     in the default mode with matmul:plain and matmul+PDL beside it: dense M = 1 / 4 every k, dense
#     M = 16..128 k = 4, MoE 1..64 tokens k = 4.
#   STEP=big: after run17 tok / shapes: TOK = 128 above 192 tokens (wgmma.choose_tok) and the big-shape
#     bands (dispatch._big_shape_bands): the TOK probe at M = 256..512 (128 / 192), the two big shapes at
#     M = 4..256 with every kernel column and matmul (expected: matmul within 5 % of the best column at
#     M = 9..128; M = 4 / 8 and 256 not measured before), the wgmma GPU tests.
#   STEP=tok / shapes: run17.sh's steps (TOK = 64 / 128 / 192 at M = 64..256; unmeasured dense shapes).
#   OUT=/tmp/out STEP=suite bash profiling/run18.sh
if [ "${STEP:-}" = tok ] || [ "${STEP:-}" = shapes ]; then exec bash profiling/run17.sh; fi
. profiling/run_env.sh
start_run suite
if [ "$STEP" = suite ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests.log" 330 tests/
  OUT=$W PREV_TREE=ab_prev AB_TAG=kdiv17 WARM=wgmma AB_TIMEOUT=60 KBITCUPY_PDL=0 \
      AB_ARGS="--M 16,64 --k 4,5 --columns WGMMA --reps 15" bash profiling/tree_ab.sh 2>&1 | tail -8
fi
if [ "$STEP" = tables ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm grouped quant dequant 2>&1 | tail -1
  timeout 60 python3 profiling/host_overhead.py --out "$W" --M 1,4 --calls 300 --repeats 3 > "$W/host.log" 2>&1
  tail -22 "$W/host.log" | head -12
  timeout 150 python3 profiling/bench.py --out "$W" --M 1,4 --k 2,3,4,5 --columns matmul,matmul:plain,matmul+PDL \
      --reps 15 --tag final23-m1 > "$W/bench_m1.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_m1.log"
  timeout 110 python3 profiling/bench.py --out "$W" --M 16,32,64,128 --k 4 \
      --columns STREAM,WGMMA,dq+cuBLAS,matmul,matmul:plain,matmul+PDL --reps 15 --tag final23 > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log"
  timeout 120 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 \
      --columns Grouped,Grouped:plain,Grouped+PDL --reps 15 --tag moe-final23 > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | head -12
fi
if [ "$STEP" = big ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm quant dequant 2>&1 | tail -1
  WG=1 GEMM=0 DQ=0 KS=4 MS=256,384,512 SHAPES_=gateup,down WGTOKS=128,192 \
      timeout 100 python3 profiling/gemm_probe.py > "$W/tok_probe.log" 2>&1
  tail -6 "$W/tok_probe.log"
  timeout 200 python3 profiling/bench.py --out "$W" --shapes 4096x14336,14336x4096 --M 4,8,9,16,32,64,128,256 --k 4 \
      --columns GEMV,STREAM,GEMM,WGMMA,dq+cuBLAS,matmul --reps 15 --tag big17 > "$W/bench_big.log" 2>&1
  grep -E "^### M|^\| [0-9]" "$W/bench_big.log" | head -40
  gpu_tests "$W/gpu_tests_wg.log" 150 tests/test_wgmma_gpu.py tests/test_matmul.py tests/test_dispatch.py
fi
if [ "$STEP" = occ ]; then  # commit 3 left k = 4 / 5 TOK = 16 / 32 at 80-82 registers: 3 CTAs per SM fit (KBIT_WG_MAXOCC=3)
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  for v in o2a o3 o2b; do
    KBIT_WG_MAXOCC=${v:1:1} timeout 60 python3 profiling/bench.py --out "$W" --M 16,32 --k 4,5 --columns WGMMA --reps 15 \
        --tag occ17-$v > "$W/occ17_$v.log" 2>&1
    echo "== $v"; grep -E "^\| TOTAL" "$W/occ17_$v.log"
  done
fi
if [ "$STEP" = big3 ]; then  # the TOK model with split counts (choose_tok k_tiles): the plan's pick against both
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  WG=1 GEMM=0 DQ=0 KS=4 MS=256,384,512 SHAPES_=gateup,down,Q,O WGTOKS=128,192 \
      timeout 100 python3 profiling/gemm_probe.py > "$W/tok_probe.log" 2>&1
  tail -12 "$W/tok_probe.log"
  gpu_tests "$W/gpu_tests_wg.log" 150 tests/test_wgmma_gpu.py tests/test_matmul.py
fi
if [ "$STEP" = big2 ]; then  # after STEP=big: TOK by waves x TOK above 192, the big-shape wgmma band to 256
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm quant dequant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_wg.log" 150 tests/test_wgmma_gpu.py tests/test_matmul.py tests/test_dispatch.py
  WG=1 GEMM=0 DQ=0 KS=4 MS=256,384,512 SHAPES_=gateup,down,Q,O WGTOKS=128,192 \
      timeout 100 python3 profiling/gemm_probe.py > "$W/tok_probe.log" 2>&1
  tail -12 "$W/tok_probe.log"
  timeout 100 python3 profiling/bench.py --out "$W" --shapes 4096x14336,14336x4096 --M 128,256 --k 4 \
      --columns WGMMA,dq+cuBLAS,matmul --reps 15 --tag big17b > "$W/bench_big.log" 2>&1
  grep -E "^### M|^\| [0-9]" "$W/bench_big.log" | head -12
  sanitize memcheck "$W/memcheck.txt" 150 profiling/sanitize_driver.py
fi
tar -czf "$OUT/run18_$STEP.tgz" -C "$W" . && rm -rf "$W"
