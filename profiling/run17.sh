#!/usr/bin/env bash
# Sixteenth session's device run (2026-11-25).
#   STEP=a: (1) the clustered launch's shared-memory cap (07f2adc) timed: same-run A/B of the WGMMA column
#     at M = 16, k = 2 / 3 / 4, every dense shape, against 84d9c7a (ab_prev = git archive 84d9c7a kbitcupy
#     cuda_src profiling | tar -x -C ab_prev, without profiling/results; carried).  Expected: Q / linear
#     value / gate/up at k = 2 / 3 back to ~8.2-8.6 us (from 9.5-10.0), k = 4 unchanged.
#     (2) the grouped wgmma's split / sum grid at 32 / 64 tokens per expert (moe_ab, MOE_WG): the default
#     plan, 1 split, 2 / 3 splits clustered, 3 / 4 splits through the workspace, TOK = 32.  Expected: at
#     64 tokens gate/up (default: 4 splits through the workspace, 256 CTAs > the 248 four-CTA clusters
#     hold) 3 clustered splits ~8-10 % faster; 10 experts (3 splits, 240 > 237) the same with 2 or 3.
#     (3) the wgmma + grouped GPU tests.  ~7 min.
#   STEP=fence: the split-K counter with one acquire-release atomic instead of two sc fences (kbit_common.cuh
#     splitk_fixup; ncu_src16: the CTA's warps wait at the barrier while thread 0 fences, 9-14 % of the warp
#     samples of grouped gate/up at 64 tokens and dense gate/up at M = 16).  A / B / A in one run: the
#     previous fences (KBIT_WGMMA_OPTS=-DKBIT_FIXUP_SC_FENCE) / the new atomic / the previous again; dense
#     WGMMA column M = 16..64 k = 4 and the MoE g-WGMMA column 16..64 tokens.  Expected: cells with a
#     workspace split-K sum -1..-4 %, clustered / unsplit cells unchanged.  Then the wgmma + grouped GPU tests.
#   STEP=suite: the whole GPU suite (timeout 500 s).  (ran at 197c5a9: 493 passed, 2 failed: test_pdl_bit_exact
#     k = 4 M = 16, the H100 PDL table picks kbit_gemm where the default one picks dq + cuBLAS; test fixed)
#   STEP=tables: the PDL GPU tests, compute-sanitizer memcheck and racecheck over sanitize_driver.py (split-K with forced split
#     counts through the new counter, every kernel family), then the dense table M = 16..128 (k = 4; STREAM,
#     WGMMA, dq+cuBLAS, matmul, matmul+PDL) and the MoE table (TAG, default final22).
#   STEP=gemm: kbit_gemm's split-K counter as the same acquire-release atomic (atomic_add_acq_rel): its GPU
#     tests (forced splits, back-to-back launches, two streams), the wgmma split-K tests, memcheck and racecheck
#     over sanitize_driver.py.
#   STEP=shapes: dense shapes the model does not have (bench.py KxN), k = 4, M = 9..128, every kernel column and
#     matmul: whether the nearest measured shape's bands (dispatch.nearest_shape, sixteenth session, not yet
#     timed) pick a kernel within 5 % of the fastest there, as the measured shapes' tables do.
#   STEP=pair (needs profiling/patches/session16-prepared.patch applied: git am): pairs (clusters of 2 summed over DSMEM,
#     the pair sums through the workspace; off by default, plan option pair=True): their GPU tests, moe_ab of
#     the grouped wgmma at 16..64 tokens, 8 experts (the default plan against 4 splits through the workspace and
#     4 / 8 splits as pairs), memcheck and racecheck over sanitize_cluster.py.  Expected: grouped gate/up 8
#     experts x 64 tokens (4 splits, 256 CTAs: the workspace sum) 5-10 % faster.  (Written, not run.)
#   STEP=safe (needs the same patch): PDL's safe mode (set_pdl("safe"): every kernel a programmatic dependent
#     that waits before touching memory): its GPU tests and the PDL tests, then the dense table at M = 1..64 and
#     the MoE table with matmul / matmul+sPDL / matmul+PDL (Grouped / Grouped+sPDL / Grouped+PDL), k = 4.
#     (Ran with columns +sPDL; safe mode is now the default, so the columns are matmul / matmul:plain / matmul+PDL.)
#     Expected: sPDL a part of PDL's gain (the launch overlap only: -3..-10 % as the grouped kernels' wait-first
#     mode measured in the sixth session), bit-exact with the default launch; if so, make it the default.
#   STEP=tok: the dense wgmma kernel at M = 64..256 with TOK = 64 (two m tiles, 107 registers: two CTAs per SM)
#     against the plan's TOK = 128 (146 registers: one CTA per SM, issue slots 19 % busy in ncu_d128_16) and
#     192 (profiling/gemm_probe.py WG=1 WGTOKS).  (Prepared, not run.)
#   (tables / gemm: their commands moved into run_env.sh helpers after they ran: sanitize, final_tables.)
#   OUT=/tmp/out STEP=a bash profiling/run17.sh
. profiling/run_env.sh
start_run a
if [ "$STEP" = a ]; then
  OUT=$W PREV_TREE=ab_prev AB_TAG=capab16 WARM=wgmma AB_TIMEOUT=120 \
      AB_ARGS="--M 16 --k 2,3,4 --columns WGMMA --reps 15" bash profiling/tree_ab.sh 2>&1 | tail -8
  MS=${MS:-32,64} ES=8,10 KS=4 moe_wg "$W/moe_grid16.log" 200 \
      "def:;ks1:+ks=1;ks2c:+ks=2 +cluster=1;ks3c:+ks=3 +cluster=1;ks3w:+ks=3 +cluster=0;ks4w:+ks=4 +cluster=0;t32:+tok=32"
  gpu_tests "$W/gpu_tests.log" 150 tests/test_wgmma_gpu.py tests/test_grouped_gpu.py -k wgmma
fi
if [ "$STEP" = fence ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  for v in sc1 acqrel sc2; do
    o=""; [ $v != acqrel ] && o=-DKBIT_FIXUP_SC_FENCE
    KBIT_WGMMA_OPTS=$o timeout 100 python3 profiling/bench.py --out "$W" --M 16,32,64 --k 4 --columns WGMMA --reps 15 \
        --tag fence16-$v > "$W/fence16_$v.log" 2>&1
    KBIT_WGMMA_OPTS=$o timeout 100 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 16,32,64 \
        --columns g-WGMMA --reps 15 --tag fence16-moe-$v > "$W/fence16_moe_$v.log" 2>&1
    echo "== $v"; grep -E "^\| TOTAL" "$W/fence16_$v.log" "$W/fence16_moe_$v.log" | sed 's/.*log://'
  done
  gpu_tests "$W/gpu_tests.log" 150 tests/test_wgmma_gpu.py tests/test_grouped_gpu.py -k wgmma
fi
if [ "$STEP" = suite ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests.log" 500 tests/
fi
if [ "$STEP" = tables ]; then
  gpu_tests "$W/gpu_tests_pdl.log" 90 tests/test_pdl_gpu.py
  sanitize memcheck "$W/memcheck.txt" 120 profiling/sanitize_driver.py
  sanitize racecheck "$W/racecheck.txt" 120 profiling/sanitize_driver.py
  final_tables ${TAG:-final22}
fi
if [ "$STEP" = gemm ]; then
  python3 profiling/warm_cache.py gemm wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests.log" 150 tests/test_gemm_gpu.py
  gpu_tests "$W/gpu_tests_wg.log" 60 tests/test_wgmma_gpu.py -k "split or stream or repeat or chain"
  sanitize memcheck "$W/memcheck.txt" 100 profiling/sanitize_driver.py
  sanitize racecheck "$W/racecheck.txt" 100 profiling/sanitize_driver.py
fi
if [ "$STEP" = shapes ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm quant 2>&1 | tail -1
  timeout 300 python3 profiling/bench.py --out "$W" --shapes 2048x1536,3072x3072,4096x14336,14336x4096,1024x1024 \
      --M 9,16,32,64,128 --k 4 --columns GEMV,STREAM,GEMM,WGMMA,dq+cuBLAS,matmul --reps 15 --tag shapes16 > "$W/bench.log" 2>&1
  grep -E "^### M|^\| [0-9]" "$W/bench.log" | head -40
fi
if [ "$STEP" = pair ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_pair.log" 120 tests/test_wgmma_gpu.py tests/test_grouped_gpu.py -k "pair or forced_splits_toks or understated"
  MS=16,32,64 ES=8 KS=4 moe_wg "$W/moe_pair16.log" 90 "def:;ws4:+ks=4 +cluster=0;pair4:+ks=4 +pair=1;pair8:+ks=8 +pair=1"
  sanitize memcheck "$W/memcheck_pair.txt" 90 profiling/sanitize_cluster.py
  sanitize racecheck "$W/racecheck_pair.txt" 120 profiling/sanitize_cluster.py
fi
if [ "$STEP" = safe ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma grouped quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_safe.log" 200 tests/test_pdl_gpu.py tests/test_pdl.py
  timeout 150 python3 profiling/bench.py --out "$W" --M 1,4,8,16,32,64 --k 4 --columns matmul,matmul:plain,matmul+PDL \
      --reps 15 --tag safe16 > "$W/bench_safe.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_safe.log"
  timeout 120 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,64 \
      --columns Grouped,Grouped:plain,Grouped+PDL --reps 15 --tag moe-safe16 > "$W/bench_moe_safe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe_safe.log" | head -12
fi
if [ "$STEP" = tok ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  WG=1 GEMM=0 DQ=0 KS=4 MS=64,128,256 SHAPES_=gateup,down,Q,O WGTOKS=64,128,192 \
      timeout 300 python3 profiling/gemm_probe.py > "$W/tok_probe.log" 2>&1
  cat "$W/tok_probe.log" | tail -14
fi
tar -czf "$OUT/run17_$STEP.tgz" -C "$W" . && rm -rf "$W"
