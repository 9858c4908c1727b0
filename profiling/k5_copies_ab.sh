#!/usr/bin/env bash
# A/B of the k = 5 pair-table copies (KBIT_K5_LOG2_COPIES: 4 = 16 copies, 64 KB, the default;
# 3 = 8 copies, 32 KB) on the decode GEMV, k = 5, M = 1, 2, 4, in one run (cold L2, graphs).
#   OUT=/tmp/out bash profiling/k5_copies_ab.sh
set -u
OUT=${OUT:-/tmp/kbit_out}
mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
for c in 4 3; do
  KBIT_K5_LOG2_COPIES=$c python3 profiling/bench.py --out "$OUT" --shapes gateup,down,Q,O,KV,lin_key,lin_value --k 5 \
      --M ${MS:-1,2,4} --columns GEMV,GEMV+PDL --reps 15 --tag k5-log2copies$c > "$OUT/k5_$c.log" 2>&1
  echo "KBIT_K5_LOG2_COPIES=$c"; grep -E "^### M|^\| (gateup|TOTAL)" "$OUT/k5_$c.log"
done
