"""Where the streaming GEMV's time goes (GPU machine): the kernel built with extra -D flags
(stage removal: -DKBIT_STREAM_NO_COMPUTE, -DKBIT_STREAM_NO_FIXUP), plan overrides, and a
per-CTA timeline (-DKBIT_STREAM_TRACE: clock64 at entry, after the prologue, as each unit
lands, at the split-K step, at exit), beside the current GEMV and the speed of light, cold L2
and graph replay (bench_foundation.time_rotated).

    SHAPES=gateup,KV KS=4 MS=1,32 VARIANTS="nocomp:-DKBIT_STREAM_NO_COMPUTE;nofix:-DKBIT_STREAM_NO_FIXUP" \\
        PLANS="st2:stages=2" python3 profiling/stream_probe.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from bench_foundation import dense_cases, env_plans, env_variants, sol_time, time_rotated  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402
from kbitcupy import gemv_stream as S  # noqa: E402
from kbitcupy._compile import load_arch_module  # noqa: E402

_MODS = {}


def variant_fn(opts, key):
    """A variant's kernel: opts are compiler options, except 'src=<file in cuda_src/>' (another
    version of the source, e.g. the previous commit's, for a same-run A/B)."""
    expr = S.STREAM.instances[key]
    mk = (opts, expr)
    if mk not in _MODS:
        src = next((o[4:] for o in opts if o.startswith("src=")), S.STREAM.source)
        flags = tuple(o for o in opts if not o.startswith(("src=",) + PLAN_KEYS))
        mod, low = load_arch_module(src, [expr], S.STREAM.arch, flags)
        _MODS[mk] = (mod, mod.get_function(low[expr]))
    return _MODS[mk]


PLAN_KEYS = ("ctas=", "stages=")


def _plan(opts):
    """The plan override of a variant: its 'ctas=<n>' / 'stages=<n>' items (e.g. ctas=264 with
    -DKBIT_STREAM_MINB=2: two CTAs per SM), None when it has none."""
    ov = tuple((o.partition("=")[0], int(o.partition("=")[2])) for o in opts if o.startswith(PLAN_KEYS))
    return ov or None


def _block(opts):
    """Block size of a variant: the 8 consumer warps and its producer warps (-DKBIT_STREAM_PRODUCERS=n)."""
    p = next((int(o.partition("=")[2]) for o in opts if o.startswith("-DKBIT_STREAM_PRODUCERS=")), S.PRODUCERS)
    return (32 * (S.CONSUMERS + p),)


def trace(A, q, out, key, opts=()):
    """Per-CTA phase times (us from the earliest CTA entry, globaltimer-aligned, clock64 inside a CTA)."""
    mod, fn = variant_fn(("-DKBIT_STREAM_TRACE",) + tuple(opts), key)
    _, grid, block, smem, args = S.launch_args(A, q, out, _plan(opts))
    block = _block(opts)
    fn.max_dynamic_shared_size_bytes = smem
    buf = mod.get_global("kbit_stream_trace")
    tr = cp.ndarray((1024, 16), cp.uint64, buf)
    assert grid[0] <= 1024, "the trace buffer holds 1024 CTAs"
    for _ in range(3):  # L2 is warm for the weights of this copy after the first: use the last
        tr.fill(0)
        fn(grid, block, args, shared_mem=smem)
    cp.cuda.runtime.deviceSynchronize()
    t = tr.get()[: grid[0]].astype(np.int64)
    ghz = cp.cuda.runtime.getDeviceProperties(0)["clockRate"] / 1e6
    g0 = t[:, 0] - t[:, 0].min()  # ns
    rel = lambda i: (t[:, i] - t[:, 1]) / ghz / 1e3 + g0 / 1e3  # noqa: E731  (us from first entry)
    cols = {"entry": g0 / 1e3, "prologue": rel(2)}
    for i in range(8):
        if (t[:, 3 + i] > 0).any():
            cols[f"u{i}"] = np.where(t[:, 3 + i] > 0, rel(3 + i), np.nan)
    for f, nm in ((11, "fixup"), (12, "counted")):  # split-K: slots stored / counters bumped
        if (t[:, f] > 0).any():
            cols[nm] = np.where(t[:, f] > 0, rel(f), np.nan)
    cols["exit"] = rel(15)
    return " ".join(f"{n}={np.nanpercentile(v, 50):.2f}[{np.nanpercentile(v, 10):.2f}-{np.nanmax(v):.2f}]"
                    for n, v in cols.items())


def main():
    rng = np.random.default_rng()
    ks = [int(x) for x in os.environ.get("KS", "4").split(",")]
    Ms = [int(x) for x in os.environ.get("MS", "1").split(",")]
    names = os.environ.get("SHAPES", "gateup,KV").split(",")
    variants = env_variants("VARIANTS")
    plans = env_plans("PLANS")
    do_trace = os.environ.get("TRACE", "1") == "1"
    print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    for name, N, K, k, M, q, Wd, nb0, cps, A, ref, out in dense_cases(rng, names, ks, Ms):
        row = {}
        if M <= G.MAX_M and G.fits(N, K, M, k, 0):
            row["gemv"] = time_rotated([lambda c=c: G.gemv(A, c, out) for c in cps])
        for col, ov in [("stream", None)] + plans:
            out.fill(np.nan)
            S.gemv_stream(A, cps[0], out, ov)
            err = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
            row[col] = time_rotated([lambda c=c: S.gemv_stream(A, c, out, ov) for c in cps])
            row[col + " err"] = err
        key = (k, "float16", S.tiles_for(M))
        for vname, opts in variants:
            _, fn = variant_fn(opts, key)
            _, grid, block, smem, a0 = S.launch_args(A, cps[0], out, _plan(opts))
            block = _block(opts)
            fn.max_dynamic_shared_size_bytes = smem
            out.fill(np.nan)
            fn(grid, block, (A, cps[0].packed, cps[0].absmax, cps[0].codebook) + a0[4:], shared_mem=smem)
            row[vname + " err"] = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
            row[vname] = time_rotated([lambda c=c: fn(grid, block, (A, c.packed, c.absmax, c.codebook) + a0[4:],
                                                      shared_mem=smem) for c in cps])
        row["sol"] = sol_time(nb0 + A.nbytes)
        plan = S.plan(N, K, M, k, 0)
        print(f"{name:9} k={k} M={M:2} plan(mt,grid,stages,smem,maxc)={plan[:5]} "
              + " ".join(f"{c}={v:.2f}" if "err" not in c else f"{c}={v:.0e}" for c, v in row.items()),
              flush=True)
        if do_trace:
            print("   trace:", trace(A, cps[0], out, key), flush=True)
            for vname, opts in variants:
                print(f"   trace {vname}:", trace(A, cps[0], out, key, opts), flush=True)


if __name__ == "__main__":
    main()
