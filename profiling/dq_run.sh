#!/usr/bin/env bash
# Eighth session: the tiled dequantize kernel for dq + cuBLAS (GPU machine).
#   OUT=/tmp/out bash profiling/dq_run.sh
. profiling/run_env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python3 -m pytest -q -m gpu tests/test_gemm_gpu.py -k "dequant" > "$OUT/tests_dq.log" 2>&1; tail -3 "$OUT/tests_dq.log"
SHAPES=${SHAPES:-gateup,down,Q,O,KV} KS=${KS:-2,4,5} MS=${MS:-16,32,64,128,512} \
  python3 profiling/dq_ab.py > "$OUT/dq_ab.md" 2> "$OUT/dq_ab.err"; tail -3 "$OUT/dq_ab.err"
grep -E "TOTAL|gateup" "$OUT/dq_ab.md"
