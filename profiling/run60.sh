#!/usr/bin/env bash
# Fifty-third session (2026-11-29).  From the repo root:  OUT=/tmp/out STEP=x2 bash profiling/run60.sh  (carry .git_rev)
. profiling/run_env.sh
start_run x2
# STEP=x2 (kind nvidia-h200-x2): the fifty-second session's review commit (69f9745: one device-switch mechanism,
#   .cuda() through one gpu_copy, the fast path's getDevice passed on) was not run on a GPU; this step runs the tests
#   it touches with both GPUs (test_devices_gpu -- now with grouped_gemv_fused's own device check -- test_launch_gpu,
#   test_layers_gpu), the nine-case cross-device probe, and profiling/device_overhead.py: the host cost of a matmul
#   whose arrays are on GPU 1 with GPU 0 current (the plan's switch around the launch; never timed).
# Expect: all pass, the probe all ok; an other-GPU call costs two cudaSetDevice more than a same-GPU one (~1-3 us).
if [ "$STEP" = x2 ]; then
  nvidia-smi -L | tee "$W/gpus.txt"
  gpu_tests "$W/gpu_tests_devices60.log" 300 -rs tests/test_devices_gpu.py tests/test_launch_gpu.py tests/test_layers_gpu.py
  grep -E "^E  |FAILED|SKIPPED|Error" "$W/gpu_tests_devices60.log" | head -30
  echo "== probe"; timeout 150 python3 profiling/device_probe.py 2>&1 | tee "$W/device_probe60.log" | tail -12
  echo "== other-GPU host cost"; timeout 120 python3 profiling/device_overhead.py 2>&1 | tee "$W/device_overhead60.log"
  finish_run run60
fi
# Result (x2, H200 x2, git 387014e, `x2_gpu_tests_devices60.log`, `x2_device_probe60.log`, `x2_device_overhead60.log`):
#   45 passed (test_devices_gpu 8 with the two-GPU ones, test_launch_gpu 18, test_layers_gpu 19).  Probe: every case
#   ok, the low-level gemv refusing by name.  Host cost, us a call (arrays on GPU 1; median of 5 x 300 calls): same GPU
#   current 5.1-5.3 (KV M = 1's 8.0 was the first timed case), GPU 0 current 6.1-6.5 (the plan's switch: +1.0-1.2),
#   no out= 8.9-9.4, the plan off 19.8-21.0; torch 5.7-5.9 / 6.8-7.2.  Every output equal to the same-GPU call's.
# STEP=suiteA / suiteB (kind nvidia-h200): the whole GPU suite on the final tree (the review commit 69f9745 touched
#   stream_ctx, torch_to_cupy, the weights' .cuda() and the fast path's device compare, which every API test crosses;
#   the fifty-second session's suite ran before it).
# Expect: every test passes; no kernel changed since 105e847.
if [ "$STEP" = suiteA ] || [ "$STEP" = suiteB ]; then
  part=${STEP#suite}
  gpu_suite "$part" "$W/gpu_tests_suite60$(echo "$part" | tr AB ab).log"
  finish_run run60
fi
# Result (suiteA / suiteB, H200, git 5289508 = 387014e's package and tests, `gpu_tests_suite60a.log`,
#   `gpu_tests_suite60b.log`): 219 passed + 5 skipped (the two-GPU tests, run on the x2 above), 401 passed (553 s of the
#   560 s limit, cold compiles) -- the whole GPU suite on the final code, 620 passed.
# STEP=dq (kind nvidia-h200): what bounds the dequant + cuBLAS path at M = 256 / 512 (issue 4's 0.64x / 0.71x; there
#   dispatch runs dq+cuBLAS on most shapes).  profiling/dq_probe.py: the dequantize kernel against the speed of light of
#   its own traffic (packed read + fp16 write; the write alone), and cuBLAS on the just-written buffer against cuBLAS
#   on the buffer alone (L2-resident) and on cold fp16 copies.  A probe for the next session: no source change.
# Expect: gate/up dq ~7.6 us (eighth session); rw_sol 5-7 (26.6 MB at the write-back rate), so dq / rw_sol 1.1-1.5; the
#   write alone faster if the L2 absorbs it; cuBLAS after the dequantize between gemm_hot and gemm_cold.
if [ "$STEP" = dq ]; then
  timeout 300 python3 profiling/dq_probe.py 2>&1 | tee "$W/dq_probe60.log"
  finish_run run60
fi
# Result (dq, H200, git dbfaec8, `dq_probe60.log`; us, k = 4 fp16): the dequantize runs at its traffic's speed of light
#   -- dq / rw_sol 1.00 / 1.04 / 1.04 / 1.08 / 1.13 (gate/up 7.30 vs 7.32, down 7.57 vs 7.28, Q 6.36 vs 6.11, O 6.52 vs
#   6.05, KV 2.49 vs 2.21) -- and the fp16 write alone is most of it (wr_sol gate/up 5.65: 21 MB at ~3.7 TB/s, not
#   absorbed by the L2).  cuBLAS right after it (dq_gemm - dq) is no faster than on cold fp16 copies (gate/up M = 256
#   11.16 vs cold 10.43, the buffer alone 10.63; M = 512 18.01 / 17.89 / 16.97).  So dq+cuBLAS = fp16 GEMM + the
#   fp16 write (gate/up M = 256 18.46 = 0.57x of 10.43): no dequantize kernel brings it within 1.15x; only the fused
#   kernels can (as the third session's note said from the bytes; now measured).
# STEP=tok (kind nvidia-h200): the dense wgmma kernel at TOK = 256 (two m64n128 a k16; 191 registers, no spills, four
#   stages; instantiated, taken only when asked for) against the plan's TOK at M = 256 / 512, every dense shape,
#   k = 4 (profiling/tok_probe.py).  Why: at M = 256 the plan runs two 128-token tiles, so every weight is dequantized
#   twice; the forty-eighth session's probe priced a 256-token tile ~18 % cheaper a token, and gate/up's 40 strips at
#   TOK = 128 x 2 tiles run 80 CTAs of the whole K (52 SMs idle) where one 256-token tile takes 3 splits on 120.
# Expect: M = 256 gate/up / Q / linear value (2048-K shapes, few splits today) 10-30 % faster; down / O (already 4-8
#   splits) within +-10 % (their partials double); M = 512 mixed against TOK = 192; every output within 1e-2.
if [ "$STEP" = tok ]; then
  timeout 250 python3 profiling/tok_probe.py --M 256,512 2>&1 | tee "$W/tok_probe60.log"
  finish_run run60
fi
# Result (tok, H200, git 7a88aaf, `tok_probe60.log`; us, k = 4): TOK = 256 slower in all 14 cells, every output right
#   (max err 4-6e-4).  TOTAL M = 256 106.37 -> 127.74 (x1.20), M = 512 144.85 -> 175.87 (x1.21); gate/up M = 256 20.91
#   -> 22.94 (3 workspace splits on 120 CTAs against 1 on 80), Q / linear value M = 256 x1.32, KV x1.48.  Per token the
#   256-token K tile is the cheaper one where nothing else changes (gate/up M = 512, one split each: ~1.08 us a 256-token
#   tile, 4.2 ns a token, against TOK = 192's 4.7 and 128's 5.1), but at M = 256 / 512 it halves the CTAs, and the
#   splits that refill the SMs exchange 128 KB partials a CTA.  Removed (profiling/patches/session53-wg-tok256.patch:
#   the kernel branch, the instantiations, the plan's explicit tok=256; tok_probe.py kept).
# STEP=glate (kind nvidia-h200): the grouped decode GEMV's late ring fill (step 1 once step 0 has landed; the hook
#   -DKBIT_GROUPED_LATE=true, default only at k = 5) at k = 4 on the H200.  It was measured on the H100 only (twentieth
#   session: +0.3-0.6 us at k = 2 / 4); the dense kernel's late fill, also fitted on the H100, was re-measured on the
#   H200 in the fifty-first session and gained 4-5 % on the gate/up-wide shapes.  moe_ab.py, 1 token, 8 / 10 experts,
#   gate/up fused and down, the default launch and the stable one (+stable=1, as moe_forward's down), two passes.
# Expect: within +-3 % (the H100 said slower); a gain on gate/up fused (640 groups, 5 an SM) if the H200 repeats the
#   dense kernel's reading.
if [ "$STEP" = glate ]; then
  MS=1 ES=8,10 KS=4 MOE_MMA=0 \
    MOE_VARIANTS="late:-DKBIT_GROUPED_LATE=true;st:+stable=1;late_st:-DKBIT_GROUPED_LATE=true +stable=1" \
    moe_ab_twice glate60 150
  finish_run run60
fi
# Result (glate, H200, git 923371c, `moe_glate60_{1,2}.log`; us, k = 4, 1 token): the late fill slower in every cell of
#   both passes, +2..+5 % -- gate/up fused 8 / 10 experts 6.20 / 7.26 -> 6.43 / 7.51 (stable 5.79 / 7.21 -> 5.97 /
#   7.59), down 4.28 / 4.92 -> 4.40 / 5.09 (stable 3.90 / 4.50 -> 4.03 / 4.62); TOTAL 10 experts 12.18 -> 12.60.  The
#   H100's reading holds on the H200: the default (late at k = 5 only) stays.
# STEP=gkeep (kind nvidia-h200): the grouped GEMV's safe early (stable) mode keeping its first word offsets from before
#   the wait, as the dense kernel does (hook -DKBIT_GROUPED_KEEP_ADDR=true; H100 only so far, thirtieth session: k = 4
#   gate/up fused + down 10.24 / 12.55 -> 10.67 / 12.87 us).  It acts in the stable launch only (moe_forward's down).
# Expect: within +-3 % or slower, as on the H100.
if [ "$STEP" = gkeep ]; then
  MS=1,4 ES=8,10 KS=4 MOE_MMA=0 MOE_GEMV=0 \
    MOE_VARIANTS="st:+stable=1;keep_st:-DKBIT_GROUPED_KEEP_ADDR=true +stable=1" moe_ab_twice gkeep60 100
  finish_run run60
fi
# Result (gkeep, H200, git 184b176, `moe_gkeep60_{1,2}.log`; us, k = 4, stable launch): down slower in every cell of
#   both passes (8 / 10 experts 1 token 3.91 / 4.51 -> 4.02 / 4.62, 4 tokens 3.95 / 4.56 -> 4.05 / 4.67: +2.2..+2.8 %);
#   gate/up fused within -1.2..+0.7 % (10 experts 1 token 7.24 / 7.27 -> 7.15 / 7.18).  moe_forward runs only down in
#   the stable launch, so it would lose ~0.1 us: the hook stays off.
