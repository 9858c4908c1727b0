#!/usr/bin/env bash
# A/B of the whole package in one run: the working tree ("new") against an older tree
# unpacked at $PREV_TREE (git archive <commit> kbitcupy cuda_src profiling | tar -x -C DIR;
# pass DIR to the device tool's carry), the same bench.py arguments ($AB_ARGS) for both.
#   usage: OUT=/tmp/out PREV_TREE=ab_prev AB_ARGS="--M 8,16,32 --k 4 --columns GEMM" bash profiling/tree_ab.sh
# AB_TAG (default ab) names the outputs: $OUT/<tag>_new.log, bench tables tagged <tag>-new / <tag>-prev.
. profiling/run_env.sh
TAG=${AB_TAG:-ab}
PREV=$(cd "${PREV_TREE:?set PREV_TREE}" && pwd)
tree_bench "$(pwd)" new "$OUT" "$TAG" ${AB_ARGS:-}
tree_bench "$PREV" prev "$OUT" "$TAG" ${AB_ARGS:-}
for v in new prev; do echo "== $v"; grep "^| TOTAL" "$OUT/${TAG}_$v.log"; done
