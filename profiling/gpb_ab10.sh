#!/usr/bin/env bash
# Tenth session: several column groups per GEMV block side by side (plan gpb: one pair table and
# one staged A per block instead of per group), A/B in one run (profiling/gemv_ab.py plan columns),
# and the gpb = 1 kernel against the previous tree (the cooperative loops now use a 2-D thread index).
#   OUT=/tmp/out PREV_TREE=ab_prev bash profiling/gpb_ab10.sh
. profiling/run_env.sh
KS=${KS:-4,5} MS=${MS:-1,2,4} SHAPES=${SHAPES:-gateup,Q,down} \
AB_PLANS=${AB_PLANS:-"g3w4:gpb=3,warps=4;g2w8:gpb=2,warps=8;g2w4:gpb=2,warps=4;g4w4:gpb=4,warps=4"} \
  python3 profiling/gemv_ab.py --out "$OUT" 2>&1 | tee "$OUT/gpb_ab10.log"
if [ -n "${PREV_TREE:-}" ]; then
  AB_TAG=gpb1 AB_ARGS="--M 1,4 --k 4,5 --columns GEMV --shapes gateup,down,Q,O,KV --reps 15" \
    bash profiling/tree_ab.sh 2>&1 | tail -12
fi
