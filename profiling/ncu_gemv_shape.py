"""One decode-GEMV shape run a few times (for ncu): python3 profiling/ncu_gemv_shape.py N K M k  (compile hooks from the
environment, e.g. the thirty-fourth session's KBIT_GEMV_APAD)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy.gemv import gemv  # noqa: E402

N, K, M, k = (int(x) for x in sys.argv[1:5])
rng = np.random.default_rng(0)
qw = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k)
A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
out = cp.empty((M, N), cp.float16)
for _ in range(4):
    gemv(A, qw, out)
cp.cuda.Device().synchronize()
print("ok", float(cp.abs(out.astype(cp.float32)).sum()))
