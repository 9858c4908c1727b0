#!/usr/bin/env bash
# Ninth session on the H100 (one tarball under $OUT):
#   STEP=tune:  the streaming-GEMV and launch tests, the STREAM / STREAM+PDL sweep for its dispatch tables
#   STEP=bench: the dense table at M = 8..64 with the dispatched matmul (after the tables are re-tuned)
#   OUT=/tmp/out STEP=tune bash profiling/h100_run9.sh
. profiling/run_env.sh
W=$OUT/work; mkdir -p $W
python3 profiling/warm_cache.py 2>&1 | tail -1
if [ "${STEP:-tune}" = tune ]; then
python3 -m pytest -q -m gpu tests/test_gemv_stream_gpu.py tests/test_launch_gpu.py > "$W/tests_stream.log" 2>&1; tail -1 "$W/tests_stream.log"
python3 profiling/bench.py --out "$W" --M 8,12,16,24,32 --k 2,3,4,5 --columns STREAM,STREAM+PDL --reps 15 --tag stream-tune3 > "$W/bench_tune3.log" 2>&1
python3 profiling/bench.py --out "$W" --M 48,64 --k 2,3,4,5 --columns STREAM,STREAM+PDL --reps 15 --tag stream-tune3b > "$W/bench_tune3b.log" 2>&1
grep -E "^### M|TOTAL" "$W/bench_tune3.log" "$W/bench_tune3b.log" | cut -c1-140
else
python3 profiling/bench.py --out "$W" --M 8,16,32,64 --k 2,3,4,5 --columns GEMV,STREAM,WGMMA,dq+cuBLAS,matmul,matmul+PDL \
    --reps 15 --tag final16 > "$W/bench.log" 2>&1
grep -E "^### M|TOTAL" "$W/bench.log"
fi
tar -czf "$OUT/h100_run9_${STEP:-tune}.tgz" -C "$W" . && rm -rf "$W"
