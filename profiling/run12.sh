#!/usr/bin/env bash
# Twelfth session's device runs (H200 / H100); every output packed into $OUT/run12_$STEP.tgz.
#   STEP=cbprobe: how much of the decode kernels' prologue is the codebook's global load
#     (-DKBIT_EXPERIMENT_CB_CONST: levels made in registers, wrong results, timing only), with the
#     bench's shared (L2-warm) codebook and with a codebook per weight copy (KBIT_BENCH_COLD_CB=1,
#     as every layer of a model has its own), and the real change beside it in both kernels
#     (-DKBIT_CB_PARAM: the levels passed by value and read from the parameter space); the decode
#     GEMV's per-block timeline (gemv_trace.py)
#   STEP=tests: the whole GPU suite (the twelfth session changed the out= handling and the low-level
#     entry points' argument checks without a GPU; new: tests/test_checks_gpu.py), ~6 min
#   OUT=/tmp/out STEP=tests bash profiling/run12.sh   (then STEP=cbprobe in a second call)
. profiling/run_env.sh
W=$OUT/work; mkdir -p $W
GPU=$(python3 -c "import cupy as c; print(c.cuda.runtime.getDeviceProperties(0)['name'].decode())")
echo "# $GPU, $(date -I), git $(cat .git_rev 2>/dev/null || echo '?'), STEP=${STEP:-cbprobe}" | tee "$W/header.txt"
case "${STEP:-cbprobe}" in
tests)
  python3 profiling/warm_cache.py 2>&1 | tail -1
  gpu_tests "$W/gpu_tests.log" 500 tests/ ;;
cbprobe)
  V="cbconst:-DKBIT_EXPERIMENT_CB_CONST"
  VG="$V;cbparam:-DKBIT_CB_PARAM"  # cbparam: the real change (levels by value), its err must equal new's
  KS=4,5 MS=1,4 SHAPES=gateup,down,Q,O,KV AB_VARIANTS="$VG" timeout 150 python3 profiling/gemv_ab.py > "$W/cb_gemv_warm.log" 2>&1
  grep -E "^#|^TOTAL|gateup" "$W/cb_gemv_warm.log"
  KBIT_BENCH_COLD_CB=1 KS=4,5 MS=1,4 SHAPES=gateup,down,Q,O,KV AB_VARIANTS="$VG" timeout 150 python3 profiling/gemv_ab.py > "$W/cb_gemv_cold.log" 2>&1
  grep -E "^TOTAL|gateup" "$W/cb_gemv_cold.log"
  KBIT_BENCH_COLD_CB=1 SHAPES=gateup,down,KV KS=4 MS=1,16,32 VARIANTS="$VG" timeout 200 python3 profiling/stream_probe.py > "$W/cb_stream_cold.log" 2>&1
  grep -v "^   trace" "$W/cb_stream_cold.log"
  SHAPES=gateup,down,KV KS=4,5 timeout 60 python3 profiling/gemv_trace.py > "$W/gemv_trace.log" 2>&1
  TRACE_OPTS=-DKBIT_EXPERIMENT_CB_CONST SHAPES=gateup,KV KS=4 timeout 60 python3 profiling/gemv_trace.py > "$W/gemv_trace_cbconst.log" 2>&1
  grep -E "^##|prologue|codebook|step 0 weights|block exit \(g" "$W/gemv_trace.log" "$W/gemv_trace_cbconst.log" ;;
esac
tar -czf "$OUT/run12_${STEP:-cbprobe}.tgz" -C "$W" . && rm -rf "$W"
