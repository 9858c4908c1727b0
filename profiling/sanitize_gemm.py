"""The fused mma.sync GEMM (kbit_gemm) for compute-sanitizer: the M <= 8 half slots and the full slots of the
workspace sum (2..8 splits, twice each: the counters must be back at zero), the cluster sum (sm_90), the
default-codebook pair table built before the PDL wait and another codebook's after it, K tails (K % 128 == 64,
K % 64 == 32) and N not a multiple of 128, both dtypes.  SAN_SMALL=1: one shape, k = 4 (racecheck).  Exits
non-zero if a result is wrong."""
import os
import sys
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sanitize_common import check, finish, rng  # noqa: E402  (puts the package on the path)
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy.gemm import device_info, gemm, k_steps  # noqa: E402

hopper = device_info(cp.cuda.Device().id)["cc"] >= 90
small = os.environ.get("SAN_SMALL") == "1"  # (racecheck: one shape, k = 4)
for (N, K) in ((200, 416),) + (() if small else ((136, 2112),)):
    for k in (4,) if small else (2, 4, 5):
        q = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k)
        other = replace(q, codebook=cp.asarray(np.linspace(-1, 1, 1 << k, dtype=np.float32) ** 3))
        for w in (q, other):
            Wd = kb.dequantize(w, np.float32).astype(cp.float64)
            for dt in (np.float16, kb.bfloat16):
                for M in (1, 8, 9, 16, 40):
                    A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(dt)
                    ref = A.astype(cp.float64) @ Wd.T
                    for ks in sorted({None, 1, 2, 3, 8} - ({8} if k_steps(K) < 8 else set()), key=str):
                        for cl in ((False, True) if hopper and ks not in (None, 1) and M <= 64 else (None,)):
                            out = cp.full((M, N), np.nan, dt)
                            gemm(A, w, out, k_splits=ks, cluster=cl)
                            gemm(A, w, out, k_splits=ks, cluster=cl)
                            check(f"gemm N={N} K={K} k={k} cb={'default' if w.default_codebook else 'other'} "
                                  f"{np.dtype(dt).name if dt is np.float16 else 'bf16'} M={M} splits={ks} cluster={cl}",
                                  out, ref, tol=1e-2)
finish()
