#!/usr/bin/env bash
# Twentieth session (2026-11-25): the grouped GEMV's safe early mode (pdl 3, KBIT_GROUPED_SAFE_EARLY).
#   STEP=stable: with ids_stable (moe_forward's down; the bench's opt-in Grouped:stable) in the default safe
#   PDL, the grouped GEMV reads the ids and L2-prefetches its first weights before its wait, as the dense
#   GEMV's safe mode does.  The PDL / grouped GPU tests (with the safe-mode late-writer test of the bank), then
#   the A/B new (ids not stable: wait first) vs st (+stable=1) vs stpf (+ all of a warp's steps prefetched), and
#   the dense GEMV with all steps prefetched (pf8).  Expected: 8 experts 1 token k = 4 moe_dn 4.62 -> ~4.2 us,
#   moe_gu_fused 6.97 -> ~6.5 (full PDL: 4.00 / 6.03); pf8: O / linear value / down (S > D) -0.1 us or nothing.
#   OUT=/tmp/out STEP=stable bash profiling/run23.sh
. profiling/run_env.sh
start_run stable
# closing_tables N: the M = 1 / 4 dense table (k = 2..5, default / plain / full PDL) tagged finalN-m1 and the MoE
# table (1..64 tokens, Grouped:stable beside, its "as moe_forward" TOTAL) tagged moe-finalN; prints their TOTALs.
closing_tables() {
  timeout 150 python3 profiling/bench.py --out "$W" --M 1,4 --k 2,3,4,5 --columns matmul,matmul:plain,matmul+PDL \
      --reps 15 --tag "final$1-m1" > "$W/bench_m1.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_m1.log"
  timeout 150 python3 profiling/bench.py --out "$W" --shapes moe --k 2,4 --moe-M 1,2,4,8,16,32,64 \
      --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag "moe-final$1" > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | head -8; grep -E "as moe_forward" "$W/bench_moe.log" | head -8
}
if [ "$STEP" = stable ]; then
  python3 profiling/warm_cache.py gemv grouped 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_stable.log" 240 tests/test_grouped_gpu.py tests/test_pdl_gpu.py -k "grouped or late_writer or moe"
  MOE_VARIANTS="st:+stable=1;stpf:+stable=1 -DKBIT_EXPERIMENT_PF_STEPS=8" KS=2,4,5 MS=1,2,4,8 MOE_MMA=0 \
      timeout 200 python3 profiling/moe_ab.py --out "$W" > "$W/stable23.log" 2>&1
  grep -vE "^\s*$" "$W/stable23.log" | tail -52
  AB_VARIANTS="pf8:-DKBIT_EXPERIMENT_PF_STEPS=8" KS=2,4 MS=1,4 SHAPES=gateup,down,Q,O,KV,lin_value \
      timeout 150 python3 profiling/gemv_ab.py --out "$W" > "$W/pf23.log" 2>&1
  grep -v "^#" "$W/pf23.log" | tail -26
fi
# STEP=stable2 (H100: name nvidia-h100-x1): the grouped / PDL GPU tests, the MoE table with the opt-in
#   Grouped:stable column (1..64 tokens; its "as moe_forward" TOTAL), the layer step, and the prefetch depth
#   the other way: one step (pf1) in the dense GEMV and (st1) the grouped one.  Expected: H100 8 experts
#   1 token k = 4 as moe_forward ~11.0 us (gate/up 6.97 + down ~4.1); pf1: if the D = 2 prefetch delays the
#   previous kernel's own loads, O / down / Q -0.05..-0.1 us, else slower.
if [ "$STEP" = stable2 ]; then
  python3 profiling/warm_cache.py gemv grouped wgmma gemm quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_stable2.log" 200 tests/test_pdl_gpu.py -k "grouped or late_writer or moe"
  timeout 150 python3 profiling/bench.py --out "$W" --shapes moe --k 2,4 --moe-M 1,2,4,8,16,32,64 \
      --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag moe-stable23 > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | head -8; grep -E "as moe_forward" "$W/bench_moe.log" | head -8
  MOE_VARIANTS="st:+stable=1;st1:+stable=1 -DKBIT_EXPERIMENT_PF_STEPS=1" KS=4 MS=1,4 MOE_MMA=0 \
      timeout 120 python3 profiling/moe_ab.py --out "$W" > "$W/stable23b.log" 2>&1
  grep "^TOTAL" "$W/stable23b.log"
  AB_VARIANTS="pf1:-DKBIT_EXPERIMENT_PF_STEPS=1" KS=2,4 MS=1 SHAPES=gateup,down,Q,O,KV,lin_value \
      timeout 120 python3 profiling/gemv_ab.py --out "$W" > "$W/pf23b.log" 2>&1
  grep -v "^#" "$W/pf23b.log" | tail -14
  timeout 120 python3 profiling/bench.py --out "$W" --shapes none --moe-layer --k 4 --reps 15 --tag layer23 \
      > "$W/layer.log" 2>&1
  grep -E "^\| (1|8|32) \| 4" "$W/layer.log"
fi
# STEP=pf2 (H100): the safe-mode prefetch depth rule (gemv.safe_prefetch_steps: one ring step at M = 1 except
#   on gate/up-wide shapes; the grouped stable mode one step): GEMV / PDL GPU tests, then the A/B of the rule
#   (new) against the whole ring (pfD) and one step (pf1) everywhere, k = 2..5, M = 1 / 2, twice, the closing
#   M = 1 / 4 table and the MoE table with Grouped:stable.  Expected: k = 4 M = 1 TOTAL 19.09 -> ~18.7 us (Q, O,
#   linear value -0.15..-0.24, down -0.08), 8 experts 1 token as moe_forward ~11.1 us.
if [ "$STEP" = pf2 ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm grouped quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_pf2.log" 240 tests/test_gemv_gpu.py tests/test_pdl_gpu.py
  for r in a b; do
    AB_PLANS="pfD:pf=2;pf1:pf=1" KS=2,3,4,5 MS=1,2 SHAPES=gateup,down,Q,O,KV,lin_key,lin_value \
        timeout 150 python3 profiling/gemv_ab.py --out "$W" > "$W/pf23d$r.log" 2>&1
    grep "^TOTAL" "$W/pf23d$r.log"
  done
  closing_tables 32
fi
# STEP=sweep (H100): the block plan again under the new prefetch rule, M = 1, k = 2 / 4, gate/up, down, Q, O:
#   c8, late, dual, warps and pf overrides (a column per override, one A/B run), then a replicate of the closing
#   M = 1 table (final32b-m1).  Expected: the 85 % of SOL misses (k = 4 gate/up 4.63 us -> 4.38 needed, down 4.51
#   -> 4.40) and k = 2's 3x (16.33 -> 15.65 needed) move only where an override wins by > 0.08 us (the noise).
if [ "$STEP" = sweep ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm 2>&1 | tail -1
  P="pfD:pf=2;c8:c8=1;c8pfD:c8=1,pf=2;n8:c8=0;n8pfD:c8=0,pf=2;l0:late=0;l1:late=1;d0:dual=0;d1:dual=1"
  P="$P;w4:warps=4;w8:warps=8;w16:warps=16;c8w8:c8=1,warps=8;c8w4:c8=1,warps=4"
  AB_PLANS="$P" KS=2,4 MS=1 SHAPES=gateup,down,Q,O timeout 300 python3 profiling/gemv_ab.py --out "$W" \
      > "$W/sweep23.log" 2>&1
  grep -v "^#" "$W/sweep23.log" | tail -12
  timeout 120 python3 profiling/bench.py --out "$W" --M 1 --k 2,4 --columns matmul,matmul+PDL \
      --reps 15 --tag final32b-m1 > "$W/bench_m1.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_m1.log"
fi
# STEP=postpf (H100): L2 prefetches, right after the wait, of the steps not prefetched before it
#   (-DKBIT_EXPERIMENT_POST_PF): dense k = 2 / 4, M = 1 / 4 (pp: with the rule; pp1: one step before the wait
#   everywhere; ctl: the same source compiled as the variants are, no flag), and the grouped stable mode.
#   Expected: down (S = 3) and the M = 4 shapes (S > D) -0.05..-0.15 us, gate/up pp1 between pf1 and pfD.
if [ "$STEP" = postpf ]; then
  python3 profiling/warm_cache.py gemv grouped 2>&1 | tail -1
  AB_VARIANTS="ctl:-DKBIT_AB_CONTROL=1;pp:-DKBIT_EXPERIMENT_POST_PF;pp1:-DKBIT_EXPERIMENT_POST_PF +pf=1" \
      AB_PLANS="pfD:pf=2" KS=2,4 MS=1,4 SHAPES=gateup,down,Q,O,KV,lin_value timeout 200 python3 profiling/gemv_ab.py \
      --out "$W" > "$W/postpf23.log" 2>&1
  grep -v "^#" "$W/postpf23.log" | tail -30
  MOE_VARIANTS="st:+stable=1;stpp:+stable=1 -DKBIT_EXPERIMENT_POST_PF" KS=2,4 MS=1,4 MOE_MMA=0 \
      timeout 150 python3 profiling/moe_ab.py --out "$W" > "$W/postpf23moe.log" 2>&1
  grep "^TOTAL" "$W/postpf23moe.log"
fi
# STEP=verify (H100): the GPU tests of every family the session touched (GEMV, grouped, PDL, layers, launch,
#   checks) and compute-sanitizer memcheck / racecheck over sanitize_driver.py (now with M = 1's one-step
#   prefetch and the grouped GEMV's safe early mode, a 0-row slot among them).
if [ "$STEP" = verify ]; then
  python3 profiling/warm_cache.py gemv grouped wgmma gemm gemv_stream quant dequant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_verify.log" 330 tests/test_gemv_gpu.py tests/test_grouped_gpu.py tests/test_pdl_gpu.py \
      tests/test_layers_gpu.py tests/test_launch_gpu.py tests/test_checks_gpu.py
  sanitize memcheck "$W/memcheck23.txt" 120 profiling/sanitize_driver.py
  sanitize racecheck "$W/racecheck23.txt" 120 profiling/sanitize_driver.py
fi
# STEP=h200pf (an H200 if one comes): the prefetch rule there (new vs the ring pfD vs one step pf1, k = 2 / 4,
#   M = 1, every dense shape), the M = 1 / 4 table and the MoE table with Grouped:stable.
if [ "$STEP" = h200pf ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm grouped quant 2>&1 | tail -1
  AB_PLANS="pfD:pf=2;pf1:pf=1" KS=2,4 MS=1 SHAPES=gateup,down,Q,O,KV,lin_key,lin_value \
      timeout 150 python3 profiling/gemv_ab.py --out "$W" > "$W/pf23h.log" 2>&1
  grep -v "^#" "$W/pf23h.log" | tail -16
  closing_tables 33
fi
# STEP=mtfix (H100): the grouped GEMV's launch cache keyed by max_tokens as grouped_plan sees it (an 8-token
#   call after a 1-token one had run the 1-token plan: profiling/results/nvidia-h100-80gb-hbm3_2026-11-26_order23.log).  Grouped GPU tests,
#   the MoE table (1..64 tokens, Grouped:stable beside) and the layer step.  Expected: 8 experts 8 tokens
#   gate/up fused k = 4 8.33 -> ~8.05 us, k = 2 7.6 -> ~7.2; the other token counts unchanged.
if [ "$STEP" = mtfix ]; then
  python3 profiling/warm_cache.py gemv grouped wgmma gemm quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_mtfix.log" 200 tests/test_grouped_gpu.py -k "plan_follows or slices or default_codebook or moe_forward"
  timeout 150 python3 profiling/bench.py --out "$W" --shapes moe --k 2,4 --moe-M 1,2,4,8,16,32,64 \
      --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag moe-final34 > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | grep -E "\| (8|10) \| 4 \|" | head -14
  timeout 120 python3 profiling/bench.py --out "$W" --shapes none --moe-layer --k 4 --reps 15 --tag layer34 \
      > "$W/layer.log" 2>&1
  grep -E "^\| (1|8|32) \| 4" "$W/layer.log"
fi
# STEP=pfm (H100): the prefetch rule at M = 2..4 (one step except gate/up-wide and down-like shapes): the A/B of
#   the rule against the ring (pfD) and one step (pf1), k = 2..5, M = 2 / 3 / 4, then the closing M = 1..4 table.
#   Expected (pf23da / pf23c): k = 4 M = 2 TOTAL 19.68 -> ~19.2 us, M = 4 21.28 -> ~20.9; M = 1 unchanged.
if [ "$STEP" = pfm ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_pfm.log" 120 tests/test_pdl_gpu.py -k "prefetch or late_writer"
  AB_PLANS="pfD:pf=2;pf1:pf=1" KS=2,3,4,5 MS=2,3,4 SHAPES=gateup,down,Q,O,KV,lin_key,lin_value \
      timeout 200 python3 profiling/gemv_ab.py --out "$W" > "$W/pf23m.log" 2>&1
  grep "^TOTAL" "$W/pf23m.log"
  timeout 200 python3 profiling/bench.py --out "$W" --M 1,2,3,4 --k 2,3,4,5 --columns matmul,matmul:plain,matmul+PDL \
      --reps 15 --tag final35-m1 > "$W/bench_m1.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_m1.log"
fi
# STEP=ring (H100): the grouped slices kernel's ring (MoE default launch and stable mode): ring steps requested
#   before the prologue (re: -DKBIT_EXPERIMENT_RING_EARLY) and a 3-step ring (d3), against a control compile
#   (ctl).  Expected: in the default launch the weights of step 1 wait behind the ids, the codebook and the
#   table build; re -0.1..-0.3 us at 1 token if the DRAM queue is not the limit, else slower (as dense: +3 %).
if [ "$STEP" = ring ]; then
  python3 profiling/warm_cache.py gemv grouped 2>&1 | tail -1
  MOE_VARIANTS="ctl:-DKBIT_AB_CONTROL=1;re:-DKBIT_EXPERIMENT_RING_EARLY;d3:-DKBIT_GROUPED_SL_DEPTH=3;st:+stable=1;stre:+stable=1 -DKBIT_EXPERIMENT_RING_EARLY" \
      KS=2,4 MS=1,4 MOE_MMA=0 timeout 200 python3 profiling/moe_ab.py --out "$W" > "$W/ring23.log" 2>&1
  grep "^TOTAL" "$W/ring23.log"
fi
# STEP=late5 (H100): the grouped kernel's LATE ring fill at k = 5 (KBIT_GROUPED_LATE default (K == 5), from
#   late23): grouped / PDL GPU tests, then the A/B against the previous build (prev: LATE off), k = 4 / 5.
#   Expected: k = 4 equal, k = 5 8 experts 1 token 16.3 -> ~15.5 us.
if [ "$STEP" = late5 ]; then
  python3 profiling/warm_cache.py gemv grouped 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_late5.log" 200 tests/test_grouped_gpu.py tests/test_pdl_gpu.py -k "grouped or moe or stable"
  MOE_VARIANTS="prev:-DKBIT_GROUPED_LATE=false" KS=4,5 MS=1,4,8 MOE_MMA=0 timeout 150 python3 profiling/moe_ab.py \
      --out "$W" > "$W/late23b.log" 2>&1
  grep "^TOTAL" "$W/late23b.log"
fi
finish_run run23
