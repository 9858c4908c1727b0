#!/usr/bin/env bash
# Ninth session: streaming-GEMV tests and SASS counts after a change (everything under $OUT packed
# into one tarball: the device tool returns a limited number of files).
#   OUT=/tmp/out bash profiling/stream9_run.sh
. profiling/run_env.sh
W=$OUT/work; mkdir -p $W
python3 profiling/warm_cache.py gemv_stream gemv 2>&1 | tail -1
python3 -m pytest -q -m gpu tests/test_gemv_stream_gpu.py ${TESTS_EXTRA:-} > "$W/tests_stream.log" 2>&1; tail -2 "$W/tests_stream.log"
OUT=$W CELLS=${CELLS:-"STREAM,gateup,4,1 STREAM,gateup,4,32"} bash profiling/ncu_src.sh > /dev/null 2>&1
for f in "$W"/src_*.csv; do python3 profiling/sass_budget.py "$f" | head -4; done
tar -czf "$OUT/stream9.tgz" -C "$W" . && rm -rf "$W"
