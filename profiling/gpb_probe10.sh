#!/usr/bin/env bash
# Tenth session, after the k = 5 slices (plan gpb): what is left of k = 5 gate/up's time (stage removal with the
# new plan), and variants on top of it: the 8-copy pair table, 5 warps per group, the ring filled early; the
# previous plan (one group of 4 warps per block) for reference.
#   OUT=/tmp/out bash profiling/gpb_probe10.sh
. profiling/run_env.sh
python3 profiling/gemv_stages.py --k 5 --shapes gateup,Q 2>&1 | tee "$OUT/stages_gpb.log"
KS=5 MS=1,2,4 SHAPES=gateup,Q AB_VARIANTS="c8:-DKBIT_K5_LOG2_COPIES=3" \
AB_PLANS="g1w4:gpb=1,warps=4;g3w5:gpb=3,warps=5;g3w4e:gpb=3,warps=4,late=0;g2w8e:gpb=2,warps=8,late=0" \
  python3 profiling/gemv_ab.py --out "$OUT" 2>&1 | tee "$OUT/gpb_probe10.log"
