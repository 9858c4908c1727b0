#!/usr/bin/env bash
# Dispatch sweep with the streaming GEMV (seventh session), and the racecheck cross-check of its
# mbarrier-paced cp.async stages:
#  1. dense shapes, M = 8..48, all k: GEMV, STREAM, GEMM, WGMMA, dq+cuBLAS and their PDL columns
#     (profiling/tune_dispatch.py [--pdl] turns the JSON, with the earlier sweeps, into the H200 tables);
#  2. compute-sanitizer racecheck on profiling/sanitize_stream.py as built (cp.async.mbarrier.arrive.noinc)
#     and with -DKBIT_STREAM_SYNC_ARRIVE (each producer waits for its copies, then a plain arrive).
#   OUT=/tmp/out bash profiling/stream_tune.sh
set -u
OUT=${OUT:-/tmp/kbit_out}
mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
python3 profiling/warm_cache.py gemv_stream gemv gemm wgmma quantize 2>&1 | tail -1
python3 profiling/bench.py --out "$OUT" --M ${MS:-8,16,24,32,48} --k 2,3,4,5 \
    --columns GEMV,STREAM,GEMM,WGMMA,dq+cuBLAS,GEMV+PDL,STREAM+PDL,GEMM+PDL,WGMMA+PDL --reps 15 \
    --tag ${TAG:-stream-tune} > "$OUT/bench.log" 2>&1; grep -E "^### M|TOTAL \| 4" "$OUT/bench.log"
[ "${SKIP_RACE:-0}" = 1 ] && exit 0
compute-sanitizer --tool racecheck python3 profiling/sanitize_stream.py > "$OUT/racecheck_noinc.txt" 2>&1
echo "racecheck (noinc arrive): $(grep -E 'RACECHECK SUMMARY|BAD:' "$OUT/racecheck_noinc.txt" | tr '\n' ' ')"
KBIT_STREAM_OPTS=-DKBIT_STREAM_SYNC_ARRIVE compute-sanitizer --tool racecheck python3 profiling/sanitize_stream.py \
    > "$OUT/racecheck_sync.txt" 2>&1
echo "racecheck (wait + plain arrive): $(grep -E 'RACECHECK SUMMARY|BAD:' "$OUT/racecheck_sync.txt" | tr '\n' ' ')"
