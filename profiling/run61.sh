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
# Result (sk, H200, git 0422c95, `streamk_probe61.log`, `gpu_tests_streamk61.log`): stream-K SLOWER in all 21 cells
#   (sk / wg 1.005-1.70): TOTAL M = 128 59.58 -> 78.48, M = 256 81.71 -> 93.95, M = 512 112.02 -> 140.15 us; gate/up
#   M = 256 21.69 -> 21.81 (expected ~14-15), KV 1.3-1.7x (2 units a CTA: tiles cut 16 ways).  Every probe output
#   right and bit-stable, but the tests: k = 3 / 5 wrong at (1000, 288) M = 130 fp16 on one CTA (err 1.28 / 0.89).
#   (The probe's fp16 column ran torch.mm outside the captured stream: nonsense, removed.)

# STEP=dbg (nvidia-h200): where stream-K goes wrong (streamk_debug.py: k = 3 / 5 / 4, both load paths, stages plan /
# 4, 1..16 CTAs) and where its time goes (wgmma_trace.py, -DKBIT_WG_TRACE: gate/up and down M = 256, split-K plan and
# stream-K on 132 CTAs; the probe's G = 80 -- gate/up's tiles, one range each = the split-K plan's partition through
# the stream-K code -- isolates the schedule's own overhead).
# Expect: the wrong cases share a trait the passing ones lack; G = 80 ~ wg (21.7) if the machinery is free, and the
# trace shows whether the owners wait, sum slowly, or the pieces run slower than 0.55 us a K tile.
if [ "$STEP" = dbg ]; then
  KS=3,5,4 timeout 200 python3 profiling/streamk_debug.py > "$W/streamk_debug61.log" 2>&1
  grep -c err "$W/streamk_debug61.log"; grep -E "BAD|Error|error" "$W/streamk_debug61.log" | head -40
  timeout 120 python3 profiling/streamk_probe.py --shapes gateup,down --M 256 --grids 0,80,128,264 > "$W/streamk_grids61.log" 2>&1
  cat "$W/streamk_grids61.log"
  KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE CASES="d:5120,2048,256;s:5120,2048,256;s:5120,2048,256,80;d:2048,5120,256;s:2048,5120,256" \
    timeout 150 python3 profiling/wgmma_trace.py > "$W/streamk_trace61.log" 2>&1
  cat "$W/streamk_trace61.log"
fi
# Result (dbg, H200, git 678c736, `streamk_debug61.log`, `streamk_grids61.log`, `streamk_trace61.log`):
#   - Wrong: k = 3 and 5 at TOK = 128 (M = 130, two token tiles) on every grid (1..16), both load paths, both stage
#     counts, all rows; right at TOK = 32 / 64 and at k = 4.  G = 16 on (1000, 288) is one whole tile a CTA (no
#     exchange, one piece): still wrong, so not the exchange and not the piece loop.
#   - gate/up M = 256: sk 21.84, sk80 (the split-K plan's partition) 24.14, sk128 22.00, sk264 32.87 against wg 21.68;
#     down sk 22.75 / 29.13 / 21.19 / 36.04 against 19.92.
#   - Trace, gate/up M = 256 on 132 CTAs: a CTA's span p50 20.3 us (max 21.6) for 19-20 K tiles (11 us of loop at
#     the split-K plan's 0.549 us an iteration): the first piece's 64 KB partial store ~2-2.5 us (the split-K "partial
#     stored" of down: 2.0-2.8), the owner's sum 0.6-1.5 us, its wait 0.2-0.6, the C store 1.1, the second piece's
#     pipeline fill, the tables 1.0 -- ~7-9 us of fixed cost against the 6.6 us the shorter range saves.

# STEP=dbg2 (nvidia-h200): the split-K path at the failing configuration (k = 3 / 5, tok=128 forced, M = 129..256,
# one and two splits) against stream-K with one CTA per tile; then the layers' GPU tests for the fifty-third session's
# review commit 406823f (never run on a GPU).
# Expect: split-K right everywhere (the suite passes); if it is wrong at M = 129 / 130 too, the fault is the kernel's.
if [ "$STEP" = dbg2 ]; then
  timeout 200 python3 profiling/streamk_debug2.py > "$W/streamk_debug2_61.log" 2>&1
  grep -c err "$W/streamk_debug2_61.log"; grep -E "BAD|Error" "$W/streamk_debug2_61.log" | head -60
  gpu_tests "$W/gpu_tests_layers61.log" 250 tests/test_layers_gpu.py tests/test_devices_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_layers61.log" | head -20
fi
# Result (dbg2, H200, git decd987, `streamk_debug2_61.log`, `gpu_tests_layers61.log`): the split-K path right in every
#   cell of the failing configuration (k = 3 / 5, tok = 128, M = 129..256, one and two splits: 0 of 64 bad); stream-K
#   wrong in all 32 of its cells, on one CTA a tile too.  So the fault is the stream-K copy of wgmma_cta's code at
#   TOK = 128 and odd k, not the kernel's shared path; not root-caused (stream-K removed, patch kept).  The layers'
#   and devices' GPU tests on 406823f's package: 22 passed, 5 skipped (the two-GPU tests).

# STEP=ids (nvidia-h200): the grouped decode GEMV with its expert ids cold (bench.py: every launch its own ids array,
#   out of the L2 after a pass over the bank) and L2-resident (one shared ids array over per-launch views of the bank:
#   the same cold weights), wait-first and stable launches, k = 4, 8 / 10 experts, 1 / 4 tokens (moe_ids_probe.py).
# Expect: if the fiftieth session's unexplained 0.5 us (grouped vs dense GEMV on the same bytes) is the ids' DRAM round
#   trip before the first weight load, hot is ~0.3-0.6 us faster in the wait-first launch and less in the stable one
#   (which reads them before its wait); if not, equal within ~0.05 us.
if [ "$STEP" = ids ]; then
  timeout 400 python3 profiling/moe_ids_probe.py > "$W/moe_ids61.log" 2>&1
  cat "$W/moe_ids61.log"
fi
# Result (ids, H200, git deb7a7b, `moe_ids61.log`): no difference -- hot - cold -0.15..+0.01 us in the wait-first
#   launch (gate/up fused -0.11..-0.15, down and gate/up 0.00), -0.02..0.00 in the stable one; every output right.  So
#   the grouped GEMV's gap to the dense one is not the ids' DRAM round trip; this repeats on the H200 what the
#   thirtieth session found on the H100 (session30-moe-ids-l2.patch: equal).  bench.py's per-launch ids arrays are fair.

# STEP=x2 (kind nvidia-h200-x2): the fifty-third session's review commit 406823f (KbitLinear without bias calls matmul
#   directly, KbitMLP makes no CuPy stream for torch inputs, the bias placed by on_gpu_device) with both GPUs: the
#   devices' and layers' GPU tests, the five two-GPU tests included (step dbg2 ran them on one GPU: 22 passed, 5 skipped).
# Expect: all pass.
if [ "$STEP" = x2 ]; then
  gpu_tests "$W/x2_gpu_tests_layers61.log" 300 -rs tests/test_devices_gpu.py tests/test_layers_gpu.py
  grep -E "^E  |FAILED|SKIPPED" "$W/x2_gpu_tests_layers61.log" | head -20
fi
# Result (x2, H200 x2, git 8e4d74b, `x2_gpu_tests_layers61.log`): 27 passed (the five two-GPU tests included).

# STEP=bisect (nvidia-h200; the tree with profiling/patches/session54-wg-streamk.patch applied): the stream-K fault at
#   k = 3 / 5, TOK = 128, bisected on grids of one whole tile a CTA (streamk_bisect.py, one build a variant): the patch
#   as measured; -DKBIT_SK_BISECT=1 its copy of wgmma_cta without the exchange code; =2 also the K range by the split
#   formula (split 0 of 1, as the split-K path); =3 also no loop (one call, as the split-K path); the patch at ptxas -O1.
# Expect: if =3 is still wrong while the split-K path (ks1, same build) is right, the fault is the second inline copy's
#   code generation alone; if a variant turns right, the last change named is the trigger.
if [ "$STEP" = bisect ]; then
  for o in "" "-DKBIT_SK_BISECT=1" "-DKBIT_SK_BISECT=2" "-DKBIT_SK_BISECT=3" "-Xptxas=-O1"; do
    KBIT_WGMMA_OPTS="$o" timeout 100 python3 profiling/streamk_bisect.py 2>&1 | tail -4
  done | tee "$W/streamk_bisect61.log"
fi
# Result (bisect, H200, git faa5989 + the patch, `streamk_bisect61.log`): split-K (ks1) right in every build (2.80e-4 /
#   3.71e-4); stream-K on one whole tile a CTA wrong as measured, with =1 (no exchange code) and =2 (+ the K range by
#   the formula) and at ptxas -O1 (0.29-0.33), right with =3 (+ no loop around the one call: 2.80e-4 / 3.71e-4, the
#   split-K path's values).  The fault needs wgmma_cta inlined inside a loop -- one that runs once, with the same
#   runtime values as the straight call -- so it is code generation (or undefined behaviour that only the loop form
#   exposes), not the schedule's logic.  The grouped kernel's own loop around wgmma_cta at TOK = 128, k = 3 / 5 is
#   exercised by test_grouped_impls_uneven (130 and 100 tokens a slot) and passes.

# STEP=cubin (nvidia-h200; the tree with the patch applied): the device's own cubins of the bisect's variants 2 (wrong)
#   and 3 (right), for a SASS diff here (nvdisasm 13): streamk_bisect.py per variant with a fresh kbitcupy cache
#   (KBITCUPY_CACHE_DIR), its wgmma cubins as $OUT/work/cubin_<variant>.tgz.
# Expect: the two builds' stream-K copies differ in the loop structure; look for a wgmma operand written after its
#   WARPGROUP.ARRIVE or an accumulator touched while a group is in flight in variant 2 only.
if [ "$STEP" = cubin ]; then
  for v in 2 3; do
    rm -rf /tmp/kc_$v
    KBITCUPY_CACHE_DIR=/tmp/kc_$v KBIT_WGMMA_OPTS="-DKBIT_SK_BISECT=$v" timeout 100 python3 profiling/streamk_bisect.py 2>&1 | tail -4
    find /tmp/kc_$v -type f -name "kbit_wgmma*" | tar czf "$W/cubin_$v.tgz" -T -
    tar tzvf "$W/cubin_$v.tgz"
  done
fi
# Result (cubin, H200, git faa5989 + the patch; two calls, the first fetched CuPy's cache, not kbitcupy's): the device
#   builds' cubins of variants 2 and 3 (NVRTC's cubins are one byte short of their last program header; padded with a
#   zero byte nvdisasm 13.5 reads them).  kbit_wgmma_tma<3, __half, 128, true>, both builds, three scans of the SASS:
#   no instruction writes a group's A fragments or the accumulators between its WARPGROUP.ARRIVE and its last HGMMA,
#   none touches the accumulators while a group is in flight, none writes an in-flight group's fragments before the
#   wait that retires it.  The builds differ in structure (the loop form keeps the piece-restart path: 31
#   SYNCS.CCTL.IV = mbarrier.inval, more copy-issue code; 18 vs 56 IMAD), not in a visible hazard.  Cause not found.

# STEP=elf (nvidia-h200): kbitcupy._compile.whole_elf -- the sm_90a cubin cache now stores the whole ELF image (CuPy's
#   nvrtc.getCUBIN hands it over one byte short; the driver loaded it, nvdisasm refused it) -- on the GPU: wgmma tests
#   that load the padded cubins (every k, TOK, fp16 / bf16: permutation rows, tensor scale, CUDA graph, dispatch).
# Expect: all pass (the padding adds the zero byte the image declares; the loaded code is the same).
if [ "$STEP" = elf ]; then
  gpu_tests "$W/gpu_tests_elf61.log" 280 tests/test_wgmma_gpu.py -k "permutation or tensor_scale or cuda_graph or dispatches"
  grep -E "^E  |FAILED" "$W/gpu_tests_elf61.log" | head -20
  python3 -c "import glob,os,struct; fs=glob.glob(os.path.expanduser('~/.cache/kbitcupy/*.cubin')); print(len(fs), 'cubins', all(len(open(f,'rb').read())==max(struct.unpack_from('<Q',open(f,'rb').read(),0x20)[0]+56*struct.unpack_from('<H',open(f,'rb').read(),0x38)[0],0) for f in fs))"
fi
# Result (elf, H200, git eef2976, `gpu_tests_elf61.log`): 10 passed (the wgmma tests that load the padded cubins); the
#   9 cubins the run cached are whole ELF images.

# STEP=review (nvidia-h200): the review commit (moe_combine(..., check_devices=False) from moe_forward, host only): the
#   moe_forward / combine GPU tests and the devices' MoE test.
# Expect: all pass.
if [ "$STEP" = review ]; then
  gpu_tests "$W/gpu_tests_review61.log" 230 tests/test_grouped_gpu.py tests/test_devices_gpu.py -k "moe_forward or combine or moe_run"
  grep -E "^E  |FAILED" "$W/gpu_tests_review61.log" | head -20
fi
# Result (review, H200, git cdd645b, `gpu_tests_review61.log`): 22 passed, 1 skipped (the two-GPU MoE test).
