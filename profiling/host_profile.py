#!/usr/bin/env python
"""cProfile of eager host paths (run on the GPU machine): where the Python time of a call
goes.  Cases: matmul M=32 (fused GEMM), grouped_matmul (8 experts x 1 token), moe_forward
(decode, 1 token, top-10 of 64 experts).

    python profiling/host_profile.py [case ...] [--top 18]
"""
import argparse
import cProfile
import os
import pstats
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy.grouped import grouped_matmul, quantize_experts  # noqa: E402
from kbitcupy.moe import moe_forward  # noqa: E402


def cases():
    rng = np.random.default_rng(0)
    q = kb.quantize(cp.asarray(rng.standard_normal((5120, 2048), dtype=np.float32) * 0.02), 4)
    A = cp.asarray(rng.standard_normal((32, 2048), dtype=np.float32)).astype(cp.float16)
    out = cp.empty((32, 5120), cp.float16)
    bank = quantize_experts(cp.asarray(rng.standard_normal((64, 1024, 2048), dtype=np.float32) * 0.02), 4)
    bdn = quantize_experts(cp.asarray(rng.standard_normal((64, 2048, 512), dtype=np.float32) * 0.02), 4)
    ids = cp.asarray(np.arange(8, dtype=np.int32))
    offs = cp.asarray(np.arange(9, dtype=np.int32))
    Ag = cp.asarray(rng.standard_normal((8, 2048), dtype=np.float32)).astype(cp.float16)
    og = cp.empty((8, 1024), cp.float16)
    x = cp.asarray(rng.standard_normal((1, 2048), dtype=np.float32)).astype(cp.float16)
    tid = cp.asarray(rng.permutation(64)[:10].astype(np.int32).reshape(1, 10))
    tw = cp.asarray(np.full((1, 10), 0.1, np.float32))
    return {"matmul": lambda: kb.matmul(A, q, out=out),
            "grouped": lambda: grouped_matmul(Ag, bank, ids, offs, 1, out=og),
            "moe_forward": lambda: moe_forward(x, bank, bdn, tid, tw)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", nargs="*")
    ap.add_argument("--top", type=int, default=18)
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    for name, fn in cases().items():
        if a.case and name not in a.case:
            continue
        for _ in range(30):
            fn()
        cp.cuda.Device().synchronize()
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(a.calls):
            fn()
        pr.disable()
        cp.cuda.Device().synchronize()
        print(f"==== {name}")
        pstats.Stats(pr).sort_stats("tottime").print_stats(a.top)


if __name__ == "__main__":
    main()
