"""Probe (tenth session): the dense decode GEMV against its several-groups-per-block form
(the grouped kernel's MULTI loop: one pair table per block, the next group's loads issued
during the reduction) on a one-expert bank, M = 1 by default.  Cold L2, graph replay.
  python3 profiling/multi_probe.py [--k 4,5] [--shapes gateup,Q] [--M 1] [--plans 1x4,3x8,...]
plans: PERBLOCKxWARPS of kbitcupy.gemv.grouped_plan."""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from bench_foundation import SHAPES, quantized_case, rand_f16, time_rotated  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402
from kbitcupy.grouped import _err_buffer, stack_experts  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--k", default="4,5")
ap.add_argument("--shapes", default="gateup,Q,down")
ap.add_argument("--M", default="1")
ap.add_argument("--plans", default="1x4,1x8,2x4,2x8,3x4,3x8,3x16")
args = ap.parse_args()
rng = np.random.default_rng()
plans = [tuple(map(int, p.split("x"))) for p in args.plans.split(",")]
print(f"{'shape':7} {'k':>2} {'M':>2} {'gemv':>7} " + " ".join(f"{'%dx%d' % p:>7}" for p in plans), flush=True)
for name in args.shapes.split(","):
    N, K = SHAPES[name]
    W = rand_f16(rng, (N, K), 0.02)
    for k in map(int, args.k.split(",")):
        q, Wd, _, cps = quantized_case(W, k)
        banks = [stack_experts([c]) for c in cps]
        for M in map(int, args.M.split(",")):
            A = rand_f16(rng, (M, K))
            ref = A.astype(cp.float64) @ Wd.T
            out = cp.empty((M, N), cp.float16)
            ids, offs, err = cp.zeros(1, cp.int32), cp.asarray([0, M], cp.int32), _err_buffer()
            row = [time_rotated([lambda c=c: G.gemv(A, c, out) for c in cps])]
            for pb, w in plans:
                ov = (("per_block", pb), ("warps", w))
                out.fill(np.nan)
                G.grouped_gemv(A, banks[0], ids, offs, out, M, err, plan_override=ov)
                e = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
                assert e < 1e-2, (name, k, M, pb, w, e)
                row.append(time_rotated([lambda b=b: G.grouped_gemv(A, b, ids, offs, out, M, err, plan_override=ov)
                                         for b in banks]))
            print(f"{name:7} {k:2d} {M:2d} " + " ".join(f"{t:7.2f}" for t in row), flush=True)
        del q, Wd, cps, banks
