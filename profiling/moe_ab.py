"""A/B of the grouped MoE GEMV kernel (kbit_gemv_grouped) in one run: variants of the
current source built with extra -D flags and/or grouped_plan overrides, beside the fp16
contiguous bmm and the speed-of-light read, with the benchmark's cold-L2 expert rotation.

Env: MOE_VARIANTS="name:-DFLAG=1 +per_block=2 +warps=4 src=FILE;..." (a column "new" = current
plan and source unless MOE_GEMV=0, and "mma" = the grouped MMA kernel unless MOE_MMA=0),
MOE_WG="name:+tok=32 +ks_div=2 +ks=3 +stages=4 +cluster=0 +chained=1;..." grouped wgmma kernel columns (plan
overrides, launch mode; ks_div divides the default split-K count, ks sets it, cluster=0 sums through the workspace), KS (default 4), MS (tokens per expert, default 1,4,8,16),
ES (active experts, default 8,10), SHAPES (moe_gu_fused,moe_dn), MOE_MMA_PLANS="name:cg=8 warps=8;..." grouped
mma.sync kernel columns (kbit_grouped plan overrides).
usage (GPU machine): python3 profiling/moe_ab.py [--out DIR]
"""
import argparse
import functools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from kbitcupy import bench as B  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402
from bench_foundation import variant_parts  # noqa: E402
from kbitcupy._compile import _options  # noqa: E402
from kbitcupy.grouped import _err_buffer, _launch  # noqa: E402

_MODS = {}


def variant_kernel(toks, key):
    """kbit_gemv_grouped of the current source (or of a src=FILE token's file) built with a variant's
    extra options (bench_foundation.variant_parts)."""
    expr = G.GEMV.instances[key]
    if (toks, expr) not in _MODS:
        _, opts, code = variant_parts(toks, "kbit_gemv.cu")
        _MODS[(toks, expr)] = cp.RawModule(code=code, options=_options(opts),
                                           name_expressions=[expr]).get_function(expr)
    return _MODS[(toks, expr)]


def column(name, toks):
    """+stable=1: the launch's ids_stable (in safe PDL the ids read before the wait and the first
    weights L2-prefetched)."""
    stable = "+stable=1" in toks
    toks = tuple(t for t in toks if not t.startswith("+stable="))
    ov = variant_parts(toks, "kbit_gemv.cu")[0]
    kern = functools.partial(variant_kernel, toks) if any(not t.startswith("+") for t in toks) else None

    def launch(c):
        return G.grouped_gemv(c.A, c.bank, c.ids, c.offsets, c.out, c.M, _err_buffer(), ov, kern,
                              ids_stable=stable)
    return B.MoeColumn(name, launch)


def wg_column(name, toks):
    """The grouped wgmma kernel with plan overrides +tok=, +ks_div=, +ks= (split count), +oldks=1 (the split count
    of default_splits, before grouped_splits), +stages=,
    +cluster=0/1 (split-K sum through the workspace / over a thread block cluster), +spread=1 (one CTA
    per SM's shared memory at launch), +stable=1 (the launch's ids_stable), +chained=1 (its chained: the full PDL
    order in safe mode), +lc=0/1 (k = 5: the default / fewer pair-table copies, grouped_plan's fewer_copies)."""
    from kbitcupy import wgmma as WG

    ov = {t[1:].split("=")[0]: int(t.split("=")[1]) for t in toks if t.startswith("+")}

    def launch(c):
        kw = dict(tok=ov.get("tok"), stages=ov.get("stages"), k_splits=ov.get("ks"))
        if "cluster" in ov:
            kw["cluster"] = bool(ov["cluster"])
        if "spread" in ov:
            kw["spread"] = bool(ov["spread"])
        if "lc" in ov:
            kw["fewer_copies"] = bool(ov["lc"])
        if ov.get("oldks"):  # the split count of the plan before grouped_splits (fill one wave of resident CTAs)
            tname = "bfloat16" if c.A.dtype == WG.bfloat16 else "float16"
            p = WG.grouped_plan(*c.bank.shape, c.bank.k, tname, c.A.device.id, int(c.ids.size), c.M, tok=kw["tok"])
            sms = WG.device_info(c.A.device.id)["sms"]
            kw["k_splits"] = WG.default_splits(-(-c.bank.shape[1] // WG.TILE_K), sms * p.occ, p.grid // p.k_splits)
        if "ks_div" in ov:
            tname = "bfloat16" if c.A.dtype == WG.bfloat16 else "float16"
            p = WG.grouped_plan(*c.bank.shape, c.bank.k, tname, c.A.device.id, int(c.ids.size), c.M, tok=kw["tok"])
            kw["k_splits"] = max(1, p.k_splits // ov["ks_div"])
        return WG.grouped_wgmma(c.A, c.bank, c.ids, c.offsets, c.out, c.M, _err_buffer(),
                                ids_stable=bool(ov.get("stable", 0)), chained=bool(ov.get("chained", 0)), **kw)
    return B.MoeColumn(name, launch)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    variants = [(v.split(":")[0], tuple(v.split(":", 1)[1].split())) for v in os.environ.get("MOE_VARIANTS", "").split(";")
                if v]
    cols = ([column("new", ())] if os.environ.get("MOE_GEMV", "1") == "1" else []) + [column(n, t) for n, t in variants]
    cols += [wg_column(v.split(":")[0], v.split(":", 1)[1].split()) for v in os.environ.get("MOE_WG", "").split(";") if v]
    if os.environ.get("MOE_MMA", "1") == "1":  # the grouped MMA kernel (kbit_grouped.cu) beside it
        cols.append(B.MoeColumn("mma", lambda c: _launch(c.A, c.bank, c.ids, c.offsets, c.out, c.M, plan_override={})))
    for v in os.environ.get("MOE_MMA_PLANS", "").split(";"):
        if v:
            ov = {t.split("=")[0]: int(t.split("=")[1]) for t in v.split(":", 1)[1].split()}
            cols.append(B.MoeColumn(v.split(":")[0], functools.partial(
                lambda ov_, c: _launch(c.A, c.bank, c.ids, c.offsets, c.out, c.M, plan_override=ov_), ov)))
    ks = [int(x) for x in os.environ.get("KS", "4").split(",")]
    Ms = [int(x) for x in os.environ.get("MS", "1,4,8,16").split(",")]
    Es = [int(x) for x in os.environ.get("ES", "8,10").split(",")]
    shapes = os.environ.get("SHAPES", "moe_gu_fused,moe_dn").split(",")
    dev = cp.cuda.runtime.getDeviceProperties(0)
    l2, sms = dev["l2CacheSize"], dev["multiProcessorCount"]
    res = B.run_moe(shapes, Ms, Es, ks, cols, "fp16", 20, l2, sms)
    print(f"# {dev['name'].decode()}  columns: new = current source and plan; " +
          "; ".join(f"{n} = {' '.join(t)}" for n, t in variants))
    names = [c.name for c in cols]
    print(f"{'shape':13} {'E':>3} {'k':>2} {'M':>3} " + " ".join(f"{n:>9}" for n in names) + f" {'fp16bmm':>8} {'SOL':>6}")
    for c in res["cells"]:
        f = lambda e, w=9: f"{e['us']:{w}.2f}" if e and e.get("us") else f"{'-':>{w}}"  # noqa: E731
        bad = [n for n in names if c["columns"].get(n, {}).get("check_ok") is False]
        print(f"{c['shape']:13} {c['experts']:>3} {c['k']:>2} {c['M']:>3} " + " ".join(f(c["columns"].get(n)) for n in names)
              + f" {f(c['fp16'].get('bmm'), 8)} {f(c['sol'], 6)}" + (f"  CHECK FAILED: {bad}" if bad else ""))
    for t in res["totals"]:
        print(f"TOTAL E={t['experts']} k={t['k']} M={t['M']}: " + " ".join(
            f"{n} {t['columns'][n]:.2f}" for n in names if t["columns"].get(n)) +
            f"  fp16 bmm {t['fp16']['bmm'] or float('nan'):.2f}  SOL {t['sol_us'] or float('nan'):.2f}")
    if args.out:
        with open(os.path.join(args.out, "moe_ab.json"), "w") as fh:
            json.dump(res, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
