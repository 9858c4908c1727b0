#!/usr/bin/env bash
# Eighth session: the STREAM / STREAM+PDL columns again (first strip published mid-stream, batched
# split-K sums) for the dispatch tables: overlaid (+file) on the earlier sweeps by tune_dispatch.py.
#   OUT=/tmp/out bash profiling/retune8.sh
. profiling/run_env.sh
python3 profiling/bench.py --out "$OUT" --M ${MS:-8,12,16,24,32} --k 2,3,4,5 --columns STREAM,STREAM+PDL \
    --reps 15 --tag ${TAG:-stream-tune2} > "$OUT/bench.log" 2>&1
grep -E "^### M|TOTAL" "$OUT/bench.log"
