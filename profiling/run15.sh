#!/usr/bin/env bash
# Fifteenth session's device run: the wgmma kernels' split-K sum over a thread block cluster.
#   STEP=cluster: smoke (profiling/sanitize_cluster.py), the wgmma GPU tests (dense + grouped),
#     gemm_probe A/B at M = 16..128 (default plan and k_splits 2 / 4 / 8, each with the cluster
#     sum and with the workspace sum, cluster=False), moe_ab A/B of the grouped wgmma at 16 / 32 /
#     64 tokens per expert (cluster, workspace, k_splits 1 / 2 / 4 / 8), then compute-sanitizer
#     memcheck and racecheck over sanitize_cluster.py.  ~8 min.
#     (ran at 39f8af4: the grouped kernel then took 153 registers under CUDA 13 instead of 126, one
#     CTA per SM instead of two, so its MoE numbers are not the cluster sum's; fixed after)
#   STEP=probe: profiling/cluster_probe.py (workspace / cluster / cluster + spread per split count,
#     with the max active clusters), moe_ab (cluster, workspace, spread, split counts), the wgmma
#     GPU tests.  ~6 min.
#   STEP=tune: after the plan rules (at most 8 splits; the cluster sum where cluster_pays): the wgmma,
#     grouped-wgmma and dispatch GPU tests, then the WGMMA / WGMMA+PDL sweep for the dispatch tables
#     (M = 16..128, k = 2..5; tag wg-tune15, overlaid last by retune_tables.py).  ~8 min.
#   STEP=ab: same-run A/B against the session's starting tree (ab_prev = git archive 92d331c kbitcupy
#     cuda_src profiling; carried): dense WGMMA at M = 16 / 32, k = 2..5, and the MoE table's grouped
#     wgmma (g-WGMMA) at 16..64 tokens per expert.  ~5 min.
#   STEP=final: the whole GPU suite, compute-sanitizer memcheck over sanitize_cluster.py, and the A/B
#     of the WGMMA column at M = 16, k = 2 / 3 (Q, gate/up, linear value: +9-15 % in STEP=ab) after
#     cluster_capacity stopped leaving the kernel's shared-memory limit raised.
#   STEP=tables: dense M = 16..128 (k = 4; STREAM, WGMMA, dq+cuBLAS, matmul, matmul+PDL; TAG, default
#     final21) and the MoE table + layer step (moe-TAG).  ~5 min.
#     (ran at 6e84cc9: the suite ran past its 330 s with no failure at 95 %; the A/B showed the M = 16
#     k = 2 / 3 regression unchanged, so the shared-memory limit was not its cause)
#   STEP=last: the GPU test files the final step's timeout cut (quantize, torch ops, wgmma), then the
#     dense table M = 16..128 at k = 4 and the MoE table without the layer step (TAG, default final21);
#     files straight into $OUT (the device time left was short).
#   OUT=/tmp/out STEP=cluster bash profiling/run15.sh
. profiling/run_env.sh
start_run cluster
if [ "$STEP" = cluster ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  timeout 120 python3 profiling/sanitize_cluster.py > "$W/smoke.log" 2>&1; echo "smoke: exit $? $(tail -1 $W/smoke.log)"
  gpu_tests "$W/gpu_tests.log" 200 tests/test_wgmma_gpu.py tests/test_grouped_gpu.py -k wgmma
  GEMM=0 DQ=0 WG=1 WGNOCL=1 WGSPLITS=2,4,8 KS=4 MS=16,32,64,128 SHAPES_=gateup,down,Q,O,KV \
      timeout 200 python3 profiling/gemm_probe.py > "$W/probe.log" 2>&1
  cat "$W/probe.log"
  MOE_GEMV=0 MOE_MMA=0 MS=16,32,64 ES=8,10 MOE_WG="cl:;ws:+cluster=0;ks1:+ks=1;ks2:+ks=2;ks4:+ks=4;ks8:+ks=8" \
      timeout 150 python3 profiling/moe_ab.py --out "$W" > "$W/moe_ab.log" 2>&1
  grep -v "^#" "$W/moe_ab.log" | tail -30
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 python3 profiling/sanitize_cluster.py > "$W/memcheck.txt" 2>&1
  echo "memcheck: exit $? $(grep -E 'ERROR SUMMARY|BAD' $W/memcheck.txt | tr '\n' ' ')"
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 python3 profiling/sanitize_cluster.py > "$W/racecheck.txt" 2>&1
  echo "racecheck: exit $? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|BAD' $W/racecheck.txt | tr '\n' ' ')"
fi
if [ "$STEP" = probe ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  timeout 200 python3 profiling/cluster_probe.py > "$W/cluster_probe.log" 2>&1
  cat "$W/cluster_probe.log"
  MOE_GEMV=0 MOE_MMA=0 MS=16,32,64 ES=8,10 \
      MOE_WG="ws:+cluster=0;cl:+cluster=1;clsp:+cluster=1 +spread=1;ks2:+ks=2;ks2ws:+ks=2 +cluster=0;ks4:+ks=4;ks4ws:+ks=4 +cluster=0" \
      timeout 150 python3 profiling/moe_ab.py --out "$W" > "$W/moe_ab.log" 2>&1
  grep -v "^#" "$W/moe_ab.log" | tail -14
  gpu_tests "$W/gpu_tests.log" 200 tests/test_wgmma_gpu.py tests/test_grouped_gpu.py -k wgmma
fi
if [ "$STEP" = tune ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests.log" 200 tests/test_wgmma_gpu.py tests/test_grouped_gpu.py tests/test_dispatch.py -k "wgmma or dispatch"
  timeout 330 python3 profiling/bench.py --out "$W" --M 16,24,32,48,64,128 --k 2,3,4,5 --columns WGMMA,WGMMA+PDL \
      --reps 15 --tag ${TAG:-wg-tune15} > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log"
fi
if [ "$STEP" = ab ]; then
  OUT=$W PREV_TREE=ab_prev AB_TAG=wgab15 WARM=wgmma AB_TIMEOUT=150 \
      AB_ARGS="--M 16,32 --k 2,3,4,5 --columns WGMMA --reps 15" bash profiling/tree_ab.sh 2>&1 | tail -12
  OUT=$W PREV_TREE=ab_prev AB_TAG=moeab15 WARM=wgmma AB_TIMEOUT=150 \
      AB_ARGS="--shapes moe --k 4 --moe-M 16,32,64 --columns g-WGMMA --reps 15" bash profiling/tree_ab.sh 2>&1 | tail -8
fi
if [ "$STEP" = final ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests.log" 330 tests/
  timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 python3 profiling/sanitize_cluster.py > "$W/memcheck_cluster.txt" 2>&1
  echo "memcheck (cluster): exit $? $(grep -E 'ERROR SUMMARY|BAD' $W/memcheck_cluster.txt | tr '\n' ' ')"
  OUT=$W PREV_TREE=ab_prev AB_TAG=m16ab15 WARM=wgmma AB_TIMEOUT=80 \
      AB_ARGS="--M 16 --k 2,3 --shapes Q,gateup,lin_value --columns WGMMA --reps 15" bash profiling/tree_ab.sh 2>&1 | tail -6
  grep -h -E "^\| (Q|gateup|lin_value) " "$W"/m16ab15_*.log
fi
if [ "$STEP" = last ]; then
  W=$OUT
  python3 profiling/warm_cache.py gemv gemv_stream wgmma grouped quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_tail.log" 170 tests/test_quantize_gpu.py tests/test_torch_ops.py tests/test_wgmma_gpu.py
  timeout 100 python3 profiling/bench.py --out "$W" --M 16,32,64,128 --k 4 \
      --columns STREAM,WGMMA,dq+cuBLAS,matmul,matmul+PDL --reps 15 --tag ${TAG:-final21} > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log"
  timeout 110 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 \
      --columns Grouped,g-WGMMA,Grouped+PDL --reps 15 --tag moe-${TAG:-final21} > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | head -20
  exit 0
fi
if [ "$STEP" = tables ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma grouped quant 2>&1 | tail -1
  timeout 280 python3 profiling/bench.py --out "$W" --M 16,32,64,128 --k 4 \
      --columns STREAM,WGMMA,dq+cuBLAS,matmul,matmul+PDL --reps 15 --tag ${TAG:-final21} > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log"
  timeout 200 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 \
      --columns Grouped,g-WGMMA,Grouped+PDL --moe-layer --layer-T 1,8,32 --reps 15 --tag moe-${TAG:-final21} \
      > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL|^\| (1|8|32) \| 4" "$W/bench_moe.log" | head -40
fi
tar -czf "$OUT/run15_$STEP.tgz" -C "$W" . && rm -rf "$W"
