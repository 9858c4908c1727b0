#!/usr/bin/env bash
# Fifty-second session (2026-11-29).  From the repo root:  OUT=/tmp/out STEP=dev2 bash profiling/run59.sh  (carry .git_rev)
. profiling/run_env.sh
start_run dev2
# STEP=dev2 (kind nvidia-h200-x2): which GPU a call runs on.  Before this session a call with its arrays on a device
#   other than CuPy's current one allocated its result on the current device and launched there with the other
#   device's pointers (matmul without out=, dequantize, repack; the low-level kernels with validate=True): a fault or a
#   read of another GPU's memory.  Now every entry point's stream_ctx makes its main array's device current (torch's
#   device-guard behaviour), moe_forward checks its banks / routing / weights against x's device, and the low-level
#   kernels refuse another current device by name.  tests/test_devices_gpu.py: the switch on one GPU (the current
#   device reported as another), and on two GPUs everything on device 1 with device 0 current (CuPy and torch,
#   quantize / repack / dequantize / matmul's general path and plan / grouped_matmul / moe_forward, equal to the same
#   calls made on device 1; mixed devices refused); then the API-level GPU tests the change touches, on GPU 0.
# Expect: all pass; no kernel changed (only host code), so no timing moves.
if [ "$STEP" = dev2 ]; then
  nvidia-smi -L | tee "$W/gpus.txt"
  gpu_tests "$W/gpu_tests_devices59.log" 240 -rs tests/test_devices_gpu.py
  grep -E "^E  |FAILED|SKIPPED" "$W/gpu_tests_devices59.log" | head -20
  gpu_tests "$W/gpu_tests_api59.log" 300 tests/test_checks_gpu.py tests/test_quantize_gpu.py tests/test_torch_ops.py \
    tests/test_layers_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_api59.log" | head -20
  finish_run run59
fi
