#!/usr/bin/env bash
# Eleventh session, first device run: where a main-loop iteration of the wgmma GEMM spends its
# time (per-iteration phase stamps, profiling/wgmma_trace.py) at M = 32..512, gate/up k = 4,
# and an ncu pass of the M = 512 launch.  usage (GPU machine): OUT=dir bash profiling/wg_trace11.sh
set -u
OUT=${OUT:-/tmp/kbit_out}; mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt"
KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE CASES="d:5120,2048,512;d:5120,2048,128;d:5120,2048,64;d:5120,2048,32;d:2048,5120,128" \
    python3 profiling/wgmma_trace.py > "$OUT/wg_trace.log" 2>&1
if [ "${NCU:-1}" = 1 ]; then
  OUT=$OUT ONE="gateup,4,512," ONE_WG=1 KREGEX=kbit_wgmma bash profiling/ncu_gemm.sh > "$OUT/ncu_summary.txt" 2>&1
fi
