#!/usr/bin/env python
"""Host cost of eager calls that launch through kbitcupy._pdl (run on the GPU machine):
matmul at M = 32 (the fused wgmma GEMM on H100/H200) and grouped_matmul (grouped GEMV,
1 token per expert, 8 experts), with PDL off and on.  Per case: 20 warm-up calls, then
`calls` back-to-back calls timed with perf_counter before the final synchronise
(enqueue = host cost per call) and after it (wall); median of 5 runs.

    python profiling/host_pdl.py [--calls 300]
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy.grouped import grouped_matmul, quantize_experts  # noqa: E402


def timed(fn, calls):
    for _ in range(20):
        fn()
    cp.cuda.get_current_stream().synchronize()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        cp.cuda.get_current_stream().synchronize()
        t2 = time.perf_counter()
        runs.append(((t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6))
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    q = kb.quantize(cp.asarray(rng.standard_normal((5120, 2048), dtype=np.float32) * 0.02), 4)
    A = cp.asarray(rng.standard_normal((32, 2048), dtype=np.float32)).astype(cp.float16)
    out = cp.empty((32, 5120), cp.float16)
    bank = quantize_experts(cp.asarray(rng.standard_normal((64, 1024, 2048), dtype=np.float32) * 0.02), 4)
    ids = cp.asarray(np.arange(8, dtype=np.int32))
    offs = cp.asarray(np.arange(9, dtype=np.int32))
    Ag = cp.asarray(rng.standard_normal((8, 2048), dtype=np.float32)).astype(cp.float16)
    og = cp.empty((8, 1024), cp.float16)
    cases = {"matmul M=32 (wgmma)": lambda: kb.matmul(A, q, out=out),
             "grouped_matmul 8 experts x 1 token": lambda: grouped_matmul(Ag, bank, ids, offs, 1, out=og,
                                                                         ids_stable=True)}
    print("| call | PDL | enqueue us | wall us |\n|---|---|---:|---:|")
    for name, fn in cases.items():
        for pdl in (False, True):
            with kb.pdl(pdl):
                e, w = timed(fn, a.calls)
            print(f"| {name} | {'on' if pdl else 'off'} | {e:.1f} | {w:.1f} |")


if __name__ == "__main__":
    main()
