#!/usr/bin/env bash
# Twenty-sixth session (2026-11-26): no device time was left (the session's budget had gone to the twenty-fifth
# session's cut-off try), so this script is prepared for the next session's first call, not run.
#   OUT=/tmp/out STEP=first bash profiling/run29.sh
# One call (~8 min with a bare machine's compiles), on whichever GPU comes: the names of the tables carry it.
. profiling/run_env.sh
start_run first
# STEP=first:
#   1. sumch (run28.sh's prepared step): the dense wgmma kernel's workspace split-K sum at TOK = 64 with 8 float4 loads
#      in flight per thread instead of 4 (-DKBIT_WG_DENSE_SUM64=8; 116 registers, no spills, NVRTC 12.9 and nvcc 13).
#      Expected: the last CTA's 3.97 us after its main loop (dense down M = 64, 8 splits, wgtrace28b) -> ~3 us; down /
#      O / Q at M = 48..64 0.5-1 us faster where they split through the workspace; the rest equal.  Keep it (default
#      8 at TOK = 64 in the dense kernel only) if the k = 4 TOTAL at M = 48 and 64 moves by more than the run-to-run
#      spread (~0.3 us) and no cell is slower by more than that.
#   2. Closing tables of the twenty-fifth session's tree (git ee294b4; its kernels are this tree's): on an H200 these
#      replace the stale H200 tables (final33-m1, final41, moe-final44: older trees); on an H100 they are replicates
#      of final35-m1 / final44 / moe-final48.  Expected on the H200 (older tree's numbers): dense k = 4 M = 1 ~2.2x,
#      M = 16 / 32 / 64 / 128 ~1.2x / ~1.0x / ~0.83x / ~0.72x; MoE k = 4 64 tokens above moe-final44's 0.77x / 0.78x
#      (the cluster sum's relaxed keep-alive arrive: -0.5 us at 64 tokens on the H100).
if [ "$STEP" = first ]; then
  python3 profiling/warm_cache.py wgmma grouped gemv gemv_stream quant 2>&1 | tail -1
  for o in "" "-DKBIT_WG_DENSE_SUM64=8"; do
    KBIT_WGMMA_OPTS="$o" timeout 100 python3 profiling/bench.py --out "$W" --M 48,64 --k 4 --columns WGMMA,matmul \
      --reps 15 --tag "sumch${o:+8}" > "$W/bench_sumch${o:+8}.log" 2>&1
    echo "## KBIT_WGMMA_OPTS='$o'"; grep -E "^### M|^\| (gateup|down|Q|O|KV) \| 4|TOTAL" "$W/bench_sumch${o:+8}.log"
  done
  timeout 110 python3 profiling/bench.py --out "$W" --M 1,4 --k 2,4 --columns matmul,matmul+PDL --reps 15 \
    --tag final45-m1 > "$W/bench45m1.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench45m1.log"
  timeout 120 python3 profiling/bench.py --out "$W" --M 16,32,64,128 --k 4 \
    --columns STREAM,WGMMA,dq+cuBLAS,matmul,matmul+PDL --reps 15 --tag final45 > "$W/bench45.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench45.log"
  timeout 120 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 --experts 8,10 \
    --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag moe-final49 > "$W/bench_moe49.log" 2>&1
  grep -E "TOTAL|as moe_forward" "$W/bench_moe49.log" | head -40
fi
finish_run run29
