#!/usr/bin/env bash
# Eighth session, fifth device run: the streaming GEMV with the first strip published mid-stream by a
# producer thread, against the previous version (cuda_src/kbit_gemv_stream_prev.cu = git show
# a98b00b:cuda_src/kbit_gemv_stream.cu, made by this script, not kept), and its GPU tests.
#   OUT=/tmp/out bash profiling/pub_run.sh
. profiling/run_env.sh
[ -f cuda_src/kbit_gemv_stream_prev.cu ] || git show a98b00b:cuda_src/kbit_gemv_stream.cu > cuda_src/kbit_gemv_stream_prev.cu  # make it before the run where the device has no git history
trap 'rm -f cuda_src/kbit_gemv_stream_prev.cu' EXIT
python3 -m pytest -q -x -m gpu tests/test_gemv_stream_gpu.py > "$OUT/tests_stream.log" 2>&1; tail -3 "$OUT/tests_stream.log"
SHAPES=${SHAPES:-gateup,down,O,Q,KV,lin_key} KS=${KS:-4,2} MS=${MS:-8,16,32} TRACE=${TRACE:-1} \
VARIANTS="prev:src=kbit_gemv_stream_prev.cu" \
  python3 profiling/stream_probe.py > "$OUT/stream_pub.log" 2>&1; grep -v "trace:" "$OUT/stream_pub.log" | cut -c1-250
