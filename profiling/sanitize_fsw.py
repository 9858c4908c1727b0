"""The decode GEMV family's two token tiles (M = 9..16) with the full A swizzle (kbit_gemv.cu gemv_fsw, k <= 4), and
the token split (plan ts), for compute-sanitizer: K tails (K % 128 == 64, K % 64 == 32), N not a multiple of 16, 1..16 warps, one or two
chains, M = 9 / 13 / 16; the grouped GEMV at 12 and 16 tokens per expert with uneven slots.  Exits non-zero if a
result is wrong."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sanitize_common import check, finish, rng  # noqa: E402  (puts the package on the path)
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402
from kbitcupy.gemv import gemv  # noqa: E402
from kbitcupy.grouped import _err_buffer, quantize_experts, reference_grouped_matmul  # noqa: E402

for (N, K) in ((196, 416), (200, 2080), (1040, 2112)):
    for k in (2, 3, 4):
        q = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k)
        Wd = kb.dequantize(q, np.float32).astype(cp.float64)
        for M in (9, 13, 16):
            A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
            for ov in ((), (("warps", 1),), (("warps", 4), ("dual", True)), (("warps", 16), ("dual", False))):
                out = cp.full((M, N), np.nan, dtype=cp.float16)
                check(f"gemv fsw N={N} K={K} k={k} M={M} plan={ov}", gemv(A, q, out, plan_override=ov),
                      A.astype(cp.float64) @ Wd.T, tol=2e-3)
# column groups side by side at two token tiles (plan gpb, gate/up's and Q's default at M = 9..16): a partial last
# block, K tails
for (N, K) in ((1040, 2080), (200, 416)):
    for k in (2, 3, 4):
        q = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k)
        Wd = kb.dequantize(q, np.float32).astype(cp.float64)
        for M in (9, 16):
            A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
            for ov in ((("gpb", 2), ("warps", 8)), (("gpb", 3), ("warps", 4)), (("gpb", 5), ("warps", 3))):
                out = cp.full((M, N), np.nan, dtype=cp.float16)
                check(f"gemv slices N={N} K={K} k={k} M={M} plan={ov}", gemv(A, q, out, plan_override=ov),
                      A.astype(cp.float64) @ Wd.T, tol=2e-3)
# the token split (plan ts, the default of KV-like shapes from M = 5): c8 CTAs of 4 rows at M <= 8, 8 rows above
for (N, K) in ((512, 2048), (200, 2080)):
    for k in (2, 3, 4, 5):
        q = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k)
        Wd = kb.dequantize(q, np.float32).astype(cp.float64)
        for M in (5, 8, 9, 16):
            A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
            out = cp.full((M, N), np.nan, dtype=cp.float16)
            assert G.plan(N, K, M, k)[9] == 2
            check(f"gemv ts N={N} K={K} k={k} M={M}", gemv(A, q, out), A.astype(cp.float64) @ Wd.T, tol=2e-3)
# grouped (the sl / loop kernels at two token tiles): 6 experts of a bank of 16, uneven slots of 0..16 rows, K % 128
# == 32; the wait-first launch (LB) and the stable one (sanitize_grouped_lb.py covers LB with the fused stagings)
for k in (2, 3, 4):
    for (N, K) in ((256, 2080), (2048, 160)):
        bank = quantize_experts(cp.asarray(rng.standard_normal((16, N, K), dtype=np.float32) * 0.02), k)
        ids_h = np.array([3, 0, 9, 15, 7, 12], np.int32)
        for counts in ((12, 0, 9, 3, 12, 1), (16, 16, 2, 0, 11, 16)):
            offs_h = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
            rows = int(offs_h[-1])
            A = cp.asarray(rng.standard_normal((rows, K), dtype=np.float32)).astype(cp.float16)
            ref = cp.asarray(reference_grouped_matmul(A.get().astype(np.float32), bank, ids_h, offs_h))
            for stable in (False, True):
                out = cp.full((rows, N), np.nan, dtype=cp.float16)
                G.grouped_gemv(A, bank, cp.asarray(ids_h), cp.asarray(offs_h), out, max(counts), _err_buffer(),
                               ids_stable=stable)
                check(f"grouped fsw k={k} N={N} K={K} counts={counts} stable={stable}", out, ref, tol=3e-3)
finish()
