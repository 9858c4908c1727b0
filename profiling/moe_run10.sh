#!/usr/bin/env bash
# Tenth session (H200): the grouped GEMV's slices plan. GPU tests (grouped / MoE / slices), compute-sanitizer
# memcheck + racecheck of the slices kernels, the MoE table (k = 4, 1..16 tokens, 8 / 10 experts, layer step;
# tag moe-final13) and the slices plan against the group loop at k = 2, 4, 5 (moe_ab.py, old = +gpb=0).
#   OUT=/tmp/out [TAG=moe-final13] [SKIP_AB=1] [SKIP_TESTS=1] bash profiling/moe_run10.sh
. profiling/run_env.sh
W=$OUT/work; mkdir -p $W
GPU=$(python3 -c "import cupy as c; print(c.cuda.runtime.getDeviceProperties(0)['name'].decode())")
python3 profiling/warm_cache.py gemv grouped wgmma 2>&1 | tail -1
if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: no tests / sanitizer (a second GPU's table)
echo "# $GPU, $(date -I): pytest -q -m gpu tests/test_grouped_gpu.py tests/test_layers_gpu.py" > "$W/gpu_tests_moe.log"
python3 -m pytest -q -m gpu tests/test_grouped_gpu.py tests/test_layers_gpu.py >> "$W/gpu_tests_moe.log" 2>&1
tail -1 "$W/gpu_tests_moe.log"
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 3 python3 profiling/sanitize_slices.py > "$W/sanitize_slices_${tool}2.txt" 2>&1
  echo "slices $tool: exit $? ($(grep -E 'checks|ERROR SUMMARY' "$W/sanitize_slices_${tool}2.txt" | tr '\n' ' '))"
done
fi
python3 profiling/bench.py --shapes moe --k 4 --moe-M 1,2,4,8,16 --columns Grouped,g-GEMV,Grouped+PDL --moe-layer \
    --layer-T 1,8,32 --reps 15 --out "$W" --tag ${TAG:-moe-final13} > "$W/bench_moe.log" 2>&1
grep -E "^### |^\| (TOTAL|moe_gu_fused|moe_dn) " "$W/bench_moe.log" | head -40
if [ -z "${SKIP_AB:-}" ]; then  # SKIP_AB=1: the table only
  KS=2,4,5 MS=1,4,8 ES=8,10 SHAPES=moe_gu_fused,moe_dn MOE_MMA=0 MOE_VARIANTS="old:+gpb=0" \
    python3 profiling/moe_ab.py > "$W/moe_sl10c.log" 2>&1
  grep TOTAL "$W/moe_sl10c.log"
fi
tar -czf "$OUT/moe10.tgz" -C "$W" . && rm -rf "$W"
