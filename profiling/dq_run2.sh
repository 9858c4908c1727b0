#!/usr/bin/env bash
# Eighth session, second device run: the stage-fill probe and the dq+cuBLAS sweep for the dispatch tables.
#   OUT=/tmp/out bash profiling/dq_run2.sh
. profiling/run_env.sh
python3 profiling/fill_probe.py > "$OUT/fill_probe.md" 2>&1; cat "$OUT/fill_probe.md"
python3 profiling/bench.py --out "$OUT" --M 16,32,64,128,256,512 --k 2,3,4,5 --columns dq+cuBLAS \
    --reps 15 --tag ${TAG:-dq-tune} > "$OUT/bench.log" 2>&1
grep -E "^### M|TOTAL" "$OUT/bench.log"
