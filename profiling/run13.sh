#!/usr/bin/env bash
# Thirteenth session's device run: the decode GEMV with the default codebook compiled in (template CBD).
#   STEP=final: the whole GPU suite, compute-sanitizer memcheck, gemv_ab's same-run A/B of the
#     compiled-in levels ('new') against the instantiation that loads the codebook ('cbload':
#     weights not flagged default_codebook), with and without PDL, then the dense table at
#     M = 1, 2, 4 (TAG, default final19c).  ~5.5 min.
#   STEP=quick: the same without the whole suite (the GEMV and launch tests only).
#   OUT=/tmp/out STEP=final bash profiling/run13.sh
# The session's probe steps (ab, bench, cbcheck, early, repl, imm, async, final) used hooks that are
# gone; each ran at the commit named in profiling/results/nvidia-h100-80gb-hbm3_2026-11-25_codebook_ab13.log.
. profiling/run_env.sh
start_run final
if [ "$STEP" = final ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests.log" 340 tests/
  memcheck "$W/memcheck.txt"
else
  python3 profiling/warm_cache.py gemv gemv_stream 2>&1 | tail -1
  gpu_tests "$W/gpu_tests.log" 150 tests/test_gemv_gpu.py tests/test_launch_gpu.py
fi
AB_CBLOAD=1 KS=2,3,4,5 MS=1,2,4 timeout 90 python3 profiling/gemv_ab.py > "$W/ab.log" 2>&1
grep -E "^TOTAL" "$W/ab.log"
KBITCUPY_PDL=1 AB_CBLOAD=1 KS=4,5 MS=1 timeout 40 python3 profiling/gemv_ab.py > "$W/ab_pdl.log" 2>&1
grep -E "^TOTAL" "$W/ab_pdl.log"
timeout 90 python3 profiling/bench.py --out "$W" --M 1,2,4 --k 2,3,4,5 --columns GEMV,STREAM,matmul,matmul+PDL \
    --reps 15 --tag ${TAG:-final19c} > "$W/bench.log" 2>&1
grep -E "^### M|TOTAL" "$W/bench.log"
tar -czf "$OUT/run13_$STEP.tgz" -C "$W" . && rm -rf "$W"
