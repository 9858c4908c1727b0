#!/usr/bin/env bash
# Ninth session review: the dequantize tests (kbit_dequant_tile now through the shared chunk_pairs
# helper: k = 3 / 5 cubins reordered) and one tiny run of each A/B script on the shared case loop
# (bench_foundation.dense_cases).
#   OUT=/tmp/out bash profiling/review9_check.sh
. profiling/run_env.sh
L=$OUT/review9_check.log
python3 -m pytest -q -m gpu tests/test_gemm_gpu.py -k "dequant" > $L 2>&1; tail -1 $L
SHAPES=KV KS=4 MS=1 TRACE=0 VARIANTS="p2:-DKBIT_STREAM_PRODUCERS=2" python3 profiling/stream_probe.py >> $L 2>&1; tail -1 $L | cut -c1-200
SHAPES=KV KS=4 MS=1 python3 profiling/pdl_ab.py >> $L 2>&1; tail -2 $L | cut -c1-200
SHAPES_=KV KS=4 MS=16 DQ=1 python3 profiling/gemm_probe.py >> $L 2>&1; tail -1 $L | cut -c1-200
SHAPES=KV KS=4 MS=1 python3 profiling/gemv_ab.py >> $L 2>&1; tail -2 $L | cut -c1-200
