#!/usr/bin/env bash
# The one command for the GPU machine: GPU tests + benchmarks, logs and JSON under $OUT.
#   usage: OUT=/tmp/out bash profiling/run_gpu.sh [warm|tests|foundation|host|bench|quick|ab|moe_ab|final|trace|all]...
set -u
OUT=${OUT:-/tmp/kbit_out}
mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
steps=${*:-all}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import cupy, numpy; print('cupy', cupy.__version__, 'cuda', cupy.cuda.runtime.runtimeGetVersion(), 'numpy', numpy.__version__)" >> "$OUT/gpu.txt" 2>&1
for s in $steps; do
  case $s in
    warm)  # compile the families named in $WARM (default: all) in parallel into the caches
      python3 profiling/warm_cache.py ${WARM:-} 2>&1 | tail -3 ;;&
    tests|all)
      python3 -m pytest -q -m gpu --maxfail=30 ${TESTS:-tests/} ${PYTEST_ARGS:-} > "$OUT/tests.log" 2>&1; tail -40 "$OUT/tests.log" ;;&
    foundation|all)
      python3 profiling/bench_foundation.py --out "$OUT" > "$OUT/foundation.log" 2>&1; tail -30 "$OUT/foundation.log" ;;&
    ab)
      python3 profiling/gemv_ab.py --out "$OUT" 2>&1 | tee "$OUT/gemv_ab.log" ;;&
    moe_ab)
      python3 profiling/moe_ab.py --out "$OUT" 2>"$OUT/moe_ab.err" | tee "$OUT/moe_ab.log" ;;&
    final)  # dense M = 1..16, MoE expert matmuls and the MoE layer step, tables named TAG
      OUT="$OUT" TAG=${TAG:-final} bash profiling/final_bench.sh ;;&
    host|all)
      python3 profiling/host_overhead.py --out "$OUT" > "$OUT/host.log" 2>&1; tail -30 "$OUT/host.log" ;;&
    trace)
      python3 profiling/gemv_trace.py 2>&1 | tee "$OUT/gemv_trace.log"
      TRACE_OPTS="-DKBIT_EXPERIMENT_NO_COMPUTE" SHAPES=gateup KS=4 python3 profiling/gemv_trace.py 2>&1 | tee "$OUT/gemv_trace_nocompute.log" ;;&
    quick)
      python3 profiling/quick_gemv.py 2>&1 | tee "$OUT/quick.log" ;;&
    bench|all)
      if [ -f profiling/bench.py ]; then python3 profiling/bench.py --out "$OUT" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1; tail -80 "$OUT/bench.log"; fi ;;&
    *) ;;
  esac
done
# ncu cross-check of one GEMV config (stall reasons, occupancy): NCU=1
if [ "${NCU:-0}" = "1" ]; then
  python3 - > "$OUT/ncu_driver.py" <<'PY'
print('''import cupy as cp, numpy as np, kbitcupy as kb, os
N, K = [int(x) for x in os.environ.get("SHAPE", "5120,2048").split(",")]
W = cp.asarray(np.random.default_rng().standard_normal((N, K), dtype=np.float32) * 0.02).astype(cp.float16)
q = kb.quantize(W, int(os.environ.get("KBITS", "4")))
A = cp.asarray(np.random.default_rng().standard_normal((int(os.environ.get("M", "1")), K), dtype=np.float32)).astype(cp.float16)
for _ in range(3): kb.matmul(A, q)
cp.cuda.runtime.deviceSynchronize()''')
PY
  ncu --clock-control none --cache-control all -k regex:kbit_gemv --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis python3 "$OUT/ncu_driver.py" > "$OUT/ncu.txt" 2>&1
  grep -E "Duration|Throughput|Occupancy|Registers|Shared Memory|Stall|Warp Cycles|Issue|Block Limit|Waves|Executed Ipc|Bank" "$OUT/ncu.txt" | head -60
  # where the warps wait (per issued instruction)
  m=""; for r in long_scoreboard short_scoreboard mio_throttle lg_throttle barrier wait math_pipe_throttle not_selected selected dispatch_stall no_instruction branch_resolving membar sleeping tex_throttle drain imc_miss misc; do
    m="$m,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
  ncu --clock-control none --cache-control all -k regex:kbit_gemv --launch-skip 2 --launch-count 1 --metrics "${m#,}" \
      python3 "$OUT/ncu_driver.py" > "$OUT/ncu_stalls.txt" 2>&1
  grep -E "stalled" "$OUT/ncu_stalls.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | sort -k3 -rn | head -20
fi
# compute-sanitizer over small shapes of every family: SANITIZE=1
if [ "${SANITIZE:-0}" = "1" ]; then
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    compute-sanitizer --tool $tool --error-exitcode 3 python3 profiling/sanitize_driver.py > "$OUT/sanitize_$tool.txt" 2>&1
    echo "compute-sanitizer $tool: exit $? ($(grep -c 'rel err' "$OUT/sanitize_$tool.txt") checks; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|BAD:' "$OUT/sanitize_$tool.txt" | tr '\n' ' '))"
  done
fi
# GEMV stage breakdown: STAGES=1
if [ "${STAGES:-0}" = "1" ]; then python3 profiling/gemv_stages.py 2>&1 | tee "$OUT/gemv_stages.log"; fi
