#!/usr/bin/env bash
# The seventh session's final device run for the streaming GEMV (kbitcupy.gemv_stream):
# GPU tests (streaming GEMV + the decode GEMV, whose shared header changed), the dense table
# with the STREAM columns beside the GEMV and the fused GEMMs, compute-sanitizer on small shapes.
#   OUT=/tmp/out bash profiling/stream_final.sh
set -u
OUT=${OUT:-/tmp/kbit_out}
mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
python3 profiling/warm_cache.py gemv_stream gemv gemm wgmma 2>&1 | tail -1
python3 -m pytest -q -m gpu tests/test_gemv_stream_gpu.py tests/test_gemv_gpu.py > "$OUT/tests.log" 2>&1; tail -3 "$OUT/tests.log"
python3 profiling/bench.py --out "$OUT" --M ${MS:-1,8,16,32} --k 2,3,4,5 --columns GEMV,STREAM,GEMM,WGMMA,STREAM+PDL \
    --reps 15 --tag ${TAG:-stream-final} > "$OUT/bench.log" 2>&1; grep -E "^### M|TOTAL" "$OUT/bench.log"
for tool in memcheck racecheck synccheck; do
  compute-sanitizer --tool $tool --error-exitcode 3 python3 profiling/sanitize_stream.py > "$OUT/sanitize_$tool.txt" 2>&1
  echo "compute-sanitizer $tool: exit $? ($(grep -c 'rel err' "$OUT/sanitize_$tool.txt") checks; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|BAD:' "$OUT/sanitize_$tool.txt" | tr '\n' ' '))"
done
