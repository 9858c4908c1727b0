#!/usr/bin/env bash
# Twenty-third session (2026-11-26).
#   OUT=/tmp/out STEP=impl bash profiling/run26.sh
. profiling/run_env.sh
start_run impl
# STEP=impl: which grouped kernel at 8..16 tokens per expert (grouped.choose_impl: 9..16 the mma.sync kernel for
#   down (K < 1024), the wgmma one for gate/up; an H200 rule of the fifth session, k = 4 only).  Every moe-final table
#   since the twentieth session has moe_dn k = 2 at 16 tokens 8 experts at 9.03-9.10 us (0.90x fp16), slower than
#   k = 4 (7.33), while the PDL column (wgmma there) is 6.3-6.5.  Expected: the wgmma kernel faster on down at
#   9..16 tokens at k = 2 (and maybe every k); every grouped kernel forced, k = 2..5, 8 / 10 experts.
if [ "$STEP" = impl ]; then
  python3 profiling/warm_cache.py grouped wgmma gemv 2>&1 | tail -1
  timeout 400 python3 profiling/bench.py --out "$W" --shapes moe --k ${KS:-2,3,4,5} --moe-M ${MS:-8,12,16} \
    --columns Grouped,g-GEMV,g-MMA,g-WGMMA,Grouped:stable --reps 15 --tag moe-impl26 > "$W/bench_impl26.log" 2>&1
  grep -E "^### |moe_dn|moe_gu_fused|TOTAL" "$W/bench_impl26.log" | head -150
fi
# STEP=mmaplan: the grouped mma.sync kernel on down (K = 512) is erratic at 9..16 tokens (impl26: 8 experts k = 2 at
#   16 tokens 9.01 us, 10 experts 7.13): its plan halves the column groups per block (cg) until the grid has 2 blocks
#   per SM, so 8 experts get cg = 4 (512 blocks of 4 warps) and 10 get cg = 8 (320 of 8).  Expected: cg = 8 at 8
#   experts near the 10-expert time scaled (~6 us at k = 2).  moe_ab with the mma kernel at cg = 4 / 8 / 16, the
#   grouped GEMV and the grouped wgmma, k = 2..5, 9 / 12 / 16 tokens.
if [ "$STEP" = mmaplan ]; then
  python3 profiling/warm_cache.py grouped wgmma gemv 2>&1 | tail -1
  KS=${KS:-2,3,4,5} MS=${MS:-9,12,16} ES=8,10 SHAPES=${SHAPES:-moe_dn} MOE_MMA_PLANS="cg4:cg=4;cg8:cg=8;cg16:cg=16" \
    MOE_WG="wg:" timeout 300 python3 profiling/moe_ab.py --out "$W" > "$W/mmaplan26.log" 2>&1
  grep -vE "^\s*$" "$W/mmaplan26.log" | tail -40
fi
# STEP=safe: the grouped wgmma kernel's safe-PDL early mode (pdl 3 with ids_stable: ids read and the first K tiles'
#   weights L2-prefetched before the wait; moe_forward passes ids_stable to gate/up and down at > 8 tokens).  Expected
#   (the full-PDL early mode's gain at 8 experts, k = 4: gate/up fused 64 tokens 14.96 -> 13.47 us, down 9.15 -> 8.50;
#   the grouped GEMV's safe early mode got ~0.7 us of down's 1-token time): the stable column 0.3-0.8 us faster per
#   projection at 16..64 tokens.  The touched GPU tests, then moe_ab (wg = ids not stable, the control; wgs = stable)
#   in four processes: KBIT_WG_SAFE_EARLY=0 (the old wait at entry), 1, 1 with one K tile prefetched, 1 with the
#   default codebook's tables built before the wait too.
if [ "$STEP" = safe ]; then
  python3 profiling/warm_cache.py grouped wgmma gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_safe26.log" 400 tests/test_pdl_gpu.py tests/test_grouped_gpu.py tests/test_grouped.py \
    tests/test_wgmma_gpu.py -k "grouped or moe or Grouped or choose or plan"
  grep -E "FAIL|Error|assert" "$W/gpu_tests_safe26.log" | head -20
  for v in "se0:0:" "se1:1:" "pf1:1:-DKBIT_WG_SAFE_PF_TILES=1" "tab:1:-DKBIT_WG_SAFE_EARLY_TABLES" "se1b:1:"; do
    n=${v%%:*}; r=${v#*:}; e=${r%%:*}; o=${r#*:}
    echo "## $n KBIT_WG_SAFE_EARLY=$e KBIT_WGMMA_OPTS='$o'" | tee -a "$W/safe26.log"
    KBIT_WG_SAFE_EARLY=$e KBIT_WGMMA_OPTS="$o" KS=${KS:-4,2} MS=${MS:-16,32,64} ES=8,10 SHAPES=moe_gu_fused,moe_dn \
      MOE_GEMV=0 MOE_MMA=0 MOE_WG="wg:;wgs:+stable=1" timeout 200 python3 profiling/moe_ab.py --out "$W" 2>&1 \
      | grep -vE "^\s*$" | tail -30 | tee -a "$W/safe26.log"
  done
fi
# STEP=moe26: the grouped wgmma's safe early mode with the default codebook's tables before the wait at k >= 4, the
#   mma plan's cg rule, k = 5 down on wgmma, down on wgmma at 9..16 tokens when the ids are stable in safe mode, the
#   MoE forward TOTAL with gate/up stable above 8 tokens: the grouped / PDL / wgmma / layer GPU tests, memcheck and
#   racecheck over sanitize_driver.py, then the MoE table k = 2..5, 1..64 tokens (moe-final45).
if [ "$STEP" = moe26 ]; then
  python3 profiling/warm_cache.py grouped wgmma gemv quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_moe26.log" 500 tests/test_pdl_gpu.py tests/test_grouped_gpu.py tests/test_grouped.py \
    tests/test_wgmma_gpu.py tests/test_layers_gpu.py
  grep -E "FAIL|Error|assert" "$W/gpu_tests_moe26.log" | head -20
  sanitize memcheck "$W/memcheck26.txt" 300 profiling/sanitize_driver.py
  sanitize racecheck "$W/racecheck26.txt" 400 profiling/sanitize_driver.py
  timeout 400 python3 profiling/bench.py --out "$W" --shapes moe --k 2,3,4,5 --moe-M 1,2,4,8,16,32,64 \
    --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag moe-final45 > "$W/bench_moe45.log" 2>&1
  grep -E "^### |TOTAL|as moe_forward" "$W/bench_moe45.log" | head -120
fi
# STEP=k5split: the grouped plan's split count where one CTA fills an SM (wgmma.grouped_splits: k = 5 at TOK = 64,
#   every k at 128).  moe-final45 had 10 experts, k = 5, 64 tokens at 0.70x fp16 (down 17.1 us against 9.1 at 8
#   experts: 160 one-split CTAs on 132 SMs; gate/up fused 24.4 against 16.2: 80 CTAs).  Expected: down ~10-11 us
#   (4 splits), gate/up fused ~18-19 (3 splits).  moe_ab with the plan (d) against forced split counts and TOK = 32,
#   k = 5 at 32 / 64 tokens and k = 4 at 128 (TOK = 128, one CTA per SM too), 8 / 10 experts.
#   Measured (commit 7504654, k5split26.log): more splits are slower in every cell (down 10 experts k = 5 64 tokens
#   1 / 2 / 4 splits 16.98 / 23.01 / 33.53 us; k = 4 128 tokens 18.49 / 26.92 / 38.82): each extra CTA per SM repeats
#   the prologue (k = 5's 64 KB pair table) and the fill rule's one split was the best count in 10 of 12 cells.
#   Reverted (4449171); the k = 5 10-expert cliff at 64 tokens stays.
if [ "$STEP" = k5split ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_k5split.log" 300 tests/test_wgmma.py tests/test_grouped_gpu.py -k "wgmma or plan or split"
  for v in "5:32,64" "4:128"; do
    KS=${v%%:*} MS=${v#*:} ES=8,10 SHAPES=moe_gu_fused,moe_dn moe_wg "$W/k5split_${v%%:*}.log" 200 \
      "d:;ks1:+ks=1;ks2:+ks=2;ks3:+ks=3;ks4:+ks=4;ks8:+ks=8;t32:+tok=32"
  done
fi
# STEP=k5cp: the k = 5 10-expert cliff at 64 tokens (one CTA per SM: a 64 KB pair table + 4 stages of 14 KB; 160
#   down CTAs on 132 SMs run two waves): the pair table at 8 copies (KBIT_K5_LOG2_COPIES=3, 32 KB: two CTAs per SM)
#   against 16, k = 5, 16..64 tokens, 8 / 10 experts, the grouped wgmma at its plan.  Expected: 10 experts 64 tokens
#   down 17 -> ~11 us, gate/up fused 24 -> ~20; the lookups' 2-way bank conflicts may cost the loop elsewhere.
if [ "$STEP" = k5cp ]; then
  for c in 4 3 4b 3b; do
    echo "## KBIT_K5_LOG2_COPIES=${c%b}" | tee -a "$W/k5cp26.log"
    KBIT_K5_LOG2_COPIES=${c%b} KBITCUPY_CACHE_DIR=/tmp/kbit_cache_k5$c python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
    KBIT_K5_LOG2_COPIES=${c%b} KBITCUPY_CACHE_DIR=/tmp/kbit_cache_k5$c KS=5 MS=16,32,64 ES=8,10 \
      SHAPES=moe_gu_fused,moe_dn MOE_GEMV=0 MOE_MMA=0 MOE_WG="d:" timeout 200 python3 profiling/moe_ab.py --out "$W" 2>&1 \
      | grep -vE "^\s*$" | tail -18 | tee -a "$W/k5cp26.log"
  done
fi
# STEP=pipe: the streaming GEMV's consumers fetch unit i + 1's operands (stage wait, weight words, scales, A fragments)
#   before unit i's lookups and MMAs (PIPE, MT <= 2: 115 -> 158-166 registers, no spills).  The per-unit time is latency
#   bound (ninth session: 2 warps per scheduler, issue slots ~32 % busy, each unit starting with a dependent chain
#   stage wait -> LDS -> keys -> LDS -> HMUL2 -> MMA); expected: M = 9..16 STREAM 3-10 % faster (issue 4's M = 16 TOTAL
#   needs ~7 %), M <= 8 likewise where the stream serves.  The streaming GEMV GPU tests, then STREAM / matmul at
#   M = 8 / 16, k = 2 / 4, PIPE off (-DKBIT_STREAM_NO_PIPE) / on, alternated twice (separate processes).
#   Measured (commit 4a594f5, pipe26.log): slower, k = 4 STREAM TOTAL M = 16 34.76 / 34.66 -> 37.11 / 37.05 us, M = 8
#   30.86 / 30.72 -> 32.00 / 31.90; k = 2 likewise.  Reverted: a warp that waits for unit i + 1's stage before computing
#   unit i waits on the arrivals, and the unit-start chain was not what limited it.
if [ "$STEP" = pipe ]; then
  python3 profiling/warm_cache.py gemv_stream 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_pipe.log" 300 tests/test_gemv_stream_gpu.py
  grep -E "FAIL|Error|assert" "$W/gpu_tests_pipe.log" | head -20
  for v in off on offb onb; do
    o=$([ "${v%b}" = off ] && echo "-DKBIT_STREAM_NO_PIPE" || echo "")
    KBIT_STREAM_OPTS="$o" KBITCUPY_CACHE_DIR=/tmp/kbit_cache_pipe${v%b} timeout 150 python3 profiling/bench.py --out "$W" \
      --M ${MS:-8,16} --k ${KS:-2,4} --columns STREAM,matmul --reps 15 --tag "pipe-$v" > "$W/bench_pipe_$v.log" 2>&1
    echo "## PIPE $v"; grep -E "^### M|TOTAL" "$W/bench_pipe_$v.log"
  done
fi
# STEP=suite: the whole GPU test suite on the final tree (every family; warmed caches first), then the MoE table at
#   k = 4, 16..64 tokens as a replicate of moe-final45 (tag moe-final46; on an H200 too when one comes).
if [ "$STEP" = suite ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_suite26.log" 480 tests
  grep -E "FAIL|Error" "$W/gpu_tests_suite26.log" | head -20
  timeout 200 python3 profiling/bench.py --out "$W" --shapes moe --k ${KS:-4} --moe-M ${MS:-1,4,16,32,64} \
    --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag ${TAG:-moe-final46} > "$W/bench_moe46.log" 2>&1
  grep -E "^### |TOTAL|as moe_forward" "$W/bench_moe46.log" | head -60
fi
# STEP=layer: the MoE layer step (moe_forward, top-10 of 512 experts, k = 4) at prefill batches, where moe_forward's
#   grouped calls pass ids_stable to both projections: KBIT_WG_SAFE_EARLY=0 (the grouped wgmma waits at entry) / 1 /
#   0 / 1 (separate processes).  T = 256 (~5 tokens per expert, max ~12-15: the 9..16 band) and 1024 (~20, the wgmma
#   kernel).  Expected: -1..-2 us per grouped call with the early mode, i.e. -2..-4 us per layer step.
#   Measured (git 18f6bf5, layer26-se*): moe_forward 2-4 % slower with the early mode at T = 256 / 1024 (1474 / 1477 ->
#   1507 / 1544 us, 1898 / 1898 -> 1937 / 1937; 505-512 experts: grids of many waves, whose later CTAs prefetch what
#   they load at once anyway); T = 1 equal.  Now the early mode only for grids of one wave (grouped_wgmma).
#   Found on the way: the step at T = 256 / 1024 is 16-20 % of SOL (1.4-1.8 ms against 274 us; fp16 loop 4.8-5.2 ms)
#   and moe_route's argsort path (> 2048 pairs) takes 114-125 us of it.
if [ "$STEP" = layer ]; then
  python3 profiling/warm_cache.py grouped wgmma gemv gemm quant 2>&1 | tail -1
  for v in 0 1 0b 1b; do
    KBIT_WG_SAFE_EARLY=${v%b} timeout 200 python3 profiling/bench.py --shapes none --moe-layer --k 4 \
      --layer-T ${LT:-1,256,1024} --reps 15 --out "$W" --tag "layer26-se$v" > "$W/bench_layer_$v.log" 2>&1
    echo "## KBIT_WG_SAFE_EARLY=$v"; grep -E "^\| [0-9]" "$W/bench_layer_$v.log" | head -10
  done
fi
# STEP=many: the grouped kernels with many active experts (layer26: a prefill step with 505-512 experts runs at 16-20 %
#   of SOL).  Every grouped kernel forced, 128 / 512 experts, 4..32 tokens each, k = 2 / 4; then the layer step at
#   T = 256 / 1024 with the one-wave rule for the early mode (expected: back to the se0 times).
if [ "$STEP" = many ]; then
  python3 profiling/warm_cache.py grouped wgmma gemv gemm quant 2>&1 | tail -1
  timeout 330 python3 profiling/bench.py --out "$W" --shapes moe --experts ${ES:-128,512} --k ${KS:-4,2} \
    --moe-M ${MS:-4,8,12,16,32} --columns Grouped,g-GEMV,g-MMA,g-WGMMA,Grouped:stable --reps 15 --tag moe-many26 \
    > "$W/bench_many26.log" 2>&1
  grep -E "^### |moe_gu_fused|moe_dn|TOTAL" "$W/bench_many26.log" | head -90
  timeout 150 python3 profiling/bench.py --shapes none --moe-layer --k 4 --layer-T 256,1024 --reps 15 --out "$W" \
    --tag layer26-wave > "$W/bench_layer_wave.log" 2>&1
  grep -E "^\| [0-9]" "$W/bench_layer_wave.log" | head -6
fi
# STEP=route: moe_route's grid kernels for > 2048 choices (kbit_moe_route_count / _scan / _scatter; layer26: the CuPy
#   argsort path took 114-125 us of a prefill layer step).  Expected: moe_route ~10-20 us at T = 256 / 1024, moe_forward
#   -100 us.  The route / MoE GPU tests, memcheck and racecheck over sanitize_route.py, then the layer step.
if [ "$STEP" = route ]; then
  python3 profiling/warm_cache.py grouped wgmma gemv gemm quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_route26.log" 300 tests/test_grouped_gpu.py tests/test_layers_gpu.py tests/test_pdl_gpu.py \
    -k "route or moe or Moe or layer"
  grep -E "FAIL|Error|assert" "$W/gpu_tests_route26.log" | head -20
  sanitize memcheck "$W/memcheck_route26.txt" 200 profiling/sanitize_route.py
  sanitize racecheck "$W/racecheck_route26.txt" 300 profiling/sanitize_route.py
  grep -E "route T=|BAD" "$W/racecheck_route26.txt"
  timeout 150 python3 profiling/bench.py --shapes none --moe-layer --k 4 --layer-T 1,256,1024 --reps 15 --out "$W" \
    --tag layer26-route > "$W/bench_layer_route.log" 2>&1
  grep -E "^\| [0-9]" "$W/bench_layer_route.log" | head -8
fi
# STEP=plantok: moe_forward's token plan at prefill sizes (moe.plan_tokens: the loose bound T made the grouped kernels
#   plan every expert's tiles T rows tall: T = 256 / 1024 tokens top-10 of 512, 5 / 20 rows per expert; new: the
#   expected largest count of a random routing as a power of two >= 16).  Expected: the layer step at T = 256 / 1024
#   (1359 / 1776 us) toward the moe-many26 grouped times (16 / 32 tokens per expert over 512 experts: ~640 / ~690 us
#   for gate/up + down).  The MoE GPU tests, then the layer step at T = 128..1024 with the plan forced (bound = the old
#   rule, 8, 16, 32, 64) and the new default.
#   Measured (git 64605ba, layer26-pt*): moe_forward per step planned for 8 / 16 / 32 / 64 rows, the bound: T = 128
#   518 / 632 / 647 / 712; T = 256 609 / 658 / 690 / 761, bound 1360; T = 512 970 / 702 / 721 / 792, bound 1507;
#   T = 1024 1702 / 1192 / 785 / 828, bound 1775 us.  The fastest is the power of two >= 8 over 1.5x the mean rows per
#   expert (2.7 / 5.1 / 10 / 20): that rule replaces mean + 4 sqrt(mean) (the "new" column, 3-9 % slower).
if [ "$STEP" = plantok ]; then
  python3 profiling/warm_cache.py grouped wgmma gemv gemm quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_plantok.log" 300 tests/test_grouped_gpu.py tests/test_layers_gpu.py tests/test_grouped.py \
    -k "route or moe or Moe or layer or plan"
  grep -E "FAIL|Error|assert" "$W/gpu_tests_plantok.log" | head -20
  for v in bound new 8 16 32 64; do
    KBIT_MOE_PLAN_TOKENS=$([ $v = new ] && echo "" || echo $v) timeout 150 python3 profiling/bench.py --shapes none \
      --moe-layer --k 4 --layer-T ${LT:-128,256,512,1024} --reps 15 --out "$W" --tag "layer26-pt$v" \
      > "$W/bench_layer_pt$v.log" 2>&1
    echo "## plan $v"; grep -E "^\| [0-9]+ \| 4 " "$W/bench_layer_pt$v.log" | head -6
  done
fi
# STEP=final26: the final plan_tokens rule: the MoE / grouped / layer GPU tests and the layer step at T = 1..1024.
if [ "$STEP" = final26 ]; then
  python3 profiling/warm_cache.py grouped wgmma gemv gemm quant 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_final26.log" 300 tests/test_grouped_gpu.py tests/test_layers_gpu.py tests/test_grouped.py \
    tests/test_pdl_gpu.py -k "route or moe or Moe or layer or plan"
  grep -E "FAIL|Error|assert" "$W/gpu_tests_final26.log" | head -20
  timeout 200 python3 profiling/bench.py --shapes none --moe-layer --k 4 --layer-T 1,8,32,128,256,512,1024 --reps 15 \
    --out "$W" --tag layer26-final > "$W/bench_layer_final.log" 2>&1
  grep -E "^\| [0-9]+ \| 4 " "$W/bench_layer_final.log" | head -8
fi
finish_run run26
