"""The decode GEMV with its weights by 2-D TMA tensor copies (kbit_gemv_tma, -DKBIT_GEMV_TMA=1) against the
package's GEMV, same run (cold L2, graph replay, safe PDL as the package launches it).

Why (fifty-sixth session, issue 3 on the H200): the register-ring GEMV requests step 1 only once step 0 has
landed (a second DRAM round trip on the path; every earlier request measured slower, because a warp that issues
loads the memory system is pacing cannot compute what has landed), and spends ~50 of a step's ~290 SASS on load
address math, predication and reloaded parameters.  kbit_gemv_tma: one thread a slice issues every stage of the
group's weights (planes + scales, one box each) right after the wait; warps read a step from shared memory once its
stage's mbarrier completes; an SM's share of 8-column groups side by side in one block (one table, one A).
Expect: the second round trip off the path (gate/up k = 4 M = 1 4.26 -> ~3.8 us) if the copies land in issue order.

Result (fifty-sixth session, H200, profiling/NOTES.md): right, and slower on every form (gate/up 4.97 vs 4.28 us); the
kernel was removed -- apply `profiling/patches/session56-gemv-tma.patch` (cuda_src/kbit_gemv.cu) before running this.

usage (GPU machine): SHAPES=gateup,down KS=4 TMA_FORMS="gpb x warps x stages;..." python3 profiling/gemv_tma_probe.py
       (a form "auto[:S]" = gpb ceil(groups / 132), warps the largest divisor of the steps <= min(8, 20 // gpb),
       S stages, default 2; TMA_FORMS_<shape> per shape; PASSES; TMA_EXTRA = more -D options; CHECK_ONLY=1 one launch
       a form and its error; TRACE=1 the chain timeline of each form, profiling/chain_trace.py's table)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from bench_foundation import dense_cases, sol_time, time_rotated  # noqa: E402
from kbitcupy import _pdl  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402
from kbitcupy._compile import _options, read_source  # noqa: E402
from kbitcupy.quantize import CTYPE  # noqa: E402

_MODS = {}
U32, U8 = 2, 0  # CUtensorMapDataType


def kernel(k, stg, bounds, trace=None):
    """The probe kernel (trace = 0 / 1: a -DKBIT_TRACE build, copy n, and its trace buffer)."""
    expr = f"kbit_gemv_tma<{k}, {CTYPE['float16']}, {stg}>"
    key = (expr, bounds, trace)
    if key not in _MODS:
        # TMA_EXTRA: more options for the probe kernel (e.g. -DKBIT_EXPERIMENT_NO_COMPUTE: loads only, wrong results)
        tr = () if trace is None else ("-DKBIT_TRACE", f"-DKBIT_TRACE_COPY={trace}")
        opts = _options(tuple(G.GEMV.options) + ("-DKBIT_GEMV_TMA=1", f"-DKBIT_GEMV_TMA_BOUNDS={bounds},1")
                        + tuple(os.environ.get("TMA_EXTRA", "").split()) + tr)
        mod = cp.RawModule(code=read_source("kbit_gemv.cu"), options=opts, name_expressions=[expr])
        fn = mod.get_function(expr)
        _MODS[key] = fn if trace is None else (fn, cp.ndarray((4096 * 64,), cp.uint64, mod.get_global("kbit_trace")))
    return _MODS[key]


def form_smem(k, M, kst, gpb, w, stg):
    """Dynamic shared memory of a form (gemv_block's layout: table, staged A, partial sums, codebook, then, 128-byte
    aligned, each slice's stage buffers and the mbarriers)."""
    return (G.table_bytes(k) + M * kst * 256 * 2 + w * gpb * 128 * 4 + 32 * 4 + 256
            + gpb * kst * 4 * (64 * k + 16) + gpb * stg * 8)


def form_args(mp, c, A, out, M, N, K, pdl):
    """kbit_gemv_tma's arguments for weight copy c with its tensor maps mp."""
    return (mp[0], mp[1], A, c.packed, c.absmax, c.codebook, out, np.int32(M), np.int32(N), np.int32(K),
            np.float32(c.tensor_scale), np.int32(pdl))


def chain_trace(name, k, cps, A, out, M, N, K, gpb, w, stg, smem, pdl):
    """The chain timeline of the form (profiling/chain_trace.py's table): two trace builds alternating in the
    graph of the rotation's launches, launch n-1's blocks against launch n-2's last exit."""
    from chain_trace import replay_chain, report

    rows = -(-K // 256) * 4 // stg
    grid = -(-(-(-N // 8)) // gpb)
    (fx, tx), (fy, ty) = kernel(k, stg, 640, 0), kernel(k, stg, 640, 1)
    for f in (fx, fy):
        f.max_dynamic_shared_size_bytes = max(smem, f.max_dynamic_shared_size_bytes)
    mp = [maps(c, N, K, k, rows) for c in cps]
    R = len(cps) + len(cps) % 2

    def launch(i):
        args = form_args(mp[i % len(cps)], cps[i % len(cps)], A, out, M, N, K, pdl)
        _pdl.launch(fx if i % 2 == 0 else fy, (grid,), (32 * w, gpb), args, smem, pdl=bool(pdl))
    ts = replay_chain(launch, R, tx, ty)
    clock_khz = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrClockRate, 0)
    report(tx, ty, ts, (grid,), (32 * w, gpb), 1e6 / clock_khz, f"{name} k={k} M={M} tma {gpb}x{w}x{stg} (trace build)")


def maps(q, N, K, k, rows):
    """(plane map, scale map) of a tiled weight: rows = K tiles a stage (the boxes' height)."""
    n_tiles, k_tiles = -(-N // 128), -(-K // 64)
    assert q.packed.size == n_tiles * k_tiles * 256 * k and q.absmax.size == n_tiles * k_tiles * 256
    d0 = n_tiles * 256 * k
    tw = _pdl.encode_tensor_map_2d(int(q.packed.data.ptr), U32, d0, k_tiles, 4 * d0, 16 * k, rows, 0, 2)
    ta = _pdl.encode_tensor_map_2d(int(q.absmax.data.ptr), U8, n_tiles * 256, k_tiles, n_tiles * 256, 16, rows, 0, 2)
    return tw, ta


def form_of(spec, N, K):
    groups, ks = -(-N // 8), -(-K // 256)
    if spec.startswith("auto"):  # "auto" / "auto:S" (S stages)
        gpb = -(-groups // 132)
        w = max(d for d in range(1, 9) if ks % d == 0 and d * gpb <= 20)
        return gpb, w, int(spec.split(":")[1]) if ":" in spec else 2
    gpb, w, stg = (int(x) for x in spec.split("x"))
    return gpb, w, stg


def main():
    rng = np.random.default_rng()
    ks = [int(x) for x in os.environ.get("KS", "4").split(",")]
    names = os.environ.get("SHAPES", "gateup,down,Q,O,KV,lin_key,lin_value").split(",")
    forms = os.environ.get("TMA_FORMS", "auto").split(";")
    # per-shape forms: TMA_FORMS_<shape>="..." (else TMA_FORMS)
    passes = int(os.environ.get("PASSES", "2"))
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"# {dev}; kbit_gemv_tma against kbitcupy.gemv (its plan), M = 1, safe PDL; us a launch, rel. error")
    tot = {}
    for name, N, K, k, M, q, Wd, nb, cps, A, ref, out in dense_cases(rng, names, ks, [1]):
        groups, kst = -(-N // 8), -(-K // 256)
        pdl = _pdl.dense_arg(A.data.device_id)
        specs = os.environ.get(f"TMA_FORMS_{name}", ";".join(forms)).split(";")
        if os.environ.get("TRACE"):  # the chain timeline of each form (trace builds), no timing table
            for spec in specs:
                gpb, w, stg = form_of(spec, N, K)
                chain_trace(name, k, cps, A, out, M, N, K, gpb, w, stg, form_smem(k, M, kst, gpb, w, stg), pdl)
            continue
        cells = {}
        for spec in specs:
            gpb, w, stg = form_of(spec, N, K)
            if kst % stg or gpb * w > 20:
                continue
            rows = kst * 4 // stg
            fn = kernel(k, stg, 640)
            smem = form_smem(k, M, kst, gpb, w, stg)
            # (one module serves every form of a (k, stages): its attribute must allow the largest)
            fn.max_dynamic_shared_size_bytes = max(smem, fn.max_dynamic_shared_size_bytes)
            grid = -(-groups // gpb)
            mp = [maps(c, N, K, k, rows) for c in cps]

            def call(i, fn=fn, grid=grid, gpb=gpb, w=w, smem=smem, mp=mp):
                _pdl.launch(fn, (grid,), (32 * w, gpb), form_args(mp[i], cps[i], A, out, M, N, K, pdl), smem,
                            pdl=bool(pdl))
            out.fill(np.nan)
            call(0)
            err = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
            cells[f"tma {gpb}x{w}x{stg}"] = ([lambda i=i, call=call: call(i) for i in range(len(cps))], err)
        if os.environ.get("CHECK_ONLY"):  # one launch a form, its error (compute-sanitizer runs)
            print(name, {c: f"{e:.1e}" for c, (_l, e) in cells.items()}, flush=True)
            continue
        out.fill(np.nan)
        G.gemv(A, cps[0], out)
        err0 = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
        base = ([lambda c=c: G.gemv(A, c, out) for c in cps], err0)
        res = {}
        for _ in range(passes):
            for col, (launches, _e) in [("gemv", base)] + list(cells.items()):
                res.setdefault(col, []).append(time_rotated(launches))
        sol = sol_time(nb + A.nbytes)
        line = f"{name:9} k={k} sol {sol:5.2f}  gemv {min(res['gemv']):5.2f} ({err0:.0e})"
        for col, (_l, e) in cells.items():
            line += f"  {col} {min(res[col]):5.2f} ({e:.0e}) [{min(res[col]) / min(res['gemv']):.3f}]"
        print(line, "  passes:", {c: [round(x, 2) for x in v] for c, v in res.items()}, flush=True)
        if name in ("gateup", "down", "Q", "O", "KV"):
            tot[(k, "gemv")] = tot.get((k, "gemv"), 0.0) + min(res["gemv"])
            best = min((min(v) for c, v in res.items() if c != "gemv"), default=None)
            if best is not None:
                tot[(k, "tma")] = tot.get((k, "tma"), 0.0) + best
    for (k, col), v in sorted(tot.items()):
        print(f"TOTAL k={k} {col}: {v:.2f} us (best form per shape for tma)")


if __name__ == "__main__":
    main()
