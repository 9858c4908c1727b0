#!/usr/bin/env bash
# Eleventh session: the warp-specialized wgmma GEMM (producer warp + two consumer warpgroups over
# mbarriers).  Correctness (wgmma + grouped wgmma tests), the per-iteration trace, TOK 128 vs 192 at
# M = 256 / 512, and an A/B of the WGMMA column against the tree in PREV_TREE (default ab_prev).
#   usage (GPU machine): OUT=dir bash profiling/wg_ws11.sh
set -u
OUT=${OUT:-/tmp/kbit_out}; mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
python3 profiling/warm_cache.py wgmma > "$OUT/warm.log" 2>&1
timeout ${TEST_TIMEOUT:-200} python3 -m pytest -q -x tests/test_wgmma_gpu.py tests/test_grouped_gpu.py -k "wgmma" > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; tail -3 "$OUT/tests.log"
KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE CASES="${CASES:-d:5120,2048,512;d:5120,2048,128;d:2048,5120,128}" \
    timeout 120 python3 profiling/wgmma_trace.py > "$OUT/wg_trace.log" 2>&1
GEMM=0 DQ=0 WG=1 KS=4 MS=256,512 SHAPES_=gateup,down WGTOKS=128,192 timeout 120 python3 profiling/gemm_probe.py > "$OUT/tok.log" 2>&1
cat "$OUT/tok.log"
OUT=$OUT PREV_TREE=${PREV_TREE:-ab_prev} WARM=wgmma AB_TAG=${AB_TAG:-ws} \
  AB_ARGS="${AB_ARGS:---shapes gateup,down,Q,O --k 4 --M 32,64,128,256,512 --columns WGMMA,STREAM,dq+cuBLAS --reps 15}" \
  bash profiling/tree_ab.sh > "$OUT/ab.txt" 2>&1
cat "$OUT/ab.txt"
