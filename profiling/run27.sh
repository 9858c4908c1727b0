#!/usr/bin/env bash
# Twenty-fourth session (2026-11-26).
#   OUT=/tmp/out STEP=steady bash profiling/run27.sh
. profiling/run_env.sh
start_run steady
# STEP=steady: the grouped GEMV in steady state (many active experts, several waves: the decode layer step at
#   T = 8 / 32 tokens activates ~74 / ~242 experts; layer26-final: 87 / 253 us, 48 / 52 % of SOL; moe-many26: 512
#   experts 4 tokens gate/up fused 60 %, down 48 % of SOL).  The plan there: 512-thread slice blocks (gate/up 8 x 2
#   warps, down 16 x 1), one block per SM, D = 2 steps (1 KB a warp-step at k = 4) in flight per warp: ~32 KB per
#   SM, about what Little's law needs at 3 TB/s, with nothing in flight while a block ends and the next starts.
#   Expected: deeper rings (d3 / d4) and two 256-thread blocks per SM (g4w2 / g8w1, one block's prologue under the
#   other's loads) faster by 10-30 % at 74 / 242 experts; the group loop (loop4 / loop8: the next group's first
#   steps requested before the current reduction) maybe too.
if [ "$STEP" = steady ]; then
  python3 profiling/warm_cache.py grouped gemv 2>&1 | tail -1
  KS=${KS:-4,2} MS=${MS:-1,4} ES=${ES:-74,242} MOE_MMA=0 MOE_VARIANTS="d3:-DKBIT_GROUPED_SL_DEPTH=3;d4:-DKBIT_GROUPED_SL_DEPTH=4;g4w2:+gpb=4 +warps=2;g8w1:+gpb=8 +warps=1;g4w2d4:+gpb=4 +warps=2 -DKBIT_GROUPED_SL_DEPTH=4;g8w1d4:+gpb=8 +warps=1 -DKBIT_GROUPED_SL_DEPTH=4;loop4:+gpb=0 +per_block=4 +warps=8;loop8:+gpb=0 +per_block=8 +warps=8" \
    timeout 500 python3 profiling/moe_ab.py --out "$W" > "$W/steady27.log" 2>&1
  grep -vE "^\s*$" "$W/steady27.log" | tail -30
fi
# Measured (steady27.log, H100): two 256-thread blocks per SM of 8 one-warp groups (g8w1) 9-12 % faster than the plan
#   on every cell (TOTAL k = 4 1 token 74 / 242 experts 82.10 / 236.48 -> 72.80 / 207.97 us; k = 2 -9 / -12 %); deeper
#   rings slower (d3 +3..7 %, d4 +4..8 %, with g8w1 too); the group loop much slower.  Not the bytes in flight, then.
# STEP=steady2: around g8w1: 4 / 2 one-warp groups a block (more, smaller blocks per SM: 16 warps at <= 128 registers
#   either way), 2- and 4-warp groups on gate/up (K = 2048: 16 steps), at 20 / 40 / 74 / 242 experts (the layer step's
#   T = 2 / 4 / 8 / 32).  Expected: g4w1 near g8w1 or faster on down (a block's prologue shares the SM with three
#   others); the 2-warp groups of gate/up behind g8w1 (g4w2 was at 242 experts).
if [ "$STEP" = steady2 ]; then
  python3 profiling/warm_cache.py grouped gemv 2>&1 | tail -1
  KS=${KS:-4,2} MS=${MS:-1} ES=${ES:-20,40,74,242} MOE_MMA=0 MOE_VARIANTS="g8w1:+gpb=8 +warps=1;g4w1:+gpb=4 +warps=1;g2w1:+gpb=2 +warps=1;g4w2:+gpb=4 +warps=2;g2w2:+gpb=2 +warps=2;g2w4:+gpb=2 +warps=4;g16w1:+gpb=16 +warps=1" \
    timeout 500 python3 profiling/moe_ab.py --out "$W" > "$W/steady27b.log" 2>&1
  grep -vE "^\s*$" "$W/steady27b.log" | tail -30
fi
# Measured (steady27b.log): g4w1 fastest on down at every E and k (k = 4 20 / 40 / 74 / 242 experts 12.99 / 19.11 /
#   30.98 / 90.13 -> 10.50 / 16.34 / 26.88 / 79.23 us); gate/up mixed (k = 4: 20 experts g4w1 15.51 (plan 28.36),
#   40 g4w2 26.94 (31.07), 74 all 44.7-45.5 (49.79), 242 g8w1 127.08 (146.31)).  The plan's 28.36 at 20 experts: a
#   share of 10 groups per SM makes 10 one-warp slices a block (320 threads, one block per SM by registers) and
#   ceil(64 / 10) = 7 blocks per slot, 140 blocks: a second wave of one 16-step chain.
# STEP=steady3: the candidates at every k and at 10 / 14 / 20 / 40 / 74 / 242 experts (14: down's share 14 -> 10
#   blocks a slot, 140 blocks, the same cliff).  Expected: g4w1 (down) and g4w1 / g8w1 (gate/up) at or below the plan
#   everywhere above one wave; k = 5's larger pair table may cap blocks per SM.
if [ "$STEP" = steady3 ]; then
  python3 profiling/warm_cache.py grouped gemv 2>&1 | tail -1
  KS=${KS:-2,3,4,5} MS=${MS:-1} ES=${ES:-10,14,20,40,74,242} MOE_MMA=0 MOE_VARIANTS="g4w1:+gpb=4 +warps=1;g8w1:+gpb=8 +warps=1;g4w2:+gpb=4 +warps=2;g2w2:+gpb=2 +warps=2;g2w1:+gpb=2 +warps=1" \
    timeout 550 python3 profiling/moe_ab.py --out "$W" > "$W/steady27c.log" 2>&1
  grep -vE "^\s*$" "$W/steady27c.log" | tail -60
fi
# Measured (steady27c.log): the plan's share of 7 / 10 groups (14 / 20 experts' gate/up) and 14 (14 experts' down)
#   overflow one wave (140 blocks, one per SM): 2x (gate/up fused 14 / 20 experts k = 4 19.67 / 27.81 us against
#   10.71 / 15.32); above one wave g4w1 fastest on down at k <= 4 (k = 5: g8w1), gate/up g4w2 up to 74 experts and
#   g8w1 at 242.  New rule (gemv.grouped_plan): the share plan only where it fits one wave; else down 4 x 1 (8 x 1
#   at k = 5), gate/up 4 x 2 up to 48 groups per SM, 8 x 1 above.
# STEP=verify: grouped / MoE GPU tests, then the whole package against the previous tree (PREV_TREE=ab_prev: git
#   archive of e03df5b) in one run: the MoE table at 10..242 experts (1 and 8 tokens) and the layer step at T = 1, 2,
#   4, 8, 32.  Expected: 14..242 experts -10..-45 % per projection, 8 / 10 experts unchanged (the same plans);
#   layer step T = 2 / 4 / 8 / 32 faster by ~10-35 %, T = 1 unchanged.
if [ "$STEP" = verify ]; then
  python3 profiling/warm_cache.py grouped gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_verify27.log" 500 tests/test_grouped_gpu.py tests/test_gemv_gpu.py -k "grouped or moe or many or plan"
  grep -E "FAIL|Error" "$W/gpu_tests_verify27.log" | head -20
  OUT=$W PREV_TREE=ab_prev AB_TAG=moe27 WARM="grouped gemv" AB_TIMEOUT=200 \
    AB_ARGS="--shapes moe --experts 10,14,20,40,74,242 --k 2,4,5 --moe-M 1,8 --columns Grouped --reps 15" \
    bash profiling/tree_ab.sh 2>&1 | tail -40
  OUT=$W PREV_TREE=ab_prev AB_TAG=layer27 WARM="grouped gemv" AB_TIMEOUT=200 \
    AB_ARGS="--shapes none --moe-layer --k 4 --layer-T 1,2,4,8,32 --reps 15" bash profiling/tree_ab.sh > /dev/null 2>&1
  for v in new prev; do echo "== layer $v"; grep -E "^\| [0-9]+ \| 4 " "$W/layer27_$v.log"; done
fi
# Measured (verify; moe27_{new,prev}, layer27_{new,prev}; 140 grouped GPU tests passed): TOTAL 1 token k = 4, 14 / 20 /
#   40 / 74 / 242 experts 31.76 / 41.27 / 50.19 / 81.10 / 237.24 -> 17.33 / 28.05 / 43.22 / 71.74 / 207.31 us (k = 5 14 /
#   20 experts 0.78x / 0.82x fp16 -> 1.36x / 1.22x); 8 tokens -6..-45 %; 10 experts unchanged.  Layer step (k = 4)
#   T = 2 / 4 / 8 / 32: 46.97 / 56.91 / 89.30 / 255.77 -> 35.22 / 50.72 / 82.64 / 232.26 us; T = 1 unchanged.
# STEP=pfa: what still bounds the several-wave plans: at k = 2 the bytes in flight (16 warps x 2 steps x 512 B = 16 KB
#   an SM, Little's law at ~1.5 us: ~11 GB/s an SM, measured ~9; k = 4 32 KB).  Without registers: L2 prefetches of
#   the steps past the ring (-DKBIT_GEMV_PF_AHEAD=2 / 4); more warps: a 96-register cap (no spills; 5 four-warp blocks
#   an SM).  Expected: k = 2 -15..-30 %, k = 4 -5..-15 % at 74 / 242 experts; 8 / 10 experts (one wave) maybe worse.
#   (The -DKBIT_GEMV_PF_AHEAD hook was removed after this step: slower everywhere; a rerun needs it back, see git de7f7ce.)
if [ "$STEP" = pfa ]; then
  python3 profiling/warm_cache.py grouped gemv 2>&1 | tail -1
  KS=${KS:-2,4,5} MS=${MS:-1} ES=${ES:-10,20,74,242} MOE_MMA=0 MOE_VARIANTS="pf2:-DKBIT_GEMV_PF_AHEAD=2;pf4:-DKBIT_GEMV_PF_AHEAD=4;r96:-DKBIT_GROUPED_SL_MAXNREG=96;r96g4w1:+gpb=4 +warps=1 -DKBIT_GROUPED_SL_MAXNREG=96;pf2r96:-DKBIT_GEMV_PF_AHEAD=2 -DKBIT_GROUPED_SL_MAXNREG=96" \
    timeout 550 python3 profiling/moe_ab.py --out "$W" > "$W/pfa27.log" 2>&1
  grep -vE "^\s*$" "$W/pfa27.log" | tail -40
fi
# Measured (pfa27.log): L2 prefetches past the ring slower everywhere (+3..15 %: the bytes in flight are not the
#   limit); the 96-register cap: down at 20..242 experts -5..-25 % (k = 4 20 experts 10.55 -> 8.12 us, 242 79.42 ->
#   74.83; five 4-warp blocks per SM), k = 2 gate/up as 4 x 1 -13..-15 % (242 experts 113.87 -> 104.68); k = 5 and the
#   8-warp blocks no faster.  New: kbit_gemv_grouped_slw (the slices kernel at 96 registers, k = 2 / 4; k = 3's SwiGLU
#   instantiation spills 4 bytes there) for several waves of 4-warp blocks; gate/up at k <= 3 as 4 x 1.
# STEP=verify2: GPU tests (grouped, MoE, PDL), memcheck over sanitize_slices.py (now with several waves of the slw
#   kernel), and the whole package against the session's start (PREV_TREE=ab_prev, e03df5b): MoE 10..242 experts, k =
#   2..5, 1 / 8 tokens; layer step T = 1, 2, 4, 8, 32.  Expected: verify's gains plus ~-5..-10 % at k = 2 / 4 on 20+
#   experts; 8 / 10 experts and T = 1 unchanged.
if [ "$STEP" = verify2 ]; then
  python3 profiling/warm_cache.py grouped gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_verify27b.log" 500 tests/test_grouped_gpu.py tests/test_pdl_gpu.py tests/test_layers_gpu.py \
    -k "grouped or moe or many or plan or Grouped"
  grep -E "FAIL|Error" "$W/gpu_tests_verify27b.log" | head -20
  sanitize memcheck "$W/memcheck_slices27.log" 300 profiling/sanitize_slices.py
  OUT=$W PREV_TREE=ab_prev AB_TAG=moe27b WARM="grouped gemv" AB_TIMEOUT=250 \
    AB_ARGS="--shapes moe --experts 10,14,20,40,74,242 --k 2,3,4,5 --moe-M 1,8 --columns Grouped --reps 15" \
    bash profiling/tree_ab.sh 2>&1 | tail -50
  OUT=$W PREV_TREE=ab_prev AB_TAG=layer27b WARM="grouped gemv" AB_TIMEOUT=200 \
    AB_ARGS="--shapes none --moe-layer --k 4,2 --layer-T 1,2,4,8,32 --reps 15" bash profiling/tree_ab.sh > /dev/null 2>&1
  for v in new prev; do echo "== layer $v"; grep -E "^\| [0-9]+ \| [245] " "$W/layer27b_$v.log"; done
fi
# Measured (verify2; moe27b_{new,prev}, layer27b_{new,prev}; 165 GPU tests passed, memcheck clean over
#   sanitize_slices.py): TOTAL 1 token k = 4 14 / 20 / 40 / 74 / 242 experts 31.60 / 41.26 / 50.22 / 81.35 / 238.05 ->
#   17.34 / 25.57 / 42.28 / 70.30 / 202.93 us, k = 2 28.01 / 37.88 / 43.58 / 71.24 / 209.73 -> 17.99 / 22.59 / 32.10 /
#   54.87 / 165.66; k = 3 (no 96-register kernel) 31.84 / .. / 244.18 -> 20.65 / .. / 210.35.  Layer step k = 4 T = 2 /
#   4 / 8 / 32: 47.73 / 57.63 / 90.23 / 258.64 -> 32.55 / 49.73 / 81.40 / 224.94 us (k = 2 42.54 / 50.25 / 78.38 / 226.68
#   -> 26.93 / 41.09 / 66.71 / 188.05); T = 1 unchanged.
#   Then: the grouped GEMV stages at most max_tokens rows a pass and reserves shared memory for that many (was 8 per
#   token tile): k = 4 gate/up's 4-warp blocks fit five per SM at 1..4 tokens (36 KB instead of 64 KB).
# STEP=gu4: GPU tests of the passes, then gate/up fused at k = 4 (and 3): 4 x 1 (now 96 registers at k = 4, five blocks
#   per SM at <= 4 tokens) against the plan's 4 x 2 / 8 x 1, 20..242 experts, 1 / 4 / 8 tokens.  Expected: 4 x 1 at k = 4
#   like k = 2's -13 % at 1..4 tokens; at 8 tokens (64 KB blocks: three per SM) no gain.
if [ "$STEP" = gu4 ]; then
  python3 profiling/warm_cache.py grouped gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_gu4_27.log" 500 tests/test_grouped_gpu.py tests/test_pdl_gpu.py tests/test_layers_gpu.py \
    -k "grouped or moe or many or plan or Grouped or passes or understated"
  grep -E "FAIL|Error" "$W/gpu_tests_gu4_27.log" | head -20
  KS=${KS:-4,3} MS=${MS:-1,4,8} ES=${ES:-20,40,74,242} SHAPES=moe_gu_fused MOE_MMA=0 \
    MOE_VARIANTS="g4w1:+gpb=4 +warps=1;g4w2:+gpb=4 +warps=2;g8w1:+gpb=8 +warps=1" \
    timeout 400 python3 profiling/moe_ab.py --out "$W" > "$W/gu4_27.log" 2>&1
  grep -vE "^\s*$" "$W/gu4_27.log" | tail -30
fi
# Measured (gu4_27.log; 167 GPU tests passed): k = 4 gate/up as 4 x 1 (96 registers) at 1 token 40 / 74 / 242 experts
#   -15 / -11 / -3 % but 20 experts +7 % and at 4 tokens +5..+14 % (four blocks per SM by shared memory): not taken;
#   k = 3 (128 registers) 4 x 2 faster than 4 x 1 up to 74 experts (40 experts 30.81 -> 27.54 us): the rule's 4 x 1 for
#   gate/up now k = 2 only.
# STEP=final1: the GPU tests of the grouped / PDL / layer files, then the MoE table (8 / 10 experts, k = 2..5, 1..64
#   tokens; the twenty-third session's moe-final45 is the baseline).  Expected: 8 / 10 experts as before (their plans
#   and kernels unchanged but for the passes' loop bound and the shared memory reserved at 1..4 tokens).
if [ "$STEP" = final1 ]; then
  python3 profiling/warm_cache.py grouped gemv wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_final27.log" 400 tests/test_grouped_gpu.py tests/test_pdl_gpu.py tests/test_layers_gpu.py
  grep -E "FAIL|Error" "$W/gpu_tests_final27.log" | head -20
  timeout 300 python3 profiling/bench.py --out "$W" --shapes moe --k 2,3,4,5 --moe-M 1,2,4,8,16,32,64 \
    --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag moe-final47 > "$W/bench_moe47.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe47.log" | grep -E "\| 4 \||k = 4" | head -30
fi
# STEP=final2: the layer step (k = 4 and 2, T = 1..128), many experts (128 / 512, 1..8 tokens), memcheck over
#   sanitize_slices.py.  Expected: layer27b's numbers; 512 experts 4 tokens TOTAL ~-15 % against moe-many26.
if [ "$STEP" = final2 ]; then
  python3 profiling/warm_cache.py grouped gemv wgmma 2>&1 | tail -1
  timeout 200 python3 profiling/bench.py --out "$W" --shapes none --moe-layer --k 4,2 --layer-T 1,2,4,8,32,128 --reps 15 \
    --tag layer27-final > "$W/bench_layer27.log" 2>&1
  grep -E "^\| [0-9]+ \| [24] " "$W/bench_layer27.log"
  timeout 200 python3 profiling/bench.py --out "$W" --shapes moe --experts 128,512 --k 4,2 --moe-M 1,4,8 \
    --columns Grouped --reps 15 --tag moe-many27 > "$W/bench_many27.log" 2>&1
  grep -E "TOTAL" "$W/bench_many27.log"
  sanitize memcheck "$W/memcheck_slices27b.log" 200 profiling/sanitize_slices.py
fi
# Measured (final1 / final2, H100): 238 GPU tests passed; moe-final47 (8 / 10 experts) as moe-final45; moe-many27 512
#   experts k = 4 4 / 8 tokens 449.6 / 529.5 us (moe-many26 507.6 / 601.5); layer27-final T = 1 / 2 / 4 / 8 / 32 / 128
#   20.7 / 32.1 / 49.1 / 80.8 / 222.7 / 460.6 us; memcheck clean.
# STEP=h200: the same tree A/B on an H200 (the plans were tuned on the H100; same SM count, more bandwidth): MoE 10..242
#   experts k = 2 / 4 at 1 token, layer step T = 1 / 2 / 8 / 32.  Expected: the H100's direction (-10..-40 % at 14+
#   experts, 8 / 10 experts and T = 1 unchanged).
if [ "$STEP" = h200 ]; then
  python3 profiling/warm_cache.py grouped gemv 2>&1 | tail -1
  OUT=$W PREV_TREE=ab_prev AB_TAG=moe27h WARM="grouped gemv" AB_TIMEOUT=200 \
    AB_ARGS="--shapes moe --experts 10,20,74,242 --k 4,2 --moe-M 1 --columns Grouped --reps 15" \
    bash profiling/tree_ab.sh 2>&1 | tail -20
  OUT=$W PREV_TREE=ab_prev AB_TAG=layer27h WARM="grouped gemv" AB_TIMEOUT=200 \
    AB_ARGS="--shapes none --moe-layer --k 4 --layer-T 1,2,8,32 --reps 15" bash profiling/tree_ab.sh > /dev/null 2>&1
  for v in new prev; do echo "== layer $v"; grep -E "^\| [0-9]+ \| 4 " "$W/layer27h_$v.log"; done
fi
# Measured (h200, an H200): TOTAL 1 token k = 4 20 / 74 / 242 experts 41.76 / 81.60 / 240.80 -> 25.86 / 70.77 / 204.36 us;
#   layer step T = 2 / 8 / 32 47.26 / 90.50 / 261.48 -> 31.88 / 80.17 / 223.81 us; 10 experts and T = 1 unchanged.
# STEP=decode: the decode layer step's two helper kernels.  The combine summed its topk choices one at a time: per
#   choice a pos / weight load, then the row's load, each waiting (topk = 10: ~20 dependent L2 round trips per thread);
#   now in batches of 8 (loads in flight together, the sum in the same order: bit-identical).  The one-block routing
#   kernel now launches as a programmatic dependent (waits at entry) and lets gate/up launch at once.  Expected: layer
#   step T = 1 -1.5..-3 us (20.7 us), T = 2 / 8 less in proportion.  GPU tests (routing, combine, a late writer of the
#   ids / rows / weights in safe and full PDL), memcheck / racecheck over sanitize_route.py, then the layer step against
#   the previous commit (PREV_TREE=ab_prev: git archive of 6972073).
if [ "$STEP" = decode ]; then
  python3 profiling/warm_cache.py grouped gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_decode27.log" 300 tests/test_pdl_gpu.py tests/test_grouped_gpu.py \
    -k "route or combine or moe_forward or late_writer"
  grep -E "FAIL|Error" "$W/gpu_tests_decode27.log" | head -20
  sanitize memcheck "$W/memcheck_route27.log" 120 profiling/sanitize_route.py
  sanitize racecheck "$W/racecheck_route27.log" 120 profiling/sanitize_route.py
  OUT=$W PREV_TREE=ab_prev AB_TAG=layer27d WARM="grouped gemv" AB_TIMEOUT=150 \
    AB_ARGS="--shapes none --moe-layer --k 4 --layer-T 1,2,8 --reps 20" bash profiling/tree_ab.sh > /dev/null 2>&1
  for v in new prev; do echo "== layer $v"; grep -E "^\| [0-9]+ \| 4 " "$W/layer27d_$v.log"; done
fi
# STEP=final3: the final tree's GPU tests of the touched families (grouped / PDL / layers; the dense GEMV cubins are
#   byte-identical to e03df5b's, cubin_diff.py).
if [ "$STEP" = final3 ]; then
  python3 profiling/warm_cache.py grouped gemv wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_final27b.log" 400 tests/test_grouped_gpu.py tests/test_pdl_gpu.py tests/test_layers_gpu.py
  grep -E "FAIL|Error" "$W/gpu_tests_final27b.log" | head -20
fi
# Measured (final3, H100, git de7f7ce): 241 passed (the call reached the session's device-time limit while packing up;
#   the log came back whole).
# Measured (decode, H100; 37 GPU tests passed with the late-writer test, memcheck / racecheck clean over sanitize_route.py):
#   layer step k = 4 T = 1 / 2 / 8, moe_forward 20.02 / 31.71 / 80.25 -> 19.45 / 31.42 / 79.71 us; the routing alone 3.23 ->
#   2.80 us; the steps with the routing given (the combine's batches) 18.62 -> 18.44 at T = 1: the combine was ~0.2 us
#   slower, not the ~2-3 us the dependent loads suggested.
finish_run run27
