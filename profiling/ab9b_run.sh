#!/usr/bin/env bash
# Ninth session, second streaming-GEMV step: lane offsets hoisted (opaque) and the E4M4 scale by a
# 256-entry shared table, against the UnitPos-only version and the eighth session's kernel, in one
# run (stream_probe.py src= variants; cuda_src/kbit_gemv_stream_{unitpos,prev}.cu are made by hand
# for the run and not kept), then the streaming tests and the SASS counts; all packed in one tarball.
# Expected: consumer instructions per unit 303 -> ~250 (M = 1), another ~5 % off the kernel time.
#   OUT=/tmp/out bash profiling/ab9b_run.sh
. profiling/run_env.sh
W=$OUT/work; mkdir -p $W
V="unitpos:src=kbit_gemv_stream_unitpos.cu;prev:src=kbit_gemv_stream_prev.cu"
SHAPES=gateup,down,Q,O,KV,lin_key KS=4 MS=1,16,32,64 TRACE=0 VARIANTS="$V" python3 profiling/stream_probe.py > $W/stream_ab9b.log 2>&1
SHAPES=gateup,down,Q,O KS=2,5 MS=16,32 TRACE=0 VARIANTS="$V" python3 profiling/stream_probe.py >> $W/stream_ab9b.log 2>&1
cut -c1-260 $W/stream_ab9b.log
python3 -m pytest -q -m gpu tests/test_gemv_stream_gpu.py > "$W/tests_stream.log" 2>&1; tail -1 "$W/tests_stream.log"
OUT=$W CELLS="STREAM,gateup,4,1 STREAM,gateup,4,32" bash profiling/ncu_src.sh > /dev/null 2>&1
for f in "$W"/src_*.csv; do python3 profiling/sass_budget.py "$f" > "$f.budget"; head -3 "$f.budget"; done
tar -czf "$OUT/ab9b.tgz" -C "$W" . && rm -rf "$W"
