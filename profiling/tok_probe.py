#!/usr/bin/env python
"""The dense wgmma kernel at TOK = 256 against its plan's token tile (issue 4 at M >= 256; run on the GPU machine).

    python profiling/tok_probe.py [--shapes gateup,down,Q,O,KV,lin_key,lin_value] [--M 256,384,512] [--k 4]

Per shape and M (fp16, fresh random weight and activations): wgmma_gemm with the plan's TOK (wg) and with tok=256
(wg256; its split count from the plan's model), and the dispatched matmul, us per launch (cold-L2 rotation over R
weight copies, CUDA-graph replay, as bench.py), each output poisoned first and checked against the float64 product
with the dequantized weight (max error relative to the largest |ref|; 'BAD' over 1e-2).  Plans printed.
TOK = 256 was measured and removed (fifty-third session: slower everywhere); to run this again apply
profiling/patches/session53-wg-tok256.patch (git apply) first.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from bench_foundation import dense_cases, time_rotated  # noqa: E402
from kbitcupy import wgmma as WG  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="gateup,down,Q,O,KV,lin_key,lin_value")
    ap.add_argument("--M", default="256,384,512")
    ap.add_argument("--k", default="4")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    rng = np.random.default_rng()
    Ms = [int(m) for m in args.M.split(",")]
    ks = [int(k) for k in args.k.split(",")]
    cols = ("wg", "wg256", "matmul")
    print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, fp16, us per launch")
    print("| shape | k | M | " + " | ".join(cols) + " | wg256 / wg | plan wg | plan wg256 | max err (wg256) |")
    print("|---|---:|---:|" + "---:|" * (len(cols) + 1) + "---|---|---:|")
    totals = {}
    for name, N, K, k, M, q, Wd, nb, cps, A, ref, out in dense_cases(rng, args.shapes.split(","), ks, Ms):
        fns = {"wg": lambda c, o: WG.wgmma_gemm(A, c, o),
               "wg256": lambda c, o: WG.wgmma_gemm(A, c, o, tok=256),
               "matmul": lambda c, o: kb.matmul(A, c, out=o)}
        t, errs = {}, {}
        for col, fn in fns.items():
            out.fill(np.nan)
            fn(q, out)
            cp.cuda.Device().synchronize()
            errs[col] = float(cp.abs(out.astype(cp.float64) - ref).max() / cp.abs(ref).max())
            t[col] = time_rotated([lambda c=c, fn=fn: fn(c, out) for c in cps], args.reps)
            totals.setdefault((k, M, col), 0.0)
            totals[(k, M, col)] += t[col]
        p0 = WG.plan(M, N, K, k, "float16", A.device.id, cbd=q.default_codebook)
        p1 = WG.plan(M, N, K, k, "float16", A.device.id, tok=256, cbd=q.default_codebook)

        def ptxt(p):
            return f"TOK {p.tok} x{p.m_tiles}, ks {p.k_splits}{' cl' if p.cluster else ''}, st {p.stages}, grid {p.grid}"

        bad = [c for c, e in errs.items() if not e < 1e-2]
        print(f"| {name} | {k} | {M} | " + " | ".join(f"{t[c]:.2f}" for c in cols) + f" | {t['wg256'] / t['wg']:.3f} | "
              f"{ptxt(p0)} | {ptxt(p1)} | {errs['wg256']:.1e}{' BAD ' + ','.join(bad) if bad else ''} |", flush=True)
    for k in ks:
        for M in Ms:
            tt = {c: totals[(k, M, c)] for c in cols}
            print(f"| TOTAL | {k} | {M} | " + " | ".join(f"{tt[c]:.2f}" for c in cols)
                  + f" | {tt['wg256'] / tt['wg']:.3f} | | | |")


if __name__ == "__main__":
    main()
