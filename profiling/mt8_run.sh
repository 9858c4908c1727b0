#!/usr/bin/env bash
# Eighth session: the streaming GEMV at M = 33..64 (MT = 8): its GPU tests, then the STREAM / STREAM+PDL
# columns beside WGMMA and dq+cuBLAS at M = 40, 48, 64 (overlaid on the dispatch sweeps).
#   OUT=/tmp/out bash profiling/mt8_run.sh
. profiling/run_env.sh
python3 -m pytest -q -x -m gpu tests/test_gemv_stream_gpu.py > "$OUT/tests_stream.log" 2>&1; tail -2 "$OUT/tests_stream.log"
python3 profiling/bench.py --out "$OUT" --M ${MS:-48,64} --k 2,3,4,5 --columns STREAM,STREAM+PDL,WGMMA,dq+cuBLAS \
    --reps 15 --tag ${TAG:-stream64} > "$OUT/bench.log" 2>&1
grep -E "^### M|TOTAL|gateup|down" "$OUT/bench.log"
