#!/usr/bin/env bash
# Eighteenth session's device runs (2026-11-25).
#   STEP=g: the grouped GEMV with the default codebook compiled in (CBD), its pair table built before
#     griddepcontrol.wait in safe PDL (the grouped kernels' wait-at-entry mode).  The grouped and PDL GPU
#     tests, memcheck over sanitize_driver.py, then the A/B against ab_prev (the tree before it: git
#     archive HEAD~1 kbitcupy cuda_src profiling | tar -x -C ab_prev --exclude=profiling/results, carried)
#     on the MoE shapes at 1..16 tokens per expert, k = 2 / 4 / 5 (Grouped; Grouped:plain, which also
#     gains the compiled-in levels) and the MoE layer step.
#     Expected: each grouped GEMV -0.1..-0.4 us at 1..4 tokens (codebook load + table build off the path
#     after the wait; the dense GEMV's CBD gave -2.8 % at k = 4, its early table another -2.4 %).
#     Ran (c59ab78): tests 183 passed, memcheck clean, but every grouped GEMV 0.3-0.7 us slower (Grouped:plain
#     too, +0.4): the SASS showed why the old kernels were faster: their expert ids / offsets (ld.global.nc
#     of const __restrict__ pointers) were hoisted above griddepcontrol.wait, a race with device routing
#     (profiling/sass_wait_check.py); the CBD build's barrier kept them after it.
#   STEP=fix: the ids, offsets, row indices and SwiGLU rows loaded with ld_after_wait (volatile asm, after the
#     wait) in both trees; A/B of CBD (new) against the same tree with the loaded-codebook kernels
#     (ab_prev: gemv.py's cbd = False).  Grouped / PDL GPU tests (subset), then MoE shapes 1 / 4 / 16 tokens
#     and the layer step.
#   OUT=/tmp/out STEP=g bash profiling/run20.sh
. profiling/run_env.sh
start_run g
[ "$STEP" = final ] && { echo "# $GPU, $(date -I), git $(cat .git_rev), STEP=final" > "$OUT/header.txt"; }
if [ "$STEP" = g ]; then
  python3 profiling/warm_cache.py gemv grouped quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_grouped.log" 240 tests/test_grouped_gpu.py tests/test_pdl_gpu.py
  sanitize memcheck "$W/memcheck.txt" 150 profiling/sanitize_driver.py
  OUT=$W PREV_TREE=ab_prev AB_TAG=cbd20 WARM="gemv grouped" AB_TIMEOUT=150 \
      AB_ARGS="--shapes moe --k 2,4,5 --moe-M 1,4,8,16 --columns Grouped,Grouped:plain --reps 15" \
      bash profiling/tree_ab.sh 2>&1 | tail -40
  OUT=$W PREV_TREE=ab_prev AB_TAG=layer20 WARM="" AB_TIMEOUT=100 \
      AB_ARGS="--shapes none --moe-layer --k 4 --layer-T 1,8,32 --reps 15" bash profiling/tree_ab.sh 2>&1 | tail -3
  grep -h -E "^\| (1|8|32) \| 4" "$W"/*layer20-*.md
fi
if [ "$STEP" = fix ]; then
  python3 profiling/warm_cache.py gemv grouped quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_fix.log" 200 tests/test_grouped_gpu.py tests/test_pdl_gpu.py \
      -k "default_codebook or pdl or safe or slices or fused or moe_forward or capture or uneven"
  OUT=$W PREV_TREE=ab_prev AB_TAG=fix20 WARM="gemv grouped" AB_TIMEOUT=120 \
      AB_ARGS="--shapes moe --k 2,4,5 --moe-M 1,4,16 --columns Grouped,Grouped:plain --reps 15" \
      bash profiling/tree_ab.sh 2>&1 | tail -20
  OUT=$W PREV_TREE=ab_prev AB_TAG=layerfix20 WARM="" AB_TIMEOUT=100 \
      AB_ARGS="--shapes none --moe-layer --k 4 --layer-T 1,8 --reps 15" bash profiling/tree_ab.sh 2>&1 | tail -3
  grep -h -E "^\| (1|8) \| 4" "$W"/*layerfix20-*.md
fi
tar -czf "$OUT/run20_$STEP.tgz" -C "$W" . && rm -rf "$W"
# STEP=final (appended after STEP=fix: CBD kept for k = 5 only, gemv.GROUPED_CBD_KS): the grouped / PDL GPU
#   tests (subset), memcheck, then the closing tables: dense M = 16..128 (k = 4) and MoE 1..64 tokens, tag final24.
if [ "${STEP:-}" = final ]; then
  W=$OUT/work; mkdir -p "$W"; cp "$OUT/header.txt" "$W/" 2>/dev/null
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_final.log" 200 tests/test_grouped_gpu.py tests/test_pdl_gpu.py \
      -k "default_codebook or pdl or safe or slices or fused or moe_forward"
  sanitize memcheck "$W/memcheck.txt" 150 profiling/sanitize_driver.py
  final_tables final24
  tar -czf "$OUT/run20_final.tgz" -C "$W" . && rm -rf "$W"
fi
