#!/usr/bin/env bash
# Fourteenth session's device run: the decode GEMV's K split over a thread block cluster
# (kbit_gemv_ks, plan ksplit; tried and reverted),
# and the absmax decode moved from the load to the use.
#   STEP=probe (ran at b14d5e5; the K split was reverted with its plan key, so the step is gone):
#     gemv_ab of the current plan against K-split plans (ksplit 2 / 4 x 4 / 8 / 16 warps), every dense
#     shape, k = 2, 4, 5, M = 1, 4, and k = 4 M = 1 with PDL (..._ksplit14.log).
#   STEP=scale: the absmax decode moved from the load to the use (no stall on the absmax byte
#     right after the ring's loads): GEMV + grouped GPU tests, gemv_ab against the previous source
#     (profiling/prev_gemv_d50b44d.cu, the same plan; not kept in the tree: write it here first with
#     `python3 profiling/gemv_ab.py --make-baseline d50b44d && mv profiling/baseline_gemv_d50b44d.cu
#     profiling/prev_gemv_d50b44d.cu`, and it travels as an untracked file), k = 2..5, M = 1, 2, 4
#     (k = 4, 5 M = 1 with PDL), moe_ab against the previous grouped GEMV.  ~6 min.
#   STEP=final: the whole GPU suite and compute-sanitizer memcheck (~6 min).
#   STEP=tables: the dense table M = 1..16 (GEMV, STREAM, WGMMA, matmul, matmul+PDL; TAG, default
#     final20) and the MoE table + layer step (moe-TAG).  ~5 min.
#   STEP=ring: with the absmax stall gone, the ring order decisions again (they were measured with it):
#     gemv_ab variants -DKBIT_EXPERIMENT_RING_EARLY (the whole register ring requested before the
#     prologue), with ring depth 3 / 4; and the MoE layer step (the fused SwiGLU staging's first
#     chunk requested before the pair table; reverted after) against the previous tree (ab_prev = git archive of
#     95bac27's kbitcupy, cuda_src and bench scripts; carried).  GEMV / grouped GPU tests first.
#   STEP=plans: the plan rules were tuned with the absmax stall in place: gemv_ab with plan overrides
#     (late, dual, warps) on every dense shape, k = 2, 4, 5, M = 1, 4.
#   STEP=trace: the decode GEMV's timeline after the absmax fix (gemv_trace.py: KV, gate/up, Q at k = 4)
#     and check_kv_matmul.py (matmul vs the GEMV column on KV).
#   STEP=gap (prepared, not run): the M between the GEMV's band and the next measured M, which the
#     dispatch rule now gives to the kernel that wins M = 16: bench at M = 9, 12, 15, every kernel
#     column and matmul (TAG, default gap15).
#   OUT=/tmp/out STEP=final bash profiling/run14.sh
. profiling/run_env.sh
start_run probe
if [ "$STEP" = scale ]; then
  python3 profiling/warm_cache.py gemv grouped 2>&1 | tail -1
  gpu_tests "$W/gpu_tests.log" 200 tests/test_gemv_gpu.py tests/test_grouped_gpu.py
  PREV=profiling/prev_gemv_d50b44d.cu
  # (at d4e9103 also AB_PLANS="s2w4:ksplit=2,warps=4;s4w4:ksplit=4,warps=4;s2w8:ksplit=2,warps=8")
  AB_VARIANTS="prev:src=$PREV" KS=2,3,4,5 MS=1,2,4 timeout 200 python3 profiling/gemv_ab.py --out "$W" > "$W/ab.log" 2>&1
  grep -v "^#" "$W/ab.log"
  KBITCUPY_PDL=1 AB_VARIANTS="prev:src=$PREV" KS=4,5 MS=1 timeout 60 python3 profiling/gemv_ab.py > "$W/ab_pdl.log" 2>&1
  grep "TOTAL" "$W/ab_pdl.log"
  MOE_VARIANTS="prev:src=$PREV" KS=4 MS=1,4,8,16 timeout 100 python3 profiling/moe_ab.py --out "$W" > "$W/moe_ab.log" 2>&1
  tail -30 "$W/moe_ab.log"
fi
if [ "$STEP" = ring ]; then
  python3 profiling/warm_cache.py gemv grouped 2>&1 | tail -1
  gpu_tests "$W/gpu_tests.log" 150 tests/test_gemv_gpu.py tests/test_grouped_gpu.py -k "plans_agree or slices or edge or moe_forward or fused or uneven"
  V="early:-DKBIT_EXPERIMENT_RING_EARLY;early_d3:-DKBIT_EXPERIMENT_RING_EARLY +depth=3;early_d4:-DKBIT_EXPERIMENT_RING_EARLY +depth=4"
  AB_VARIANTS="$V" KS=2,4,5 MS=1,4 timeout 120 python3 profiling/gemv_ab.py --out "$W" > "$W/ab.log" 2>&1
  grep -E "^TOTAL" "$W/ab.log"
  KBITCUPY_PDL=1 AB_VARIANTS="$V" KS=4,5 MS=1 timeout 50 python3 profiling/gemv_ab.py > "$W/ab_pdl.log" 2>&1
  grep -E "^TOTAL" "$W/ab_pdl.log"
  OUT=$W PREV_TREE=ab_prev AB_TAG=layer14 WARM="grouped gemv" AB_TIMEOUT=80 \
      AB_ARGS="--shapes none --moe-layer --k 4 --layer-T 1,8 --reps 15" bash profiling/tree_ab.sh 2>&1 | tail -3
  grep -h -E "^\| (1|8) \| 4" "$W"/*layer14-*.md
fi
if [ "$STEP" = plans ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  P="l0:late=0;l1:late=1;d0:dual=0;d1:dual=1;w4:warps=4;w8:warps=8;w16:warps=16"
  AB_PLANS="$P" KS=2,4,5 MS=1,4 timeout 200 python3 profiling/gemv_ab.py --out "$W" > "$W/ab.log" 2>&1
  grep -v "^#" "$W/ab.log"
fi
if [ "$STEP" = trace ]; then
  SHAPES=KV,gateup,Q KS=4 timeout 100 python3 profiling/gemv_trace.py > "$W/trace.log" 2>&1
  cat "$W/trace.log"
  timeout 100 python3 profiling/check_kv_matmul.py > "$W/kv_matmul.log" 2>&1
  cat "$W/kv_matmul.log"
fi
if [ "$STEP" = gap ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm 2>&1 | tail -1
  timeout 300 python3 profiling/bench.py --out "$W" --M 9,12,15 --k 2,4,5 --columns GEMV,STREAM,WGMMA,GEMM,matmul \
      --reps 15 --tag ${TAG:-gap15} > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log"
fi
if [ "$STEP" = final ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests.log" 360 tests/
  memcheck "$W/memcheck.txt"
fi
if [ "$STEP" = tables ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma grouped 2>&1 | tail -1
  timeout 260 python3 profiling/bench.py --out "$W" --M 1,2,4,8,16 --k 2,3,4,5 \
      --columns GEMV,STREAM,WGMMA,matmul,matmul+PDL --reps 15 --tag ${TAG:-final20} > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log"
  timeout 200 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 \
      --columns Grouped,g-WGMMA,Grouped+PDL --moe-layer --layer-T 1,8,32 --reps 15 --tag moe-${TAG:-final20} \
      > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL|layer|T = " "$W/bench_moe.log" | head -40
fi
tar -czf "$OUT/run14_$STEP.tgz" -C "$W" . && rm -rf "$W"
