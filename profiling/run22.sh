#!/usr/bin/env bash
# Nineteenth session (2026-11-25): the decode GEMV with 8-column groups (kbit_gemv's C8, plan c8).
#   STEP=c8: the c8 GPU tests, then the A/B of c8 against the current plan (k = 2..4, M = 1 / 4, the dense
#   shapes) with its block-plan variants.  Expected (profiling/NOTES.md, nineteenth session): gate/up
#   k = 4 M = 1 4.91 -> ~4.35 us (an SM's share 2.42 -> 2.5 groups of 16 columns instead of 3), O / down
#   -0.2..-0.3 (two 8-warp blocks per SM instead of one 16-warp one), Q / linear value equal or worse.
#   OUT=/tmp/out STEP=c8 bash profiling/run22.sh
. profiling/run_env.sh
start_run c8
if [ "$STEP" = c8 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_c8.log" 200 tests/test_gemv_gpu.py -k "c8 or plans_agree"
  P="c8:c8=1;c8d0:c8=1,dual=0;c8d1:c8=1,dual=1;c8l0:c8=1,late=0;c8l1:c8=1,late=1"
  AB_PLANS="$P" KS=2,3,4 MS=1,4 SHAPES=gateup,down,Q,O,KV,lin_key timeout 300 python3 profiling/gemv_ab.py --out "$W" \
      > "$W/c8ab22.log" 2>&1
  grep -v "^#" "$W/c8ab22.log" | tail -48
fi
# STEP=c8b: the c8 rule (kbitcupy.gemv.plan, from c8ab22): the GEMV + PDL GPU tests, the A/B of the rule against
#   c8 forced off / on (k = 2..5, M = 1 / 2 / 4, every dense shape; gate/up's dual + late combinations), and the
#   closing M = 1 / 4 table (final27-m1).  Expected: k = 4 M = 1 TOTAL 19.6 -> ~18.7 us, k = 3 -0.8, k = 2 -0.3.
if [ "${STEP:-}" = c8b ]; then
  python3 profiling/warm_cache.py gemv gemv_stream wgmma gemm quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_c8b.log" 200 tests/test_gemv_gpu.py tests/test_pdl_gpu.py
  P="c0:c8=0;c1:c8=1;c8d1l1:c8=1,dual=1,late=1;c8d0l1:c8=1,dual=0,late=1"
  AB_PLANS="$P" KS=2,3,4,5 MS=1,2,4 SHAPES=gateup,down,Q,O,KV,lin_key,lin_value timeout 200 python3 profiling/gemv_ab.py \
      --out "$W" > "$W/c8ab22b.log" 2>&1
  grep "^TOTAL" "$W/c8ab22b.log"
  timeout 150 python3 profiling/bench.py --out "$W" --M 1,4 --k 2,3,4,5 --columns matmul,matmul:plain,matmul+PDL \
      --reps 15 --tag final27-m1 > "$W/bench_m1.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_m1.log"
fi
# STEP=sweep: (1) down (K = 5120: 20 steps of 256 over 8 warps = 2.5 per warp, some warps 3) with 10 / 5 warps
#   (2 / 4 steps each), 8-column groups or not; expected -0.1..-0.2 us if the last warps' third step is the
#   tail; (2) the grouped wgmma kernel's plan at 32 / 64 tokens per expert (tile, split count, cluster sum):
#   8 experts 64 tokens TOTAL is 0.95x fp16 (moe-final25).
if [ "${STEP:-}" = sweep ]; then
  python3 profiling/warm_cache.py gemv wgmma 2>&1 | tail -1
  P="c8w10:c8=1,warps=10;c8w5:c8=1,warps=5;c8w10d0:c8=1,warps=10,dual=0;w10:c8=0,warps=10;w8:c8=0,warps=8;w10d0:c8=0,warps=10,dual=0"
  AB_PLANS="$P" KS=2,3,4,5 MS=1,2,4 SHAPES=down,O timeout 150 python3 profiling/gemv_ab.py --out "$W" > "$W/downw22.log" 2>&1
  grep -v "^#" "$W/downw22.log" | grep -E "^(down|O)" | cut -c1-230
  ES=8,10 MS=32,64 moe_wg "$W/moewg22.log" 200 "t32:+tok=32;t64:+tok=64;ks1:+ks=1;ks2:+ks=2;ks4:+ks=4;kd2:+ks_div=2;c0:+cluster=0"
fi
# STEP=check: the final tree's GPU tests (GEMV, PDL, dispatch / fast path, grouped subset) and memcheck over
#   sanitize_driver.py (now with forced 8-column groups, N % 8 != 0).
if [ "${STEP:-}" = check ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_check.log" 240 tests/test_gemv_gpu.py tests/test_pdl_gpu.py tests/test_launch_gpu.py \
      tests/test_checks_gpu.py tests/test_layers_gpu.py
  sanitize memcheck "$W/memcheck.txt" 200 profiling/sanitize_driver.py
fi
# STEP=final: the closing tables -- M = 1 / 2 / 4 every k (twice: final28-m1, final28b-m1), then dense M = 16..128
#   (k = 4) and MoE 1..64 tokens (final28, moe-final28).
if [ "${STEP:-}" = final ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  for t in final28-m1 final28b-m1; do
    timeout 120 python3 profiling/bench.py --out "$W" --M 1,2,4 --k 2,3,4,5 --columns matmul,matmul:plain,matmul+PDL \
        --reps 15 --tag $t > "$W/bench_$t.log" 2>&1
    grep -E "^### M|TOTAL" "$W/bench_$t.log"
  done
  final_tables final28
fi
# STEP=lut: the k = 4 pair table's size.  gate/up with 8-column groups runs five 4-warp blocks per SM, each
#   building its own 32 KB table (160 KB of shared stores per SM, ~0.7 us of store bandwidth if not hidden).
#   Variants: 16 / 8 copies (16 / 8 KB; lanes l and l + 16 share a copy: ~1.5-way conflicts on the lookups),
#   no table at all (a bound, wrong results), and 16 copies with c8 forced (M = 2 / 4 lost to occupancy).
if [ "${STEP:-}" = lut ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  AB_VARIANTS="cp16:-DKBIT_K4_LOG2_COPIES=4;cp8:-DKBIT_K4_LOG2_COPIES=3;nolut:-DKBIT_EXPERIMENT_NO_LUT;cp16c8:-DKBIT_K4_LOG2_COPIES=4 +c8=1" \
      KS=4 MS=1,2,4 SHAPES=gateup,down,Q,O,KV,lin_key,lin_value timeout 200 python3 profiling/gemv_ab.py --out "$W" \
      > "$W/lut22.log" 2>&1
  grep -v "^#" "$W/lut22.log" | cut -c1-200
fi
# STEP=prof: where gate/up's time goes at k = 4 M = 1 (8-column groups, 81 % of SOL) against Q (16-column, 87 %) and
#   down: ncu (speed of light, warp state, scheduler, occupancy; clocks not locked) and the per-block trace.
if [ "${STEP:-}" = prof ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  for s in gateup Q down; do
    timeout 90 ncu --clock-control none --cache-control all --profile-from-start off --section SpeedOfLight \
        --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
        python3 profiling/ncu_driver.py --shape $s --k 4 --M 1 --calls 2 > "$W/ncu19_$s.txt" 2>&1
    grep -E "Duration|Issue Slots Busy|DRAM Throughput|Achieved Occupancy|Registers Per|No Eligible|Stall" "$W/ncu19_$s.txt" | head -12
  done
  SHAPES=gateup,Q,down KS=4 timeout 120 python3 profiling/gemv_trace.py > "$W/trace19.txt" 2>&1; tail -60 "$W/trace19.txt"
fi
# STEP=san: racecheck and memcheck of the 8-column-group GEMV (profiling/sanitize_c8.py: every block shape forced).
if [ "${STEP:-}" = san ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  sanitize racecheck "$W/racecheck_c8.txt" 280 profiling/sanitize_c8.py
  sanitize memcheck "$W/memcheck_c8.txt" 200 profiling/sanitize_c8.py
fi
# STEP=moe: the grouped GEMV's block shape at 1 / 4 tokens in the default launch (tuned on the H200 with plain
#   launches, moe_sl10): an SM's share of groups as one 16-warp block (the plan) against two 8-warp blocks
#   (gpb 2 x 4 warps, 4 x 2) and other splits.
if [ "${STEP:-}" = moe ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  MOE_MMA=0 ES=8,10 MS=1,4 MOE_VARIANTS="g2w4:+gpb=2 +warps=4;g4w2:+gpb=4 +warps=2;g8w1:+gpb=8 +warps=1;g4w4:+gpb=4 +warps=4;g8w2:+gpb=8 +warps=2" \
      timeout 200 python3 profiling/moe_ab.py --out "$W" > "$W/moegpb22.log" 2>&1
  grep -vE "^\s*$" "$W/moegpb22.log" | tail -16
fi
# STEP=moe2: the grouped GEMV's two-blocks-per-SM rule (shares of 4 / 8 groups per SM; moegpb22): grouped + layer GPU
#   tests, the A/B against the old one-block plan (g4w4 = gate/up fused at 8 experts, g8w2 = down at 8 experts),
#   k = 2..5, 1..8 tokens, then the MoE table (moe-final29).  Expected: 8 experts 1 token TOTAL 12.06 -> ~11.7 us.
if [ "${STEP:-}" = moe2 ]; then
  python3 profiling/warm_cache.py gemv grouped wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_moe2.log" 240 tests/test_grouped_gpu.py tests/test_layers_gpu.py
  MOE_MMA=0 ES=8,10 MS=1,2,4,8 KS=2,3,4,5 MOE_VARIANTS="g4w4:+gpb=4 +warps=4;g8w2:+gpb=8 +warps=2" \
      timeout 150 python3 profiling/moe_ab.py --out "$W" > "$W/moegpb22b.log" 2>&1
  grep -E "^(moe|TOTAL)" "$W/moegpb22b.log" | grep -E " 8 +[2-5] |E=8" | head -40
  timeout 110 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 \
      --columns Grouped,g-WGMMA,Grouped+PDL --reps 15 --tag moe-final29 > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | head -20
fi
# STEP=moe3: the rule with gate/up's share of 4 kept as one block at more than 4 tokens (moegpb22b): grouped GPU tests
#   and the MoE table again (moe-final30).
if [ "${STEP:-}" = moe3 ]; then
  python3 profiling/warm_cache.py gemv grouped wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_moe3.log" 200 tests/test_grouped_gpu.py
  timeout 110 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,8,16,32,64 \
      --columns Grouped,g-WGMMA,Grouped+PDL --reps 15 --tag moe-final30 > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | head -20
fi
# STEP=cbd: ncu of the grouped GEMV with the default codebook compiled in (CBD) against the loading kernel, MoE down and
#   gate/up fused at 8 experts, 1 token, k = 4, plain launches (the CBD slowdown, fix20 / ic-*).
if [ "${STEP:-}" = cbd ]; then
  for one in 8,1,2048,512,4 8,1,1024,2048,4; do
    for c in 0 1; do
      ONE=$one CBD=$c timeout 90 ncu -k regex:kbit_gemv_grouped --launch-skip 2 --launch-count 1 --clock-control none \
          --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
          --section MemoryWorkloadAnalysis python3 profiling/ncu_grouped_gemv.py > "$W/ncu19_cbd${c}_${one//,/_}.txt" 2>&1
      echo "== $one cbd=$c"; grep -E "^\s+(Duration|Issue Slots Busy|DRAM Throughput|Registers Per|No Eligible|Dynamic Shared|Grid Size|Block Size|Stall)" "$W/ncu19_cbd${c}_${one//,/_}.txt" | head -10
    done
  done
fi
# STEP=cbd2: ncu (STEP=cbd) showed the CBD grouped kernel ~0.7 us longer in isolated launches with more L1TEX
#   (global load) stalls: its pair table is built before the wait, i.e. before the ids and weights are requested,
#   where the loading kernel builds it while the weights are in flight.  Tree ab_b (git-ignored, carried): CBD at
#   every k without the early build (lut_ready = false); against main, MoE k = 2 / 4 at 1 / 4 tokens.
if [ "${STEP:-}" = cbd2 ]; then
  for t in main:. ab_b:ab_b; do
    WARM="gemv grouped" AB_TIMEOUT=60 tree_bench ${t#*:} ${t%%:*} "$W" cbd2 --shapes moe --k 2,4 --moe-M 1,4 \
        --columns Grouped,Grouped:plain --reps 15
    echo "== ${t%%:*}"; grep -E "^\| (moe_dn|moe_gu_fused|TOTAL) " "$W/cbd2_${t%%:*}.log"
  done
fi
# STEP=cbd3 (prepared in the nineteenth session, not run: its device time was spent): the grouped GEMV with the default
#   codebook compiled in at every k, its pair table built while the block's expert id and offsets are in flight (after
#   the wait, before the weights are requested: profiling/patches/session19-cbd-ids.patch).  Tree ab_b (git-ignored,
#   carried) = this tree + the patch: mkdir ab_b && tar -c --exclude=profiling/results kbitcupy cuda_src profiling tests |
#   tar -x -C ab_b && (cd ab_b && patch -p1 < ../profiling/patches/session19-cbd-ids.patch).  The grouped and PDL GPU
#   tests on ab_b, then main against ab_b: MoE k = 2 / 4 / 5 at 1 / 4 / 8 tokens.  Expected: 8 experts 1 token k = 4
#   TOTAL 11.55 -> ~11.0 us (the codebook load and the table build off both kernels' critical paths); if ab_b is not
#   faster than main at k = 2 / 4, the cbd2 hypothesis (table stores delaying the weight loads) is wrong too.
if [ "${STEP:-}" = cbd3 ]; then
  (cd ab_b && export PYTHONPATH=$(pwd) KBITCUPY_CACHE_DIR=/tmp/kbit_cache_ab_b && \
   python3 profiling/warm_cache.py gemv grouped wgmma 2>&1 | tail -1 && \
   gpu_tests "$W/gpu_tests_cbd3_ab_b.log" 240 tests/test_grouped_gpu.py tests/test_pdl_gpu.py -k "grouped or late_writer or moe")
  for t in main:. ab_b:ab_b; do
    WARM="gemv grouped" AB_TIMEOUT=90 tree_bench ${t#*:} ${t%%:*} "$W" cbd3 --shapes moe --k 2,4,5 --moe-M 1,4,8 \
        --columns Grouped,Grouped:plain,Grouped+PDL --reps 15
    echo "== ${t%%:*}"; grep -E "^\| TOTAL " "$W/cbd3_${t%%:*}.log"
  done
fi
finish_run run22
