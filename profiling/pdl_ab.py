"""Programmatic dependent launch (kbitcupy.set_pdl) for the decode GEMV: A/B in one run
(cold L2, CUDA graph of R back-to-back launches over R weight copies).

Columns: base = matmul's GEMV as launched by default; pdl_order = the kernel's PDL
order (pair table before griddepcontrol.wait, A after it) but launched normally (what
that order costs without the overlap); pdl = launched as a programmatic dependent
(set_pdl(True)): each launch's prologue overlaps the previous launch's tail.
Env: KS (default 4,2), MS (1,4,8), SHAPES.
usage (GPU machine): python3 profiling/pdl_ab.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from bench_foundation import SHAPES, dense_cases, sol_time, time_rotated  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402


def main():
    rng = np.random.default_rng()
    ks = [int(x) for x in os.environ.get("KS", "4,2").split(",")]
    Ms = [int(x) for x in os.environ.get("MS", "1,4,8").split(",")]
    names = os.environ.get("SHAPES", ",".join(SHAPES)).split(",")
    print("#", cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "- us per launch, cold L2, graph of R launches")
    cols = ("base", "pdl_order", "pdl")
    print(f"{'shape':9} {'k':>2} {'M':>2} " + " ".join(f"{c:>9}" for c in cols) + f" {'sol':>6}  pdl/base")
    tot = {}
    for name, N, K, k, M, q, Wd, nb, cps, A, ref, out in dense_cases(rng, names, ks, Ms):

        def order_only(c):
            fn, grid, block, smem, args = G.launch_args(A, c, out)
            return lambda: fn(grid, block, args[:-1] + (np.int32(1),), shared_mem=smem)
        row = {}
        for col in cols:
            kb.set_pdl(col == "pdl")
            fns = [order_only(c) if col == "pdl_order" else (lambda c=c: G.gemv(A, c, out)) for c in cps]
            out.fill(np.nan)
            fns[0]()
            err = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
            row[col] = time_rotated(fns)
            if not err < 1e-2:
                print(f"  ! {col} {name} k={k} M={M}: rel err {err}")
        kb.set_pdl(False)
        sol = sol_time(nb + A.nbytes)
        if name in ("gateup", "down", "Q", "O", "KV"):
            for col in cols:
                tot.setdefault((k, M), {}).setdefault(col, 0.0)
                tot[(k, M)][col] += row[col]
        print(f"{name:9} {k:>2} {M:>2} " + " ".join(f"{row[c]:9.2f}" for c in cols)
              + f" {sol:6.2f}  {row['pdl'] / row['base']:.3f}", flush=True)
    for (k, M), t in sorted(tot.items()):
        print(f"TOTAL k={k} M={M}: " + " ".join(f"{c} {v:.2f}" for c, v in t.items()))


if __name__ == "__main__":
    main()
