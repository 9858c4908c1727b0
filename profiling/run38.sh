#!/usr/bin/env bash
# Thirty-first session (2026-11-27).  From the repo root:  OUT=/tmp/out STEP=ps bash profiling/run38.sh
#   (kind nvidia-h100-x1)
. profiling/run_env.sh
start_run ps
RUN=38
# STEP=ps: the decode GEMV's per-step work (issue 3: k = 2 M = 1 TOTAL needs -0.44 us of 16.08; gate/up / down at
#   70 / 73 % of SOL at k = 2, 81 / 84 % at k = 4).  At k = 2 a step's compute is the same per weight as at k = 4
#   while its bytes are half, and a second accumulator chain had bought k = 2 Q 13 % (eighteenth session): the
#   lookup -> HMUL2 -> MMA chain, not DRAM, is the longer part there.  Two hooks (kbit_gemv.cu, block_mma):
#   - ps (-DKBIT_GEMV_PS=1): the block scales after the MMA (per step fresh fp32 partial sums, 4 FFMA), no HMUL2
#     per pair (-32 of a step's ~150 instructions, and the MMA chain no longer runs across steps);
#   - q2 (-DKBIT_GEMV_Q2=1): k = 2 quad table (8-bit key of four elements, LDS.64 of two pairs, 16 copies, 32 KB):
#     half the lookups (PRMT + LEA + LDS) at k = 2;  psq2: both.
#   Registers (NVRTC, the plan's kernels): equal or fewer (k = 2 gate/up 78 -> 74 / 66 / 71).
#   Expect: k = 2 gate/up / down / Q 0.1-0.3 us each faster with psq2, k = 4 less (ps only); err column unchanged
#   in order of magnitude (the product no longer rounded to fp16: if anything smaller).
if [ "$STEP" = ps ]; then
  SHAPES=gateup,down,Q,O,KV KS=2,4 MS=1,4 AB_VARIANTS="ps:-DKBIT_GEMV_PS=1;q2:-DKBIT_GEMV_Q2=1;psq2:-DKBIT_GEMV_PS=1 -DKBIT_GEMV_Q2=1" \
    timeout 400 python3 profiling/gemv_ab.py --out "$W" > "$W/gemv_ps38.log" 2>&1
  grep -vE "^\s*$" "$W/gemv_ps38.log" | cut -c1-230 | tail -30
fi
#   Got (first run, gemv_ps38a.log): every ps column and q2 on down wrong (err 0.1-0.2): block_mma read the ring
#   slot's scale after load_step had refilled it (fixed, 2nd commit); its times not usable.  k = 2 gate/up q2 4.05 ->
#   3.85 us and psq2 3.74 (those warps have no third step, so correct there).
finish_run run38
