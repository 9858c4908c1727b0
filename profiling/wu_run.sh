#!/usr/bin/env bash
# Eighth session, third device run: does cp.async.mbarrier.arrive.noinc serialize a thread's units?
# fill_probe (units with per-unit arrives vs commit groups vs a unit per warp) and the streaming GEMV
# with a unit per producer warp (-DKBIT_STREAM_WARP_UNITS).   OUT=/tmp/out bash profiling/wu_run.sh
set -u
OUT=${OUT:-/tmp/kbit_out}
mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
NBYTES=5242880 python3 profiling/fill_probe.py > "$OUT/fill_probe2.md" 2>&1; cat "$OUT/fill_probe2.md"
SHAPES=${SHAPES:-gateup,down,O,KV} KS=4 MS=${MS:-1,16,32} \
VARIANTS="wu4:-DKBIT_STREAM_WARP_UNITS;wu8:-DKBIT_STREAM_WARP_UNITS -DKBIT_STREAM_PRODUCERS=8;wu4nn:-DKBIT_STREAM_WARP_UNITS -DKBIT_STREAM_NO_COMPUTE -DKBIT_STREAM_NO_FIXUP;nn:-DKBIT_STREAM_NO_COMPUTE -DKBIT_STREAM_NO_FIXUP" \
  python3 profiling/stream_probe.py > "$OUT/stream_wu.log" 2>&1; cat "$OUT/stream_wu.log"
