#!/usr/bin/env bash
# Eighth session on the H100: the streaming GEMV tests (M = 1..64), then the sweeps behind the H100 /
# H100+PDL dispatch tables after this session's changes (overlaid on the earlier H100 sweeps):
# dq+cuBLAS at M = 16..512 (tiled dequantize kernel), STREAM / STREAM+PDL at M = 8..32 (split-K
# publish / sums) and at M = 48, 64 beside WGMMA and dq+cuBLAS (MT = 8).
#   OUT=/tmp/out bash profiling/h100_run8.sh
. profiling/run_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pytest -q -m gpu tests/test_gemv_stream_gpu.py tests/test_gemm_gpu.py -k "stream or dequant" > "$OUT/tests.log" 2>&1; tail -2 "$OUT/tests.log"
B="python3 profiling/bench.py --out $OUT --k 2,3,4,5 --reps 15"
$B --M 16,32,64,128,256,512 --columns dq+cuBLAS --tag dq-tune > "$OUT/bench_dq.log" 2>&1
$B --M 8,16,24,32 --columns STREAM,STREAM+PDL --tag stream-tune2 > "$OUT/bench_st.log" 2>&1
$B --M 48,64 --columns STREAM,STREAM+PDL,WGMMA,dq+cuBLAS --tag stream64 > "$OUT/bench_64.log" 2>&1
grep -h -E "^### M|TOTAL \| 4" "$OUT"/bench_*.log
