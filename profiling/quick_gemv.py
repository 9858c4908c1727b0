"""Quick GEMV timing at M=1..4 (cold L2, graph) for kernel iteration; the full tables come from bench.py."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from bench_foundation import SHAPES, rand_f16, sol_time, time_rotated, weight_copies  # noqa: E402
from kbitcupy.gemv import gemv  # noqa: E402

rng = np.random.default_rng()
ks = [int(x) for x in os.environ.get("KS", "2,4,5").split(",")]
Ms = [int(x) for x in os.environ.get("MS", "1,4").split(",")]
plans = os.environ.get("PLANS", "")
print(f"{'shape':8} {'k':>2} {'M':>2} {'gemv_us':>8} {'sol_us':>7} {'%sol':>5}")
for name, (N, K) in SHAPES.items():
    W = rand_f16(rng, (N, K), 0.02)
    for k in ks:
        q = kb.quantize(W, k)
        for M in Ms:
            A = rand_f16(rng, (M, K))
            nb = q.packed.nbytes + q.absmax.nbytes + A.nbytes
            _, cps = weight_copies(q)
            out = cp.empty((M, N), cp.float16)
            variants = [None] + [tuple(zip(("warps", "dual"), map(int, p.split(",")))) for p in plans.split(";") if p]
            t = min((time_rotated([lambda c=c: gemv(A, c, out, v) for c in cps]), str(v)) for v in variants)
            if plans:
                print("   ", name, k, M, [(round(time_rotated([lambda c=c: gemv(A, c, out, v) for c in cps]), 2), v)
                                      for v in variants], flush=True)
            t = t[0]
            ts = sol_time(nb)
            print(f"{name:8} {k:>2} {M:>2} {t:8.2f} {ts:7.2f} {100 * ts / t:5.0f}", flush=True)
            del cps
