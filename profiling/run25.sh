#!/usr/bin/env bash
# Twenty-second session (2026-11-26): the streaming GEMV with the default codebook compiled in (issue 4, M = 16..64).
#   STEP=scbd: the streaming-GEMV GPU tests (a CBD-vs-loaded bit-exact test among them), then profiling/bench.py's
#   STREAM and matmul columns with KBIT_STREAM_CBD=0 / 1 / 0 (separate processes; k = 2 / 4, M = 16..64, dense
#   shapes).  Expected (the wgmma kernel's CBD: -1.5..-5 %, all from its tables built before the PDL wait): the
#   consumers' codebook load (~0.6-1 us of L2 / DRAM latency) and table build leave the path after the wait, so
#   STREAM -0.3..-0.5 us per call where its prologue is exposed (M = 16: gate/up 7.6 us -> ~7.2).
#   OUT=/tmp/out STEP=scbd bash profiling/run25.sh
. profiling/run_env.sh
start_run scbd
if [ "$STEP" = scbd ]; then
  python3 profiling/warm_cache.py gemv_stream 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_scbd.log" 300 tests/test_gemv_stream_gpu.py
  grep -E "FAIL|Error|assert" "$W/gpu_tests_scbd.log" | head -20
  for v in 0 1 0b 1b; do
    KBIT_STREAM_CBD=${v%b} timeout 120 python3 profiling/bench.py --out "$W" --M ${MS:-16,32,64} --k ${KS:-2,4} \
      --columns STREAM,matmul --reps 15 --tag "scbd$v" > "$W/bench_scbd$v.log" 2>&1
    echo "## KBIT_STREAM_CBD=$v"; grep -E "^### M|TOTAL" "$W/bench_scbd$v.log"
  done
fi
finish_run run25
