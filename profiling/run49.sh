#!/usr/bin/env bash
# Forty-second session (2026-11-28).  From the repo root:  OUT=/tmp/out STEP=aca bash profiling/run49.sh
. profiling/run_env.sh
start_run aca
# STEP=aca: the chain trace (chain48c, gate/up k = 4 M = 1, safe launch) has A staged ~0.8 us after the wait and the
#   L2-prefetched step-0 weights landing ~1 us after it, while the SM-side bytes right after the wait are A's as much
#   as the weights': five 4-warp blocks an SM each copy the same 4 KB of A through L2 (cp.async.cg), 2.6 MB over the
#   GPU for 5.2 MB of weights.  Two hooks in kbit_gemv.cu:
#   ca  (-DKBIT_GEMV_A_CA=1): A's copies through L1 (cp.async.ca), so an SM's blocks read A from L2 about once;
#   af1 (-DKBIT_EXP_A_FIRST=1): A's copies requested before the first weights after the wait (the dense safe launch);
#   af2 (=2): the same and the whole ring with them (the late fill dropped; gate/up then takes 114 registers: four
#        blocks an SM, a confound there).
# Expect: ca -0.05..-0.2 us on gate/up (five blocks an SM share A), less on the two-block shapes; af1 small either way;
#   af2 slower (late0 / ring-early of the forty-first / fortieth sessions) unless A behind step 1 was their cost.
if [ "$STEP" = aca ]; then
  AB_NOBASE=1 KS=4,2 MS=1 SHAPES=gateup,down,Q,O AB_VARIANTS="ca:-DKBIT_GEMV_A_CA=1;af1:-DKBIT_EXP_A_FIRST=1;af2:-DKBIT_EXP_A_FIRST=2" \
    CUT=230 gemv_ab_twice aca49 260
  finish_run run49
fi
# Result (aca, H200, `nvidia-h200_2026-11-28_gemv_aca49_{1,2}.log`): confounded -- gemv_ab's variant columns launch
#   without the package's blocks-an-SM cap unless given +cap=1, so Q / O k = 4 and gate/up k = 2 ran 15-22 % slower in
#   every variant (the thirty-ninth session's uncapped mode).  Where the cap does not bind: ca gate/up k = 4 4.26 ->
#   4.22 us (-1 %), down 4.10 -> 4.13, k = 2 down / O equal; af1 gate/up k = 4 +0.5 %, down +2 %; af2 slower everywhere
#   (down k = 4 4.10 -> 4.65; gate/up 6.57 at 114 registers): dead.
# STEP=aca2: ca and af1 again with the cap (+cap=1), plus the current source through the same variant path (v0) as
#   the control, k = 4 / 2, M = 1 and 4 (M = 4: four A rows, 16 KB a block at K = 2048, so more for ca to save).
# Expect: v0 = new within 1 %; ca -1 % on gate/up k = 4, 0..-2 % on the others, more at M = 4; af1 +-1 %.
if [ "$STEP" = aca2 ]; then
  AB_NOBASE=1 KS=4,2 MS=1,4 SHAPES=gateup,down,Q,O,KV \
    AB_VARIANTS="v0:+cap=1;ca:-DKBIT_GEMV_A_CA=1 +cap=1;af1:-DKBIT_EXP_A_FIRST=1 +cap=1" CUT=230 gemv_ab_twice aca49b 280
  finish_run run49
fi
# Result (aca2, H200, two passes, `nvidia-h200_2026-11-28_gemv_aca49b_{1,2}.log`): v0 = new (the control).  ca neutral to
#   slower: k = 4 M = 1 TOTAL 17.20 / 17.23 -> 17.22 / 17.24 (gate/up 4.28 -> 4.23, the rest +0.3..+1 %), M = 4 +0.4 %,
#   k = 2 M = 4 +0.8 %; af1 slower everywhere (k = 4 M = 1 +2.9 %, KV +7 %).  A's bytes after the wait (L2 -> SM) are not
#   what holds the launch, and neither is its order against the weights.  Both hooks removed from the source in
#   review (profiling/patches/session42-gemv-a-ca-first.patch re-applies them).
# STEP=parts: which part of the step's compute is on the path (nocomp48: all of it, -20 %): diagnostic builds, results
#   wrong -- nolut (-DKBIT_EXP_NO_LUT: the pair key instead of the table's pair; no address IMAD, no LDS: 32 + 32 a step
#   at k = 4 C8), noscale (-DKBIT_EXP_NO_SCALE: no HMUL2, 32 a step), both.  The step is ~190 issued instructions with
#   ~36 shared-memory wavefronts a warp: an SM's burst (20 warps) is ~935 issue cycles a scheduler and ~720 wavefront
#   cycles, so both are near the 0.5-0.6 us the chain trace shows a step.
# Expect: if issue-bound, noscale (-17 % of the step's instructions) and nolut (-34 %) move M = 1 in proportion (a
#   fifth of the nocomp gain and a third); if the shared-memory wavefronts bound it, noscale ~0 and nolut most of it.
if [ "$STEP" = parts ]; then
  AB_NOBASE=1 KS=4,2 MS=1 SHAPES=gateup,down,Q,O,KV \
    AB_VARIANTS="nolut:-DKBIT_EXP_NO_LUT +cap=1;noscale:-DKBIT_EXP_NO_SCALE +cap=1;both:-DKBIT_EXP_NO_LUT -DKBIT_EXP_NO_SCALE +cap=1" \
    CUT=230 gemv_ab_twice parts49 200
  finish_run run49
fi
# Result (parts, H200, two passes, `nvidia-h200_2026-11-28_gemv_parts49_{1,2}.log`; results wrong by design): k = 4 M = 1
#   TOTAL (5 shapes) 17.25 / 17.26 -> nolut 16.13 / 16.14 (-6.5 %; gate/up 4.28 -> 3.95, down -6 %, Q / O -6.5 %), noscale
#   17.54 / 17.56 (+1.7 %: 32 fewer instructions a step and slower), both 16.82 / 16.86 (-2.4 %); k = 2 15.03 -> 14.38 /
#   15.07 / 14.26.  So the issued instructions are not what holds the step (noscale), the table lookups' address +
#   LDS are worth at most ~6.5 % (short of the 2.5x target's -5 % only if every lookup went), and the removals
#   interact with ptxas's schedule by +-4 % (both < nolut).  The rest of nocomp48's -20 % is the key build, the A
#   fragments and the MMA chain (latency a warp, not throughput an SM).
# STEP=moeplan: issue 5's H200 "never slower than fp16 at <= 16 tokens" fails on moe_dn 8 experts x 16 tokens (close47h-moe
#   0.96x default, 1.00x stable; moe_sweep48 GEMV 6.80 vs bmm 6.57).  At 9..16 tokens the grouped GEMV's plan is the
#   per-block group loop (tiles = 2: no slices), per_block from the resident-blocks rule, 4 warps (K = 512: 4 steps),
#   fitted on the H100.  Plan overrides of the grouped GEMV at 12 / 16 tokens, moe_dn and moe_gu_fused, 8 / 10 experts:
#   per_block 1..4, warps 2, slices (gpb 2 x 4 warps, 4 x 4, 2 x 2), and the stable launch for reference.
# Expect: the plan within ~3 % of the best; a slices form may win at 8 experts (128 groups a slot, one table per block).
if [ "$STEP" = moeplan ]; then
  MOE_MMA=0 KS=4 MS=12,16 ES=8,10 SHAPES=moe_dn,moe_gu_fused \
    MOE_VARIANTS="pb1:+per_block=1;pb2:+per_block=2;pb3:+per_block=3;pb4:+per_block=4;w2:+warps=2;g2:+gpb=2 +warps=4;g4:+gpb=4 +warps=4;g2w2:+gpb=2 +warps=2;st:+stable=1" \
    timeout 400 python3 profiling/moe_ab.py --out "$W" > "$W/moe_plan49.log" 2>&1
  grep -vE "^\s*$" "$W/moe_plan49.log" | tail -14
  finish_run run49
fi
# Result (moeplan, H200, `nvidia-h200_2026-11-28_moe_plan49.log`, every column checked): the slices form wins big where
#   its grid fits one wave, and loses where it does not.  8 experts: moe_dn g2w2 (2 groups x 2 warps, 512 blocks of 4
#   warps, four an SM) 12 / 16 tokens 6.34 / 6.77 -> 5.39 / 5.69 us (fp16 bmm 6.55 / 6.57: 1.15x), faster than even the
#   stable launch (5.79 / 6.14); moe_gu_fused g4 (4 x 4 warps, 128 blocks, one an SM) 8.97 / 9.66 -> 7.40 / 7.62 (bmm
#   10.73 / 10.57), g2 7.79 / 8.05.  10 experts (grids past one wave in every form tried): the plan is the best
#   default launch (moe_dn 8.13 / 8.58, gate/up fused 11.78 / 12.84); per_block and warps 2 no better.
# STEP=moeplan2: the one-wave slices forms at two token tiles, more of them and at 4 / 8 / 10 / 16 experts, to fit a
#   rule (among the forms whose grid fits one wave: which): moe_dn g2w2 g4w2 g8w2 g4w1 g5w1 g10w1 g16w1 g4w4, gate/up
#   fused g2w4 g4w4 g5w3 g4w2 g8w2 g2w8.
# Expect: at 8 experts g2w2 / g4 again; at 10 experts g5w3 (gate/up fused, 130 blocks) and g10w1 / g5w1 (down) near
#   or under the plan; at 4 experts the 4-warp groups; at 16 experts nothing fits one wave.
if [ "$STEP" = moeplan2 ]; then
  MOE_MMA=0 MOE_GEMV=1 KS=4 MS=12,16 ES=4,8,10,16 SHAPES=moe_dn \
    MOE_VARIANTS="g2w2:+gpb=2 +warps=2;g4w2:+gpb=4 +warps=2;g8w2:+gpb=8 +warps=2;g4w1:+gpb=4 +warps=1;g5w1:+gpb=5 +warps=1;g10w1:+gpb=10 +warps=1;g16w1:+gpb=16 +warps=1;g4w4:+gpb=4 +warps=4" \
    timeout 280 python3 profiling/moe_ab.py --out "$W" > "$W/moe_plan49b_dn.log" 2>&1
  grep -vE "^\s*$" "$W/moe_plan49b_dn.log" | tail -13
  mv "$W/moe_ab.json" "$W/moe_ab_dn.json"
  MOE_MMA=0 MOE_GEMV=1 KS=4 MS=12,16 ES=4,8,10,16 SHAPES=moe_gu_fused \
    MOE_VARIANTS="g2w4:+gpb=2 +warps=4;g4w4:+gpb=4 +warps=4;g5w3:+gpb=5 +warps=3;g4w2:+gpb=4 +warps=2;g8w2:+gpb=8 +warps=2;g2w8:+gpb=2 +warps=8" \
    timeout 280 python3 profiling/moe_ab.py --out "$W" > "$W/moe_plan49b_gu.log" 2>&1
  grep -vE "^\s*$" "$W/moe_plan49b_gu.log" | tail -13
  finish_run run49
fi
# Result (moeplan2, H200, `nvidia-h200_2026-11-28_moe_plan49b_{dn,gu}.log`, every column checked): the best form at each
#   expert count is an SM's share of the groups in one block, one block an SM (as the one-tile plan's share rule):
#   moe_dn 16 tokens 4 / 8 / 10 / 16 experts: g4w2 3.87 (plan 4.58), g4w2 5.41 / g8w2 5.47 (6.79), g10w1 6.37 (8.59),
#   g16w1 7.76 (10.72); gate/up fused g2w8 5.47 (6.12), g4w4 7.61 (9.70), g5w3 8.98 (12.86), g8w2 11.93 (16.35).  The
#   forms with more blocks an SM, or fewer SMs, slower.  Rule (kbitcupy.gemv.grouped_plan, tiles = 2, k <= 4): gpb = the
#   share (or one more where the share's grid overflows one wave), warps = the one-tile table capped at ks / 2 (two
#   K steps a warp at least: moe_dn 4 experts g4w2 3.87 vs g4w4 4.20).
# STEP=moeval: the rule ("new") against the group loop (old: +gpb=0), the stable launch, the grouped mma and wgmma kernels
#   (default and stable), k = 4, 9 / 12 / 16 tokens, 2..32 experts; k = 2 / 3 at 16 tokens; then the grouped GEMV GPU
#   tests (the 9..16-token plans now slices).
# Expect: new <= old everywhere the rule fires (2 <= share <= 16), = old elsewhere; new under mma / wgmma up to 16
#   experts (down) and ~32 (gate/up fused), which is where choose_impl should take the GEMV.
if [ "$STEP" = moeval ]; then
  MOE_MMA=1 MOE_WG="wg:;wgst:+stable=1" KS=4 MS=9,12,16 ES=2,4,6,8,9,10,12,16,20,32 SHAPES=moe_dn,moe_gu_fused \
    MOE_VARIANTS="old:+gpb=0;st:+stable=1" timeout 300 python3 profiling/moe_ab.py --out "$W" > "$W/moe_val49_k4.log" 2>&1
  grep -E "^(moe|TOTAL)" "$W/moe_val49_k4.log" | tail -64
  mv "$W/moe_ab.json" "$W/moe_ab_k4.json"
  MOE_MMA=1 MOE_WG="wg:" KS=2,3 MS=16 ES=4,8,10,16 SHAPES=moe_dn,moe_gu_fused MOE_VARIANTS="old:+gpb=0" \
    timeout 150 python3 profiling/moe_ab.py --out "$W" > "$W/moe_val49_k23.log" 2>&1
  grep -E "^(moe|TOTAL)" "$W/moe_val49_k23.log" | tail -20
  gpu_tests "$W/gpu_tests_moeval.log" 120 tests/test_grouped_gpu.py -k "gemv or real_moe or tokens_per_expert or moe_forward"
  finish_run run49
fi
# Result (moeval, H200, `nvidia-h200_2026-11-28_moe_val49_{k4,k23}.log`, every column checked; 48 grouped GPU tests passed
#   with the rule): wherever the rule fires the grouped GEMV is the fastest kernel, default and stable launch.  k = 4,
#   16 tokens, down + gate/up fused TOTAL: 8 experts 16.34 (loop) -> 13.03 us (wgmma 17.23, mma 21.97, fp16 bmm 17.30),
#   10: 21.27 -> 15.29 (fp16 20.85), 16: 26.85 -> 19.58 (wgmma 24.22, fp16 29.67), 32 (gate/up only) 31.72 -> 20.44; k = 2
#   / 3 alike (16 tokens 10 experts 19.07 / 20.73 -> 14.37 / 16.33).  One cell slower: moe_dn 2 experts (2 x 2 warps)
#   3.28 -> 3.36, so the rule now wants 8 warps a block.  Down at 20 / 32 experts (no slices): mma / wgmma stay
#   faster than the loop, as choose_impl has them.  choose_impl now takes the GEMV wherever its plan is the slices
#   form at 9..16 tokens (stable ids too).
# STEP=close: the benchmark's MoE table on this tree (1..64 tokens, 8 / 10 experts, k = 4; the 12-token column added),
#   then memcheck over sanitize_slices.py (now with the two-tile slices kernel: 60 slots x 13 groups, a slot's last
#   block partial, K % 64 == 32, empty slots, a second pass).
# Expect: 12 / 16 tokens TOTAL ~1.3x fp16 (was 1.03-1.04x), moe_dn 8 x 16 over 1.0x; 1..8 and 32..64 unchanged.
if [ "$STEP" = close ]; then
  timeout 200 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,8,12,16,32,64 --experts 8,10 \
      --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag close49h-moe > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL|^### " "$W/bench_moe.log" | head -40
  sanitize memcheck "$W/memcheck_slices49.log" 240 profiling/sanitize_slices.py
  finish_run run49
fi
# Result (close, H200, `nvidia-h200_2026-11-28_close49h-moe.{md,json.gz}`, `..._memcheck_slices49.log`): 12 / 16 tokens
#   TOTAL (gate/up fused + down) 1.38x / 1.41x and 1.32x / 1.37x fp16 bmm (8 / 10 experts; close47h-moe 16 tokens
#   1.04x / 1.03x); every MoE row at 8 / 12 / 16 tokens over 1.0x (the lowest moe_dn 8 x 16 1.20x, was 0.96x): issue 5's
#   "never slower than fp16 at <= 16" now holds on the H200.  1 / 4 / 8 / 32 / 64 tokens as before (1.62-1.69x at 1 / 4,
#   0.84-0.94x at 32 / 64).  memcheck over sanitize_slices.py (21 checks, the two-tile slices cases in): 0 errors.
# STEP=tests: the grouped GPU tests (the new two-tile slices test among them) and the MoE layer's.
if [ "$STEP" = tests ]; then
  gpu_tests "$W/gpu_tests_grouped49.log" 420 tests/test_grouped_gpu.py tests/test_layers_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_grouped49.log" | head
  finish_run run49
fi
# Result (tests, H200, `nvidia-h200_2026-11-28_gpu_tests_grouped49.log`): tests/test_grouped_gpu.py + test_layers_gpu.py 183
#   passed (the new two-tile slices test: k = 2..4, fp16 / bf16, three shapes).  NVRTC cubins of all 165 groups
#   byte-identical to 7e1f65b (the change is the plan and the dispatch, Python only).
# STEP=prefill: the grouped GEMV's slices plan past 16 tokens (passes of 16 rows: the second pass re-stages A and re-reads
#   the weights, from L2) against the wgmma kernel choose_impl runs there, default and stable, 24 / 32 / 64 tokens.
# Expect: 24 tokens close; 32 ~1.6x the 16-token time (moe_dn 10 experts ~10 us vs wgmma 9.38): slower; if it wins
#   anywhere, choose_impl could take it there.
if [ "$STEP" = prefill ]; then
  MOE_MMA=0 MOE_WG="wg:;wgst:+stable=1" KS=4 MS=24,32,64 ES=8,10 SHAPES=moe_dn,moe_gu_fused MOE_VARIANTS="st:+stable=1" \
    timeout 200 python3 profiling/moe_ab.py --out "$W" > "$W/moe_prefill49.log" 2>&1
  grep -E "^(moe|TOTAL)" "$W/moe_prefill49.log" | tail -20
  finish_run run49
fi
# Result (prefill, H200, `nvidia-h200_2026-11-28_moe_prefill49.log`, every column checked): the slices GEMV in passes of 16
#   rows is far slower past 16 tokens (TOTAL 8 experts 24 / 32 / 64 tokens 23.03 / 24.18 / 46.32 us against wgmma's
#   19.06 / 19.25 / 21.76; the second pass costs more than the first, e.g. moe_dn 8 experts 16 -> 24 tokens 5.47 ->
#   9.42): choose_impl keeps the wgmma kernel from 17 tokens on.  Prefill's gap to fp16 stays the wgmma kernel's
#   (default 0.84-0.94x at 32 / 64 tokens; its stable launch 17.13-23.39 against fp16 17.50-21.96).
# STEP=san2: sanitize_slices.py after its grouped checks went through one helper (review): memcheck again.
if [ "$STEP" = san2 ]; then
  sanitize memcheck "$W/memcheck_slices49b.log" 240 profiling/sanitize_slices.py
  finish_run run49
fi
# Result (san2, H200, `nvidia-h200_2026-11-28_memcheck_slices49b.log`): 21 checks, 0 errors.
# STEP=t2: the new moe_forward test at 10 tokens per expert (the fused gather / SwiGLU grouped GEMV in the two-tile slices
#   form, bit-identical to the unfused path) and the two-tile slices test again.
if [ "$STEP" = t2 ]; then
  gpu_tests "$W/gpu_tests_t2_49.log" 200 tests/test_grouped_gpu.py -k "two_tile_slices"
  grep -E "^E  |FAILED" "$W/gpu_tests_t2_49.log" | head -20
  finish_run run49
fi
# Result (t2, H200, `nvidia-h200_2026-11-28_gpu_tests_t2_49.log`): 20 passed (18 two-tile slices + 2 moe_forward).
# STEP=t3: the same after the review commit (choose_impl's slices query cached; the A hooks out of the source).
if [ "$STEP" = t3 ]; then
  gpu_tests "$W/gpu_tests_t3_49.log" 200 tests/test_grouped_gpu.py -k "two_tile_slices or real_moe"
  grep -E "^E  |FAILED" "$W/gpu_tests_t3_49.log" | head -20
  finish_run run49
fi
# Result (t3, H200, `nvidia-h200_2026-11-28_gpu_tests_t3_49.log`): 32 passed.
