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
