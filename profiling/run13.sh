#!/usr/bin/env bash
# Thirteenth session's device run: the decode GEMV with the codebook levels by value (default now).
#   STEP=ab: the GPU tests the change touches (dense GEMV, launch / PDL fast paths, layers, torch,
#     argument checks, out=), compute-sanitizer memcheck of the GEMV paths, then gemv_ab's same-run A/B
#     of levels by value ('new') against the codebook from device memory ('cbptr': weights without host
#     levels, the kernel as before), with the bench's shared codebook, with one codebook per weight copy
#     (KBIT_BENCH_COLD_CB=1) and with PDL
#   STEP=bench: a one-kernel-module variant of the GEMV (ab_solo), the dense table at M = 1, 2, 4 (tag final19)
#   OUT=/tmp/out STEP=ab bash profiling/run13.sh   (then STEP=bench in a second call)
. profiling/run_env.sh
W=$OUT/work; mkdir -p $W
GPU=$(python3 -c "import cupy as c; print(c.cuda.runtime.getDeviceProperties(0)['name'].decode())")
echo "# $GPU, $(date -I), git $(cat .git_rev 2>/dev/null || echo '?'), STEP=${STEP:-ab}" | tee "$W/header.txt"
case "${STEP:-ab}" in
ab)
  python3 profiling/warm_cache.py 2>&1 | tail -1
  echo "# $GPU, $(date -I): pytest -q -m gpu (GEMV-related files)" > "$W/gpu_tests.log"
  timeout 240 python3 -m pytest -q -m gpu tests/test_gemv_gpu.py tests/test_launch_gpu.py tests/test_pdl_gpu.py \
      tests/test_checks_gpu.py tests/test_quantize_gpu.py tests/test_layers_gpu.py tests/test_torch_ops.py >> "$W/gpu_tests.log" 2>&1
  tail -2 "$W/gpu_tests.log"
  compute-sanitizer --tool memcheck --error-exitcode 3 python3 profiling/sanitize_driver.py > "$W/memcheck.txt" 2>&1
  echo "memcheck: exit $? ($(grep -c 'rel err' "$W/memcheck.txt") checks; $(grep -E 'ERROR SUMMARY|BAD' "$W/memcheck.txt" | tr '\n' ' '))"
  AB_CBPTR=1 KS=2,4,5 MS=1,2,4 timeout 120 python3 profiling/gemv_ab.py > "$W/ab_warm.log" 2>&1
  grep -E "^#|^TOTAL" "$W/ab_warm.log"
  KBIT_BENCH_COLD_CB=1 AB_CBPTR=1 KS=2,4,5 MS=1,2,4 timeout 120 python3 profiling/gemv_ab.py > "$W/ab_cold.log" 2>&1
  grep -E "^TOTAL" "$W/ab_cold.log"
  KBITCUPY_PDL=1 AB_CBPTR=1 KS=4 MS=1 timeout 60 python3 profiling/gemv_ab.py > "$W/ab_pdl.log" 2>&1
  grep -E "^TOTAL" "$W/ab_pdl.log" ;;
bench)
  python3 profiling/warm_cache.py gemv gemv_stream 2>&1 | tail -1
  # 'solo': the same source and arguments as 'new', built as a one-kernel module (as the twelfth
  # session's probe variants were): is the probe's 3 % a module effect rather than the codebook load?
  AB_VARIANTS="solo:" AB_CBPTR=1 KS=4,5 MS=1,4 timeout 90 python3 profiling/gemv_ab.py > "$W/ab_solo.log" 2>&1
  grep -E "^TOTAL|gateup" "$W/ab_solo.log"
  timeout 400 python3 profiling/bench.py --out "$W" --M 1,2,4 --k 2,3,4,5 --columns GEMV,STREAM,matmul,matmul+PDL \
      --reps 15 --tag final19 > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log" ;;
cbcheck)
  # the twelfth session's probe columns beside the shipped paths, one run: new (levels by value, LDC),
  # cbptr (same binary, codebook from memory), solo (one-kernel module of new), cbconst (no load at all)
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  V="solo:;cbconst:-DKBIT_EXPERIMENT_CB_CONST"
  AB_VARIANTS="$V" AB_CBPTR=1 KS=4,5 MS=1 timeout 120 python3 profiling/gemv_ab.py > "$W/cbcheck_warm.log" 2>&1
  grep -E "^TOTAL" "$W/cbcheck_warm.log"
  KBIT_BENCH_COLD_CB=1 AB_VARIANTS="$V" AB_CBPTR=1 KS=4,5 MS=1 timeout 120 python3 profiling/gemv_ab.py > "$W/cbcheck_cold.log" 2>&1
  grep -E "^TOTAL" "$W/cbcheck_cold.log"
  AB_VARIANTS="$V" AB_CBPTR=1 KS=4 MS=1 timeout 120 python3 profiling/gemv_ab.py > "$W/cbcheck_warm2.log" 2>&1
  grep -E "^TOTAL" "$W/cbcheck_warm2.log" ;;
early)
  # -DKBIT_CB_EARLY: the codebook's load issued before the step-0 weight loads (cbcheck: no load at
  # all, cbconst, was 2.6-2.8 % faster, the levels by value were not): is it the load's place in the queue?
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  V="solo:;early:-DKBIT_CB_EARLY;cbconst:-DKBIT_EXPERIMENT_CB_CONST"
  AB_VARIANTS="$V" KS=2,4,5 MS=1,4 timeout 150 python3 profiling/gemv_ab.py > "$W/early_warm.log" 2>&1
  grep -E "^TOTAL" "$W/early_warm.log"
  KBIT_BENCH_COLD_CB=1 AB_VARIANTS="$V" KS=4,5 MS=1,4 timeout 120 python3 profiling/gemv_ab.py > "$W/early_cold.log" 2>&1
  grep -E "^TOTAL" "$W/early_cold.log"
  KBITCUPY_PDL=1 AB_VARIANTS="$V" KS=4,5 MS=1 timeout 90 python3 profiling/gemv_ab.py > "$W/early_pdl.log" 2>&1
  grep -E "^TOTAL" "$W/early_pdl.log" ;;
repl)
  # -DKBIT_CB_REPL=R: block b reads the codebook from copy b % R (its own L2 line): is the no-load
  # bound's 2.5 % the L2 slice that every block's codebook request queues on?
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  V="solo:;r8:-DKBIT_CB_REPL=8;r64:-DKBIT_CB_REPL=64;r512:-DKBIT_CB_REPL=512;cbconst:-DKBIT_EXPERIMENT_CB_CONST"
  AB_VARIANTS="$V" KS=4,5 MS=1,4 timeout 150 python3 profiling/gemv_ab.py > "$W/repl_warm.log" 2>&1
  grep -E "^TOTAL" "$W/repl_warm.log"
  KBIT_BENCH_COLD_CB=1 AB_VARIANTS="$V" KS=4 MS=1 timeout 120 python3 profiling/gemv_ab.py > "$W/repl_cold.log" 2>&1
  grep -E "^TOTAL" "$W/repl_cold.log"
  KBITCUPY_PDL=1 AB_VARIANTS="$V" KS=4,5 MS=1 timeout 90 python3 profiling/gemv_ab.py > "$W/repl_pdl.log" 2>&1
  grep -E "^TOTAL" "$W/repl_pdl.log" ;;
imm)
  # the no-load bound again, split: 'zeroldg' = cbconst's uniform levels but still dependent on the load
  # (values vs load); 'imm' = the default codebook's levels as immediates (correct results: err = new's)
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  V="solo:;imm:-DKBIT_CB_IMM;zeroldg:-DKBIT_CB_ZEROLDG;cbconst:-DKBIT_EXPERIMENT_CB_CONST"
  AB_VARIANTS="$V" KS=2,4,5 MS=1,4 timeout 200 python3 profiling/gemv_ab.py > "$W/imm_warm.log" 2>&1
  grep -E "^TOTAL" "$W/imm_warm.log"
  KBITCUPY_PDL=1 AB_VARIANTS="$V" KS=4,5 MS=1 timeout 100 python3 profiling/gemv_ab.py > "$W/imm_pdl.log" 2>&1
  grep -E "^TOTAL" "$W/imm_pdl.log" ;;
async)
  # -DKBIT_CB_ASYNC: the codebook by cp.async (its own commit group) instead of a register load whose
  # wait may share a scoreboard with the step-0 weight loads; imm (no load) beside it
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  V="solo:;async:-DKBIT_CB_ASYNC;imm:-DKBIT_CB_IMM"
  AB_VARIANTS="$V" KS=2,4,5 MS=1,4 timeout 200 python3 profiling/gemv_ab.py > "$W/async_warm.log" 2>&1
  grep -E "^TOTAL" "$W/async_warm.log"
  KBIT_BENCH_COLD_CB=1 AB_VARIANTS="$V" KS=4 MS=1 timeout 100 python3 profiling/gemv_ab.py > "$W/async_cold.log" 2>&1
  grep -E "^TOTAL" "$W/async_cold.log"
  KBITCUPY_PDL=1 AB_VARIANTS="$V" KS=4,5 MS=1 timeout 100 python3 profiling/gemv_ab.py > "$W/async_pdl.log" 2>&1
  grep -E "^TOTAL" "$W/async_pdl.log" ;;
final)
  # the default-codebook immediates (shipped): GEMV-related GPU tests, memcheck, same-run A/B against the
  # codebook load (cbload), then the dense table at M = 1, 2, 4 (final19b)
  python3 profiling/warm_cache.py 2>&1 | tail -1
  echo "# $GPU, $(date -I): pytest -q -m gpu (GEMV-related files)" > "$W/gpu_tests.log"
  timeout 240 python3 -m pytest -q -m gpu tests/test_gemv_gpu.py tests/test_launch_gpu.py tests/test_pdl_gpu.py \
      tests/test_checks_gpu.py tests/test_quantize_gpu.py tests/test_layers_gpu.py tests/test_torch_ops.py >> "$W/gpu_tests.log" 2>&1
  tail -2 "$W/gpu_tests.log"
  compute-sanitizer --tool memcheck --error-exitcode 3 python3 profiling/sanitize_driver.py > "$W/memcheck.txt" 2>&1
  echo "memcheck: exit $? ($(grep -c 'rel err' "$W/memcheck.txt") checks; $(grep -E 'ERROR SUMMARY|BAD' "$W/memcheck.txt" | tr '\n' ' '))"
  AB_CBLOAD=1 KS=2,3,4,5 MS=1,2,4 timeout 120 python3 profiling/gemv_ab.py > "$W/final_ab.log" 2>&1
  grep -E "^TOTAL" "$W/final_ab.log"
  KBITCUPY_PDL=1 AB_CBLOAD=1 KS=4,5 MS=1 timeout 60 python3 profiling/gemv_ab.py > "$W/final_ab_pdl.log" 2>&1
  grep -E "^TOTAL" "$W/final_ab_pdl.log"
  timeout 200 python3 profiling/bench.py --out "$W" --M 1,2,4 --k 2,3,4,5 --columns GEMV,STREAM,matmul,matmul+PDL \
      --reps 15 --tag final19b > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log" ;;
final2)
  # the default codebook compiled in (template CBD): the whole GPU suite, memcheck, same-run A/B against
  # the codebook-loading instantiation (cbload), the dense table at M = 1, 2, 4 (final19c)
  python3 profiling/warm_cache.py 2>&1 | tail -1
  echo "# $GPU, $(date -I): pytest -q -m gpu tests/" > "$W/gpu_tests.log"
  timeout 340 python3 -m pytest -q -m gpu tests/ >> "$W/gpu_tests.log" 2>&1
  tail -2 "$W/gpu_tests.log"
  compute-sanitizer --tool memcheck --error-exitcode 3 python3 profiling/sanitize_driver.py > "$W/memcheck.txt" 2>&1
  echo "memcheck: exit $? ($(grep -c 'rel err' "$W/memcheck.txt") checks; $(grep -E 'ERROR SUMMARY|BAD' "$W/memcheck.txt" | tr '\n' ' '))"
  AB_CBLOAD=1 KS=2,3,4,5 MS=1,2,4 timeout 90 python3 profiling/gemv_ab.py > "$W/final2_ab.log" 2>&1
  grep -E "^TOTAL" "$W/final2_ab.log"
  KBITCUPY_PDL=1 AB_CBLOAD=1 KS=4,5 MS=1 timeout 40 python3 profiling/gemv_ab.py > "$W/final2_ab_pdl.log" 2>&1
  grep -E "^TOTAL" "$W/final2_ab_pdl.log"
  timeout 60 python3 profiling/bench.py --out "$W" --M 1,2,4 --k 2,3,4,5 --columns GEMV,STREAM,matmul,matmul+PDL \
      --reps 15 --tag final19c > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log" ;;
h200)
  # the same change on the H200 (the issues' reference GPU): GEMV tests, same-run A/B, the dense table
  python3 profiling/warm_cache.py gemv gemv_stream 2>&1 | tail -1
  echo "# $GPU, $(date -I): pytest -q -m gpu tests/test_gemv_gpu.py tests/test_launch_gpu.py" > "$W/gpu_tests.log"
  timeout 150 python3 -m pytest -q -m gpu tests/test_gemv_gpu.py tests/test_launch_gpu.py >> "$W/gpu_tests.log" 2>&1
  tail -1 "$W/gpu_tests.log"
  AB_CBLOAD=1 KS=2,3,4,5 MS=1,2,4 timeout 90 python3 profiling/gemv_ab.py > "$W/h200_ab.log" 2>&1
  grep -E "^TOTAL" "$W/h200_ab.log"
  KBITCUPY_PDL=1 AB_CBLOAD=1 KS=4,5 MS=1 timeout 40 python3 profiling/gemv_ab.py > "$W/h200_ab_pdl.log" 2>&1
  grep -E "^TOTAL" "$W/h200_ab_pdl.log"
  timeout 90 python3 profiling/bench.py --out "$W" --M 1,2,4 --k 2,3,4,5 --columns GEMV,STREAM,matmul,matmul+PDL \
      --reps 15 --tag final19c > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log" ;;
esac
tar -czf "$OUT/run13_${STEP:-ab}.tgz" -C "$W" . && rm -rf "$W"
