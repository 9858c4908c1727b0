#!/usr/bin/env bash
# Tenth session: the grouped MoE GEMV with the dense kernel's block shape (kbit_gemv_grouped_sl: column groups side
# by side over one table, one step requested before the prologue barrier) against its group loop (MULTI), k = 4,
# 1..8 tokens per expert, 8 and 10 experts; "c" columns capped at 80 registers (three 256-thread blocks per SM).
#   OUT=/tmp/out bash profiling/moe_sl10.sh
. profiling/run_env.sh
C80="-DKBIT_GROUPED_SL_MAXNREG=80"
KS=${KS:-4} MS=${MS:-1,4,8} ES=${ES:-8,10} SHAPES=${SHAPES:-moe_gu,moe_gu_fused,moe_dn} MOE_MMA=0 \
MOE_VARIANTS=${MOE_VARIANTS:-"sl1w8:+gpb=1 +warps=8;sl1w8c:$C80 +gpb=1 +warps=8;sl2w8:+gpb=2 +warps=8;sl1w4:+gpb=1 +warps=4;sl3w4:+gpb=3 +warps=4;sl4w4:+gpb=4 +warps=4;sl4w4c:$C80 +gpb=4 +warps=4"} \
  python3 profiling/moe_ab.py --out "$OUT" 2>&1 | tee "$OUT/moe_sl10.log"
