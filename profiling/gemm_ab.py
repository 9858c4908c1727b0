"""A/B of the fused mma.sync GEMM (kbit_gemm) in one run: plans x source variants (cold L2, graph replay,
the default launch), with the speed-of-light read of the same bytes.

Env: KS (k list, default 4), MS (M list, default 8), SHAPES (names of bench_foundation.SHAPES),
GAB_PLANS="name:tile_n=64,ks=4,cl=1,st=6;..." (plan overrides, cl=1 / 0: the cluster / workspace sum, st: stages; the default plan is always the first column),
GAB_VARIANTS="name:-DFLAG=1 -DOTHER;..." (the current source built with extra options; each runs every plan).
Every cell is checked against the float64 reference ('!' after the time: max rel err > 1e-2).
usage: python3 profiling/gemm_ab.py [--out DIR]   (GPU machine)
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from bench_foundation import SHAPES, dense_cases, env_plans, env_variants, sol_time, time_rotated, variant_parts  # noqa: E402
from kbitcupy import _pdl  # noqa: E402
from kbitcupy import gemm as G  # noqa: E402
from kbitcupy._compile import _options  # noqa: E402

_VMOD = {}


def variant_plan(p, fn):
    """A copy of plan p launching fn (a variant build of the same kernel)."""
    q = G.Plan()
    for a in G.Plan.__slots__:
        setattr(q, a, getattr(p, a))
    q.fn = fn
    return q


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng()
    ks = [int(x) for x in os.environ.get("KS", "4").split(",")]
    Ms = [int(x) for x in os.environ.get("MS", "8").split(",")]
    names = os.environ.get("SHAPES", ",".join(SHAPES)).split(",")
    plans = [("def", ())] + list(env_plans("GAB_PLANS"))
    variants = [("cur", ())] + env_variants("GAB_VARIANTS")
    dev = cp.cuda.Device().id
    gpu = cp.cuda.runtime.getDeviceProperties(dev)["name"].decode()
    print(f"# {gpu}; kbit_gemm A/B, default launch (pdl arg {_pdl.dense_arg(dev)})", flush=True)
    rows = []
    for name, N, K, k, M, q, Wd, nb0, cps, A, ref, out in dense_cases(rng, names, ks, Ms):
        sol = sol_time(nb0 + A.nbytes)
        for pname, pov in plans:
            ov = dict(pov)
            try:
                p = G.plan(M, N, K, k, "float16", dev, ov.get("ks"), ov.get("tile_n"), None if "cl" not in ov else bool(ov["cl"]), ov.get("st"))
            except ValueError as e:
                print(f"{name:9} k={k} M={M:3d} {pname}: {e}", flush=True)
                continue
            for vname, vtoks in variants:
                if vtoks:
                    _, vopts, vcode = variant_parts(vtoks, "kbit_gemm.cu")
                    expr = G.GEMM.instances[(k, "float16", p.m_blocks, p.tile_n)]
                    key = (vname, expr)
                    if key not in _VMOD:
                        _VMOD[key] = cp.RawModule(code=vcode, options=_options(G.GEMM.options + vopts),
                                                  name_expressions=[expr]).get_function(expr)
                    vp = variant_plan(p, _VMOD[key])
                else:
                    vp = p
                flags = 1 | (2 if cps[0].default_codebook else 0)  # as kbitcupy.gemm.gemm passes them
                call = lambda c, vp=vp: G.launch_fused(vp, G.THREADS, A, c, out, flags, _pdl.dense_arg(dev))  # noqa: E731
                out.fill(np.nan)
                call(cps[0])
                err = float(cp.abs(out.astype(cp.float64) - ref).max() / cp.abs(ref).max())
                t = time_rotated([lambda c=c: call(c) for c in cps])
                r = dict(shape=name, k=k, M=M, plan=pname, variant=vname, us=t, err=err, sol=sol, tile_n=p.tile_n,
                         k_splits=p.k_splits, stages=p.stages, grid=p.grid, cluster=p.cluster)
                rows.append(r)
                print(f"{name:9} k={k} M={M:3d} {pname:8} {vname:8} {t:7.2f}{'!' if not err < 1e-2 else ' '} "
                      f"sol {sol:5.2f} {100 * sol / t:4.0f}%  (tn={p.tile_n} ks={p.k_splits} st={p.stages} "
                      f"g={p.grid}{' cl' if p.cluster else ''})", flush=True)
    if args.out:
        with open(os.path.join(args.out, "gemm_ab.json"), "w") as fh:
            json.dump(dict(device=gpu, rows=rows), fh, indent=1)


if __name__ == "__main__":
    main()
