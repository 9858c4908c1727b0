#!/usr/bin/env bash
# Forty-third session (2026-11-28).  From the repo root:  OUT=/tmp/out STEP=chain bash profiling/run50.sh
# (carry ab_prev/: ab_prev/tree = b12a6c4's kbitcupy / cuda_src / profiling, the tree before this session)
. profiling/run_env.sh
start_run chain
# STEP=chain: moe_forward above the decode sizes (gather -> gate/up -> silu_mul -> down -> combine) launched each grouped
#   call with ids_stable, so in the default safe PDL the grouped wgmma kernel only L2-prefetched its first weights before
#   its wait.  But the kernel right before each of those calls is one of ours (the gather, silu_mul, or gate/up itself),
#   which writes none of the call's weights / ids and lets its dependents launch only after its own wait: nothing
#   earlier can still be running, so the full-PDL order (weights requested, tables built before the wait) is safe there.
#   New: grouped_matmul(chained=True) -> GROUPED_EARLY in safe mode (the wgmma kernel; the GEMV keeps its safe early
#   mode, the full order measured slower there in close49h-moe), moe_forward passes it; bench column Grouped:chained and
#   the "as moe_forward" TOTAL from the chained columns above the decode sizes.
# Expect: Grouped:chained = Grouped+PDL (the same kernel mode) within noise: at 32 / 64 tokens k = 4 gate/up fused -0.35 /
#   -0.8 us and down -0.9 us against Grouped:stable (close49h-moe: TOTAL 8 experts 32 tokens 17.19 -> ~15.9, 64 tokens
#   19.83 -> ~18.1; 1.02x fp16 at 64 where 0.93x); 16 tokens unchanged (the decode path).  Layer step (the real chain,
#   T = 2048: ~40 tokens an expert, wgmma): new faster than old by ~1 us a grouped call; T = 1 unchanged (decode path).
if [ "$STEP" = chain ]; then
  python3 profiling/warm_cache.py wgmma grouped 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_chain50.log" 300 tests/test_pdl_gpu.py -k "chained or moe_forward"
  grep -E "^E  |FAILED" "$W/gpu_tests_chain50.log" | head
  timeout 200 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 16,32,64 --experts 8,10 \
    --columns Grouped,Grouped:stable,Grouped:chained,Grouped+PDL --reps 15 --tag chain50-moe > "$W/bench_chain50.log" 2>&1
  grep -E "^### M|^\| TOTAL|as moe_forward" "$W/bench_chain50.log"
  AB_TIMEOUT=200 ab_trees layer50 "wgmma grouped" --shapes none --moe-layer --k 4 --layer-T 1,2048 --reps 15
  for v in new old; do echo "== layer $v"; grep -E "^\| [0-9]+ \| 4 " "$W/layer50_$v.log"; done
  finish_run run50
fi
# Result (chain, H200, git 4420331, `nvidia-h200_2026-11-28_chain50-moe.md`, `..._layer50-{new,old}.md`): 7 GPU tests passed
#   (the new chained test: wgmma 16 / 40 / 64 / 130 tokens, GEMV, mma; moe_forward bit-exact in safe mode).
#   Grouped:chained = Grouped+PDL to 0.01 us, as expected.  As moe_forward launches them, k = 4 TOTAL (gate/up fused +
#   down): 32 tokens 17.27 -> 16.02 us (8 experts, 1.09x fp16), 20.55 -> 19.73 (10, 1.08x); 64 tokens 19.85 -> 18.10
#   (1.02x), 23.48 -> 22.59 (10 experts: 0.96x, still short); 16 tokens unchanged (the decode path).  Layer step T = 2048
#   (all 512 experts, ~40 tokens each: several-wave grids, where the early order helps only the first wave): kbit steps
#   872.6 vs 873.8 us (equal), T = 1 equal.
# STEP=wg64: what holds 10 experts x 64 tokens (down 8.48 vs bmm 8.10 us; gate/up fused 14.12 vs 13.68) while 8 experts
#   pass: down's 10 x 16 column strips (160 CTAs at TOK 64) overflow the 132 SMs where 8 experts' 128 fit.  The plans,
#   then the grouped wgmma in the chained mode over token tiles and split counts.
# Expect: a split count or token tile that spreads 10 experts' down evenly (e.g. 2 splits, 320 CTAs at two an SM) within
#   a few % of the plan, or the plan stays best (the moe_sweep48 finding at 12 / 16 tokens).
if [ "$STEP" = wg64 ]; then
  python3 - <<'PY' 2>&1 | tee "$W/plans_wg64.log"
from kbitcupy import wgmma as WG
for E in (8, 10):
    for M in (32, 64):
        for s, (N, K) in (("gu_fused", (1024, 2048)), ("dn", (2048, 512))):
            print(E, M, s, WG.grouped_plan(N, K, 4, "float16", 0, E, M, cbd=True))
PY
  MS=32,64 ES=8,10 KS=4 MOE_GEMV=0 MOE_MMA=0 CUT=230 \
    MOE_WG="plan:+chained=1;t32:+tok=32 +chained=1;t128:+tok=128 +chained=1;ks1:+ks=1 +chained=1;ks2:+ks=2 +chained=1;ks3:+ks=3 +chained=1;ks4:+ks=4 +chained=1;cl0:+cluster=0 +chained=1" \
    moe_ab_twice wg64 200
  finish_run run50
fi
# Result (wg64, H200, two passes, `nvidia-h200_2026-11-28_moe_wg64_{1,2}.log`, plans in `..._plans_wg64.log`): the plan is
#   the fastest form or within noise in every cell (10 x 64 TOTAL plan 22.43 / 22.47 us, cluster=0 22.42 / 22.43; every
#   other token tile / split count 22-80 % slower; down 10 x 64 8.40 vs fp16 bmm 8.09).  What holds 10 experts x 64
#   tokens is the K-tile rate of the plan's own form, not its shape.
# STEP=pf: moe_forward's decode pair (gate/up with the gather fused, then down with SwiGLU fused) runs down's 4-5 MB of
#   weights from DRAM after gate/up's grid completes.  New: the gate/up blocks L2-prefetch the down bank's weights of
#   their slots' experts (a share of each expert's lines a block; gemv.MOE_NEXT_PF / KBITCUPY_MOE_PF: 1 = right after the
#   ids are read, 2 = after the block's last pass; moe_forward passes prefetch=bank_down).  Prefetches are hints:
#   results bit-identical.  The kernel's parameters changed for every grouped GEMV instantiation (ptxas: 1-8 registers
#   fewer, no spills), so the per-projection table is re-measured against the tree before this session (ab_prev/tree).
# Expect: pair (moe_pair.py) mode 2 -0.5..-1.2 us at 1..4 tokens (down reads L2, ~1 us of DRAM latency and 4 MB of its
#   stream off the path), mode 1 less or slower (the prefetches ahead of gate/up's own first loads); bit-exact; the
#   per-projection rows (mode 0 by default) within +-2 % of the old tree.
if [ "$STEP" = pf ]; then
  gpu_tests "$W/gpu_tests_pf50.log" 400 tests/test_grouped_gpu.py tests/test_pdl_gpu.py -k "next_prefetch or two_tile or moe_forward"
  grep -E "^E  |FAILED" "$W/gpu_tests_pf50.log" | head
  sanitize memcheck "$W/memcheck_slices50.log" 200 profiling/sanitize_slices.py
  MS=1,4,8,16 ES=8,10 MODES=0,1,2 timeout 240 python3 profiling/moe_pair.py --out "$W" 2>&1 | tee "$W/moe_pair50.log" | grep -v "^ "
  AB_TIMEOUT=150 ab_trees moeab50 "" --shapes moe --k 4 --moe-M 1,4,16 --experts 8,10 --columns Grouped,Grouped:stable --reps 15
  finish_run run50
fi
# Result (pf, H200, git 7979b3a): 41 GPU tests passed (prefetch modes bit-identical, moe_forward, two-tile), memcheck over
#   sanitize_slices.py 0 errors (25 checks).  moe_pair.py failed (it passed a keyword grouped_gemv_fused does not take).
#   The per-projection table against the old tree (`moeab50-{new,old}`): new slower -- down 1 token 4.27 -> 4.40 us,
#   stable 3.88 -> 4.05, 16 tokens stable 5.34 -> 5.76; TOTAL as moe_forward 1 token 10.16 -> 10.45 (+3 %).  The mode's
#   runtime test sat in every grouped GEMV instantiation and moved ptxas's schedule (registers 122 -> 117 ...).  Fixed:
#   only the row-gather instantiations (AMODE 1, moe_forward's gate/up) look at the prefetch; the others' SASS is now
#   identical to the old tree's but for label and helper names (nvcc 13 SASS of sl / slw / group-loop at AMODE 0 / 2).
# STEP=pf2: the same checks on the fixed source, the pair (moe_pair.py, modes 0 / 1 / 2 alternated twice), and the layer
#   step T = 1 / 2 / 8 of this tree at KBITCUPY_MOE_PF = 0 / 1 / 2 against the old tree.
# Expect: pair mode 2 -0.5..-1.2 us at 1..4 tokens; layer T = 1 (10 experts x 1 token) the same gain; PF = 0 equal to old.
if [ "$STEP" = pf2 ]; then
  gpu_tests "$W/gpu_tests_pf50b.log" 300 tests/test_grouped_gpu.py -k "next_prefetch or two_tile"
  grep -E "^E  |FAILED" "$W/gpu_tests_pf50b.log" | head
  sanitize memcheck "$W/memcheck_slices50b.log" 200 profiling/sanitize_slices.py
  MS=1,4,8,16 ES=8,10 MODES=0,1,2 timeout 240 python3 profiling/moe_pair.py --out "$W" 2>&1 | tee "$W/moe_pair50.log" | grep -v "^ "
  for pf in 0 1 2; do
    KBITCUPY_MOE_PF=$pf WARM="" AB_TIMEOUT=120 tree_bench "$(pwd)" "pf$pf" "$W" layer50b --shapes none --moe-layer --k 4 \
      --layer-T 1,2,8 --reps 15
    echo "== pf$pf"; grep -E "^\| [0-9]+ \| 4 " "$W/layer50b_pf$pf.log"
  done
  WARM="" AB_TIMEOUT=120 tree_bench "$(pwd)/ab_prev/tree" old "$W" layer50b --shapes none --moe-layer --k 4 --layer-T 1,2,8 --reps 15
  echo "== old"; grep -E "^\| [0-9]+ \| 4 " "$W/layer50b_old.log"
  finish_run run50
fi
# Result (pf2, H200, git f516c10, `nvidia-h200_2026-11-28_moe_pair50.log`, `..._layer50b-{pf0,pf1,pf2,old}.md`): 24 GPU
#   tests passed, memcheck 0 errors (25 checks).  The prefetch is slower everywhere, bit-exact: the decode pair (gate/up +
#   down, 8 experts 1 token) pf0 10.96 / 10.97 us, pf1 11.86, pf2 11.09; 10 experts 13.13 -> 14.27 / 13.30; 16 tokens
#   +1..+6 %.  Layer step T = 1 / 2 / 8: pf0 17.59 / 29.40 / 75.18 us (old tree 17.46 / 29.20 / 74.70), pf1 19.05 / 31.78
#   / 80.00, pf2 18.54 / 31.40 / 79.43.  So down's time after gate/up is not its weights' DRAM latency (the decode GEMV's
#   finding again: its compute bursts), and the extra 4-5 MB of prefetch only loads gate/up.  Reverted
#   (profiling/patches/session43-moe-next-prefetch.patch).  Seen on the way: the measured pair (10.96 us, 8 x 1) is
#   0.8 us above the bench's "as moe_forward launches them" sum of per-projection columns (10.16): the gather in gate/up
#   and the gate/up <-> down transitions are not in those columns.  moe_pair.py now times moe_forward's expert MLP as one
#   chain against fp16 bmm + SwiGLU + bmm.
# STEP=close: closing checks and tables on this tree -- the PDL / grouped / layers GPU tests, the MoE table (k = 4, 1..64
#   tokens, 8 / 10 experts; Grouped, Grouped:stable, Grouped:chained), the measured moe_forward chain (moe_pair.py).
# Expect: tests pass; MoE rows as chain50 / close49h-moe (kernels byte-identical to 7e1f65b but the chained mode); the
#   measured chain about 0.8 us over the column sums at decode sizes and equal to them above.
if [ "$STEP" = close ]; then
  gpu_tests "$W/gpu_tests_close50.log" 420 tests/test_pdl_gpu.py tests/test_grouped_gpu.py tests/test_layers_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_close50.log" | head
  finish_run run50
fi
if [ "$STEP" = close2 ]; then
  timeout 200 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,8,16,32,64 --experts 8,10 \
    --columns Grouped,Grouped:stable,Grouped:chained --reps 15 --tag close50h-moe > "$W/bench_close50h-moe.log" 2>&1
  grep -E "^### M|^\| TOTAL|as moe_forward" "$W/bench_close50h-moe.log"
  timeout 200 python3 profiling/moe_pair.py --out "$W" --tag moe-pair50h 2>&1 | tee "$W/moe_pair50h.log" | grep -E "^E="
  finish_run run50
fi
# Result (close2, H200, `nvidia-h200_2026-11-28_close50h-moe.md`, `..._moe-pair50h.md`): MoE rows as chain50 (as
#   moe_forward launches them, column sums: 1 token 10.21 / 11.88 us 1.69x / 1.68x, 32 tokens 1.10x / 1.07x, 64 tokens
#   1.00x / 0.96x).  The measured chain against fp16 bmm + SwiGLU + bmm: 1 token 10.92 / 13.03 us 2.09x / 1.95x, 4 tokens
#   2.03x / 1.96x, 8 1.82x / 1.78x, 16 1.60x / 1.42x, 32 1.05x / 1.07x, 64 0.86x / 0.96x.  The chain is over the column
#   sums by 0.7-1.2 us at 1..8 tokens, 2.3 / 3.7 us at 16, 7.8 / 6.3 at 32 and 11.8 / 8.3 at 64 (the gather and silu_mul
#   kernels of the four-kernel path; the fused AMODE 1 / 2 kernels at two token tiles).
# STEP=paths: which of moe_forward's fusions pay at 8..32 tokens: the default path against the four-kernel one (split)
#   and each fusion alone (gu: the gather in gate/up, then silu_mul and down; dn: the gather kernel, gate/up, SwiGLU in
#   down).
# Expect: at 8 tokens the fused path fastest (the per-projection kernels are the one-tile GEMV either way); at 16 the
#   two-tile fused kernels (AMODE 1 / 2, A staged without the row-by-row copy) may lose to split's AMODE 0 kernels by
#   ~1-2 us each, then a partial fusion wins; at 32 (wgmma for split) the split path fastest.
if [ "$STEP" = paths ]; then
  MS=8,12,16,32 ES=8,10 PATHS=split,gu,dn timeout 300 python3 profiling/moe_pair.py --out "$W" --tag moe-paths50 2>&1 \
    | tee "$W/moe_paths50.log" | grep -E "^E="
  finish_run run50
fi
# Result (paths, H200, `nvidia-h200_2026-11-28_moe-paths50.md` / `..._moe_paths50.log`): every path bit-identical to the
#   default at 8..16 tokens.  8 tokens: the fused path within 0.1 us of "gu" (gather fused only), split / dn 1-1.6 us
#   slower.  12 / 16 tokens: 10 experts "gu" 17.07 / 17.78 us against the fused 17.58 / 19.07 (SwiGLU fused into down at two
#   token tiles costs: every block of a slot computes the slot's 16 rows' silu again); 8 experts "gu" +0.19 / +0.10 us.
#   32 tokens: the four-kernel default = split, partial GEMV fusions 2-6 us slower (the GEMV in passes).
# STEP=paths2: the same at 9 / 12 / 16 tokens over 4..32 experts (gu against the fused path), to fix the rule.
# Expect: "gu" faster from 10 experts on at 12 / 16 tokens, within +-1 % at 8 experts.
if [ "$STEP" = paths2 ]; then
  MS=9,12,16 ES=4,8,10,16,32 PATHS=gu timeout 300 python3 profiling/moe_pair.py --out "$W" --tag moe-paths50b 2>&1 \
    | tee "$W/moe_paths50b.log" | grep -E "^E="
  finish_run run50
fi
# Result (paths2, H200, `..._moe-paths50b.md`, `..._moe_paths50b.log`; "gu" = the gather fused only, against the fused
#   path; all bit-identical): 4 experts 9 / 12 / 16 tokens 12.31 / 12.66 / 14.02 -> 11.37 / 11.08 / 11.83 us; 8 experts
#   +0.24 / +0.31 / +0.23; 10 experts +0.38 / -0.29 / -1.02; 16 experts +0.55 / +0.56 / +0.59; 32 experts (the four-kernel
#   default there: down is not the GEMV) 41.94 / 42.68 / 43.48 -> 39.34 / 39.77 / 40.69.  What orders them: the SwiGLU
#   evaluations a thread makes while staging down's A (every block of a slot computes the pass's rows x K again):
#   rows x K / threads = 18 / 24 / 32 at 4 experts, 14.4 / 19.2 / 25.6 at 10, <= 16 at 8 and 16.
#   New (kbitcupy.moe): expert_mlp (moe_forward's gate/up -> SwiGLU -> down, also used by the bench's layer step and
#   moe_pair.py) fuses the row gather into gate/up wherever gate/up runs the grouped GEMV (_fuse_gather) and SwiGLU into
#   down where down runs it with at most 16 evaluations a thread (_fuse_swiglu, gemv.grouped_swiglu_per_thread).
# STEP=close3: GPU tests of moe_forward / the grouped kernels / PDL; moe_pair.py on this tree (the rule) against both
#   fusions forced (PATHS=both, the old rule at decode sizes) at 1..64 tokens, 4..16 experts; the layer step T = 1 / 8 / 32.
# Expect: tests pass; the new default = min(both, gu) within noise at 9..16 tokens (4 / 10 experts faster as in paths2,
#   8 / 16 unchanged); 32 experts at 9..16 -2.6 us; the rest unchanged.
if [ "$STEP" = close3 ]; then
  gpu_tests "$W/gpu_tests_close50.log" 400 tests/test_grouped_gpu.py tests/test_pdl_gpu.py tests/test_layers_gpu.py \
    -k "moe or chained or fused or layer"
  grep -E "^E  |FAILED" "$W/gpu_tests_close50.log" | head
  MS=1,4,8,9,12,16,32,64 ES=8,10 PATHS=both timeout 240 python3 profiling/moe_pair.py --out "$W" --tag moe-pair50h2 2>&1 \
    | tee "$W/moe_pair50h2.log" | grep -E "^E="
  MS=9,12,16 ES=4,16,32 PATHS=both timeout 200 python3 profiling/moe_pair.py --out "$W" --tag moe-pair50h3 2>&1 \
    | tee "$W/moe_pair50h3.log" | grep -E "^E="
  timeout 150 python3 profiling/bench.py --out "$W" --shapes none --moe-layer --k 4 --layer-T 1,8,32 --reps 15 \
    --tag layer50h > "$W/bench_layer50h.log" 2>&1
  grep -E "^\| [0-9]+ \| 4 " "$W/bench_layer50h.log"
  finish_run run50
fi
# Result (close3, H200, git 09abc08, `..._moe-pair50h2.md`, `..._moe-pair50h3.md`, `..._layer50h.md`): the rule as
#   expected, every path bit-identical at <= 16 tokens: 10 experts 12 / 16 tokens 17.57 / 19.05 -> 17.30 / 18.10 us
#   (1.58x / 1.52x fp16 bmm + SwiGLU + bmm), 4 experts 9 / 12 / 16 12.27 / 12.62 / 14.01 -> 11.34 / 11.06 / 11.85, 32
#   experts 9..16 tokens 39.4-40.5 us (the four-kernel path was 41.9-43.5 in paths2), 8 / 16 experts and 1..8 tokens
#   unchanged (1 token 2.09x / 1.99x, 4 tokens 2.03x / 2.00x).  Layer step T = 1 / 8 / 32: 17.40 / 74.15 / 202.98 us.
#   GPU tests: the call's 400 s ran out at 81 % with 5 failures before the summary; the cause found on the CPU: the
#   new assertion in test_moe_forward_fused_gemv_matches_unfused asked _decode_fusions for the fusions without the
#   routing's slot count (the plan of one slot: 20 SwiGLU evaluations a thread at k = 5, 5 tokens), where moe_forward
#   passes it.  Fixed in the test.
# STEP=close4: the failing tests again, with tracebacks.
if [ "$STEP" = close4 ]; then
  gpu_tests "$W/gpu_tests_close50b.log" 170 tests/test_grouped_gpu.py --tb=short \
    -k "fused_gemv_matches_unfused or two_tile_slices or gather_fused_only or next_prefetch"
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_close50b.log" | head -20
  finish_run run50
fi
# Result (close4, H200, run on 2026-11-29 by the forty-fourth session, git 6117fa0, `nvidia-h200_2026-11-29_gpu_tests_
#   close50b.log`): 28 passed (the three failures of close3 were the test's, as found on the CPU).
