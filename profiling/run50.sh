#!/usr/bin/env bash
# Forty-third session (2026-11-28).  From the repo root:  OUT=/tmp/out STEP=chain bash profiling/run50.sh
# (carry ab_prev/: ab_prev/tree = b12a6c4's kbitcupy / cuda_src / profiling, the tree before this session)
. profiling/run_env.sh
start_run chain
# STEP=chain: moe_forward above the decode sizes (gather -> gate/up -> silu_mul -> down -> combine) launched each grouped
#   call with ids_stable, so in the default safe PDL the grouped wgmma kernel only L2-prefetched its first weights before
#   its wait.  But the kernel right before each of those calls is one of ours (the gather, silu_mul, or gate/up itself),
#   which writes none of the call's weights / ids and lets its dependents launch only after its own wait: nothing
#   earlier can still be running, so the full-PDL order (weights requested, tables built before the wait) is safe there.
#   New: grouped_matmul(chained=True) -> GROUPED_EARLY in safe mode (the wgmma kernel; the GEMV keeps its safe early
#   mode, the full order measured slower there in close49h-moe), moe_forward passes it; bench column Grouped:chained and
#   the "as moe_forward" TOTAL from the chained columns above the decode sizes.
# Expect: Grouped:chained = Grouped+PDL (the same kernel mode) within noise: at 32 / 64 tokens k = 4 gate/up fused -0.35 /
#   -0.8 us and down -0.9 us against Grouped:stable (close49h-moe: TOTAL 8 experts 32 tokens 17.19 -> ~15.9, 64 tokens
#   19.83 -> ~18.1; 1.02x fp16 at 64 where 0.93x); 16 tokens unchanged (the decode path).  Layer step (the real chain,
#   T = 2048: ~40 tokens an expert, wgmma): new faster than old by ~1 us a grouped call; T = 1 unchanged (decode path).
if [ "$STEP" = chain ]; then
  python3 profiling/warm_cache.py wgmma grouped 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_chain50.log" 300 tests/test_pdl_gpu.py -k "chained or moe_forward"
  grep -E "^E  |FAILED" "$W/gpu_tests_chain50.log" | head
  timeout 200 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 16,32,64 --experts 8,10 \
    --columns Grouped,Grouped:stable,Grouped:chained,Grouped+PDL --reps 15 --tag chain50-moe > "$W/bench_chain50.log" 2>&1
  grep -E "^### M|^\| TOTAL|as moe_forward" "$W/bench_chain50.log"
  AB_TIMEOUT=200 ab_trees layer50 "wgmma grouped" --shapes none --moe-layer --k 4 --layer-T 1,2048 --reps 15
  for v in new old; do echo "== layer $v"; grep -E "^\| [0-9]+ \| 4 " "$W/layer50_$v.log"; done
  finish_run run50
fi
