#!/usr/bin/env bash
# Twenty-first session (2026-11-26): where the dense wgmma kernel's time goes at M = 64..256 (issue 4).
#   STEP=wgprobe: profiling/gemm_probe.py's wgmma column (default plan and 1 split) with stages removed through
#   KBIT_WGMMA_OPTS: none, no token copies (-DKBIT_WG_NO_TOKENS), no dequantize, no MMA, no tokens + no dequantize;
#   gate/up, down, Q at k = 4, M = 64 / 128 / 256; dq + cuBLAS beside (the baseline row).  Expected: if the
#   token tile re-read from L2 per 128-column strip limits it (16 KB of tokens per 4 KB weight tile at TOK = 128),
#   no-tokens drops M = 128 gate/up from ~16 us towards ~8; if not, the per-tile barrier chain is the limit.
#   OUT=/tmp/out STEP=wgprobe bash profiling/run24.sh
. profiling/run_env.sh
start_run wgprobe
if [ "$STEP" = wgprobe ]; then
  for o in "" "-DKBIT_WG_NO_TOKENS" "-DKBIT_WG_NO_DEQUANT" "-DKBIT_WG_NO_MMA" "-DKBIT_WG_NO_TOKENS -DKBIT_WG_NO_DEQUANT"; do
    echo "## KBIT_WGMMA_OPTS='$o'" | tee -a "$W/wgprobe24.log"
    KBIT_WGMMA_OPTS="$o" GEMM=0 DQ=$([ -z "$o" ] && echo 1 || echo 0) WG=1 WGSPLITS=1 KS=4 MS=${MS:-64,128,256} \
      SHAPES_=${SHAPES_:-gateup,down,Q} timeout 150 python3 profiling/gemm_probe.py 2>&1 | tee -a "$W/wgprobe24.log"
  done
fi
# STEP=wgtrace: profiling/wgmma_trace.py timelines of gate/up k = 4 at M = 128 (default 3 splits, 1 split) and
#   M = 256, and the same with -DKBIT_WG_NO_MMA: which phase of the ~1000-cycle iteration is the wait.
if [ "$STEP" = wgtrace ]; then
  for o in "" "-DKBIT_WG_NO_MMA"; do
    echo "## extra opts '$o'" | tee -a "$W/wgtrace24.log"
    KBIT_WGMMA_OPTS="-DKBIT_WG_TRACE $o" CASES="d:5120,2048,128;d:5120,2048,128,1;d:5120,2048,256" \
      timeout 150 python3 profiling/wgmma_trace.py 2>&1 | tee -a "$W/wgtrace24.log"
  done
fi
# STEP=ws (commit 390bf53, reverted after it): the warp-specialized wgmma kernel (kbit_wgmma_ws, a producer
#   warpgroup issuing the copies, mbarrier stage hand-off): the wgmma GPU tests with KBIT_WG_WS=1 (every dense
#   plan with TOK <= 128 on it, a bit-exact WS-vs-plain test: 31 passed); gemm_probe WS off / on (k = 4, M =
#   16..256; no gain: gate/up M = 128 16.10 -> 16.95 us) and the WS timeline at M = 128 (main loop 8.0 us).
# STEP=tok256 (commit 4d3aa9a; TOK = 256 not kept): TOK = 256 (one CTA's token tile covering M = 256; each weight tile dequantized once for all
#   256 tokens): the wgmma GPU tests (edge shapes / permutation rows now with TOK = 256 too), then gemm_probe's
#   wgmma at TOK = 128 / 192 / 256 forced, M = 256 / 384 / 512, gate/up, down, Q, O, KV, k = 4, and dq + cuBLAS
#   beside.  Expected, if the loop is bound by shared memory (B reads 64 B/clk at the MMA's peak + ~480
#   wavefronts of dequantize and copies per K tile, run24 wgtrace / wgmma_rate_probe): M = 256 gate/up 26.2 ->
#   ~18 us (the dequantize's share per token halves); if it is not, no better than TOK = 128.
if [ "$STEP" = tok256 ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_tok256.log" 300 tests/test_wgmma_gpu.py
  grep -E "FAIL|Error|assert" "$W/gpu_tests_tok256.log" | head -20
  GEMM=0 DQ=1 WG=1 WGTOKS=128,192,256 KS=4 MS=${MS:-256,384,512} SHAPES_=${SHAPES_:-gateup,down,Q,O,KV} \
    timeout 200 python3 profiling/gemm_probe.py 2>&1 | tee "$W/tok256.log"
fi
# STEP=subfence (commit 202a076; not kept: no change): the n64 sub-MMAs of a K tile (TOK >= 128: 2..4 of them) issued behind one wgmma.fence instead
#   of one each (a fence waits for the earlier sub's async reads of the same A registers: the ~200 ns "wgmma
#   issue" of the wgtrace timeline).  A/B in one run: -DKBIT_WG_SUB_FENCE (the fence per sub, before) vs now,
#   gemm_probe wgmma at the default plan and TOK = 128 / 192 / 256 forced, M = 64..512, gate/up, down, Q, O, k = 4;
#   the wgmma GPU tests on the new kernel first.  Expected: TOK = 128 per-tile 730 -> ~500 ns (gate/up M = 128
#   16.1 -> ~12 us), TOK = 192 / 256 more; TOK = 64 (one sub) unchanged.
if [ "$STEP" = subfence ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_subfence.log" 300 tests/test_wgmma_gpu.py
  grep -E "FAIL|Error|assert" "$W/gpu_tests_subfence.log" | head -20
  for o in "-DKBIT_WG_SUB_FENCE" ""; do
    echo "## KBIT_WGMMA_OPTS='$o'" | tee -a "$W/subfence24.log"
    KBIT_WGMMA_OPTS="$o" GEMM=0 DQ=$([ -z "$o" ] && echo 1 || echo 0) WG=1 WGTOKS=128,192,256 KS=4 \
      MS=${MS:-64,128,256,512} SHAPES_=${SHAPES_:-gateup,down,Q,O} timeout 200 python3 profiling/gemm_probe.py 2>&1 \
      | tee -a "$W/subfence24.log"
  done
fi
# STEP=src: per-SASS warp-state samples (ncu source page) of the dense wgmma kernel, gate/up k = 4, M = 128,
#   1 split (no fixup: the main loop alone) and the default 3, summarized by profiling/ncu_src_top.py: which
#   instruction of the ~700 ns K-tile iteration the warps wait at, now that the copy issue (ws), the sub fences
#   (subfence), the MMA rate (wgmma_rate_probe: 955 TFLOPS with register A) and the dequantize per token
#   (tok256) are ruled out.
if [ "$STEP" = src ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  for ks in 1 3; do
    ONE=gateup,4,128,$ks ONE_WG=1 GEMM=0 DQ=0 timeout 150 ncu --clock-control none --cache-control all \
      -k regex:'^kbit_wgmma$' --launch-skip 2 --launch-count 1 --section WarpStateStats --section SourceCounters \
      --section MemoryWorkloadAnalysis_Tables -o "$W/rep_d128_$ks" python3 profiling/gemm_probe.py > "$W/ncu_src_d128_$ks.log" 2>&1
    ncu -i "$W/rep_d128_$ks.ncu-rep" --page source --print-source sass --csv > "$W/src_d128_$ks.csv" 2>&1
    ncu -i "$W/rep_d128_$ks.ncu-rep" --page details > "$W/details_d128_$ks.txt" 2>&1
    python3 profiling/ncu_src_top.py "$W/src_d128_$ks.csv" 30 > "$W/src_top_d128_$ks.txt" 2>&1
    echo "== ks=$ks"; head -40 "$W/src_top_d128_$ks.txt"
    grep -iE "shared|bank" "$W/details_d128_$ks.txt" | head -12
  done
  rm -f "$W"/*.ncu-rep
fi
# STEP=tok64: at M = 128 / 256, TOK = 64 (96 registers: two CTAs = 16 warps per SM, each weight tile
#   dequantized M / 64 times) against TOK = 128 (146 registers: one CTA = 8 warps per SM) -- the src profile
#   shows a latency-bound chain per warp (wait / dispatch / short scoreboard, 2 warps per scheduler), which
#   more warps per SM hide; gate/up, down, Q, O, KV, k = 2 / 4.
if [ "$STEP" = tok64 ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  GEMM=0 DQ=0 WG=1 WGTOKS=64,128 KS=${KS:-4,2} MS=${MS:-128,256} SHAPES_=${SHAPES_:-gateup,down,Q,O,KV} \
    timeout 200 python3 profiling/gemm_probe.py 2>&1 | tee "$W/tok64.log"
fi
# STEP=cbd: the wgmma kernels with the default codebook compiled in (CBD; a weight's default_codebook):
#   no codebook load on the way to the pair table, and in safe PDL (dense) / the grouped wait mode the
#   pair and scale tables built before griddepcontrol.wait.  The wgmma / grouped wgmma / PDL GPU tests
#   (incl. the CBD-vs-loaded bit-exact test), then A/B in one run (KBIT_WG_CBD=0 / 1): gemm_probe's wgmma
#   at M = 16..128 (gate/up, down, Q, O, KV, k = 4) and the MoE table's g-WGMMA at 16 / 32 / 64 tokens;
#   then compute-sanitizer racecheck over sanitize_driver.py.  Expected: the wgmma trace's 1.7 us
#   "pair/scale tables" phase (codebook load ~0.7 us + build) off the path after the wait: -0.5..-1 us a
#   launch (dense M = 32 gate/up ~10.4 -> ~9.6 us; MoE 64 tokens gate/up + down ~-1.5 us).
if [ "$STEP" = cbd ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_cbd.log" 400 tests/test_wgmma_gpu.py tests/test_grouped_gpu.py tests/test_pdl_gpu.py \
    -k "wgmma or pdl"
  grep -E "FAIL|Error|assert" "$W/gpu_tests_cbd.log" | head -20
  for c in 0 1; do
    echo "## KBIT_WG_CBD=$c" | tee -a "$W/cbd24.log"
    KBIT_WG_CBD=$c GEMM=0 DQ=0 WG=1 KS=4 MS=${MS:-16,32,64,128} SHAPES_=${SHAPES_:-gateup,down,Q,O,KV} \
      timeout 150 python3 profiling/gemm_probe.py 2>&1 | tee -a "$W/cbd24.log"
    KBIT_WG_CBD=$c timeout 150 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 16,32,64 \
      --columns Grouped,g-WGMMA --reps 15 --tag "moe-cbd$c" > "$W/bench_moe_cbd$c.log" 2>&1
    grep -E "TOTAL" "$W/bench_moe_cbd$c.log" | tee -a "$W/cbd24.log"
  done
  sanitize racecheck "$W/sanitize_racecheck24.txt" 240 profiling/sanitize_driver.py
fi
# STEP=final: the dense CBD kept, the grouped one not (0.3-1.9 % slower, cbd above): the wgmma / PDL GPU tests,
#   compute-sanitizer memcheck over sanitize_driver.py, and the closing dense table (M = 16..128, k = 4) and MoE
#   table (tagged final36 / moe-final36).  Expected: matmul TOTAL at M = 32..128 0.5-1.5 % faster where wgmma
#   serves (down / O / KV at M = 128, the wgmma band at 32..64); MoE unchanged.
if [ "$STEP" = final ]; then
  python3 profiling/warm_cache.py wgmma gemv gemv_stream gemm grouped quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_final24.log" 300 tests/test_wgmma_gpu.py tests/test_pdl_gpu.py tests/test_matmul.py
  grep -E "FAIL|Error|assert" "$W/gpu_tests_final24.log" | head -20
  sanitize memcheck "$W/sanitize_memcheck24.txt" 240 profiling/sanitize_driver.py
  final_tables final36
fi
# STEP=cbd2: the grouped wgmma with the default codebook compiled in but its tables built after the wait (no
#   codebook load on the way), and the dense CBD's early tables against the same late (-DKBIT_WG_CBD_LATE).  Tests
#   (the CBD-vs-loaded test now with the grouped kernel, grouped wgmma, PDL grouped), then A/B in one run: dense
#   gemm_probe wgmma KBIT_WG_CBD=0 / CBD early / CBD late, M = 16..128; MoE g-WGMMA / Grouped KBIT_WG_CBD=0 / 1 at
#   16 / 32 / 64 tokens.  Expected: grouped -0.2..-0.6 us a launch (the codebook's load latency), 64 tokens 8
#   experts TOTAL 24.3 -> ~23.6 us; dense late between loaded and early.
if [ "$STEP" = cbd2 ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_cbd2.log" 300 tests/test_wgmma_gpu.py tests/test_grouped_gpu.py tests/test_pdl_gpu.py \
    -k "default_codebook or wgmma or grouped"
  grep -E "FAIL|Error|assert" "$W/gpu_tests_cbd2.log" | head -20
  for v in "0:" "1:" "1:-DKBIT_WG_CBD_LATE"; do
    echo "## KBIT_WG_CBD=${v%%:*} KBIT_WGMMA_OPTS='${v#*:}'" | tee -a "$W/cbd2_24.log"
    KBIT_WG_CBD=${v%%:*} KBIT_WGMMA_OPTS="${v#*:}" GEMM=0 DQ=0 WG=1 KS=4 MS=${MS:-16,32,64,128} \
      SHAPES_=${SHAPES_:-gateup,down,Q,O,KV} timeout 150 python3 profiling/gemm_probe.py 2>&1 | tee -a "$W/cbd2_24.log"
  done
  for c in 0 1 0 1; do
    KBIT_WG_CBD=$c timeout 150 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 16,32,64 \
      --columns Grouped,g-WGMMA --reps 15 --tag "moe-cbd2-$c" > "$W/bench_moe_cbd2_$c.log" 2>&1
    echo "## MoE KBIT_WG_CBD=$c" | tee -a "$W/cbd2_24.log"; grep -E "TOTAL" "$W/bench_moe_cbd2_$c.log" | tee -a "$W/cbd2_24.log"
  done
fi
# STEP=suite: the whole GPU test suite on the session's last kernel commit (every family), then the MoE table
#   (1..64 tokens, k = 2 / 4, Grouped, Grouped:stable, Grouped+PDL: the grouped wgmma with the default codebook
#   compiled in) tagged moe-final37.
if [ "$STEP" = suite ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_suite24.log" 540 tests
  grep -E "FAIL|Error" "$W/gpu_tests_suite24.log" | head -20
  timeout 150 python3 profiling/bench.py --out "$W" --shapes moe --k 2,4 --moe-M 1,2,4,8,16,32,64 \
      --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag moe-final37 > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | head -8; grep -E "as moe_forward" "$W/bench_moe.log" | head -8
fi
# STEP=wgtune: the WGMMA / WGMMA+PDL columns after the dense CBD (M = 16..128, k = 2..5, every dense shape), the
#   overlay +wg-tune24 of the H100 / H100+PDL dispatch tables (profiling/retune_tables.py --extra +wg-tune24):
#   final36 had the dispatched call 10.6 % off the fastest at KV M = 64 (dq + cuBLAS 7.60 vs WGMMA 6.87 us) and
#   8.5 % at linear key M = 64 (10.05 vs 9.26).
if [ "$STEP" = wgtune ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  timeout 500 python3 profiling/bench.py --out "$W" --M 16,24,32,48,64,128 --k 2,3,4,5 --columns WGMMA,WGMMA+PDL \
    --reps 15 --tag wg-tune24 > "$W/wgtune.log" 2>&1
  grep -E "^### M|TOTAL" "$W/wgtune.log"
fi
# STEP=dispatch: the dense table M = 16..128 at k = 2 / 4 (matmul, matmul+PDL beside every kernel) on the
#   re-tuned dispatch tables, tagged final38 (TAG=final39: the check after final38 was overlaid).
if [ "$STEP" = dispatch ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  timeout 500 python3 profiling/bench.py --out "$W" --M 16,24,32,48,64,128 --k ${KS:-2,4} \
    --columns GEMV,STREAM,WGMMA,dq+cuBLAS,matmul,matmul+PDL --reps 15 --tag ${TAG:-final38} > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log"
fi
# STEP=sanitize: compute-sanitizer memcheck and racecheck over sanitize_driver.py on the session's last kernel
#   commit (the grouped wgmma with the default codebook compiled in came after the cbd / final steps' checks).
if [ "$STEP" = sanitize ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  sanitize memcheck "$W/sanitize_memcheck24b.txt" 240 profiling/sanitize_driver.py
  sanitize racecheck "$W/sanitize_racecheck24b.txt" 240 profiling/sanitize_driver.py
fi
finish_run run24
