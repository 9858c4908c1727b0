#!/usr/bin/env bash
# Fourteenth session's device run: the decode GEMV's K split over a thread block cluster
# (kbit_gemv_ks, plan ksplit).
#   STEP=probe: the ksplit GPU tests, then gemv_ab's same-run A/B of the current plan ('new')
#     against K-split plans on every dense shape (AB_PLANS below), k = 2, 4, 5, M = 1, 4; k = 4
#     M = 1 again with PDL.  ~4 min.
#   STEP=scale: the absmax decode moved from the load to the use (no stall on the absmax byte
#     right after the ring's loads): GEMV + grouped GPU tests, gemv_ab against the previous source
#     (profiling/prev_gemv_d50b44d.cu, the same plan) and K-split plans, k = 2..5, M = 1, 2, 4
#     (k = 4, 5 M = 1 with PDL), moe_ab against the previous grouped GEMV.  ~6 min.
#   OUT=/tmp/out STEP=probe bash profiling/run14.sh
. profiling/run_env.sh
W=$OUT/work; mkdir -p $W
GPU=$(python3 -c "import cupy as c; print(c.cuda.runtime.getDeviceProperties(0)['name'].decode())")
STEP=${STEP:-probe}
echo "# $GPU, $(date -I), git $(cat .git_rev 2>/dev/null || echo '?'), STEP=$STEP" | tee "$W/header.txt"
if [ "$STEP" = probe ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  echo "# $GPU, $(date -I): pytest -q -m gpu tests/test_gemv_gpu.py -k 'ksplit or plans_agree'" > "$W/gpu_tests.log"
  timeout 150 python3 -m pytest -q -m gpu tests/test_gemv_gpu.py -k "ksplit or plans_agree" >> "$W/gpu_tests.log" 2>&1
  tail -3 "$W/gpu_tests.log"
  PLANS="s2w4:ksplit=2,warps=4;s2w4L:ksplit=2,warps=4,late=1;s2w8:ksplit=2,warps=8;s4w4:ksplit=4,warps=4"
  PLANS="$PLANS;s4w8:ksplit=4,warps=8;s2w16:ksplit=2,warps=16"
  AB_PLANS="$PLANS" KS=2,4,5 MS=1,4 timeout 200 python3 profiling/gemv_ab.py --out "$W" > "$W/ab.log" 2>&1
  grep -v "^#" "$W/ab.log" | head -80
  KBITCUPY_PDL=1 AB_PLANS="$PLANS" KS=4 MS=1 timeout 60 python3 profiling/gemv_ab.py > "$W/ab_pdl.log" 2>&1
  cat "$W/ab_pdl.log"
fi
if [ "$STEP" = scale ]; then
  python3 profiling/warm_cache.py gemv grouped 2>&1 | tail -1
  echo "# $GPU, $(date -I): pytest -q -m gpu tests/test_gemv_gpu.py tests/test_grouped_gpu.py" > "$W/gpu_tests.log"
  timeout 200 python3 -m pytest -q -m gpu tests/test_gemv_gpu.py tests/test_grouped_gpu.py >> "$W/gpu_tests.log" 2>&1
  tail -3 "$W/gpu_tests.log"
  PREV=profiling/prev_gemv_d50b44d.cu
  PLANS="s2w4:ksplit=2,warps=4;s4w4:ksplit=4,warps=4;s2w8:ksplit=2,warps=8"
  AB_VARIANTS="prev:src=$PREV" AB_PLANS="$PLANS" KS=2,3,4,5 MS=1,2,4 timeout 200 python3 profiling/gemv_ab.py --out "$W" > "$W/ab.log" 2>&1
  grep -v "^#" "$W/ab.log"
  KBITCUPY_PDL=1 AB_VARIANTS="prev:src=$PREV" AB_PLANS="$PLANS" KS=4,5 MS=1 timeout 60 python3 profiling/gemv_ab.py > "$W/ab_pdl.log" 2>&1
  grep "TOTAL" "$W/ab_pdl.log"
  MOE_VARIANTS="prev:src=$PREV" KS=4 MS=1,4,8,16 timeout 100 python3 profiling/moe_ab.py --out "$W" > "$W/moe_ab.log" 2>&1
  tail -30 "$W/moe_ab.log"
fi
tar -czf "$OUT/run14_$STEP.tgz" -C "$W" . && rm -rf "$W"
