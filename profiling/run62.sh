#!/bin/bash
# Fifty-fifth session (2026-11-29): the root cause of the stream-K experiment's k = 3 / 5 fault (fifty-fourth session).
# Usage on the GPU machine: STEP=<step> bash profiling/run62.sh   (results under $OUT/work)
cd "$(dirname "$0")/.." || exit 1
source profiling/run_env.sh
start_run skfix

# STEP=skfix (nvidia-h200): the cause found on the CPU -- lds_planes read k = 3 / 5's plane words through lds_u32, a
# plain asm with no memory clobber, which NVVM treats as a pure function of its address: with wgmma_cta inlined in the
# stream-K loop it hoisted the first tile's 12 (k = 3) plane loads above the TMA copies and the mbarrier wait (nvcc 13
# PTX of kbit_wgmma_tma<3, half, 128, true> with the patch: the loads at line 503, the first copy at 675, the first
# wait at 1813; the straight form's loads after its wait).  k = 2 / 4 load their planes with asm volatile vector loads,
# which is why only k = 3 / 5 failed.  Fix: asm volatile for those loads (cubins of the shipped kernels byte-identical:
# NVRTC 12 all 165 groups, nvcc 13 all 36 k = 3 / 5 wgmma kernels).  Here: the stream-K patch on the fixed tree (fix)
# and on the tree with the fix undone (ctl), same checks.
# Expect: ctl wrong at k = 3 / 5, TOK = 128 (as in the fifty-fourth session: err 0.3-1.0); fix right everywhere (err
#   ~1e-3, as the split-K path) and the patch's stream-K GPU tests all pass on it.
if [ "$STEP" = skfix ]; then
  for t in fix ctl; do
    rm -rf "/tmp/sk_$t" && mkdir -p "/tmp/sk_$t" && cp -r cuda_src kbitcupy tests profiling "/tmp/sk_$t/"
    (cd "/tmp/sk_$t" && git apply profiling/patches/session54-wg-streamk.patch) || echo "patch failed ($t)"
  done
  python3 - <<'PY'
p = "/tmp/sk_ctl/cuda_src/kbit_wgmma.cu"; s = open(p).read()
new = 'asm volatile("ld.shared.u32 %0, [%1];\\n" : "=r"(p[b]) : "r"(wa + 4 * b));'
assert new in s, "fix not found"
open(p, "w").write(s.replace(new, "p[b] = lds_u32(wa + 4 * b);"))
PY
  cat > /tmp/sk_warm.py <<'PY'
import sys
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, sys.argv[1])
from kbitcupy import _compile as C
from kbitcupy import wgmma as WG
keys = [("tma_cbd", int(k), t) for k in sys.argv[2].split(",") for t in sys.argv[3].split(",")]
fam = WG.WGMMA
groups = fam.groups()
work = [[fam.instances[i] for i in groups[key]] for key in keys]
with ThreadPoolExecutor(len(work)) as ex:
    list(ex.map(lambda g: C.build_arch_cubin(fam.source, g, fam.arch, fam.options), work))
print("warm", sys.argv[1], keys)
PY
  cat > /tmp/sk_check.py <<'PY'
import sys
import numpy as np
import cupy as cp
sys.path.insert(0, "tests")
from kbitcupy import wgmma as WG
from test_gemm_gpu import _A, _rel, _weight
rng = np.random.default_rng(5)
for k in [int(x) for x in sys.argv[1].split(",")]:
    for (N, K) in ((1000, 288), (512, 2048)):
        q, Wd = _weight(N, K, k, rng)
        for M in (130, 256):
            A = _A(M, K, np.float16, rng)
            ref = A.astype(cp.float64) @ Wd.T
            for label, kw in (("split-K 1", dict(k_splits=1)), ("stream-K, a CTA a tile", dict(streamk=2 * -(-N // 128))),
                              ("stream-K, 1 CTA", dict(streamk=1)), ("stream-K, 5 CTAs", dict(streamk=5))):
                out = cp.full((M, N), np.nan, dtype=np.float16)
                WG.wgmma_gemm(A, q, out, tok=128, **kw)
                e = _rel(out, ref)
                print(f"k={k} {N}x{K} M={M} TOK=128 {label}: err {e:.2e}{'' if e < 2e-3 else ' BAD'}", flush=True)
PY
  t0=$(date +%s)
  (cd /tmp/sk_fix && PYTHONPATH=/tmp/sk_fix timeout 300 python3 /tmp/sk_warm.py /tmp/sk_fix 3,5 float16,bfloat16) &
  (cd /tmp/sk_ctl && PYTHONPATH=/tmp/sk_ctl timeout 300 python3 /tmp/sk_warm.py /tmp/sk_ctl 3 float16) &
  wait; echo "warm: $(( $(date +%s) - t0 )) s"
  (cd /tmp/sk_ctl && PYTHONPATH=/tmp/sk_ctl timeout 120 python3 /tmp/sk_check.py 3) > "$W/sk_ctl62.log" 2>&1
  echo "ctl: $(grep -c BAD "$W/sk_ctl62.log") BAD of $(grep -c err "$W/sk_ctl62.log")"; tail -2 "$W/sk_ctl62.log"
  (cd /tmp/sk_fix && PYTHONPATH=/tmp/sk_fix timeout 120 python3 /tmp/sk_check.py 3,5) > "$W/sk_fix62.log" 2>&1
  echo "fix: $(grep -c BAD "$W/sk_fix62.log") BAD of $(grep -c err "$W/sk_fix62.log")"; tail -2 "$W/sk_fix62.log"
  (cd /tmp/sk_fix && export PYTHONPATH=/tmp/sk_fix && gpu_tests "$W/gpu_tests_skfix62.log" 200 \
    tests/test_wgmma_gpu.py -k "streamk_matches_reference and (3 or 5)")
  grep -E "^E  |FAILED" "$W/gpu_tests_skfix62.log" | head -10
  finish_run run62
fi
# Result (skfix, H200, git f415c44, `nvidia-h200_2026-11-29_{sk_ctl62,sk_fix62,gpu_tests_skfix62}.log`): as expected.
#   ctl (the patch, plane words through lds_u32): k = 3 TOK = 128 every stream-K launch wrong (12 of 12, err 0.32-1.06),
#   the split-K path right (2.8e-4); fix: 0 of 32 wrong (k = 3 / 5, err 2.8e-4 / 3.7e-4, the split-K values), and the
#   patch's stream-K GPU tests at k = 3 / 5 pass (2 passed).  The fifty-fourth session's fault is this hoist.

# STEP=suite (nvidia-h200, two calls: SUITE=A, SUITE=B): the whole GPU suite on the final tree (the kernels' cubins are
#   byte-identical to 105e847's: NVRTC 12 all 165 groups, nvcc 13 the k = 3 / 5 wgmma kernels; the host changes since
#   the last whole run -- the whole-ELF cubin cache, moe_combine's check_devices -- were checked only by their own tests).
# Expect: every test passes (the fiftieth session's count: 206 + 401 + 10 skipped-or-passed).
if [ "$STEP" = suite ]; then
  gpu_suite "${SUITE:-A}" "$W/gpu_tests_suite62${SUITE:-A}.log"
  finish_run run62
fi
# STEP=x2 (nvidia-h200-x2): the two-GPU tests (test_devices_gpu.py, test_layers_gpu.py) on the final tree: moe_forward's
#   combine without its own device check (cdd645b) has not run on two GPUs.
# Expect: all pass (the fifty-fourth session's x2 run: 27 passed).
if [ "$STEP" = x2 ]; then
  gpu_tests "$W/x2_gpu_tests62.log" 500 tests/test_devices_gpu.py tests/test_layers_gpu.py
  grep -E "^E  |FAILED" "$W/x2_gpu_tests62.log" | head -20
  finish_run run62
fi
# Result (suite, x2; H200 / H200 x2, git 8e916b7, `nvidia-h200_2026-11-29_{gpu_tests_suite62A,gpu_tests_suite62B,
#   x2_gpu_tests62}.log`): A 219 passed, 5 skipped (the two-GPU tests); B 401 passed; x2 27 passed (the two-GPU ones
#   included).  Nothing failed.
# STEP=m1 (nvidia-h200): issue 3's decode table on the final tree (M = 1 / 4, k = 2..5, the dispatched matmul; the
#   kernels are the fifty-first session's `m1k58c`, the host path has changed since -- the device fix, the cubin cache)
#   with its host-overhead section.
# Expect: kernel times within run-to-run noise of m1k58c (k = 4 M = 1 TOTAL 17.02 us, 2.40x); host overhead per call
#   ~bare launch + 1.5-4 us.
if [ "$STEP" = m1 ]; then
  timeout 330 python3 profiling/bench.py --out "$W" --M 1,4 --k 2,3,4,5 --columns matmul --reps 15 --tag m1k62 \
    > "$W/bench_m1k62.log" 2>&1
  tail -4 "$W/bench_m1k62.log"; grep -A4 "^| TOTAL" "$W"/*m1k62*.md | head -12
  finish_run run62
fi
# Result (m1, H200, git 121e746, `nvidia-h200_2026-11-29_m1k62.md` + log): as m1k58c within ~1 %: M = 1 TOTAL k = 2 / 3 / 4 / 5
#   14.89 / 16.92 / 17.16 / 22.89 us = 2.75x / 2.42x / 2.38x / 1.79x fp16; k = 4 % of SOL gate/up 79, down 82, Q 88, O 83
#   (linear value and the rest in the file); M = 4 k = 4 18.73 us, 2.17x.  Host overhead 6.0-10.4 us a call against this
#   host's bare launch 4.0-6.1 (5 of 28 cells over 10 us, all where the bare launch had risen to 5.7-6.1 us late in the run).
