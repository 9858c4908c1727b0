"""The decode GEMV with 8-column groups (plan c8), for compute-sanitizer (memcheck / racecheck): N % 8 != 0,
K % 256 != 0, every block shape (1..16 warps, one or two chains, late ring or not), and the default plans of
gate/up (k = 4) and KV, and k = 2's (the quad table; M = 9: two token tiles, the pair table), and the depth-3
ring's (down k = 3 / 4, O k = 3 at M = 1).  Exits non-zero if a result is wrong."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sanitize_common import check, finish, rng  # noqa: E402  (puts the package on the path)
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy.gemv import gemv  # noqa: E402

cases = [((196, 416), k, (("c8", True), ("warps", w), ("dual", d), ("late", lt)))
         for k in (2, 4, 5) for w in (1, 4, 8, 16) for d in (False, True) for lt in (False, True)]
cases += [((5120, 2048), 4, None), ((512, 2048), 3, None), ((2048, 4096), 4, None)]
# k = 2's default plans (the quad table at one token tile, the pair table at two: M = 9)
cases += [((5120, 2048), 2, ()), ((2048, 5120), 2, ()), ((196, 416), 2, ())]
# the depth-3 ring (gemv._depth3: M = 1, down at k = 3 / 4, O at k = 3)
cases += [((2048, 5120), 4, ()), ((2048, 5120), 3, ()), ((2048, 4096), 3, ()), ((200, 5120), 4, ())]
for (N, K), k, ov in cases:
    q = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k)
    Wd = kb.dequantize(q, np.float32).astype(cp.float64)
    for M in (1, 3) if ov else (1, 5, 9) if ov == () else (1,):
        A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
        out = cp.full((M, N), np.nan, dtype=cp.float16)
        check(f"gemv c8 N={N} K={K} k={k} M={M} plan={ov}", gemv(A, q, out, plan_override=ov),
              A.astype(cp.float64) @ Wd.T, tol=2e-3)
finish()
