#!/usr/bin/env bash
# A/B of the whole package in one run: the working tree ("new") against an older tree
# unpacked at $PREV_TREE (git archive <commit> kbitcupy cuda_src profiling | tar -x -C DIR;
# pass DIR to the device tool's carry), the same bench.py arguments ($AB_ARGS) for both.
#   usage: OUT=/tmp/out PREV_TREE=ab_prev AB_ARGS="--M 8,16,32 --k 4 --columns GEMM" bash profiling/tree_ab.sh
# AB_TAG (default ab) names the outputs: $OUT/<tag>_new.log, bench tables tagged <tag>-new / <tag>-prev.
set -u
OUT=${OUT:-/tmp/kbit_out}; mkdir -p "$OUT"
TAG=${AB_TAG:-ab}
ROOT=$(pwd); PREV=$(cd "${PREV_TREE:?set PREV_TREE}" && pwd)
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
for v in new prev; do
  d=$ROOT; [ $v = prev ] && d=$PREV
  (cd $d && export PYTHONPATH=$d KBITCUPY_CACHE_DIR=/tmp/kbit_cache_$v
   python3 profiling/warm_cache.py ${WARM:-} 2>&1 | tail -1
   timeout ${AB_TIMEOUT:-200} python3 profiling/bench.py ${AB_ARGS:-} --out "$OUT" --tag "$TAG-$v" > "$OUT/${TAG}_$v.log" 2>&1)
done
for v in new prev; do echo "== $v"; grep "^| TOTAL" "$OUT/${TAG}_$v.log"; done
