"""A/B of the decode GEMV against a baseline source, in one run (cold L2, graph replay).

Columns: the baseline kernel (profiling/baseline_gemv_<rev>.cu with the plan rule of
that revision), the current plan, optional variants of the current source built with
extra -D flags (AB_VARIANTS="name:-DFLAG=1 +plan_key=1 src=FILE;...": src= builds that file, e.g. a
revision's source written by --make-baseline and renamed), AB_CBLOAD=1: the weights not flagged
default-codebook (the instantiation that loads the codebook), and the speed-of-light read of the
same bytes.  Env: KS (k list), MS (M list), SHAPES (names).
usage: python3 profiling/gemv_ab.py --make-baseline REV   (here, with git: writes the file)
       python3 profiling/gemv_ab.py [--out DIR]            (GPU machine)
"""
import argparse
import glob
import json
import os
import sys
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from bench_foundation import (SHAPES, dense_cases, env_plans, env_variants, sol_time, time_rotated,  # noqa: E402
                              variant_parts)
from kbitcupy import gemv as G  # noqa: E402
from kbitcupy import _pdl  # noqa: E402
from kbitcupy._compile import _options, inline_source  # noqa: E402
from kbitcupy.quantize import CTYPE  # noqa: E402

_VMOD = {}


def make_baseline(rev):
    """kbit_gemv.cu of a git revision with its headers inlined (the device machine has no git)."""
    import subprocess
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as d:
        tar = subprocess.run(["git", "-C", root, "archive", rev, "cuda_src"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", d], input=tar, check=True)
        src = inline_source(os.path.join(d, "cuda_src"), "kbit_gemv.cu")
    path = os.path.join(root, "profiling", f"baseline_gemv_{rev}.cu")
    with open(path, "w") as fh:
        fh.write(f"// kbit_gemv.cu at {rev} (headers inlined): the A/B baseline of profiling/gemv_ab.py\n" + src)
    print("wrote", path)


def _pdl_launch(fn, grid, block, args, cluster=1):
    _pdl.launch(fn, grid, block, args, fn.max_dynamic_shared_size_bytes, pdl=bool(args[-1]), cluster=cluster)


def baseline_kernel(path, k, tname, tiles):
    """The baseline kernel and its plan rule (commit 7eebc25: 32-copy table, 64 registers)."""
    src = open(path).read()
    expr = f"kbit_gemv<{k}, {CTYPE[tname]}, unsigned char, true, 2, {tiles}>"
    mod = cp.RawModule(code=src, options=_options(()), name_expressions=[expr])
    return mod.get_function(expr)


def baseline_plan(N, K, M, k):
    groups, ks, tiles = -(-N // 16), -(-K // 128), 1 if M <= 8 else 2
    warps = min(8 if groups >= 256 else 16, ks)
    lut = (1 << (2 * k)) * (32 if k <= 4 else 16) * 4
    return warps, lut + M * ks * 128 * 2 + warps * 128 * tiles * 4 + 32 * 4, groups, tiles


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--make-baseline", default=None, metavar="REV",
                    help="write profiling/baseline_gemv_REV.cu (headers inlined) from git and exit")
    args = ap.parse_args()
    if args.make_baseline:
        return make_baseline(args.make_baseline)
    base = sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "baseline_gemv_*.cu")))
    if os.environ.get("AB_NOBASE"):  # no baseline column (its compile and timing)
        base = []
    rng = np.random.default_rng()
    ks = [int(x) for x in os.environ.get("KS", "2,4,5").split(",")]
    Ms = [int(x) for x in os.environ.get("MS", "1,2,4").split(",")]
    names = os.environ.get("SHAPES", ",".join(SHAPES)).split(",")
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"# {dev}; baseline: {os.path.basename(base[-1]) if base else 'none'}")
    print(f"{'shape':9} {'k':>2} {'M':>2} {'base':>7} {'new':>7} {'sol':>6} {'%sol':>5} {'new/base':>8}")
    rows = []
    # AB_VARIANTS="name:-DFLAG=1 -DOTHER +late=0;name2:..." -> extra columns ("+key=int"
    # tokens override the plan, the rest are compiler options)
    variants = env_variants("AB_VARIANTS")
    # AB_PLANS="name:warps=16,dual=1;..." -> columns of the current kernels with a plan override
    plans = tuple(env_plans("AB_PLANS"))
    extra = [vn for vn, _ in variants + list(plans)] + (["cbload"] if os.environ.get("AB_CBLOAD") else [])
    for name, N, K, k, M, q, Wd, nb0, cps, A, ref, out in dense_cases(rng, names, ks, Ms):
        row = dict(shape=name, k=k, M=M)
        warps, smem, grid, tiles = baseline_plan(N, K, M, k)
        if base and smem <= cp.cuda.runtime.deviceGetAttribute(97, 0):  # max opt-in smem per block
            fn = baseline_kernel(base[-1], k, "float16", tiles)
            fn.max_dynamic_shared_size_bytes = smem
            call = lambda c: fn((grid,), (warps * 32,), (A, c.packed, c.absmax, c.codebook, out,  # noqa: E731
                                                       np.int32(M), np.int32(N), np.int32(K),
                                                       np.float32(c.tensor_scale)), shared_mem=smem)
            row["base"] = time_rotated([lambda c=c: call(c) for c in cps])
        if not G.fits(N, K, M, k, 0):  # the GEMV's staged A does not fit: matmul uses the GEMM
            continue
        for col, ov in (("new", None),) + plans:
            out.fill(np.nan)
            try:
                G.gemv(A, cps[0], out, ov)
            except ValueError as e:  # a plan override this cell cannot take (reported, not timed)
                if col == "new":
                    raise
                row[col], row[col + "_err"] = None, str(e)[:60]
                continue
            err = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
            row[col] = time_rotated([lambda c=c: G.gemv(A, c, out, ov) for c in cps])
            row[col + "_err"] = err
        if os.environ.get("AB_CBLOAD"):  # the same kernel loading the codebook: copies not flagged default
            lcs = [replace(c) for c in cps]
            for c in lcs:
                object.__setattr__(c, "default_codebook", False)
            out.fill(np.nan)
            G.gemv(A, lcs[0], out)
            row["cbload_err"] = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
            row["cbload"] = time_rotated([lambda c=c: G.gemv(A, c, out) for c in lcs])
        for vname, vtoks in variants:  # the current source built with extra -D flags
            ov, vopts, vcode = variant_parts(vtoks, "kbit_gemv.cu")
            ov = dict(ov or ())
            pf = ov.pop("pf", None)  # the safe-mode prefetch depth: the launch's pdl argument, not the plan
            cl = int(ov.pop("cluster", 1))  # launched in thread block clusters of cl CTAs (probes)
            # shared memory padded as the package's launch pads it (G.resident_cap_smem); +cap=0: not.  (Before the
            # forty-second session the default was off, which ran some shapes' variants 15-22 % slower: run49.sh aca.)
            cap = int(ov.pop("cap", 1))
            pl = G.plan(N, K, M, k, **ov)
            ts = pl[9] > 1  # the token split: grid.y CTAs a group (the kernel's TS)
            grid, block, smem = ((pl[3], pl[9]) if ts else (pl[3],)), (pl[0] * 32, pl[7]), pl[2]
            # formatted here, not looked up: a probe may use a depth the package does not instantiate
            expr = (f"kbit_gemv<{k}, __half, unsigned char, true, {pl[1]}, {pl[4]}, "
                    f"{str(pl[5]).lower()}, {str(pl[6]).lower()}, {str(pl[7] > 1).lower()}, "
                    f"{str(bool(cps[0].default_codebook)).lower()}"
                    + (f", {str(bool(pl[8])).lower()}, true>" if ts else ", true>" if pl[8] else ">"))
            for t in vopts:  # a k = 5 table of another size (1024 entries x copies x 4 bytes): plan its smem
                if t.startswith("-DKBIT_K5_LOG2_COPIES=") and k == 5:
                    smem += 1024 * (1 << int(t.split("=")[1])) * 4 - G.lut_bytes(5)
                if t.startswith("-DKBIT_K4_LOG2_COPIES=") and k == 4:
                    smem += 256 * (1 << int(t.split("=")[1])) * 4 - G.lut_bytes(4)
                if t.startswith("-DKBIT_GEMV_Q2=") and k == 2:  # the k = 2 quad table (QuadLut: 32 KB) or not
                    smem += (G.QUAD_LUT_BYTES if t.endswith("=1") else G.lut_bytes(2)) - G.table_bytes(2)
            key = (vname, expr)
            if key not in _VMOD:
                _VMOD[key] = cp.RawModule(code=vcode, options=_options(vopts), name_expressions=[expr]).get_function(expr)
            vf = _VMOD[key]
            if cap:
                smem = G.capped_smem(vf, smem, grid[0] * (grid[1] if ts else 1), block[0] * block[1], 0)
            vf.max_dynamic_shared_size_bytes = smem  # (_pdl_launch launches with this attribute's bytes)
            # the current source's arguments, as kbitcupy.gemv passes them
            # (and launched as it does: a programmatic dependent where KBITCUPY_PDL=1)
            pov = None if pf is None else (("pf", pf),)
            vcall = lambda c: _pdl_launch(vf, grid, block, G.launch_args(A, c, out, pov)[4], cl)  # noqa: E731
            out.fill(np.nan)
            vcall(cps[0])
            row[vname + "_err"] = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
            row[vname] = time_rotated([lambda c=c: vcall(c) for c in cps])
        row["sol"] = sol_time(nb0 + A.nbytes)
        rows.append(row)
        f = lambda v: f"{v:7.2f}" if isinstance(v, float) else f"{'-':>7}"  # noqa: E731
        print(f"{name:9} {k:>2} {M:>2} {f(row.get('base'))} {f(row['new'])} "
              + "".join(f"{vn}={row[vn]:.2f}({row[vn + '_err']:.0e}) " if row[vn] is not None else f"{vn}=- "
                        for vn in extra) +
              f"{row['sol']:6.2f} {100 * row['sol'] / row['new']:5.0f} "
              f"{row['new'] / row['base'] if 'base' in row else float('nan'):8.3f}"
              f"  err {row['new_err']:.1e}", flush=True)
    for k in ks:
        for M in Ms:
            sel = [r for r in rows if r["k"] == k and r["M"] == M and r["shape"] in ("gateup", "down", "Q", "O", "KV")]
            if sel and all("new" in r for r in sel):  # (the base column only where a baseline file is there)
                n = sum(r["new"] for r in sel)
                b = f"base {sum(r['base'] for r in sel):.2f} " if all("base" in r for r in sel) else ""
                print(f"TOTAL k={k} M={M}: {b}new {n:.2f} "
                      + " ".join(f"{vn} {sum(r[vn] for r in sel):.2f}" if all(r[vn] is not None for r in sel)
                                 else f"{vn} -" for vn in extra))
    if args.out:
        with open(os.path.join(args.out, "gemv_ab.json"), "w") as fh:
            json.dump(dict(device=dev, rows=rows), fh, indent=1)


if __name__ == "__main__":
    main()
