#!/usr/bin/env bash
# Ninth session: the STREAM / STREAM+PDL columns after the streaming GEMV's per-unit changes (UnitPos,
# hoisted lane offsets, scale table), for the dispatch tables (overlaid with tune_dispatch.py +file on
# the earlier sweeps).  Two benches, so that the first one's files survive if the second runs out of time.
#   OUT=/tmp/out bash profiling/retune9.sh
. profiling/run_env.sh
python3 profiling/warm_cache.py gemv_stream 2>&1 | tail -1
python3 profiling/bench.py --out "$OUT" --M 8,12,16,24,32 --k 2,3,4,5 --columns STREAM,STREAM+PDL \
    --reps 15 --tag stream-tune3 > "$OUT/bench_tune3.log" 2>&1
grep -E "^### M|TOTAL" "$OUT/bench_tune3.log"
python3 profiling/bench.py --out "$OUT" --M 48,64 --k 2,3,4,5 --columns STREAM,STREAM+PDL \
    --reps 15 --tag stream-tune3b > "$OUT/bench_tune3b.log" 2>&1
grep -E "^### M|TOTAL" "$OUT/bench_tune3b.log"
