"""The decode GEMV's token split (kbitcupy.gemv.plan ts: each 8 rows of A on CTAs of their own, every CTA reading its
column group's weights, the second time mostly from L2) past 32 rows, against the wgmma kernel, cold L2, graph replay.

KV (32 column groups) runs it by default from M = 5; the other shapes only with the plan override ts = 1 (measured
slower at M <= 16), forced here past the GEMV's 32-row cap to see where it stands.  Env: SHAPES, KS, MS, PLAN (more
plan overrides, e.g. warps=8), NOWG=1 (no wgmma column).
usage (GPU machine): python3 profiling/ts_probe.py [--out DIR]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from bench_foundation import dense_cases, dump_json, time_rotated  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402
from kbitcupy import wgmma as WG  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    names = os.environ.get("SHAPES", "KV,lin_key,O,down,Q").split(",")
    ks = [int(x) for x in os.environ.get("KS", "4").split(",")]
    Ms = [int(x) for x in os.environ.get("MS", "32,48,64,96,128,256").split(",")]
    G.max_rows = lambda k, N=None, tiled=True: 1 << 16  # (probe only: the forced token split past the cap)
    ov = (("ts", 1),) + tuple((a.split("=")[0], int(a.split("=")[1])) for a in os.environ.get("PLAN", "").split(",") if a)
    rows = []
    for name, N, K, k, M, q, Wd, nb, cps, A, ref, out in dense_cases(np.random.default_rng(0), names, ks, Ms):
        row = dict(shape=name, k=k, M=M)
        cols = (("ts", lambda c: G.gemv(A, c, out, ov, validate=False)),
                ("wgmma", lambda c: WG.wgmma_gemm(A, c, out, validate=False)))
        for col, fn in cols[:1] if os.environ.get("NOWG") else cols:
            out.fill(np.nan)
            try:
                fn(cps[0])
            except Exception as e:  # noqa: BLE001 (a form that does not fit: reported)
                row[col], row[col + "_err"] = None, f"{type(e).__name__}: {str(e)[:60]}"
                continue
            row[col + "_err"] = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
            row[col] = time_rotated([lambda c=c: fn(c) for c in cps])
        rows.append(row)
        f = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
        print(f"{name:8s} k={k} M={M:4d}  ts {f(row.get('ts'))}  wgmma {f(row.get('wgmma'))}  "
              f"err ts {row.get('ts_err')}  wgmma {row.get('wgmma_err')}", flush=True)
    dump_json(args.out, "ts_probe.json", rows)


if __name__ == "__main__":
    main()
