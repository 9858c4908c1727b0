#!/usr/bin/env bash
# Twenty-fifth session (2026-11-26).
#   OUT=/tmp/out STEP=k5sweep bash profiling/run28.sh
. profiling/run_env.sh
start_run k5sweep
# STEP=k5sweep: the grouped wgmma kernel at k = 5, 16..64 tokens per expert.  moe-final47 (H100) has a cliff there:
#   10 experts, 64 tokens, gate/up fused 24.25 us (8 experts 15.96, 32 tokens 16.20) and down 17.05 (8 experts 9.12):
#   0.70x fp16 bmm; k = 5 down is below fp16 at 16 / 32 tokens too (0.85-0.89x).  Why (the plan, CPU): at TOK = 64
#   k = 5's 64 KB pair table leaves one CTA per SM (k = 4: two), and default_splits = slots // tiles floors to 1:
#   gate/up's 80 tiles run 80 CTAs of all 32 K tiles (8 experts: 64 tiles x 2 splits), down's 160 tiles two waves.
#   Expected: a split count of 2-3 on gate/up ~20-30 % faster; down at TOK = 32 (two CTAs per SM) or 2 splits
#   faster; the mma.sync kernel (column "mma") may beat both on down.
if [ "$STEP" = k5sweep ]; then
  python3 profiling/warm_cache.py wgmma grouped 2>&1 | tail -1
  MOE_GEMV=0 MOE_MMA=1 KS=${KS:-5} MS=${MS:-16,32,64} ES=${ES:-8,10,12} SHAPES=moe_gu_fused,moe_dn \
    MOE_WG="d:;ks1:+ks=1;ks2:+ks=2;ks3:+ks=3;ks4:+ks=4;ks6:+ks=6;t32:+tok=32;t32k2:+tok=32 +ks=2;t32k3:+tok=32 +ks=3" \
    timeout 450 python3 profiling/moe_ab.py --out "$W" > "$W/k5sweep28.log" 2>&1
  grep -vE "^\s*$" "$W/k5sweep28.log" | tail -24
fi
# Measured (k5sweep28.log, H100): the plan's split count is the best or within 1 % in 16 of 18 cells (down E = 8 at 16 /
#   32 tokens: 1 split 8.07 / 9.20 against the plan's 2, 9.12 / 9.60); more splits or TOK = 32 are slower everywhere
#   (E = 10, 64 tokens, gate/up: 2 / 3 splits 30.40 / 26.13 us against 24.30; down 23.00 against 16.97; TOK = 32 32.60 /
#   18.40).  A CTA wave at TOK = 64 costs ~7 us + 0.53 us per K tile (gate/up E = 8: 32 tiles 24.27, 16 tiles 15.95),
#   so at one CTA per SM the cliff is the wave count: E = 10 gate/up 80 CTAs of 32 tiles, down 160 CTAs (two waves).
# STEP=k5copies: the same at 8 copies of the k = 5 pair table (KBIT_K5_LOG2_COPIES=3: 32 KB instead of 64 KB, every
#   family; lut_bytes plans with it).  Expected: TOK = 64 fits two CTAs per SM (k = 4 does, and runs 64 tokens at 10
#   experts in 16.52 / 10.60 us against k = 5's 24.30 / 16.97): the plan then gives gate/up 3 splits (240 CTAs) and
#   down one wave; k = 5 near k = 4's times, if the extra bank conflicts of the lookups cost less than the waves.
#   Also the dense wgmma kernel at k = 5 (M = 32..128) both ways.
if [ "$STEP" = k5copies ]; then
  for c in 4 3; do
    (export KBIT_K5_LOG2_COPIES=$c
     python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
     MOE_GEMV=0 MOE_MMA=0 KS=5 MS=${MS:-16,32,64} ES=${ES:-8,10,12} SHAPES=moe_gu_fused,moe_dn \
       MOE_WG="d:;ks1:+ks=1;ks2:+ks=2;ks3:+ks=3;ks4:+ks=4" \
       timeout 200 python3 profiling/moe_ab.py --out "$W" > "$W/k5copies$c.log" 2>&1
     echo "## KBIT_K5_LOG2_COPIES=$c"; grep -vE "^\s*$" "$W/k5copies$c.log" | tail -24 | grep -v "^TOTAL"
     timeout 150 python3 profiling/bench.py --out "$W" --M 32,64,128 --k 5 --columns WGMMA,matmul --reps 10 \
       --tag k5copies$c > "$W/bench_k5copies$c.log" 2>&1
     grep -E "^### M|TOTAL" "$W/bench_k5copies$c.log")
  done
fi
# Measured (k5copies28.log, H100, the same grid in both builds): 8 copies won where they gave the plan two CTAs per SM
#   instead of a second wave or idle SMs on one split: 10 / 12 experts at 64 tokens gate/up fused 24.30 / 24.29 ->
#   19.31 / 23.54 us, down 16.97 / 17.03 -> 12.83 / 12.85 (k = 5 TOTAL 41.26 -> 32.14: 0.70x -> 0.90x fp16 bmm); lost
#   elsewhere (8 experts' down at 64 tokens 9.05 -> 10.51, 16 tokens gate/up 12.70 -> 13.22: the lookups' conflicts).
#   The bench.py calls failed (--reps must be >= 15): the dense k = 5 wgmma was not measured.
# STEP=verify: the grouped wgmma kernel with 8 k = 5 table copies as its own instantiation (kbit_wgmma_grouped<5, T,
#   64, CBD, 3>), grouped_plan choosing it by a cost model (wgmma.fewer_copies_pays): GPU tests (bit-identical to the
#   16-copy kernel at the same split count; against the reference), memcheck / racecheck over sanitize_k5lc.py, then
#   the plan (d) against the 16 copies forced (old = the plan before) at k = 5, 8..32 experts, 16..100 tokens.
#   Expected: d = old where the model keeps 16 copies; 10 / 12 experts at 64 tokens -4.4 / -4.2 us (down), -5 us
#   (gate/up, 10 experts); 16 / 32 experts (several waves) unmeasured so far.
if [ "$STEP" = verify ]; then
  python3 profiling/warm_cache.py wgmma grouped 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_verify28.log" 400 tests/test_grouped_gpu.py tests/test_grouped.py -k "k5 or wgmma or impls"
  sanitize memcheck "$W/memcheck_k5lc28.log" 240 profiling/sanitize_k5lc.py
  sanitize racecheck "$W/racecheck_k5lc28.log" 300 profiling/sanitize_k5lc.py
  MOE_GEMV=0 MOE_MMA=0 KS=5 MS=16,32,64,100 ES=8,10,12,16,32 SHAPES=moe_gu_fused,moe_dn \
    MOE_WG="d:;old:+lc=0" timeout 200 python3 profiling/moe_ab.py --out "$W" > "$W/k5verify28.log" 2>&1
  grep -vE "^\s*$" "$W/k5verify28.log" | tail -52 | grep -vE "^\s+k="
fi
# Measured (k5verify28.log): the plan = the 16-copy plan in every cell but 64 tokens at 10 / 12 / 16 / 32 experts, where
#   TOTAL 41.51 / 41.28 / 41.52 / 82.11 -> 32.35 / 37.14 / 37.22 / 64.28 us; GPU tests 37 passed; memcheck / racecheck
#   clean.  At 100 tokens (TOK = 128: 182 registers, one CTA per SM with either table) k = 5 is 0.6-0.8x fp16 bmm.
# STEP=trace: where a grouped wgmma CTA's time goes at 16 / 64 tokens (k = 4, 8 experts; one plain launch after an L2
#   flush, profiling/wgmma_trace.py).  The k5 sweeps fit ~5-7 us of fixed work per wave besides ~0.53 us per K tile;
#   expected: tables ~0.3-0.5 us, first tile ~1-1.5 us, split-K sum ~1 us, epilogue ~0.5 us.
if [ "$STEP" = trace ]; then
  KBIT_WG_CBD=0 KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE KBITS=4 \
    CASES="g:1024,2048,8,64;g:2048,512,8,64;g:1024,2048,8,16;g:2048,512,8,16;g:1024,2048,8,64,1;d:5120,2048,64" \
    timeout 300 python3 profiling/wgmma_trace.py > "$W/wgtrace28.log" 2>&1
  cat "$W/wgtrace28.log"
fi
# Measured (wgtrace28.log; the trace build takes more registers: one CTA per SM where production has two): tables
#   after the wait 1.45-2.3 us (CBD off here; the default grouped mode builds them after its wait), a K tile ~0.63 us at
#   TOK = 64 (wgmma issue ~0.2, dequantize ~0.18, copy issue ~0.11), and the cluster split-K sum 2.5 us at TOK = 64 with
#   2 splits (gate/up, 8 experts, 64 tokens), 1.75 us at TOK = 16 (down, 16 tokens) -- more than the workspace sum
#   (0.9 / 1.3 us at TOK = 16, 4 splits).
# STEP=trace2: the cluster sum's steps (new stamps: partial to shared memory, first cluster barrier, the share summed
#   and stored, second barrier).  Expected: the barriers or the DSMEM round trips, not the stores.
if [ "$STEP" = trace2 ]; then
  KBIT_WG_CBD=0 KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE KBITS=4 \
    CASES="g:1024,2048,8,64;g:2048,512,8,16;g:2048,512,8,64,2;d:2048,5120,64" \
    timeout 300 python3 profiling/wgmma_trace.py > "$W/wgtrace28b.log" 2>&1
  grep -E "^##|cluster sum|split-K|main loop|tables|CTA lifetime" "$W/wgtrace28b.log"
fi
# Measured (wgtrace28b.log): the cluster sum at 2 splits: first barrier ~0.6 us, the share's DSMEM loads + C stores
#   0.47 us (TOK = 16) / 1.26 us (TOK = 64: four serial round trips), second barrier ~0.6 us; the workspace sum (gate/up
#   8 experts 64 tokens, 4 splits; dense down M = 64, 8 splits): non-last CTAs 1.9-2.0 us from the main loop's end to
#   return (16-32 KB of stores + the release), the last 3.7-4.0 us (its own stores and fence, then 8-16 serial L2 round
#   trips of 4 float4).
# STEP=fixup: both split-K sums shortened (same bits).  Cluster: every chunk of the thread's share summed together (one
#   DSMEM round trip per SPB splits), the keep-alive barrier split (arrive when the partials are read, wait after the C
#   stores).  Workspace: CTAs arrive first (counter low 16 bits); the last to arrive keeps its partial in shared memory
#   instead of storing it and fencing, waits for the others' stores (high 16 bits, release / acquire), and sums two
#   splits' 4 float4 at a time at TOK = 64.  Expected: the last CTA's 3.7-4.0 us -> ~1.5-2, the cluster sum 2.7 -> ~1.5
#   us at TOK = 64; dense M = 64 / 128 and MoE 64 tokens 5-15 % faster.  GPU tests, memcheck over the dense plans, the
#   trace again, then the tree A/B against the session's lc commit (b2017fc, ab_prev).
if [ "$STEP" = fixup ]; then
  python3 profiling/warm_cache.py wgmma grouped 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_fixup28.log" 400 tests/test_wgmma_gpu.py tests/test_grouped_gpu.py tests/test_pdl_gpu.py -k "wgmma or impls or k5"
  sanitize memcheck "$W/memcheck_plans28.log" 200 profiling/sanitize_plans25.py
  KBIT_WG_CBD=0 KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE KBITS=4 \
    CASES="g:1024,2048,8,64;g:2048,512,8,16;g:2048,512,8,64,2;d:2048,5120,64;d:5120,2048,128" \
    timeout 200 python3 profiling/wgmma_trace.py > "$W/wgtrace28c.log" 2>&1
  grep -E "^##|cluster sum|split-K|main loop|CTA lifetime" "$W/wgtrace28c.log"
  WARM="wgmma gemv_stream gemv quant" AB_TAG=fix28 PREV_TREE=ab_prev AB_TIMEOUT=150 \
    AB_ARGS="--M 32,64,128 --k 4 --columns WGMMA,matmul --reps 15" OUT=$W bash profiling/tree_ab.sh
  WARM="wgmma grouped gemv" AB_TAG=fix28moe PREV_TREE=ab_prev AB_TIMEOUT=150 \
    AB_ARGS="--shapes moe --k 4 --moe-M 16,32,64 --experts 8,10 --columns Grouped,Grouped:stable --reps 15" OUT=$W bash profiling/tree_ab.sh
fi
# Measured (fixup, git 0785ba4; wgtrace28c, fix28-*, fix28moe-*): the cluster sum's keep-alive barrier 0.6 -> 0.03 us
#   (the release arrive had waited for the C stores), but its batched loads no faster (TOK = 64 1.26 -> 1.36 us: not
#   serial round trips); the arrive-first workspace sum no faster for the last CTA (gate/up 8 experts 64 tokens 3.7 ->
#   3.8 us) and slower at 8 splits (dense down M = 64: 3.97 -> 5.67: the last arriver waits for the others' stores,
#   which start only after their arrive's round trip); A/B: dense k = 4 TOTAL M = 32 / 64 / 128 42.98 / 52.10 / 65.82 ->
#   41.94 / 53.14 / 65.77 us, MoE 16 tokens 17.71 -> 18.63 (8 experts), 64 tokens 23.87 -> 23.23.  A test failed:
#   kbit_gemm.cu used the removed atomic_add_acq_rel (its family had not been compiled on the CPU).  Both reverted but
#   the relaxed keep-alive arrive (kbit_wgmma.cu).
# STEP=fixup2: that tree.  GPU tests (wgmma / grouped / PDL / gemm dispatch), the trace, the tree A/B as in fixup.
#   Expected: cluster-sum plans (MoE down at 16 tokens, dense down / O at M = 128: 6 splits) ~0.5 us faster, the rest equal.
if [ "$STEP" = fixup2 ]; then
  python3 profiling/warm_cache.py wgmma grouped gemm 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_fixup28b.log" 400 tests/test_wgmma_gpu.py tests/test_grouped_gpu.py tests/test_pdl_gpu.py -k "wgmma or impls or k5"
  KBIT_WG_CBD=0 KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE KBITS=4 CASES="g:2048,512,8,16;g:2048,512,8,64,2;d:2048,5120,128" \
    timeout 200 python3 profiling/wgmma_trace.py > "$W/wgtrace28d.log" 2>&1
  grep -E "^##|cluster sum|split-K|CTA lifetime" "$W/wgtrace28d.log"
  WARM="wgmma gemv_stream gemv quant" AB_TAG=fix28b PREV_TREE=ab_prev AB_TIMEOUT=150 \
    AB_ARGS="--M 32,64,128 --k 4 --columns WGMMA,matmul --reps 15" OUT=$W bash profiling/tree_ab.sh
  WARM="wgmma grouped gemv" AB_TAG=fix28bmoe PREV_TREE=ab_prev AB_TIMEOUT=150 \
    AB_ARGS="--shapes moe --k 4 --moe-M 16,32,64 --experts 8,10 --columns Grouped,Grouped:stable --reps 15" OUT=$W bash profiling/tree_ab.sh
fi
# Measured (fixup2; fix28b-*, fix28bmoe-*, wgtrace28d): 85 GPU tests passed; the keep-alive barrier 0.03-0.3 us (was
#   ~0.6); same-run A/B against the session's lc commit: dense k = 4 TOTAL M = 32 / 64 / 128 42.98 / 52.11 / 66.19 -> 42.56 /
#   51.01 / 63.90 us (0.74x -> 0.76x at 128: down / Q / O / KV -0.4..-0.6 us each), MoE k = 4 8 experts 16 / 32 / 64 tokens
#   17.75 / 20.02 / 24.01 -> 17.71 / 19.47 / 23.51 (64 tokens 0.97x -> 0.99x).
# STEP=final: closing tables of the session's tree: MoE k = 4 / 5 at 1..64 tokens (moe-final48), dense k = 4 M = 16..128
#   (final44).
if [ "$STEP" = final ]; then
  python3 profiling/warm_cache.py wgmma grouped gemv gemv_stream quant 2>&1 | tail -1
  timeout 230 python3 profiling/bench.py --out "$W" --shapes moe --k 4,5 --moe-M 1,4,16,32,64 --experts 8,10 \
    --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag moe-final48 > "$W/bench_moe48.log" 2>&1
  grep -E "TOTAL|as moe_forward" "$W/bench_moe48.log" | grep -E "\| 4 \||\| 5 \||k = 4|k = 5" | head -60
  timeout 170 python3 profiling/bench.py --out "$W" --M 16,32,64,128 --k 4 \
    --columns STREAM,WGMMA,dq+cuBLAS,matmul,matmul+PDL --reps 15 --tag final44 > "$W/bench44.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench44.log"
fi
# Measured (moe-final48, final44): MoE k = 4 as moe_forward launches them, 8 / 10 experts: 1 token 2.02x / 2.00x, 4 tokens
#   1.96x / 1.98x, 16 tokens 1.36x / 1.41x, 32 tokens 1.25x / 1.34x, 64 tokens 1.06x / 1.17x; the default per-projection
#   call at 64 tokens 0.99x / 1.07x (moe-final47: 0.96x / 1.06x); k = 5 at 64 tokens 0.94x / 0.90x (was 0.92x / 0.70x).
#   Dense k = 4 TOTAL M = 16 / 32 / 64 / 128: 1.39x / 1.11x / 0.95x / 0.77x (final43: 1.40x / 1.11x / 0.92x / 0.74x).
# STEP=h200: the same closing tables on an H200 (k = 4 / 5, 16..64 tokens; dense M = 32..128), and a same-run A/B of the
#   k = 5 table copies (moe_ab: the plan against 16 copies forced).
if [ "$STEP" = h200 ]; then
  python3 profiling/warm_cache.py wgmma grouped gemv gemv_stream quant 2>&1 | tail -1
  MOE_GEMV=0 MOE_MMA=0 KS=5 MS=64 ES=8,10,12 SHAPES=moe_gu_fused,moe_dn MOE_WG="d:;old:+lc=0" \
    timeout 100 python3 profiling/moe_ab.py --out "$W" > "$W/k5verify28h.log" 2>&1
  grep -E "^TOTAL" "$W/k5verify28h.log"
  timeout 200 python3 profiling/bench.py --out "$W" --shapes moe --k 4,5 --moe-M 16,32,64 --experts 8,10 \
    --columns Grouped,Grouped:stable --reps 15 --tag moe-final48h > "$W/bench_moe48h.log" 2>&1
  grep -E "TOTAL|as moe_forward" "$W/bench_moe48h.log" | head -40
  timeout 150 python3 profiling/bench.py --out "$W" --M 32,64,128 --k 4 \
    --columns STREAM,WGMMA,dq+cuBLAS,matmul --reps 15 --tag final44h > "$W/bench44h.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench44h.log"
fi
# Ran on the warm H100 (the device tool keeps a held machine for kind nvidia-h200 unless needs_h200): a replicate, files
#   *_final44rep, *_moe-final48rep, *_k5verify28rep.log (k = 5 64 tokens 10 experts 42.27 -> 32.83 us, 12 experts 41.96 ->
#   37.78; MoE k = 4 64 tokens 0.99x / 1.06x; dense M = 128 0.77x: the same as STEP=final).
# STEP=suite: the whole GPU suite on the session's final kernels (every family's source includes kbit_pairlut.cuh, which
#   changed).
if [ "$STEP" = suite ]; then
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_suite28.log" 470
fi
# Measured (gpu_tests_suite28.log): 553 passed, 1 failed: the new test_grouped_wgmma_k5_fewer_table_copies[float16]
#   read the device error flag that an earlier test had left set (ERR_MAX_TOKENS; alone it passed, 37 / 85 tests in
#   verify / fixup2); the test now clears the flag first.  STEP=suite2: that test file again -- 140 passed
#   (gpu_tests_suite28b.log).
if [ "$STEP" = suite2 ]; then
  gpu_tests "$W/gpu_tests_suite28b.log" 300 tests/test_grouped_gpu.py
fi
# STEP=batch (the session's last device seconds): the cluster sum's batched loads (hook -DKBIT_WG_CLUSTER_BATCH, the
#   fixup step's loop) where the share loop is ~9 serial DSMEM round trips: dense down / O at M = 128 (TOK = 128, 6
#   clustered splits; wgtrace28d: share summed and stored 2.36 us p50).  Expected, if latency-bound: ~0.8-1 us.
if [ "$STEP" = batch ]; then
  for o in "" "-DKBIT_WG_CLUSTER_BATCH"; do
    echo "## KBIT_WGMMA_OPTS extra: '$o'"
    KBIT_WG_CBD=0 KBIT_WGMMA_OPTS="-DKBIT_WG_TRACE $o" KBITS=4 CASES="d:2048,5120,128;d:2048,4096,128" \
      timeout 60 python3 profiling/wgmma_trace.py 2>&1 | grep -E "^##|cluster sum|CTA lifetime|span"
  done 2>&1 | tee "$W/wgtrace28e.log"
fi
# Measured (wgtrace28e.log): slower -- share summed and stored p50 2.36 -> 3.08 us (down), 2.36 -> 2.88 (O), launch span
#   18.1 -> 18.8 us: more DSMEM loads in flight make it worse, so the share sum is bound by the cluster network's
#   throughput, not by serial round trips.  Hook removed (the kernel's source is the fixup2 / final tree's again).
# STEP=sumch (prepared, not run: the session's device time ran out): the dense kernel's workspace sum at TOK = 64 with
#   8 float4 loads in flight per thread instead of 4 (-DKBIT_WG_DENSE_SUM64=8; 116 registers under NVRTC 12.9 and
#   nvcc 13, no spills).  Expected: the last CTA's 3.97 us after the main loop (dense down M = 64, 8 splits, wgtrace28b)
#   -> ~3 us; down / O / Q at M = 48..64 0.5-1 us faster where they split through the workspace, the rest equal.
if [ "$STEP" = sumch ]; then
  for o in "" "-DKBIT_WG_DENSE_SUM64=8"; do
    KBIT_WGMMA_OPTS="$o" timeout 150 python3 profiling/bench.py --out "$W" --M 48,64 --k 4 --columns WGMMA,matmul \
      --reps 15 --tag "sumch${o:+8}" > "$W/bench_sumch${o:+8}.log" 2>&1
    echo "## '$o'"; grep -E "^### M|WGMMA \||^\| (gateup|down|Q|O|KV) \| 4|TOTAL" "$W/bench_sumch${o:+8}.log"
  done
fi
finish_run run28
