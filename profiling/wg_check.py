"""Accuracy side by side: the wgmma GEMM vs kbit_gemm / the GEMV on the same inputs (relative
Frobenius error against the float64 product with the dequantized weight), per k, M, dtype."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy.gemm import gemm  # noqa: E402
from kbitcupy.wgmma import wgmma_gemm  # noqa: E402

rng = np.random.default_rng(int(os.environ.get("SEED", "1")))
N, K = [int(x) for x in os.environ.get("NK", "5120,2048").split(",")]
W = cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * np.float32(0.02))
for k in [int(x) for x in os.environ.get("KS", "2,3,4,5").split(",")]:
    q = kb.quantize(W, k)
    Wd = kb.dequantize(q, np.float32).astype(cp.float64)
    for dt in (np.float16, kb.bfloat16):
        for M in [int(x) for x in os.environ.get("MS", "1,2,5,16,64,200").split(",")]:
            A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(dt)
            ref = A.astype(cp.float64) @ Wd.T
            res = {}
            for name, fn in (("wg", wgmma_gemm), ("gemm", gemm), ("matmul", lambda a, q, o: kb.matmul(a, q, out=o))):
                o = cp.full((M, N), np.nan, dtype=dt)
                fn(A, q, o)
                d = o.astype(cp.float64) - ref
                res[name] = (float(cp.linalg.norm(d) / cp.linalg.norm(ref)), float(cp.abs(d).max() / cp.abs(ref).max()))
            print(f"k={k} {np.dtype(dt).name:8} M={M:3d} " + "  ".join(f"{n}: rel {a:.2e} max {b:.2e}" for n, (a, b) in res.items()),
                  flush=True)
