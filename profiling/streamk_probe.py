#!/usr/bin/env python
"""The dense wgmma kernel's stream-K schedule against its split-K plan (issue 4 at M >= 64; run on the GPU machine).

    python profiling/streamk_probe.py [--shapes gateup,down,Q,O,KV,lin_key,lin_value] [--M 64,128,256,512] [--k 4]
                                      [--grids 0,132]

Per shape and M (fp16, fresh random weight and activations): wgmma_gemm with the plan's split-K (wg), with
streamk=G for every G of --grids (sk<G>; 0: True, one CTA per SM) and the dispatched matmul, us per launch (cold-L2 rotation over R weight copies, CUDA-graph replay, as bench.py).  Each
output poisoned first and checked against the float64 product with the dequantized weight (max error relative to
the largest |ref|; 'BAD' over 1e-2) and, for stream-K, a second launch bit for bit (the fixed summation order).
TOTAL: gateup, down, Q, O, KV (bench.py's).
Stream-K was measured and removed (fifty-fourth session: slower in 20 of 21 cells, wrong at k = 3 / 5 with TOK = 128);
to run this again apply profiling/patches/session54-wg-streamk.patch (git apply) first.
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
from kbitcupy.bench import TOTAL_SHAPES  # noqa: E402
from kbitcupy import wgmma as WG  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="gateup,down,Q,O,KV,lin_key,lin_value")
    ap.add_argument("--M", default="64,128,256,512")
    ap.add_argument("--k", default="4")
    ap.add_argument("--grids", default="0")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    rng = np.random.default_rng()
    Ms = [int(m) for m in args.M.split(",")]
    ks = [int(k) for k in args.k.split(",")]
    grids = [int(g) for g in args.grids.split(",")]
    sk_cols = [f"sk{g or ''}" for g in grids]
    cols = ["wg"] + sk_cols + ["matmul"]
    print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, fp16, us per launch")
    print("| shape | k | M | " + " | ".join(cols) + f" | {sk_cols[0]} / wg | plan wg | plan {sk_cols[0]} | max err |")
    print("|---|---:|---:|" + "---:|" * (len(cols) + 1) + "---|---|---|")
    totals = {}
    for name, N, K, k, M, q, Wd, nb, cps, A, ref, out in dense_cases(rng, args.shapes.split(","), ks, Ms):
        fns = {"wg": lambda c, o: WG.wgmma_gemm(A, c, o), "matmul": lambda c, o: kb.matmul(A, c, out=o)}
        for g, col in zip(grids, sk_cols):
            fns[col] = lambda c, o, g=g: WG.wgmma_gemm(A, c, o, streamk=g or True)
        t, errs, bad = {}, {}, []
        for col in cols:
            fn = fns[col]
            out.fill(np.nan)
            fn(q, out)
            cp.cuda.Device().synchronize()
            errs[col] = float(cp.abs(out.astype(cp.float64) - ref).max() / cp.abs(ref).max())
            if not errs[col] < 1e-2:
                bad.append(col)
            if col.startswith("sk"):
                first = out.copy()
                out.fill(np.nan)
                fn(q, out)
                if not bool((out.view(cp.uint16) == first.view(cp.uint16)).all()):
                    bad.append(col + ":bits")
            t[col] = time_rotated([lambda c=c, fn=fn: fn(c, out) for c in cps], args.reps)
        for col in cols:
            if name in TOTAL_SHAPES:
                totals[(k, M, col)] = totals.get((k, M, col), 0.0) + t[col]
        p0 = WG.plan(M, N, K, k, "float16", A.device.id, cbd=q.default_codebook)
        p1 = WG.plan(M, N, K, k, "float16", A.device.id, cbd=q.default_codebook, streamk=grids[0] or True)

        def ptxt(p):
            ks_txt = "sk" if p.streamk else f"ks {p.k_splits}{' cl' if p.cluster else ''}"
            return f"TOK {p.tok} x{p.m_tiles}, {ks_txt}, st {p.stages}, grid {p.grid}"

        print(f"| {name} | {k} | {M} | " + " | ".join(f"{t[c]:.2f}" for c in cols)
              + f" | {t[sk_cols[0]] / t['wg']:.3f} | {ptxt(p0)} | {ptxt(p1)} | {max(errs.values()):.1e}"
              + (f" BAD {','.join(bad)}" if bad else "") + " |", flush=True)
    for k in ks:
        for M in Ms:
            if (k, M, "wg") not in totals:
                continue
            tt = {c: totals[(k, M, c)] for c in cols}
            print(f"| TOTAL | {k} | {M} | " + " | ".join(f"{tt[c]:.2f}" for c in cols)
                  + f" | {tt[sk_cols[0]] / tt['wg']:.3f} | | | |")


if __name__ == "__main__":
    main()
