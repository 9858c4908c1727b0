#!/usr/bin/env bash
# Eleventh session: the wgmma split-K sum with 8-16 loads in flight (TOK >= 128), on top of the
# 128-byte swizzle.  Tests, trace (M = 128), TOK / split variants at M = 64..256, and A/B of the
# dense WGMMA column and the MoE grouped columns against PREV_TREE (default ab_prev = before the swizzle).
#   usage (GPU machine): OUT=dir bash profiling/wg_sum11.sh
set -u
OUT=${OUT:-/tmp/kbit_out}; mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
python3 profiling/warm_cache.py wgmma > "$OUT/warm.log" 2>&1
timeout ${TEST_TIMEOUT:-200} python3 -m pytest -q -x tests/test_wgmma_gpu.py tests/test_grouped_gpu.py -k "wgmma" > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; tail -2 "$OUT/tests.log"
KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE CASES="${CASES:-d:5120,2048,128;d:2048,5120,128;d:2048,5120,64}" \
    timeout 120 python3 profiling/wgmma_trace.py > "$OUT/wg_trace.log" 2>&1
GEMM=0 DQ=0 WG=1 KS=4 MS=64,128,256 SHAPES_=gateup,down,Q,O WGTOKS=64,128 timeout 150 python3 profiling/gemm_probe.py > "$OUT/tok.log" 2>&1
cat "$OUT/tok.log"
OUT=$OUT PREV_TREE=${PREV_TREE:-ab_prev} WARM=wgmma AB_TAG=sum \
  AB_ARGS="--shapes gateup,down,Q,O --k 4 --M 32,64,128,256,512 --columns WGMMA,STREAM,dq+cuBLAS --reps 15" \
  bash profiling/tree_ab.sh > "$OUT/ab.txt" 2>&1
cat "$OUT/ab.txt"
OUT=$OUT PREV_TREE=${PREV_TREE:-ab_prev} WARM="wgmma grouped" AB_TAG=moe AB_TIMEOUT=240 \
  AB_ARGS="--shapes moe --k 4 --moe-M 16,32,64 --experts 8,10 --columns Grouped,g-WGMMA,g-MMA --reps 15" \
  bash profiling/tree_ab.sh > "$OUT/ab_moe.txt" 2>&1
cat "$OUT/ab_moe.txt"
