#!/usr/bin/env python
"""Which stream-K launches go wrong (debug aid, run on the GPU machine): error per (k, shape, M, grid, stages, tma),
and for a wrong one the rows / column strips that differ from the split-K result."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import cupy as cp  # noqa: E402

from kbitcupy import wgmma as WG  # noqa: E402
from test_gemm_gpu import _A, _rel, _weight  # noqa: E402


def main():
    rng = np.random.default_rng(1)
    for k in [int(x) for x in os.environ.get("KS", "3,5,4").split(",")]:
        for (N, K) in ((1000, 288), (512, 2048)):
            q, Wd = _weight(N, K, k, rng)
            for M in (130, 128, 100, 64):
                A = _A(M, K, np.float16, rng)
                ref = A.astype(cp.float64) @ Wd.T
                for tma in (True, False):
                    for st in (None, 4):
                        for g in (1, 2, 3, 16):
                            out = cp.full((M, N), np.nan, dtype=np.float16)
                            WG.wgmma_gemm(A, q, out, streamk=g, stages=st, tma=tma)
                            e = _rel(out, ref)
                            p = WG.plan(M, N, K, k, "float16", 0, streamk=g, stages=st, tma=tma, cbd=q.default_codebook)
                            line = f"k={k} {N}x{K} M={M} tma={tma} st={st} g={g} -> {p}: err {e:.2e}"
                            if not e < 2e-3:
                                d = cp.abs(out.astype(cp.float64) - ref) > 1e-2 * float(cp.abs(ref).max())
                                d |= cp.isnan(out)
                                rows = cp.nonzero(d.any(axis=1))[0].get()
                                cols = cp.nonzero(d.any(axis=0))[0].get()
                                line += f" BAD rows {rows.min()}..{rows.max()} ({rows.size}), strips {sorted(set((cols // 128).tolist()))}"
                            print(line, flush=True)


if __name__ == "__main__":
    main()
