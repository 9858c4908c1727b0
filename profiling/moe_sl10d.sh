#!/usr/bin/env bash
# Tenth session: the grouped slices kernel where the plan does not use it yet: 16 tokens per expert (two token
# tiles; the dispatch runs the grouped wgmma kernel there) and 1 token over 32 / 74 experts (the T = 8 layer step's
# 74 slots: 36 groups per SM, more than a 512-thread block of one-warp slices holds).
#   OUT=/tmp/out bash profiling/moe_sl10d.sh
. profiling/run_env.sh
KS=4 MS=16 ES=8,10 SHAPES=moe_gu_fused,moe_dn MOE_MMA=1 MOE_WG="wg:" \
MOE_VARIANTS="sl2w8:+gpb=2 +warps=8;sl4w4:+gpb=4 +warps=4;sl5w3:+gpb=5 +warps=3;sl8w2:+gpb=8 +warps=2;sl10w1:+gpb=10 +warps=1" \
  python3 profiling/moe_ab.py 2>&1 | tee "$OUT/moe_sl10d_m16.log" | grep -v "^TOTAL"
KS=4 MS=1 ES=32,74 SHAPES=moe_gu_fused,moe_dn MOE_MMA=0 \
MOE_VARIANTS="sl16w1:+gpb=16 +warps=1;sl8w2:+gpb=8 +warps=2;sl4w4:+gpb=4 +warps=4" \
  python3 profiling/moe_ab.py 2>&1 | tee "$OUT/moe_sl10d_e74.log" | grep -v "^TOTAL"
