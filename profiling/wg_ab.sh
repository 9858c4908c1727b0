#!/usr/bin/env bash
# A/B of the wgmma kernels on the GPU machine, in one run: the working tree ("new") against
# "prev": the tree built with the extra NVRTC options $PREV_OPTS (e.g. an experiment hook
# such as -DKBIT_FIXUP_FENCE_ALL), or without PREV_OPTS the kbit_wgmma.cu at $PREV_CU (e.g.
# a file in the working tree extracted with git show, run from a copy of the tree); plus the new kernel's GPU
# tests and both per-CTA timelines (wgmma_trace.py).
#   usage: OUT=/tmp/out [PREV_OPTS=...] bash profiling/wg_ab.sh   (env AB_M dense M list, MS MoE tokens)
set -u
OUT=${OUT:-/tmp/kbit_out}; mkdir -p "$OUT"
ROOT=$(pwd)
PREV=/tmp/kbit_prev; rm -rf $PREV; mkdir -p $PREV
cp -r kbitcupy cuda_src profiling tests $PREV/
[ -z "${PREV_OPTS:-}" ] && cp "${PREV_CU:?set PREV_OPTS or PREV_CU}" $PREV/cuda_src/kbit_wgmma.cu
python3 profiling/warm_cache.py quant gemv grouped wgmma 2>&1 | tail -1
(cd $PREV && KBIT_WGMMA_OPTS="${PREV_OPTS:-}" python3 profiling/warm_cache.py wgmma 2>&1 | tail -1)
PYTHONPATH=$ROOT timeout ${TEST_TIMEOUT:-200} python3 -m pytest -q -m gpu tests/test_wgmma_gpu.py tests/test_grouped_gpu.py \
  -k "${TEST_K:-wgmma}" > "$OUT/tests_new.log" 2>&1; tail -3 "$OUT/tests_new.log"
for v in new prev; do
  d=$ROOT; o=""; [ $v = prev ] && d=$PREV && o="${PREV_OPTS:-}"
  (cd $d && export PYTHONPATH=$d
   KBIT_WGMMA_OPTS="-DKBIT_WG_TRACE $o" CASES="${CASES:-d:5120,2048,32;d:5120,2048,32,1;d:2048,5120,32;d:5120,2048,128;g:1024,2048,8,32}" \
     timeout 120 python3 profiling/wgmma_trace.py > "$OUT/trace_$v.log" 2>&1
   KBIT_WGMMA_OPTS="$o" timeout 150 python3 profiling/bench.py --M ${AB_M:-16,32,64,128} --k 4 --columns WGMMA --out "$OUT" --tag "ab-$v" \
     > "$OUT/bench_$v.log" 2>&1
   KBIT_WGMMA_OPTS="$o" MOE_GEMV=0 MOE_MMA=0 MOE_WG="wg:" MS=${MS:-16,32,64} ES=8,10 SHAPES=moe_gu,moe_gu_fused,moe_dn \
     timeout 150 python3 profiling/moe_ab.py > "$OUT/moe_$v.log" 2> "$OUT/moe_$v.err")
done
for v in new prev; do echo "== $v"; grep "^| TOTAL" "$OUT/bench_$v.log"; grep "^TOTAL" "$OUT/moe_$v.log"; done
# one summary file (the device returns a limited number of files)
for f in tests_new trace_new trace_prev bench_new bench_prev moe_new moe_prev; do echo "######## $f"; cat "$OUT/$f.log"; done > "$OUT/wg_ab_all.log"
rm -f "$OUT"/tests_new.log "$OUT"/trace_*.log "$OUT"/moe_*.log "$OUT"/moe_*.err "$OUT"/*ab-prev*
