"""compute-sanitizer driver for the dense wgmma plans of the twenty-second session (dense_splits' split
counts, fill_tok's halved token tiles): kbitcupy.matmul and wgmma_gemm at their default plans on the
Qwen3-Coder-Next dense shapes, M = 24..128, k = 4 (fp16) and k = 2 (bf16), values checked."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sanitize_common import check, finish, rng  # noqa: E402
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy.wgmma import plan, wgmma_gemm  # noqa: E402

SHAPES = {"gateup": (5120, 2048), "down": (2048, 5120), "Q": (4096, 2048), "O": (2048, 4096), "KV": (512, 2048),
          "lin_key": (2048, 2048)}
for k, dt in ((4, np.float16), (2, kb.bfloat16)):
    for name, (N, K) in SHAPES.items():
        q = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k)
        Wd = kb.dequantize(q, np.float32).astype(cp.float64)
        for M in (24, 48, 64, 96, 128):
            A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(dt)
            ref = A.astype(cp.float64) @ Wd.T
            p = plan(M, N, K, k, np.dtype(dt).name, cp.cuda.Device().id)
            out = cp.full((M, N), np.nan, dt)
            wgmma_gemm(A, q, out)
            check(f"wgmma {name} k={k} M={M} tok={p.tok} ks={p.k_splits}{' cl' if p.cluster else ''}", out, ref, 8e-3)
            check(f"matmul {name} k={k} M={M}", kb.matmul(A, q), ref, 8e-3)
finish()
