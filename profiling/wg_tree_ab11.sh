#!/usr/bin/env bash
# The eleventh session's wgmma A/B run (H200): wgmma + grouped wgmma tests, the per-CTA / per-iteration
# trace (wgmma_trace.py), forced TOK variants (gemm_probe.py), and the WGMMA column (with STREAM and
# dq+cuBLAS beside it) and, with MOE=1, the MoE grouped columns of the working tree against PREV_TREE
# (tree_ab.sh; default ab_prev).  Runs of the session with their settings:
#   swizzle:            CASES="d:5120,2048,512;d:5120,2048,128;d:2048,5120,128" TOK_MS= MOE=0 AB_TAG=swz
#                       AB_COLS=WGMMA,dq+cuBLAS
#   warp-specialized:   CASES as above, TOK_MS=256,512 TOK_SHAPES=gateup,down TOKS=128,192 MOE=0 AB_TAG=ws
#   split-K sum:        the defaults
#   usage (GPU machine): OUT=dir [ENV=...] bash profiling/wg_tree_ab11.sh
set -u
OUT=${OUT:-/tmp/kbit_out}; mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
python3 profiling/warm_cache.py wgmma > "$OUT/warm.log" 2>&1
timeout ${TEST_TIMEOUT:-200} python3 -m pytest -q -x tests/test_wgmma_gpu.py tests/test_grouped_gpu.py -k "wgmma" > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; tail -2 "$OUT/tests.log"
KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE CASES="${CASES:-d:5120,2048,128;d:2048,5120,128;d:2048,5120,64}" \
    timeout 120 python3 profiling/wgmma_trace.py > "$OUT/wg_trace.log" 2>&1
if [ -n "${TOK_MS-64,128,256}" ]; then
  GEMM=0 DQ=0 WG=1 KS=4 MS=${TOK_MS-64,128,256} SHAPES_=${TOK_SHAPES:-gateup,down,Q,O} WGTOKS=${TOKS:-64,128} \
      timeout 150 python3 profiling/gemm_probe.py > "$OUT/tok.log" 2>&1
  cat "$OUT/tok.log"
fi
OUT=$OUT PREV_TREE=${PREV_TREE:-ab_prev} WARM=wgmma AB_TAG=${AB_TAG:-sum} \
  AB_ARGS="--shapes gateup,down,Q,O --k 4 --M 32,64,128,256,512 --columns ${AB_COLS:-WGMMA,STREAM,dq+cuBLAS} --reps 15" \
  bash profiling/tree_ab.sh > "$OUT/ab.txt" 2>&1
cat "$OUT/ab.txt"
if [ "${MOE:-1}" = 1 ]; then
  OUT=$OUT PREV_TREE=${PREV_TREE:-ab_prev} WARM="wgmma grouped" AB_TAG=moe AB_TIMEOUT=240 \
    AB_ARGS="--shapes moe --k 4 --moe-M 16,32,64 --experts 8,10 --columns Grouped,g-WGMMA,g-MMA --reps 15" \
    bash profiling/tree_ab.sh > "$OUT/ab_moe.txt" 2>&1
  cat "$OUT/ab_moe.txt"
fi
