#!/usr/bin/env bash
# Tenth session: the k = 5 plan with PDL (one group per block at M <= 2): GEMV / GEMV+PDL / matmul+PDL on the
# k = 5 shapes whose plan has slices, and the GEMV / launch tests.
#   OUT=/tmp/out bash profiling/pdlplan10.sh
. profiling/run_env.sh
GPU=$(python3 -c "import cupy as c; print(c.cuda.runtime.getDeviceProperties(0)['name'].decode())")
python3 profiling/warm_cache.py gemv 2>&1 | tail -1
echo "# $GPU, $(date -I): pytest -q -m gpu tests/test_gemv_gpu.py tests/test_launch_gpu.py" > "$OUT/gpu_tests_pdlplan.log"
python3 -m pytest -q -m gpu tests/test_gemv_gpu.py tests/test_launch_gpu.py >> "$OUT/gpu_tests_pdlplan.log" 2>&1
tail -1 "$OUT/gpu_tests_pdlplan.log"
python3 profiling/bench.py --out "$OUT" --shapes gateup,Q,lin_value --k 5 --M 1,2,4 --columns GEMV,GEMV+PDL,matmul,matmul+PDL \
    --reps 15 --tag k5-pdlplan > "$OUT/bench_pdlplan.log" 2>&1
grep -E "^### M|^\| (gateup|Q|lin_value) " "$OUT/bench_pdlplan.log"
