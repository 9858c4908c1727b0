#!/usr/bin/env bash
# Forty-sixth session (2026-11-29).  From the repo root:  OUT=/tmp/out STEP=probe bash profiling/run53.sh
# (carry .git_rev)
. profiling/run_env.sh
start_run probe
# STEP=probe: (1) profiling/host_probe.py -- is bench.py's host overhead (6-7 us in some runs, 9-11 in others: sweep52h,
#   final61-m1, host17) the host's cost or the GPU's pace?  The same 200 calls enqueued behind a 40 ms spin kernel measure
#   the host alone.  Expect: held ~6-7 us on every shape and round; if the 9-11 us rows come back only in `free`, the
#   bench measured the GPU's per-launch pace (a stream of launches without a graph), not the host.
#   (2) profiling/ts_probe.py: the GEMV's token split past 32 rows (KV by default; linear key / O / down / Q forced), k = 4,
#   against the wgmma kernel.  KV M = 32: GEMV 3.13 us, wgmma 5.69 (sweep52h); wgmma M = 64 / 128 5.70 / 6.40 (close52h).
#   Expect: KV M = 64 ~3.5-4 us (256 CTAs, two an SM), M = 128 ~5-6 (512 CTAs), M = 256 slower than wgmma; the forced
#   128-group shapes slower than wgmma past 32 (each CTA re-reads its group's weights, 8x at M = 64).
#   (3) bench.py KV, k = 2..5, M = 32..256: GEMV (now to 256 rows on KV), WGMMA, dq + cuBLAS, matmul, fp16, SOL.
if [ "$STEP" = probe ]; then
  timeout 100 python3 profiling/host_probe.py --out "$W" > "$W/host_probe53.log" 2>&1
  tail -22 "$W/host_probe53.log"
  SHAPES=KV,lin_key,O,down,Q KS=4 MS=32,48,64,96,128,256 timeout 200 python3 profiling/ts_probe.py --out "$W" \
    > "$W/ts_probe53.log" 2>&1
  cat "$W/ts_probe53.log" | cut -c1-160
  timeout 220 python3 profiling/bench.py --out "$W" --M 32,48,64,96,128,192,256 --k 4,2,3,5 --shapes KV \
    --columns GEMV,WGMMA,dq+cuBLAS,matmul --reps 15 --tag kvts53 > "$W/bench_kvts53.log" 2>&1
  grep -E "^### M|^\| KV" "$W/bench_kvts53.log"
  finish_run run53
fi
# Result (probe, H200, `nvidia-h200_2026-11-29_{ts_probe53,kvts53}.*`): the token split past 32 rows is slower than the
#   wgmma kernel from M = 48 on KV: ts / wgmma k = 4 M = 32 3.13 / 5.44, 48 5.67 / 5.69, 64 6.10 / 5.72, 96 9.07 / 6.35,
#   128 11.99 / 6.40, 256 23.68 / 7.68 us -- linear in the waves: the default ts plan is 16 warps a CTA (K = 2048: one
#   step a warp), one CTA an SM, so M = 32's 128 CTAs are one wave and M = 48's 192 two.  The forced 128-group shapes are
#   2-8x slower than wgmma (linear key M = 64 23.8 vs 7.7).  host_probe crashed (RawKernel.ptr; fixed: .kernel.ptr).
# STEP=ts8: the same KV token split with 8 / 4 warps a CTA (two / four CTAs an SM, each warp two / four K steps).
# Expect: M = 64 with 8 warps (256 CTAs, two an SM) ~4-4.5 us against wgmma 5.72; M = 128 with 4 warps ~5.5-6.5 vs 6.40.
if [ "$STEP" = ts8 ]; then
  timeout 100 python3 profiling/host_probe.py --out "$W" > "$W/host_probe53.log" 2>&1
  tail -22 "$W/host_probe53.log"
  for w in 8 4; do
    SHAPES=KV KS=4,2 MS=32,48,64,96,128 PLAN=warps=$w NOWG=1 timeout 100 python3 profiling/ts_probe.py \
      > "$W/ts_probe53_w$w.log" 2>&1
    cat "$W/ts_probe53_w$w.log" | cut -c1-100
  done
  finish_run run53
fi
# Result (ts8, H200, `nvidia-h200_2026-11-29_{ts_probe53_w8,ts_probe53_w4,host_probe53}.log`):
#   - KV token split with 8 warps a CTA (two an SM): k = 4 M = 32 / 48 / 64 / 96 / 128 3.08 / 3.92 / 4.13 / 5.34 / 8.70 us
#     (wgmma 5.44 / 5.69 / 5.72 / 6.35 / 6.40), k = 2 3.22 / 4.20 / 4.42 / 5.70 / 9.22 (wgmma 5.10 / 5.35 / 5.37 / 6.08 /
#     6.13); 4 warps 5.25 at 96, 9.62 at 128 (three CTAs an SM by shared memory: waves).  Kept: gemv.plan's token split
#     takes 8 warps past 32 rows, gemv.max_rows 128 on such shapes (dispatch.GEMV_TS_MAX_M).
#   - host_probe: the fast path's enqueue is the host's own cost: 10.0-10.3 us per call on all three shapes whether the
#     GPU runs the calls or is held by a spin kernel (held 10.01 / 10.03 / 10.09, held_1000 alike, GC off alike), against
#     a bare cuLaunchKernel of an empty kernel at 5.2-5.4 us on this host.  So this host's ~4.7 us over the bare launch is
#     the Python path (issue 3's 10 us not met on this machine; disp52h's host read 6.5).  On the CPU (profiling with CuPy
#     arrays over fake pointers, a no-op launch) the fast path took 2.62 us, 0.8 of it the typed ctypes call.
# STEP=ab: (1) host_probe after the lean launch (untyped cuLaunchKernelEx handle, prebuilt ctypes arguments; the
#   C-contiguous check by CuPy's flag; CPU: 2.62 -> 1.98 us).  Expect: held ~10.1 -> ~9 us (this host ~1.7x the CPU's
#   Python time), the bare launch unchanged.  (2) the GPU tests the change touches (launch, PDL, checks, the token
#   split and four-tile GEMV tests).  (3) KV at M = 32..128 with the 8-warp token split, every k (the table's input).
# Expect: tests pass; KV GEMV k = 4 M = 48 / 64 / 96 ~3.9 / 4.1 / 5.3 us, faster than wgmma to 96.
if [ "$STEP" = ab ]; then
  timeout 100 python3 profiling/host_probe.py --out "$W" > "$W/host_probe53b.log" 2>&1
  tail -18 "$W/host_probe53b.log"
  timeout 200 python3 profiling/bench.py --out "$W" --M 32,40,48,64,80,96,112,128 --k 4,2,3,5 --shapes KV \
    --columns GEMV,WGMMA,dq+cuBLAS,matmul --reps 15 --tag kvts53b > "$W/bench_kvts53b.log" 2>&1
  grep -E "^### M|^\| KV" "$W/bench_kvts53b.log"
  gpu_tests "$W/gpu_tests_ab53.log" 150 tests/test_launch_gpu.py tests/test_checks_gpu.py tests/test_gemv_gpu.py \
    -k "launch or checks or token_split or four_tiles or bad_inputs or graph or torch"
  gpu_tests "$W/gpu_tests_ab53_pdl.log" 130 tests/test_pdl_gpu.py \
    -k "bit_exact or chain_reads or torch_tensors or prefetch_depth or weight_written or safe_pdl_grouped"
  grep -E "^E  |FAILED|Error" "$W"/gpu_tests_ab53*.log | head -20
  finish_run run53
fi
# Result (ab, H200, `nvidia-h200_2026-11-29_{kvts53b.md,host_probe53b.log,gpu_tests_ab53*.log}`):
#   - KV with the 8-warp token split (GEMV / WGMMA, us), k = 4: M = 40 3.91 / 5.67, 48 3.89 / 5.67, 64 4.10 / 5.73, 80
#     4.92 / 6.35, 96 5.34 / 6.36, 112 8.10 / 6.34, 128 8.61 / 6.41 (fp16 5.78-5.93); k = 2 / 3 alike (GEMV to 96); k = 5
#     to 64 (5.47 / 6.20), slower from 80.  H200 table rebuilt with ~kvts53b: KV k = 2..4 GEMV to M = 96.
#   - host_probe (another machine: bare launch 3.7-4.8 us here against 5.3 before): fast path 5.2-8.5 us, rounds 0-1 ~8,
#     rounds 2-4 ~5.3 on every shape, the bare launch moving with them (4.5-4.8 / 3.7-4.1): host noise by the minute.  A
#     same-run A/B against the previous tree is needed (STEP=close).
#   - tests: launch / checks / GEMV (token split, four tiles, bad inputs, graphs, torch) 34 passed, 3 failed: the k = 5
#     refusal's message lost its "k = 5" (check_kernel_call now caps at max_rows and spoke first; its message now names
#     k, N and the layout); PDL subset 56 passed.
# STEP=close: (1) host A/B, same run: host_probe of the previous tree (ab_prev/tree = 4b2a0b9) and this one, alternated
#   three times.  Expect: this tree's fast path ~0.6-1 us under the previous one's on every shape (CPU: 2.62 -> 1.98 us),
#   the bare launch equal.  (2) KV k = 5 at M = 17..96 with the GEMV (the table's k = 5 band: no GEMV cell at 17..31 yet).
#   (3) the GEMV tests that failed, and the token split through matmul.  (4) dense k = 4 TOTAL at M = 40..96 (matmul, the
#   new table).  Expect: M = 64 47.97 -> ~46.4 us (KV 5.70 -> 4.1), 0.87x -> ~0.90x fp16.
if [ "$STEP" = close ]; then
  for i in 1 2 3; do
    (cd ab_prev/tree && PYTHONPATH=$(pwd) timeout 60 python3 profiling/host_probe.py --rounds 2 > "$W/host_old_$i.log" 2>&1)
    timeout 60 python3 profiling/host_probe.py --rounds 2 > "$W/host_new_$i.log" 2>&1
    grep -E "^\| (gateup|down|KV|launch) \| (free|held) " "$W/host_old_$i.log" | sed 's/^/old /'
    grep -E "^\| (gateup|down|KV|launch) \| (free|held) " "$W/host_new_$i.log" | sed 's/^/new /'
  done
  gpu_tests "$W/gpu_tests_close53.log" 150 tests/test_gemv_gpu.py tests/test_checks_gpu.py \
    -k "four_tiles or token_split_many or checks or bad_inputs"
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_close53.log" | head -20
  timeout 100 python3 profiling/bench.py --out "$W" --M 17,20,24,28,32,40,48,64,80,96 --k 5 --shapes KV \
    --columns GEMV,WGMMA,dq+cuBLAS,matmul --reps 15 --tag kvts53k5 > "$W/bench_kvts53k5.log" 2>&1
  grep -E "^### M|^\| KV" "$W/bench_kvts53k5.log"
  timeout 200 python3 profiling/bench.py --out "$W" --M 40,48,64,80,96 --k 4 --columns matmul --reps 15 \
    --tag close53h > "$W/bench_close53h.log" 2>&1
  grep -E "^### M|TOTAL|^\| KV" "$W/bench_close53h.log"
  finish_run run53
fi
# Result (close, H200, `nvidia-h200_2026-11-29_{host_ab53,gpu_tests_close53}.log`, `..._{kvts53k5,close53h}.md`):
#   - host A/B: the host's noise swamps the medians (the previous tree's medians 6.5-15.2 us, this tree's 6.6-9.6, the
#     bare launch 3.9-6.0 over the same minutes); the fastest rounds, where the noise is least: previous 6.00-6.18 us,
#     this tree 5.36-5.46 (-0.6..-0.7 us, as the CPU profile's -0.64).  Kept.
#   - tests: 13 passed (four tiles, the token split past 32 rows incl. matmul at M = 40 / 64 / 96, checks, bad inputs).
#   - KV k = 5 GEMV / WGMMA: M = 17..32 3.56-3.94 / 5.46-5.70, 40 / 48 / 64 4.62 / 4.79 / 5.46 vs 6.11 / 6.11 / 6.15, 80
#     8.63 vs 6.73: the H200 table's k = 5 KV GEMV band 16 -> 64 (~kvts53k5).
#   - dense k = 4 TOTAL with the new table (matmul): M = 40 / 48 / 64 / 80 / 96 45.08 / 45.29 / 46.37 / 54.65 / 55.48 us =
#     0.93x / 0.93x / 0.90x / 0.78x / 0.76x fp16 (M = 64 was 47.97, 0.87x: close52h); KV at 64 4.08 us (was 5.70).
# STEP=final: the committed tree (bench's host table now with the host's bare launch beside each shape): (1) dense k = 4
#   M = 1 / 16 / 32 / 64 / 128 through matmul (TOTAL vs fp16 and the host table), (2) the whole GEMV GPU test file.
# Expect: TOTAL M = 1 / 16 / 32 as close52h (17.1 / 25.3 / 39.9 us), M = 64 ~46.4 (KV on the GEMV), 128 ~58.6; host
#   ~0.6 us over the bare launch's ratio of before; every GEMV test passes.
if [ "$STEP" = final ]; then
  timeout 200 python3 profiling/bench.py --out "$W" --M 1,16,32,64,128 --k 4 --columns matmul --reps 15 \
    --tag close53h2 > "$W/bench_close53h2.log" 2>&1
  grep -E "^### M|TOTAL|^\| (gateup|down|Q|O|KV|lin_key|lin_value) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$" \
    "$W/bench_close53h2.log"
  gpu_tests "$W/gpu_tests_final53.log" 330 tests/test_gemv_gpu.py
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_final53.log" | head -20
  finish_run run53
fi
# Result (final, H200, git 710d590, `nvidia-h200_2026-11-29_{close53h2.md,gpu_tests_final53.log}`): dense k = 4 TOTAL
#   M = 1 / 16 / 32 / 64 / 128 17.13 / 25.38 / 40.06 / 46.42 / 58.70 us = 2.38x / 1.62x / 1.04x / 0.90x / 0.77x fp16 (M = 64
#   was 0.87x; the rest as close52h within 0.4 %); host table 5.6-8.6 us a call against the bare launch's 4.1-5.0 on
#   that host (every shape under 10 us this run).  The whole test_gemv_gpu.py: 118 passed.
# STEP=suite: the GPU files through matmul's dispatch and fallbacks (layers, streaming GEMV), on the final tree.
if [ "$STEP" = suite ]; then
  gpu_tests "$W/gpu_tests_suite53.log" 300 tests/test_layers_gpu.py tests/test_gemv_stream_gpu.py
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_suite53.log" | head -20
  finish_run run53
fi
# Result (suite, H200, `nvidia-h200_2026-11-29_gpu_tests_suite53.log`): test_layers_gpu.py + test_gemv_stream_gpu.py 87
#   passed.
# STEP=moe64: the grouped wgmma kernel's split-K at 64 tokens an expert on the H200 (issue 5's prefill: as moe_forward
#   0.93x fp16 bmm, close47h-moe; the split rule was fitted on the H100 and checked on the H200 at 12 / 16 tokens only,
#   moe_sweep48), chained as moe_forward launches it: the plan, ks = 1..6, the workspace sum instead of the cluster.
# Expect: the plan within ~3 % of the best split (as at 12 / 16); a split >= 5 % faster would change the rule.
if [ "$STEP" = moe64 ]; then
  MOE_GEMV=0 MOE_MMA=0 MOE_WG="d:;ch:+chained=1;c1:+chained=1 +ks=1;c2:+chained=1 +ks=2;c3:+chained=1 +ks=3;c4:+chained=1 +ks=4;c6:+chained=1 +ks=6;cw:+chained=1 +cluster=0" \
    KS=4 MS=64 ES=8,10 SHAPES=moe_gu_fused,moe_dn timeout 300 python3 profiling/moe_ab.py --out "$W" \
    > "$W/moe_ks53.log" 2>&1
  grep -vE "^\s*$" "$W/moe_ks53.log" | tail -12
  finish_run run53
fi
# Result (moe64, H200, `nvidia-h200_2026-11-29_moe_ks53.log`): the plan holds -- chained (as moe_forward launches it) the
#   plan's split is the fastest measured or tied in all four rows (gate/up fused 8 / 10 experts 11.78 / 14.11 us, ks = 2
#   11.78 / 15.85, ks = 3 13.48 / 14.12, the workspace sum 12.96 / 14.11; down 6.30 / 8.48 = ks = 1); every other split is
#   slower by up to 3.3x.  TOTAL chained 8 / 10 experts 18.08 / 22.60 us against fp16 bmm 18.53 / 21.96: 1.02x / 0.97x (the
#   default launch 21.75 / 26.11, 0.85x / 0.84x).  No change.
# STEP=recheck: after the review's refactors (test_gemv_gpu's graph check as one helper; the probes' JSON through
#   bench_foundation.dump_json): the GEMV tests that use the helper and both probes in short form.
# Expect: the tests pass; the probes print their tables.
if [ "$STEP" = recheck ]; then
  gpu_tests "$W/gpu_tests_recheck53.log" 200 tests/test_gemv_gpu.py -k "token_split_many or four_tiles"
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_recheck53.log" | head -20
  timeout 60 python3 profiling/host_probe.py --rounds 1 --calls 100 --out "$W" > "$W/host_probe53r.log" 2>&1
  tail -6 "$W/host_probe53r.log"
  SHAPES=KV KS=4 MS=64 timeout 60 python3 profiling/ts_probe.py --out "$W" > "$W/ts_probe53r.log" 2>&1
  cat "$W/ts_probe53r.log"; ls "$W"
  finish_run run53
fi
# Result (recheck, H200, git 1111763, `nvidia-h200_2026-11-29_gpu_tests_recheck53.log`): 7 passed; both probes ran (host
#   5.9-6.2 us a call against a bare launch of 4.1-4.3; ts_probe's forced ts at M = 64 took 16 warps, 6.08 us: a plan named
#   ts = 1 did not get the 8-warp rule, which only the automatic token split took -- after this run plan() gives it to
#   both (the same plan either way: tests/test_gemv.py; every other plan unchanged, checked against the previous gemv.py
#   over 5760 (shape, k, M, override) cases).
# STEP=h100 (prepared, not run: no H100 was lent this session): the H100's inputs for its table after the four-tile
#   GEMV (forty-fifth session) and the 8-warp token split (this one): the dense sweep at M = 17..32 every kernel (as
#   sweep52h), KV at M = 32..128 every k (as kvts53b / kvts53k5), then the closing TOTAL.  Afterwards, here: add
#   "~<tag>" of each to profiling/retune_tables.py FILES["H100"], `retune_tables.py --write H100`, and update
#   tests/test_dispatch.py's H100 expectations.
# Expect: the four-tile GEMV wins the K = 2048 shapes at M = 17..32 (H200: gate/up 9.02 vs 9.7 us), KV on the GEMV to
#   M = 96; H100 dense k = 4 TOTAL M = 32 / 64 a few % faster than final tables.
if [ "$STEP" = h100 ]; then
  timeout 280 python3 profiling/bench.py --out "$W" --M 17,20,24,28,32 --k 2,3,4 \
    --columns GEMV,STREAM,GEMM,WGMMA,dq+cuBLAS,matmul --reps 15 --tag sweep53 > "$W/bench_sweep53.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_sweep53.log"
  timeout 150 python3 profiling/bench.py --out "$W" --M 17,24,32,40,48,64,80,96,112,128 --k 2,3,4,5 --shapes KV \
    --columns GEMV,WGMMA,dq+cuBLAS,matmul --reps 15 --tag kvts53h100 > "$W/bench_kvts53h100.log" 2>&1
  grep -E "^### M|^\| KV" "$W/bench_kvts53h100.log"
  finish_run run53
fi
# STEP=review: after the review commit (host Python only: the row checks through _checks.check_rows, the token-split
#   shape rule in one place; plans and instantiations identical to the previous tree over 9324 cases): the GPU checks
#   and the GEMV refusal / token-split tests.
if [ "$STEP" = review ]; then
  gpu_tests "$W/gpu_tests_review53.log" 200 tests/test_checks_gpu.py tests/test_gemv_gpu.py \
    -k "checks or bad_inputs or token_split_many"
  grep -E "^E  |FAILED|Error" "$W/gpu_tests_review53.log" | head -20
  finish_run run53
fi
# Result (review, H200, git 42cbb57, `nvidia-h200_2026-11-29_gpu_tests_review53.log`): 10 passed (the low-level checks,
#   bad inputs, the token split past 32 rows with its refusals and matmul at 40 / 64 / 96).
