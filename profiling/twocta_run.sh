#!/bin/bash
# Two streaming-GEMV CTAs per SM (16 consumer warps per SM instead of 8), ninth session.
# Expected: the consumers' per-unit time is latency-bound with 2 warps per scheduler
# (eighth session), so 4 per scheduler should cut it; against that, the pair table is
# built twice per SM and each strip is split over twice as many CTAs (split-K sums).
#   c264: grid 2 x SMs with the default build (MT = 1 fits two CTAs per SM at 80 registers,
#         MT = 2 at 119 does not: a second wave);
#   m2:   built with __launch_bounds__(384, 2) (80 registers), grid 2 x SMs;
#   m2p2: 2 producer warps, (320, 2) = 96 registers (MT = 4: spills), grid 2 x SMs.
source profiling/run_env.sh
G=$(python3 -c "import cupy as cp; print(cp.cuda.runtime.getDeviceProperties(0)['name'].decode().lower().replace(' ', '-'))")
D=$(date +%F)
LOG=$OUT/${G}_${D}_twocta.log
echo "# command: bash profiling/twocta_run.sh (git $(git rev-parse --short HEAD 2>/dev/null))" > $LOG
SM2=$(python3 -c "import cupy as cp; print(2 * cp.cuda.runtime.getDeviceProperties(0)['multiProcessorCount'])")
SHAPES=gateup,down,Q,O,KV KS=4 MS=1,8,16 PLANS="c2x:ctas=$SM2" TRACE=${TRACE:-1} \
  VARIANTS="m2:-DKBIT_STREAM_MINB=2 ctas=$SM2;m2p2:-DKBIT_STREAM_MINB=2 -DKBIT_STREAM_PRODUCERS=2 ctas=$SM2" \
  python3 profiling/stream_probe.py >> $LOG 2>&1
SHAPES=gateup,down,Q,O KS=4 MS=32 TRACE=0 \
  VARIANTS="m2p2:-DKBIT_STREAM_MINB=2 -DKBIT_STREAM_PRODUCERS=2 ctas=$SM2" \
  python3 profiling/stream_probe.py >> $LOG 2>&1
SHAPES=gateup,down,Q,O KS=2,5 MS=1,16 TRACE=0 \
  VARIANTS="m2:-DKBIT_STREAM_MINB=2 ctas=$SM2" \
  python3 profiling/stream_probe.py >> $LOG 2>&1
