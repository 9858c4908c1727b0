#!/bin/bash
# Fifty-fourth session (2026-11-29): the dense wgmma kernel's stream-K schedule (issue 4 at M = 128..512).
# Usage on the GPU machine: STEP=<step> bash profiling/run61.sh   (results under $OUT/work)
cd "$(dirname "$0")/.." || exit 1
source profiling/run_env.sh
start_run sk

# STEP=sk (nvidia-h200): stream-K (wgmma_gemm(..., streamk=True): 132 CTAs share the tiles x K-tile units in equal
# ranges, a partial exchanged once per range boundary, the owner -- the tile's highest CTA -- adds the others' slots)
# against the split-K plan, k = 4, every dense shape, M = 128 / 256 / 512; then the stream-K GPU tests.
# Expect: gate/up M = 256 (80 tiles of 32 K tiles: today 80 CTAs of the whole K, 21.0 us) ~14-15 us (19.4 units a
# CTA at ~0.55 us + prologue + one 64 KB exchange); down / O (6 cluster splits today) little gain (their tiles cut
# 4-5 ways: the owner reads 3-4 slots); TOTAL M = 256 WGMMA 79.9 -> ~63-68 us; M = 512 (TOK 192, 120 CTAs of one
# split) within a few %; M = 128 gate/up (3 workspace splits) a little faster.  Every output right, bits equal.
if [ "$STEP" = sk ]; then
  timeout 330 python3 profiling/streamk_probe.py --M 128,256,512 > "$W/streamk_probe61.log" 2>&1
  cat "$W/streamk_probe61.log"
  gpu_tests "$W/gpu_tests_streamk61.log" 240 tests/test_wgmma_gpu.py -k streamk
  grep -E "^E  |FAILED" "$W/gpu_tests_streamk61.log" | head -20
fi
