#!/usr/bin/env bash
# Eighth session, fourth device run: the streaming GEMV with 16 consumer warps (block halves) against
# 8 (-DKBIT_STREAM_CONSUMERS=8), each with and without a unit per producer warp; its GPU tests.
#   OUT=/tmp/out bash profiling/c16_run.sh
set -u
OUT=${OUT:-/tmp/kbit_out}
mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
python3 -m pytest -q -x -m gpu tests/test_gemv_stream_gpu.py > "$OUT/tests_stream.log" 2>&1; tail -3 "$OUT/tests_stream.log"
SHAPES=${SHAPES:-gateup,down,O,Q,KV} KS=${KS:-4} MS=${MS:-1,8,16,32} TRACE=${TRACE:-1} \
VARIANTS="wu:-DKBIT_STREAM_WARP_UNITS;c8:-DKBIT_STREAM_CONSUMERS=8;c8wu:-DKBIT_STREAM_CONSUMERS=8 -DKBIT_STREAM_WARP_UNITS" \
  python3 profiling/stream_probe.py > "$OUT/stream_c16.log" 2>&1; grep -v trace "$OUT/stream_c16.log"
