#!/usr/bin/env bash
# Ninth session: after the streaming GEMV's per-unit changes, does it beat the GEMV at M = 1..4 anywhere
# (k = 5 gate/up at M = 2..4 is the one (shape, k, M <= 4) that still loses to fp16)?  STREAM / GEMV with
# and without PDL at M = 1, 2, 4, k = 4, 5, overlaid on the dispatch sweeps (tune_dispatch.py +file).
#   OUT=/tmp/out bash profiling/lowm9_run.sh
. profiling/run_env.sh
python3 profiling/warm_cache.py gemv gemv_stream 2>&1 | tail -1
python3 profiling/bench.py --out "$OUT" --M 1,2,4 --k 4,5 --columns GEMV,STREAM,GEMV+PDL,STREAM+PDL \
    --reps 15 --tag lowm-tune > "$OUT/bench_lowm.log" 2>&1
grep -E "^### M|TOTAL|gateup \| 5" "$OUT/bench_lowm.log"
