#!/usr/bin/env bash
# Ninth session: the streaming GEMV's unit position stepped instead of divided (UnitPos), the
# GEMV's step count and A staging without divisions, against the previous commit (ab_prev =
# git archive d34171e kbitcupy cuda_src profiling/*.py), in one run; then the SASS counts.
#   OUT=/tmp/out bash profiling/ab9_run.sh
# Expected (ncu SASS counts of d34171e, gate/up k = 4 M = 1): the stream consumers ~343 -> ~270
# instructions per unit, the producers ~239 -> ~120; the GEMV ~893 -> ~830 per warp.
. profiling/run_env.sh
WARM="gemv gemv_stream" PREV_TREE=ab_prev AB_TAG=ab9-dense AB_TIMEOUT=240 \
  AB_ARGS="--M 1,8,16,32 --k 4,5 --columns GEMV,STREAM --reps 15" bash profiling/tree_ab.sh
WARM="gemv" PREV_TREE=ab_prev AB_TAG=ab9-moe AB_TIMEOUT=120 \
  AB_ARGS="--shapes moe --k 4 --moe-M 1,4,8 --columns g-GEMV --reps 15" bash profiling/tree_ab.sh
CELLS="STREAM,gateup,4,1 GEMV,gateup,4,1" bash profiling/ncu_src.sh > /dev/null 2>&1
for f in "$OUT"/src_*.csv; do python3 profiling/sass_budget.py "$f"; done
