#!/usr/bin/env python
"""The split-K path at the stream-K failures' configuration (odd k, TOK = 128, two token tiles, M = 129 / 130 / 200)
against stream-K on one CTA per tile (debug aid, run on the GPU machine): is the fault stream-K's own?"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import cupy as cp  # noqa: E402

from kbitcupy import wgmma as WG  # noqa: E402
from test_gemm_gpu import _A, _rel, _weight  # noqa: E402


def main():
    rng = np.random.default_rng(2)
    for k in (3, 5, 4, 2):
        for (N, K) in ((1000, 288), (512, 2048)):
            q, Wd = _weight(N, K, k, rng)
            units_n = -(-N // 128) * -(-K // 64)
            for M in (129, 130, 200, 256):
                A = _A(M, K, np.float16, rng)
                ref = A.astype(cp.float64) @ Wd.T
                for label, kw in (("ks1", dict(k_splits=1)), ("ks2", dict(k_splits=2)),
                                  ("sk_tile", dict(streamk=2 * -(-N // 128))), ("sk1", dict(streamk=1))):
                    for tok in (128, 64):
                        out = cp.full((M, N), np.nan, dtype=np.float16)
                        WG.wgmma_gemm(A, q, out, tok=tok, **kw)
                        e = _rel(out, ref)
                        print(f"k={k} {N}x{K} M={M} tok={tok} {label}: err {e:.2e}{'' if e < 2e-3 else ' BAD'}"
                              f" (units {units_n * -(-M // tok)})", flush=True)


if __name__ == "__main__":
    main()
