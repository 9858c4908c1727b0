#!/usr/bin/env bash
# Eleventh session: the wgmma GEMM's token tile in the 128-byte swizzle (whole-line copies).
# Correctness (wgmma + grouped wgmma tests), the per-iteration trace, and an A/B of the WGMMA
# column against the previous tree (PREV_TREE, default ab_prev).  usage: OUT=dir bash profiling/wg_swz11.sh
set -u
OUT=${OUT:-/tmp/kbit_out}; mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
python3 profiling/warm_cache.py wgmma > "$OUT/warm.log" 2>&1
timeout 240 python3 -m pytest -q -x tests/test_wgmma_gpu.py tests/test_grouped_gpu.py -k "wgmma" > "$OUT/tests.log" 2>&1
tail -3 "$OUT/tests.log"
KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE CASES="${CASES:-d:5120,2048,512;d:5120,2048,128;d:2048,5120,128}" \
    python3 profiling/wgmma_trace.py > "$OUT/wg_trace.log" 2>&1
OUT=$OUT PREV_TREE=${PREV_TREE:-ab_prev} WARM=wgmma AB_TAG=${AB_TAG:-swz} \
  AB_ARGS="${AB_ARGS:---shapes gateup,down,Q,O --k 4 --M 32,64,128,256,512 --columns WGMMA,dq+cuBLAS --reps 15}" \
  bash profiling/tree_ab.sh > "$OUT/ab.txt" 2>&1
cat "$OUT/ab.txt"
