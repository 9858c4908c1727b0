#!/usr/bin/env bash
# Thirty-fourth session (2026-11-27).  From the repo root:  OUT=/tmp/out STEP=ab1 bash profiling/run41.sh
#   (kind nvidia-h100-x1; carry ab_prev/ = b0b87fc's tree for the old column)
. profiling/run_env.sh
start_run ab1
RUN=41
# (ab_trees: profiling/run_env.sh; ab_prev/tree holds b0b87fc's tree here)
# STEP=ab1: A's fragments unpredicated (gemv_block: a token row past M reads row M - 1, its MMA column is never
#   read; the streaming GEMV: the producers zero-fill A's chunks past K, rows >= M read the stage's leftovers into
#   columns never written out).  SASS: the decode GEMV's step loses its 8-12 CS2R zeroings (k = 4 C8: 275 -> 272
#   lines, step 0 328 -> 305), the streaming GEMV's unit at MT = 2 239 -> 219 lines (16 CS2R and the K-end
#   predicate), its producers' division by the row's chunks gone; registers MT = 2 115 -> 111.
#   Expect: M = 1 / 4 within -0.5 %..-1.5 % a TOTAL (the step's instructions after the wait), MoE 1 / 4 tokens
#   -0.02..-0.05 us a kernel; M = 16 / 32 (STREAM) -2..-5 % on the streamed shapes.
# (ab1 / ab2 ran on trees not kept: the changes they measured were reverted after them.)
# Result (ab41m1 / ab41moe, H100): slower everywhere -- M = 1 TOTAL k = 2 / 3 / 4 / 5 15.03 / 18.48 / 17.65 / 24.09 ->
#   16.53 / 19.16 / 18.35 / 25.06 us, M = 4 +5..+9 %, MoE down 4 tokens 4.53 / 5.28 -> 4.67 / 5.47.  The A loads of every
#   lane cost shared-memory wavefronts (a full-warp LDS.128 is four quarter-warp passes; predicated, only the valid rows'
#   lanes pass): beside a step's 32+ table lookups the shared-memory pipe, not the issue, is what it costs.  gemv_block
#   reverted; the streaming GEMV keeps the change for ab2 (at M = 16 / 32 all its rows are valid: no extra wavefronts).
if [ "$STEP" = ab1 ]; then
  ab_trees ab41m1 gemv --M 1,4 --k 2,3,4,5 --columns matmul --reps 15
  ab_trees ab41moe "gemv grouped" --shapes moe --k 4 --moe-M 1,4 --experts 8,10 --columns Grouped,Grouped:stable --reps 15
fi
# STEP=ab2 (the tree of ab1 with gemv_block reverted): the streaming GEMV's side of it (M = 16 / 32, k = 4), then the GPU tests of the three families that changed
#   and the host overhead of one matmul call (issue 3: final61-m1 had three cells above 10 us from one run of 200
#   calls; profiling/host_overhead.py: 500 calls, the median of 5 runs, with the bare launch as the floor).
if [ "$STEP" = ab2 ]; then
  AB_TIMEOUT=150 ab_trees ab41d "gemv_stream gemv" --M 16,32 --k 4 --columns STREAM,matmul --reps 15
  python3 profiling/warm_cache.py gemv_stream 2>&1 | tail -1
  gpu_tests "$W/gpu_tests41a.log" 200 tests/test_gemv_stream_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests41a.log" | head
  sanitize memcheck "$W/memcheck_stream41.log" 150 profiling/sanitize_stream.py
  timeout 100 python3 profiling/host_overhead.py --out "$W" --M 1 --calls 500 --repeats 5 > "$W/host41.log" 2>&1
  grep -A8 "## Enqueue" "$W/host41.log"
fi
# Result (ab41d, H100): the streaming GEMV slower -- M = 16 STREAM TOTAL 34.42 -> 36.34 us (KV 5.33 -> 6.15), M = 32
#   equal; reverted (its consumer loop 239 -> 219 SASS lines, 115 -> 111 registers, yet slower: the predicates were not
#   the cost).  68 streaming tests and memcheck passed on it.  Host overhead (host41, 500 calls, median of 5 runs):
#   `matmul(A, qw, out=out)` 6.06-6.77 us enqueue at M = 1 on gate/up, down, Q, KV (bare cuLaunchKernel 3.7-4.9 us):
#   under 10 us; final61-m1's 9-11 us cells were one-run noise.
# STEP=asw: the staged A's bank conflicts.  A lane (g, t) of gemv_block reads chunks 4t..4t+3 of its row, one LDS.128
#   each: lanes t and t + 2 sit 128 bytes apart and rows of either parity a multiple of 256 bytes apart, so every
#   quarter-warp pass is 2-way (one row: M = 1) to 4-way (two rows) conflicted -- at C8 M = 1 four passes a load, 16 a
#   step beside the 32 lookups'.  ab1 showed the step pays for shared-memory passes (8-16 more cost 4-10 %).
#   sw (-DKBIT_GEMV_ASW=1): chunk q of row m stored at q ^ ((q bit 3) | (m & 1) << 1), a lane reads chunk r at its base
#   ^ 16 r: conflict-free (two passes a load at C8 M = 1, one a row pair elsewhere); SASS +9 a step (k = 4 C8 274 ->
#   283, the XORs and the lane's swizzle), 96 registers.  swp (+ -DKBIT_GEMV_C8PACK=1): C8's token column j = 2 row +
#   half, so at M = 1 both halves' lanes share quarter-warp 0 (one pass a load; +6 a step).  new = this source without
#   the flags (the A loads as a predicated asm LDS.128, SASS -1 a step), old = b0b87fc's (ab_prev/gemv_b0b87fc.cu).
#   Expect: sw / swp -1..-4 % at M = 1 / 4 (k = 2 most: the quad table's LDS.64 are two passes each), new = old.
if [ "$STEP" = asw ]; then
  SHAPES=gateup,down,Q,O,KV KS=2,4 MS=1,4 \
    AB_VARIANTS="old:src=ab_prev/gemv_b0b87fc.cu;sw:-DKBIT_GEMV_ASW=1;swp:-DKBIT_GEMV_ASW=1 -DKBIT_GEMV_C8PACK=1" \
    CUT=230 gemv_ab_twice asw41 250
fi
# Result (gemv_asw41_{1,2}.log, H200, two passes): M = 4 faster at every cell (TOTAL k = 2 18.00 / 18.06 -> 17.02 /
#   17.06 us, k = 4 19.80 / 19.97 -> 19.26 / 19.38; KV k = 4 2.23 -> 2.09), M = 1 slower (k = 2 14.93 -> 15.13, k = 4
#   17.28 / 17.42 -> 17.54 / 17.66: the step's 9 more instructions); swp = sw within 0.1 us (M = 1 k = 4 0.1 better).
#   new (the asm load) 0-0.1 us slower than old.  Conflicts cost at M >= 2; at M = 1 the instructions weigh more.
# (STEPs apad, apaddiag, regs, ncu, stall ran on a tree with the KBIT_GEMV_APAD hook in kbit_gemv.cu, kbitcupy/_compile.py,
#  kbitcupy/gemv.py (a_row_bytes) and gemv_ab.py (the -DKBIT_AB_SMEM_PAD / -DKBIT_AB_CARVEOUT tokens), removed after
#  them; profiling/NOTES.md thirty-fourth session describes it.  Outputs of regs / ncu / stall:
#  results/nvidia-h200_2026-11-27_apad_ncu41.txt.)
# STEP=apad: the same conflicts removed by padding instead (KBIT_GEMV_APAD=1 in the environment: a 128-element
#   segment of a staged row takes 17 chunks, chunks 8..15 one further, the row stride 32 mod 128 bytes; the lane's
#   offsets stay immediates, SASS k = 4 C8 step 275 lines as before), process-level, two alternations: dense M = 1 / 4
#   (k = 2 / 4) and the grouped GEMV (k = 4, 1 / 4 tokens).  Expect: M = 4 as sw (-3..-5 %), M = 1 equal or faster;
#   MoE 4 tokens -2..-4 %.
if [ "$STEP" = apad ]; then
  for a in 0 1; do KBIT_GEMV_APAD=$a python3 profiling/warm_cache.py gemv 2>&1 | tail -1; done
  env_ab KBIT_GEMV_APAD 1 apad 2,4
fi
# Result (apad_{off,on}{1,2}.log, H200, two alternations): the grouped GEMV faster -- down 4 tokens 8 / 10 experts 4.51 /
#   5.17 -> 4.31 / 5.01 us (-4 / -3 %), 1 token 4.32 -> 4.27, gate/up fused 1 token equal; but the dense GEMV much
#   slower at every cell (M = 1 TOTAL k = 2 / 4 14.87 -> 17.07 / 17.42 -> 22.06, KV 1.72 -> 1.87, down 3.58 -> 3.97: one
#   block per SM, so not occupancy alone), though its SASS a step is as before and the results are right.
# STEP=apaddiag: why (one process, gemv_ab variants, smem planned for each): pad = -DKBIT_GEMV_APAD=1; padc = the same
#   with the kernel's preferred carveout 100 (max shared memory); big = the plain kernel given 1 KB more shared memory
#   (-DKBIT_AB_SMEM_PAD, not a kernel macro); newc = the plain kernel with carveout 100.  Expect: if big is slow too,
#   the extra bytes (carveout) and padc / newc fix it; if only pad is slow, the padded layout itself.
if [ "$STEP" = apaddiag ]; then
  SHAPES=gateup,down,Q,KV KS=2,4 MS=1,4 \
    AB_VARIANTS="pad:-DKBIT_GEMV_APAD=1;padc:-DKBIT_GEMV_APAD=1 -DKBIT_AB_CARVEOUT=100;big:-DKBIT_AB_SMEM_PAD=1024;newc:-DKBIT_AB_CARVEOUT=100" \
    CUT=230 gemv_ab_twice apaddiag41 200
fi
# Result (gemv_apaddiag41_{1,2}.log, H200): pad as slow as in apad (gate/up k = 4 M = 1 4.32 -> 5.79 us); padc the same;
#   big and newc = new.  So not the shared-memory size nor the carveout: the padded kernel itself.  Its SASS here
#   (NVRTC 12.9, nvcc 13) has the step's instruction count and 95-96 registers; the GPU machine's NVRTC may allocate
#   differently (a block per SM lost at 97+ registers would explain the big shapes' +35 %).
# STEP=regs: the GPU machine's NVRTC registers of the dense plans' kernels and the grouped LB ones, plain / APAD / ASW.
if [ "$STEP" = regs ]; then
  python3 profiling/regs_probe.py "-DKBIT_GEMV_APAD=1" 2>&1 | tail -40
fi
# Result (regs): the device's NVRTC gives the padded kernels the same or fewer registers (gate/up k = 4 C8 96 -> 95).
# STEP=ncu: ncu of gate/up (k = 4 M = 1 C8; k = 2 M = 4 16-column) plain and padded: duration, occupancy, shared-memory
#   wavefronts and bank conflicts of the loads, instructions.  Expect: the padded kernel's shared-load conflicts lower
#   (the design) -- and something else higher that explains its time.
if [ "$STEP" = ncu ]; then
  MET=gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed.sum,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__cycles_active.avg
  for a in 0 1; do
    for shp in "5120 2048 1 4" "5120 2048 4 2"; do
      echo "== APAD=$a $shp"
      KBIT_GEMV_APAD=$a timeout 120 ncu --clock-control none --kernel-name regex:kbit_gemv --launch-skip 2 --launch-count 1 \
        --metrics $MET python3 profiling/ncu_gemv_shape.py $shp 2>&1 | grep -E "^\s+(gpu__|sm__|l1tex__|smsp__|launch__)" | awk '{print $1, $(NF)}'
    done
  done
fi
# Result (H200, one launch each, not a graph): gate/up k = 4 M = 1 7.23 -> 8.80 us with the padding, though its shared
#   load bank conflicts fell 51.8 K -> 7.4 K and load wavefronts 272 K -> 228 K (instructions 2.67 M -> 2.65 M); k = 2
#   M = 4 7.14 -> 8.10 us, conflicts 143 K -> 18 K, wavefronts 363 K -> 238 K.  The conflicts were real and are gone,
#   yet the kernel is slower: the shared-memory pipe is not what bounds it.
# STEP=stall: where the padded kernel's time goes (ncu WarpStateStats, the same two runs of gate/up k = 4 M = 1).
if [ "$STEP" = stall ]; then
  for a in 0 1; do
    echo "== APAD=$a"
    KBIT_GEMV_APAD=$a timeout 150 ncu --clock-control none --kernel-name regex:kbit_gemv --launch-skip 2 --launch-count 1 \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active" \
      python3 profiling/ncu_gemv_shape.py 5120 2048 1 4 2>&1 | grep -E "^\s+(gpu__|smsp__)" | awk '$NF+0 > 0.05 {print $1, $NF}'
  done
fi
# Result (H200): long-scoreboard stalls a issued instruction 0.96 -> 3.42, barrier 0.44 -> 0.81, issue active 57.5 ->
#   47.5 %: the warps wait on A's cp.async copies (the prologue after the PDL wait), which the padded rows' 16-byte gaps
#   slowed (a warp's 512 contiguous bytes no longer land as whole 128-byte lines).  The XOR swizzle keeps every chunk
#   in its 64 bytes, so its copies are as before.
# STEP=asw2: the swizzles again, now as hooks of this source: sw (KBIT_GEMV_ASW=1, full, three XORs a step, SASS
#   k = 4 C8 step 275 -> 283) and rsw (=2: the row parity only -- two passes instead of four at M >= 2, none saved at
#   M = 1; the lane's chunks 0, 1 and 2, 3 from two bases, immediates; SASS 281, 96 registers); dense M = 1 / 4 (k = 2
#   / 4) and the grouped GEMV (k = 4, 1 / 4 tokens).  Expect: sw as in asw; rsw most of sw's M = 4 gain at a smaller
#   M = 1 cost.
if [ "$STEP" = asw2 ]; then
  SHAPES=gateup,down,Q,O,KV KS=2,4 MS=1,4 \
    AB_VARIANTS="old:src=ab_prev/gemv_b0b87fc.cu;sw:-DKBIT_GEMV_ASW=1;rsw:-DKBIT_GEMV_ASW=2" \
    CUT=230 gemv_ab_twice asw2_41 250
  SHAPES=moe_dn,moe_gu_fused KS=4 MS=1,4 ES=8,10 MOE_MMA=0 \
    MOE_VARIANTS="old:src=ab_prev/gemv_b0b87fc.cu;sw:-DKBIT_GEMV_ASW=1;rsw:-DKBIT_GEMV_ASW=2" CUT=230 moe_ab_twice asw2_41 200
fi
# Result (gemv_asw2_41_{1,2}, moe_asw2_41_{1,2}, H200, two passes): rsw dense M = 1 k = 4 17.38 / 17.40 (old 17.38 /
#   17.37), M = 4 k = 4 19.17 / 19.16 (old 19.95 / 19.92), k = 2 M = 1 15.14 / 15.16 (old 15.01 / 15.00), M = 4 17.19 /
#   17.18 (old 18.09 / 18.10); sw M = 1 +1.4 % (k = 4 17.63).  Grouped k = 4 (gate/up fused + down): 1 token 10.52 /
#   12.21 (old 10.52 / 12.33), 4 tokens 10.62 / 12.25 (old 10.95 / 12.64).  Kept: rsw at k >= 3 (kbit_gemv.cu's
#   gemv_asw; k = 2's kernels byte-identical to b0b87fc's).
# STEP=close1: the whole tree against b0b87fc's (ab_prev/tree) on this machine: M = 1 / 4 every k, MoE k = 4 1 / 4 / 16
#   / 64 tokens.  Expect: k = 3..5 M = 4 -3..-5 %, M = 1 equal; k = 2 equal; MoE 4 tokens -3 %.
if [ "$STEP" = close1 ]; then
  ab_trees close41m1 gemv --M 1,4 --k 2,3,4,5 --columns matmul --reps 15
  ab_trees close41moe "gemv grouped" --shapes moe --k 4 --moe-M 1,4,16,64 --experts 8,10 --columns Grouped,Grouped:stable \
    --reps 15
fi
# Result (H200 close41m1 / close41moe, H100 the same step again, new vs old, same run): H100 M = 1 TOTAL k = 2 / 3 / 4 / 5
#   14.97 / 18.50 / 17.62 / 24.02 us (old 14.99 / 18.45 / 17.64 / 24.07), M = 4 17.89 / 20.16 / 19.32 / 25.52 (old 17.93 /
#   20.96 / 20.07 / 26.45); MoE down 4 tokens 4.33 / 5.07 (old 4.47 / 5.25), 1 token 4.32 / 5.03 (old 4.30 / 5.09).  H200
#   M = 1 k = 2..5 +0.3..+0.8 % (k = 2's kernels byte-identical: the noise), M = 4 k = 3 / 4 / 5 -2.9 / -3.5 / -3.1 %; MoE
#   4 tokens gate/up fused + down 11.07 / 12.68 -> 10.71 / 12.31.
# STEP=close2: the GPU tests of the decode GEMV family (dense, grouped, PDL) and memcheck over the dense and grouped
#   sanitizer drivers.  Expect: all pass, 0 errors.
if [ "$STEP" = close2 ]; then
  python3 profiling/warm_cache.py gemv grouped 2>&1 | tail -1
  gpu_tests "$W/gpu_tests41b.log" 330 tests/test_gemv_gpu.py tests/test_grouped_gpu.py tests/test_pdl_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests41b.log" | head
  sanitize memcheck "$W/memcheck_c8_41.log" 110 profiling/sanitize_c8.py
  sanitize memcheck "$W/memcheck_glb41.log" 110 profiling/sanitize_grouped_lb.py
fi
# STEP=m816: issue 4's M = 5..16 side of the swizzle (after this session's note; the tree 80056a4 + the hook value 2).
#   The decode GEMV serves M = 8 (one token tile: swizzled now, 8 rows = four row pairs, 4-way conflicted before);
#   M = 16 is the streaming GEMV's on the big shapes.  (a) this tree vs b0b87fc at M = 8 / 16 (k = 4; GEMV, STREAM,
#   matmul); (b) gemv_ab at M = 9 / 16 with the swizzle at two token tiles too (-DKBIT_GEMV_ASW=2).  Expect: M = 8 GEMV
#   -3..-6 %; at M = 16 the swizzled GEMV gains but stays behind STREAM on the big shapes.
if [ "$STEP" = m816 ]; then
  AB_TIMEOUT=200 ab_trees close41d8 "gemv gemv_stream" --M 8,16 --k 4 --columns GEMV,STREAM,matmul --reps 15
  SHAPES=gateup,down,Q,O,KV KS=4 MS=9,16 AB_VARIANTS="asw2:-DKBIT_GEMV_ASW=2" CUT=200 gemv_ab_twice m816_41 150
fi
# Result (H100): (a) M = 8 k = 4 TOTAL 25.58 -> 22.73 us (1.82x -> 2.05x fp16: the swizzle at one token tile); M = 16
#   unchanged (33.53 -> 33.47: STREAM / wgmma serve it).  (b) the GEMV at two token tiles swizzled: M = 9 TOTAL 31.07
#   -> 28.74, M = 16 41.39 -> 35.87 us (gate/up 12.43 -> 10.88, down 9.06 -> 7.75, Q 7.56 -> 6.52, O 7.75 -> 6.71, KV
#   4.59 -> 3.98); at M = 16 O and KV now beat the stream (7.14 / 5.29).  Kept at k <= 4 (gemv_asw).
# STEP=sweep: the dispatch bands at M = 9..16 after it (H100 table: k = 2..4, the seven dense shapes; GEMV, STREAM and
#   the dispatched matmul), and the dense GEMV's GPU tests.  Expect: GEMV ahead of STREAM on more (shape, M) than the
#   table's bands say; all tests pass.
if [ "$STEP" = sweep ]; then
  python3 profiling/warm_cache.py gemv gemv_stream 2>&1 | tail -1
  timeout 250 python3 profiling/bench.py --out "$W" --M 9,10,12,14,16 --k 2,3,4 --columns GEMV,STREAM,matmul --reps 15 \
    --tag sweep41 > "$W/bench_sweep41.log" 2>&1
  grep -E "^### M|^\| TOTAL" "$W/bench_sweep41.log"
  gpu_tests "$W/gpu_tests41c.log" 250 tests/test_gemv_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests41c.log" | head
fi
# Result (sweep41, H100): the GEMV ahead of the stream on more cells -- k = 4 O 6.58 vs 7.09 us at 16, down 7.59 vs
#   7.64, Q 6.38 vs 6.46; k = 2 / 3 down and O to 14; 101 dense GEMV GPU tests passed (gpu_tests41c).  retune_tables.py
#   with +sweep41 moved the H100 bands (GEMV to 15 / 16 on most shapes), but its contiguous bands kept O / Q k = 4's
#   stream from 15 (an older M = 15 point): O at 16 dispatched 7.8 % over the GEMV.
# STEP=sweep2: the odd M between (11 / 13 / 15, the four big shapes, for the bands), then the grouped / PDL GPU tests
#   and memcheck on the two-tile swizzle.
if [ "$STEP" = sweep2 ]; then
  python3 profiling/warm_cache.py gemv gemv_stream grouped 2>&1 | tail -1
  timeout 150 python3 profiling/bench.py --out "$W" --M 11,13,15 --k 2,3,4 --columns GEMV,STREAM,matmul --reps 15 \
    --shapes gateup,down,Q,O --tag sweep41b > "$W/bench_sweep41b.log" 2>&1
  grep -E "^### M|^\| (down|Q|O) \| 4 " "$W/bench_sweep41b.log"
  gpu_tests "$W/gpu_tests41d.log" 330 tests/test_grouped_gpu.py tests/test_pdl_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests41d.log" | head
  sanitize memcheck "$W/memcheck_c8_41b.log" 110 profiling/sanitize_c8.py
fi
# Result (sweep41b, H100): GEMV ahead at M = 11 / 13 / 15 on k = 4 down, Q, O (O 6.50 vs 7.15 us at 15); retune_tables.py
#   with +sweep41b: k = 4 down / Q / O GEMV to 16, stream from 17.  229 grouped / PDL GPU tests passed (gpu_tests41d),
#   memcheck over sanitize_c8.py 120 checks, 0 errors (memcheck_c8_41b).
# STEP=dclose: issue 4's M = 8 / 12 / 16 table (k = 4) with the rebuilt bands (this tree's dispatch).  Expect: matmul =
#   the best column within 2 %; M = 16 TOTAL ~32.2 us (1.46x fp16).
if [ "$STEP" = dclose ]; then
  python3 profiling/warm_cache.py gemv gemv_stream 2>&1 | tail -1
  timeout 150 python3 profiling/bench.py --out "$W" --M 8,12,16 --k 4 --columns GEMV,STREAM,matmul --reps 15 \
    --tag dclose41 > "$W/bench_dclose41.log" 2>&1
  grep -E "^### M|^\| TOTAL" "$W/bench_dclose41.log"
fi
# Result (dclose41, H100): k = 4 TOTAL M = 8 22.84 us (2.04x), M = 12 29.15 (1.61x), M = 16 32.27 (1.46x; 1.5x needs 31.4);
#   matmul within 1 % of the best column; M = 8 % of SOL gate/up 67, down 71.
# STEP=plan16: the two-tile GEMV's plans at M = 12 / 16 now that its A loads are conflict-free (plans tuned with them
#   conflicted): warps 4 / 8 / 16 and the second chain on / off, k = 4, down, Q, O, KV; two passes.  Expect: one of
#   them 3-5 % faster on some shape (M = 16 TOTAL needs -0.9 us of 32.3 for 1.5x), or none.
if [ "$STEP" = plan16 ]; then
  SHAPES=down,Q,O,KV KS=4 MS=12,16 AB_PLANS="w4:warps=4;w8:warps=8;w16:warps=16;d0:dual=0;d1:dual=1" CUT=220 \
    gemv_ab_twice plan16_41 120
fi
# Result (gemv_plan16_41_{1,2}, H100): the current plans stand -- one chain (d0) 0.5-1 % faster on down / O / KV (0.03-0.07
#   us, the passes' noise), 4 / 8 warps slower where 16 run and 16 slower where 8 run (Q 6.44 -> 8.83 us at M = 16).
# Result (H200): 330 passed (gpu_tests41b); memcheck sanitize_c8.py 120 checks, sanitize_grouped_lb.py 52, 0 errors.
finish_run run41
