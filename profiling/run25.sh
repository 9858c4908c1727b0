#!/usr/bin/env bash
# Twenty-second session (2026-11-26): the streaming GEMV with the default codebook compiled in (issue 4, M = 16..64).
#   STEP=scbd: the streaming-GEMV GPU tests (a CBD-vs-loaded bit-exact test among them), then profiling/bench.py's
#   STREAM and matmul columns with KBIT_STREAM_CBD=0 / 1 / 0 (separate processes; k = 2 / 4, M = 16..64, dense
#   shapes).  Expected (the wgmma kernel's CBD: -1.5..-5 %, all from its tables built before the PDL wait): the
#   consumers' codebook load (~0.6-1 us of L2 / DRAM latency) and table build leave the path after the wait, so
#   STREAM -0.3..-0.5 us per call where its prologue is exposed (M = 16: gate/up 7.6 us -> ~7.2).
#   OUT=/tmp/out STEP=scbd bash profiling/run25.sh
#   Measured (H100, commit 641b8c9): slower, M = 16 k = 4 TOTAL 33.68..33.88 -> 35.25..35.34 us (+0.3..0.45 us per
#   call, every shape); with the tables after the wait (occ2 step, -DKBIT_STREAM_CBD_LATE) still +0.4..0.5 us
#   TOTAL.  Reverted (the kernel, its launcher and test as before 641b8c9).
. profiling/run_env.sh
start_run scbd
# dense_all TAG: every kernel column at k = 2 / 4, M = 16..128, every dense shape (bench.py) tagged TAG into $W; prints
# the TOTAL rows.
dense_all() {
  timeout 200 python3 profiling/bench.py --out "$W" --M 16,24,32,48,64,128 --k 2,4 \
    --columns GEMV,STREAM,WGMMA,dq+cuBLAS,matmul,matmul+PDL --reps 15 --tag "$1" > "$W/bench_$1.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_$1.log"
}
if [ "$STEP" = scbd ]; then
  python3 profiling/warm_cache.py gemv_stream 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_scbd.log" 300 tests/test_gemv_stream_gpu.py
  grep -E "FAIL|Error|assert" "$W/gpu_tests_scbd.log" | head -20
  for v in 0 1 0b 1b; do
    KBIT_STREAM_CBD=${v%b} timeout 120 python3 profiling/bench.py --out "$W" --M ${MS:-16,32,64} --k ${KS:-2,4} \
      --columns STREAM,matmul --reps 15 --tag "scbd$v" > "$W/bench_scbd$v.log" 2>&1
    echo "## KBIT_STREAM_CBD=$v"; grep -E "^### M|TOTAL" "$W/bench_scbd$v.log"
  done
fi
# STEP=occ2: two CTAs per SM for the dense wgmma kernel at TOK = 128 (-DKBIT_WG_MINB=2: registers capped at 128,
#   no spills at k = 2..5; k = 4 needs its pair table at 16 copies, -DKBIT_K4_LOG2_COPIES=4, for two CTAs' shared
#   memory).  The kernel is latency bound at one CTA per SM (issue slots 19 % busy, run24 / sixteenth session);
#   expected: M = 128..256 main loop up to ~1.5x faster where the plan's splits (now filling 2 x 132 slots) do
#   not eat it.  gemm_probe's wgmma at its plan and forced 3 / 4 / 6 splits; k = 4 also 16 copies alone.
#   Then the streaming GEMV's CBD with its tables after the wait (-DKBIT_STREAM_CBD_LATE) against no CBD.
if [ "$STEP" = occ2 ]; then
  for v in "2:" "2:-DKBIT_WG_MINB=2" "3:" "3:-DKBIT_WG_MINB=2" "4:" "4:-DKBIT_K4_LOG2_COPIES=4" \
           "4:-DKBIT_WG_MINB=2 -DKBIT_K4_LOG2_COPIES=4"; do
    k=${v%%:*}; o=${v#*:}
    echo "## k=$k KBIT_WGMMA_OPTS='$o'" | tee -a "$W/occ2.log"
    KBIT_WGMMA_OPTS="$o" GEMM=0 DQ=$([ -z "$o" ] && echo 1 || echo 0) WG=1 WGSPLITS=${WGSPLITS:-3,4,6} KS=$k \
      MS=${MS:-64,128,256} SHAPES_=${SHAPES_:-gateup,down,Q,O,KV} timeout 200 python3 profiling/gemm_probe.py 2>&1 \
      | tee -a "$W/occ2.log"
  done
  for v in "0:" "1:-DKBIT_STREAM_CBD_LATE" "0b:" "1b:-DKBIT_STREAM_CBD_LATE"; do
    c=${v%%:*}; o=${v#*:}
    KBIT_STREAM_CBD=${c%b} KBIT_STREAM_OPTS="$o" timeout 120 python3 profiling/bench.py --out "$W" --M 16,32 --k 4 \
      --columns STREAM --reps 15 --tag "scbdlate$c" > "$W/bench_scbdlate$c.log" 2>&1
    echo "## KBIT_STREAM_CBD=$c '$o'"; grep -E "^### M|TOTAL" "$W/bench_scbdlate$c.log"
  done
fi
# STEP=ksweep: the wgmma kernels' split-K count swept (occ2 showed the plan's "fill sms x occupancy slots"
#   rule 9-18 % off at M = 64 (TOK = 64, two CTAs per SM: Q 12.66 us at ks = 8 vs 10.39 at 4) and M = 128 (down /
#   O: ks = 8 through the workspace vs 6 over a cluster, 17.73 vs 16.07 / 16.24 vs 13.98)): dense gemm_probe at
#   ks = 1..8 (k = 4, 2; M = 16..128; six shapes), grouped moe_ab at ks = 1..6 (8 / 10 experts, 16..64 tokens).
if [ "$STEP" = ksweep ]; then
  for k in ${KS:-4 2}; do
    GEMM=0 DQ=0 WG=1 WGSPLITS=1,2,3,4,5,6,8 KS=$k MS=${MS:-16,24,32,48,64,96,128} \
      SHAPES_=${SHAPES_:-gateup,down,Q,O,KV,lin_key} timeout 280 python3 profiling/gemm_probe.py 2>&1 | tee -a "$W/ksweep.log"
  done
  KS=4 MS=16,32,64 ES=8,10 SHAPES=moe_gu_fused,moe_dn moe_wg "$W/ksweep_moe.log" 200 \
    "d:;ks1:+ks=1;ks2:+ks=2;ks3:+ks=3;ks4:+ks=4;ks6:+ks=6;ks8:+ks=8"
fi
# STEP=tune25: the dense wgmma plan's new split rule (kbitcupy.wgmma.dense_splits: one CTA per SM, a clustered
#   smaller count where the model prices it lower; in-sample on ksweep: 6.8 % less summed time, every cell within
#   3.3 % of its fastest split count).  The wgmma / stream / matmul GPU tests, then the WGMMA columns at k = 2..5
#   (wg-tune25, for the dispatch tables) and every kernel at k = 2 / 4 (final40), M = 16..128.
if [ "$STEP" = tune25 ]; then
  python3 profiling/warm_cache.py wgmma gemv_stream gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_tune25.log" 400 tests/test_wgmma_gpu.py tests/test_gemv_stream_gpu.py tests/test_matmul.py \
    tests/test_gemm_gpu.py
  grep -E "FAIL|Error|assert" "$W/gpu_tests_tune25.log" | head -20
  timeout 200 python3 profiling/bench.py --out "$W" --M 16,24,32,48,64,128 --k 2,3,4,5 --columns WGMMA,WGMMA+PDL \
    --reps 15 --tag wg-tune25 > "$W/wgtune25.log" 2>&1
  grep -E "^### M|TOTAL" "$W/wgtune25.log"
  dense_all "${TAG:-final40}"
fi
# STEP=check25: the GPU tests that tune25 failed (a forced-stages plan's occupancy query before its DoesNotFit;
#   test_dispatch_kinds_run without the wgmma / stream kinds) and the dispatch / PDL GPU tests, then every kernel
#   at k = 2 / 4 with the re-tuned tables (TAG, default final41).
if [ "$STEP" = check25 ]; then
  python3 profiling/warm_cache.py wgmma gemv_stream gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_check25.log" 300 tests/test_wgmma_gpu.py tests/test_gemm_gpu.py tests/test_pdl_gpu.py \
    tests/test_launch_gpu.py
  grep -E "FAIL|Error|assert" "$W/gpu_tests_check25.log" | head -20
  dense_all "${TAG:-final41}"
fi
# STEP=tok25: smaller token tiles where the covering TOK leaves the machine idle (KV: 4 strips, 32 CTAs at 8 splits):
#   gemm_probe's wgmma at its plan and TOK = 16 / 32 / 64 / 128 forced (each with the new split rule), KV, linear key,
#   down, O, Q at M = 32..128, k = 4.  Expected: KV M = 128 8.45 -> ~7.1 us at TOK = 64 (twenty-first session);
#   the wider shapes no better.
if [ "$STEP" = tok25 ]; then
  GEMM=0 DQ=1 WG=1 WGTOKS=16,32,64,128 KS=${KS:-4} MS=${MS:-32,48,64,96,128} SHAPES_=${SHAPES_:-KV,lin_key,down,O,Q} \
    timeout 250 python3 profiling/gemm_probe.py 2>&1 | tee "$W/tok25.log"
  KS=4 MS=32,64 ES=8,10 SHAPES=moe_gu_fused,moe_dn moe_wg "$W/tok25_moe.log" 150 "d:;t32:+tok=32;t16:+tok=16;t128:+tok=128"
fi
# STEP=kv25: the dense plan's fill_tok (KV's token tile halved where 4 strips leave the machine idle): the wgmma GPU
#   tests, KV's WGMMA columns at k = 2..5, M = 16..128 (wg-tune25kv, for the dispatch tables), and every kernel at
#   k = 2 / 4 (final42).
if [ "$STEP" = kv25 ]; then
  python3 profiling/warm_cache.py wgmma gemv_stream gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_kv25.log" 300 tests/test_wgmma_gpu.py
  grep -E "FAIL|Error|assert" "$W/gpu_tests_kv25.log" | head -20
  timeout 150 python3 profiling/bench.py --out "$W" --shapes KV --M 16,24,32,48,64,128 --k 2,3,4,5 \
    --columns WGMMA,WGMMA+PDL --reps 15 --tag wg-tune25kv > "$W/wgtune25kv.log" 2>&1
  grep -E "^### M|\| KV" "$W/wgtune25kv.log" | head -40
  dense_all "${TAG:-final42}"
fi
# STEP=final25: the GPU tests of the touched modules on the final tree (wgmma, gemm / dispatch, stream, PDL, launch,
#   matmul), memcheck over sanitize_plans25.py (the new default plans), and every kernel at k = 2 / 4, M = 16..128
#   with the final tables (final43).
if [ "$STEP" = final25 ]; then
  python3 profiling/warm_cache.py wgmma gemv_stream gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_final25.log" 400 tests/test_wgmma_gpu.py tests/test_gemm_gpu.py tests/test_gemv_stream_gpu.py \
    tests/test_pdl_gpu.py tests/test_launch_gpu.py tests/test_matmul.py tests/test_dispatch.py tests/test_wgmma.py
  grep -E "FAIL|Error|assert" "$W/gpu_tests_final25.log" | head -20
  sanitize memcheck "$W/sanitize_memcheck_plans25.txt" 300 profiling/sanitize_plans25.py
  dense_all "${TAG:-final43}"
fi
# STEP=h200_25: on an H200 only (exits at once elsewhere): the WGMMA columns at k = 2..5 (wg-tune25) and every kernel at
#   k = 2 / 4 (final40), M = 16..128, after the dense split rule and fill_tok, for the H200 / H200+PDL tables.
if [ "$STEP" = h200_25 ]; then
  case "$GPU" in *H200*) ;; *) echo "not an H200 ($GPU): nothing run"; finish_run run25; exit 0 ;; esac
  python3 profiling/warm_cache.py wgmma gemv_stream gemv 2>&1 | tail -1
  timeout 200 python3 profiling/bench.py --out "$W" --M 16,24,32,48,64,128 --k 2,3,4,5 --columns WGMMA,WGMMA+PDL \
    --reps 15 --tag wg-tune25 > "$W/wgtune25.log" 2>&1
  grep -E "^### M|TOTAL" "$W/wgtune25.log"
  dense_all "final40"
fi
# STEP=suite: the whole GPU test suite on the final tree (every family; warmed caches first), then the MoE table
#   (k = 4, 1..64 tokens per expert; the grouped plans are unchanged, the dense dispatch inside moe_forward is not).
if [ "$STEP" = suite ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_suite25.log" 420 tests
  grep -E "FAIL|Error" "$W/gpu_tests_suite25.log" | head -20
  timeout 110 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 \
    --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag moe-final43 > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | head -30
fi
# STEP=stages25: pipeline depth.  The dense plan now runs one CTA per SM, but its stage count is still chosen to fit
#   two (TOK <= 64: 6 stages where 8 would fit): gemm_probe's wgmma at its plan and 4 / 6 / 8 stages forced (k = 4,
#   M = 16..64, five shapes).  The grouped kernel's 4-stage cap (H200, 2026-11-22, an older kernel): moe_ab at 3 / 5 / 6
#   stages and 32 / 64 tokens.
if [ "$STEP" = stages25 ]; then
  GEMM=0 DQ=0 WG=1 WGSTAGES=4,6,8 KS=4 MS=${MS:-16,32,48,64} SHAPES_=${SHAPES_:-gateup,down,Q,O,KV} \
    timeout 200 python3 profiling/gemm_probe.py 2>&1 | tee "$W/stages25.log"
  KS=4 MS=16,32,64 ES=8,10 SHAPES=moe_gu_fused,moe_dn moe_wg "$W/stages25_moe.log" 150 \
    "d:;st3:+stages=3;st5:+stages=5;st6:+stages=6"
fi
# STEP=moe25: the grouped wgmma kernel at up to 5 stages (was 4): the grouped / MoE-layer GPU tests, then the MoE table
#   (k = 2 / 4, 1..64 tokens per expert) tagged moe-final44.
if [ "$STEP" = moe25 ]; then
  python3 profiling/warm_cache.py wgmma grouped gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_moe25.log" 300 tests/test_grouped_gpu.py tests/test_layers_gpu.py
  grep -E "FAIL|Error|assert" "$W/gpu_tests_moe25.log" | head -20
  timeout 200 python3 profiling/bench.py --out "$W" --shapes moe --k 2,4 --moe-M 1,2,4,8,16,32,64 \
      --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag moe-final44 > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | head -8; grep -E "as moe_forward" "$W/bench_moe.log" | head -40
fi
# STEP=h200check: on an H200 only: every kernel at k = 2 / 4, M = 16..128 with the re-tuned H200 table (final41), and the
#   MoE table k = 4 with the grouped kernel's 5 stages (moe-final44).
if [ "$STEP" = h200check ]; then
  case "$GPU" in *H200*) ;; *) echo "not an H200 ($GPU): nothing run"; finish_run run25; exit 0 ;; esac
  python3 profiling/warm_cache.py wgmma gemv_stream gemv grouped 2>&1 | tail -1
  dense_all "final41"
  timeout 150 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 \
      --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag moe-final44 > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | head -12; grep -E "as moe_forward" "$W/bench_moe.log" | head -12
fi
# STEP=cl25: the clusters the plan refuses at M = 96 / 128 (cluster_pays): gate/up at 3 splits (120 CTAs, workspace
#   sum ~1.7 us by the model), down / O at 8 splits (128 CTAs); each split count also forced onto clusters, with the
#   clustered grid's capacity (all CTAs, one per SM) printed.  Expected from the fifteenth session: a clustered grid
#   that puts two CTAs on some SMs is 14-23 % slower; if the capacity allows one per SM, the cluster wins.
if [ "$STEP" = cl25 ]; then
  GEMM=0 DQ=0 WG=1 WGCL=1 WGSPLITS=${WGSPLITS:-3,4,6,8} KS=4 MS=${MS:-96,128} SHAPES_=${SHAPES_:-gateup,down,O,Q} \
    timeout 250 python3 profiling/gemm_probe.py 2>&1 | tee "$W/cl25.log"
fi
finish_run run25
