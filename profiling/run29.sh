#!/usr/bin/env bash
# Twenty-sixth session (2026-11-26): no device time was left (the session's budget had gone to the twenty-fifth
# session's cut-off try), so this script is prepared for the next session, not run.
#   OUT=/tmp/out STEP=exp bash profiling/run29.sh      (then STEP=exp2, exp3 if TMA won, then STEP=final)
. profiling/run_env.sh
start_run exp
# wg_arm ARM MS PASS: the dense wgmma column (k = 4, the TOTAL's shapes) of one experiment arm: base, tma (KBIT_WG_TMA=1),
# tmaw (+ -DKBIT_WG_TMA_WEIGHTS), n128 (-DKBIT_WG_N128), tmaw_n128 (all three); tables tagged tma29-ARM-PASS.
wg_arm() {
  local t=0 o=""
  case $1 in tma) t=1 ;; tmaw) t=1; o=-DKBIT_WG_TMA_WEIGHTS ;; n128) o=-DKBIT_WG_N128 ;;
    tmaw_n128) t=1; o="-DKBIT_WG_TMA_WEIGHTS -DKBIT_WG_N128" ;; esac
  KBIT_WG_TMA=$t KBIT_WGMMA_OPTS="$o" timeout 55 python3 profiling/bench.py --out "$W" --M "$2" --k 4 --columns WGMMA \
    --shapes gateup,down,Q,O,KV --reps 15 --tag "tma29-$1-$3" > "$W/bench_tma29_$1_$3.log" 2>&1
  echo "## $1 pass $3"; grep -E "^### M|^\| (gateup|down|Q|O|KV) \| 4|TOTAL" "$W/bench_tma29_$1_$3.log"
}
# STEP=exp (first call, ~8 min on a bare machine):
#   1. The token tiles by TMA (kbit_wgmma_tma, env KBIT_WG_TMA=1; written in the twenty-sixth session without a GPU:
#      compiled, not yet run), and on top of it the weight tile and absmax by two 1-D bulk copies on the same
#      mbarrier (-DKBIT_WG_TMA_WEIGHTS: no cp.async left in the loop).  GPU tests of both first (bit-exact against
#      the cp.async kernel at the same plan, every TOK, k = 2..5, PDL modes, graph capture); then the dense k = 4
#      A/B at M = 64 / 128, three arms, two passes.
#      Why: the twenty-first session's per-SASS profile of the K-tile loop at M = 128 (one CTA per SM, 8 warps): the
#      copy issue ~20 % of the warp samples, ~195 of ~730 ns a tile, most of it the 4 token LDGSTS per thread (the
#      weights and absmax 1-2).  nvcc 13 SASS of kbit_wgmma<4, half, 128, CBD>, the two-tile loop body: 601
#      instructions (12 LDGSTS, the cp.async wait's switch on the runtime stage count: 16 DEPBAR), TMA 555 (4
#      LDGSTS, 2 UTMALDG by one thread, 4 mbarrier try_waits), TMA + weights 495 (no LDGSTS, 2 DEPBAR); 146 / 142 /
#      138 registers.  Expected, two models: by instruction count the M = 128 loop 8-18 % shorter; by the timeline
#      (wgtrace24: a tile's ~730 ns = wgmma issue ~200 + copy issue ~195 + dequantize ~175 + cp.async wait ~75, in
#      series per warp, the MMA's own ~270 ns hidden under them) tmaw removes most of the copy issue and the wait,
#      ~730 -> ~500 ns (-30 %), as long as the dequantize alone still covers the MMA.  gate/up's 7.5 us loop of 15.4
#      -> 5.3..6.9; the k = 4 TOTAL at M = 128 63.5 -> ~55..60 us (0.77x -> 0.81..0.88x); M = 64 less.  The fifth
#      session's weights-by-bulk (then without TMA tokens) was 4-10 % slower: the third arm says whether that holds.
#      Keep the fastest arm (on by default, then the grouped kernel the same way) if every M = 64 / 128 cell is
#      faster or equal in both passes; if only M = 128 gains, from TOK >= 128.
#   2. sumch (run28.sh's prepared step; in exp2): the dense wgmma kernel's workspace split-K sum at TOK = 64 with 8 float4
#      loads in flight per thread instead of 4 (-DKBIT_WG_DENSE_SUM64=8; 116 registers, no spills).  Expected: the
#      last CTA's 3.97 us after its main loop (dense down M = 64, 8 splits, wgtrace28b) -> ~3 us; down / O / Q at
#      M = 48..64 0.5-1 us faster where they split through the workspace; the rest equal.  Keep it if the k = 4
#      TOTAL at M = 48 and 64 moves by more than the run-to-run spread (~0.3 us) and no cell is slower by more.
if [ "$STEP" = exp ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_tma29.log" 100 tests/test_wgmma_gpu.py -k "tma"
  (export KBIT_WGMMA_OPTS=-DKBIT_WG_TMA_WEIGHTS; gpu_tests "$W/gpu_tests_tmaw29.log" 100 tests/test_wgmma_gpu.py -k "tma")
  # the session's host-side fix: grouped_matmul's new output zero in rows no slot covers; moe_forward's own buffers
  gpu_tests "$W/gpu_tests_host29.log" 120 tests/test_grouped_gpu.py tests/test_layers_gpu.py -k "new_output or moe_forward"
  for pass in 1 2; do
    for arm in base tma tmaw; do
      wg_arm $arm 64,128 $pass
    done
  done
fi
# STEP=exp2 (second call): 3. one m64n128 wgmma per k16 at TOK = 128 instead of two m64n64 (hook -DKBIT_WG_N128; the
#   same accumulator layout).  Why: the twenty-first session's timeline put the wgmma issue at ~200 of ~730 ns a K
#   tile at TOK = 128; the loop body 601 -> 584 instructions, HGMMA 16 -> 8 per two tiles (with TMA + weights: 475).
#   Expected: if the ~200 ns "wgmma issue" of the timeline is per HGMMA instruction (each reads its 4 A registers
#   from 128 threads), n128 halves it: base -100 ns a tile (~-14 %), and with tmaw (no copy issue, no cp.async wait)
#   a tile ~730 -> ~360 ns, under which the MMA's own ~280 ns still fits; if the issue waits on the tensor core
#   instead, n128 changes nothing.  GPU tests with the hook (every TOK, both sums, permutation rows), then M = 128 A/B.
#   Then sumch (item 2 above).
if [ "$STEP" = exp2 ]; then
  (export KBIT_WGMMA_OPTS=-DKBIT_WG_N128
   gpu_tests "$W/gpu_tests_n128_29.log" 150 tests/test_wgmma_gpu.py -k "all_k_gateup or permutation or cluster_sum or tma")
  for pass in 1 2; do
    for arm in base n128 tmaw_n128; do
      wg_arm $arm 128 $pass
    done
  done
  for o in "" "-DKBIT_WG_DENSE_SUM64=8"; do
    KBIT_WGMMA_OPTS="$o" timeout 60 python3 profiling/bench.py --out "$W" --M 48,64 --k 4 --columns WGMMA \
      --shapes gateup,down,Q,O,KV --reps 15 --tag "sumch${o:+8}" > "$W/bench_sumch${o:+8}.log" 2>&1
    echo "## KBIT_WGMMA_OPTS='$o'"; grep -E "^### M|^\| (gateup|down|Q|O|KV) \| 4|TOTAL" "$W/bench_sumch${o:+8}.log"
  done
  # memcheck of the TMA kernel with the weights by bulk copies too (tokens and weights through the mbarriers)
  (export KBIT_WGMMA_OPTS=-DKBIT_WG_TMA_WEIGHTS; sanitize memcheck "$W/memcheck_tmaw29.log" 200 profiling/sanitize_tma.py)
fi
# STEP=exp3 (third call, only worth it if TMA won in exp): 4. the grouped wgmma kernel's token tiles by TMA (hook
#   -DKBIT_WG_GROUPED_TMA: a tensor map of the whole A_sorted first in the kernel's parameters; a tile's rows past its
#   expert's read the next expert's tokens, whose columns of C are never stored; a CTA running extra token tiles
#   invalidates and re-initializes the stage mbarriers).  nvcc 13: TOK = 64 128 -> 110 registers (two CTAs per SM
#   either way), TOK = 128 184 -> 166.  The grouped GPU tests under the hook (against the reference), then the MoE
#   A/B at 16..64 tokens, two passes.  Expected: a K tile at TOK = 64 ~0.63 us (wgtrace28), of which the copy issue
#   ~0.11: 64 tokens 8 experts gate/up fused + down 23.5 -> ~22 us if it goes.
# Twenty-seventh session: exp found the tokens by TMA alone slower and tokens + weights by bulk copies faster, so
#   exp3 runs the grouped hook with the weights hook (and n128) too: GOPTS.
GOPTS=${GOPTS:-"-DKBIT_WG_GROUPED_TMA -DKBIT_WG_TMA_WEIGHTS -DKBIT_WG_N128"}
if [ "$STEP" = exp3 ]; then
  (export KBIT_WGMMA_OPTS="$GOPTS"
   python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
   gpu_tests "$W/gpu_tests_gtma29.log" 300 tests/test_grouped_gpu.py -k "wgmma"
   sanitize memcheck "$W/memcheck_gtma29.log" 150 profiling/sanitize_tma.py)
  for pass in 1 2; do
    for nm in off on; do
      o=$([ $nm = on ] && echo "$GOPTS" || true)
      KBIT_WGMMA_OPTS="$o" timeout 60 python3 profiling/bench.py --out "$W" --shapes moe_gu_fused,moe_dn --k 4 \
        --moe-M 16,32,64 --experts 8,10 --columns g-WGMMA --reps 15 --tag "gtma29-$nm-$pass" \
        > "$W/bench_gtma29_${nm}_$pass.log" 2>&1
      echo "## grouped TMA $nm pass $pass"; grep -E "TOTAL" "$W/bench_gtma29_${nm}_$pass.log" | head -12
    done
  done
fi
# STEP=final (second call, ~6 min): closing tables of the tree (after exp's outcome is applied): M = 1 / 4 at k = 2 / 4,
#   M = 16..128 at k = 4, MoE k = 4 at 1..64 tokens, on whichever GPU comes.  On an H200 they replace the stale H200
#   tables (final33-m1, final41, moe-final44: older trees); on an H100 they follow final35-m1 / final44 / moe-final48.
#   A call that names nvidia-h200 gets an H100 when one is held: give it back first.
if [ "$STEP" = final ]; then
  python3 profiling/warm_cache.py wgmma grouped gemv gemv_stream quant 2>&1 | tail -1
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
