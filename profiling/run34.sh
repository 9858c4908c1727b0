#!/usr/bin/env bash
# Prepared in the twenty-eighth session (2026-11-27, its device time spent) for the next one.  From the repo root:
#   OUT=/tmp/out STEP=h100 bash profiling/run34.sh      (kind nvidia-h100-x1)
#   OUT=/tmp/out STEP=k23 bash profiling/run34.sh       (either GPU)
. profiling/run_env.sh
start_run h100
RUN=34
# STEP=h100: the twenty-eighth session's one kept change, the k = 4 pair table at 64 copies for the dense wgmma
#   kernels at TOK >= 128 (default since 723999c), measured on the H200 only (TOTAL M = 128 / 256 -1.4 / -2.7 %).
#   Here on the H100 against -DKBIT_WG_K4_ROW256=0 (the 32-copy table), M = 64..512, two alternations.  Expected:
#   the same -1..-3 % at M >= 128, M = 64 equal.  Then the dense closing table (dense_closing) with the tree's
#   dispatch tables, for issue 4's M = 128 number.
if [ "$STEP" = h100 ]; then
  MS=64,128,256,512 ab_passes row256 "" -DKBIT_WG_K4_ROW256=0
  dense_closing final51 300
fi
# STEP=k23: the same 256-byte rows for k = 2 / 3 at every TOK (-DKBIT_WG_K23_ROW256=1: 4 / 16 KB tables, so no stage
#   or CTA is lost; SASS of tma_cbd k = 3 TOK = 64: PRMT + LDS [R + UR] per lookup, IMAD 492 -> 479).  Expected:
#   -1..-3 % wherever the wgmma kernel runs at k = 2 / 3 (M = 16..256), if the K tile follows the dequantize's
#   instruction count as it did at k = 4.  Tests first (every wgmma test with the hook).
if [ "$STEP" = k23 ]; then
  hook_tests k23 -DKBIT_WG_K23_ROW256=1 240
  KS=2,3 ab_passes k23 -DKBIT_WG_K23_ROW256=1
fi
finish_run run34
