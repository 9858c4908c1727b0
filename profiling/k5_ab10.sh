#!/usr/bin/env bash
# Tenth session: k = 5 decode-GEMV A/B (profiling/gemv_ab.py variants, one run, cold L2, graphs):
# ring depth 4 (all of a 4-warp block's steps in flight), the 8-copy pair table (half the build),
# both, and 4-warp blocks at M = 4 (which the 8-copy table lets three of fit per SM).
#   OUT=/tmp/out bash profiling/k5_ab10.sh
. profiling/run_env.sh
KS=${KS:-5} MS=${MS:-1,2,4} SHAPES=${SHAPES:-gateup,Q,down,O,KV} \
AB_VARIANTS=${AB_VARIANTS:-"d4:+depth=4;d4e:+depth=4 +late=0;c8:-DKBIT_K5_LOG2_COPIES=3;c8d4:-DKBIT_K5_LOG2_COPIES=3 +depth=4;c8w4d4:-DKBIT_K5_LOG2_COPIES=3 +warps=4 +depth=4"} \
  python3 profiling/gemv_ab.py --out "$OUT" 2>&1 | tee "$OUT/k5_ab10.log"
