#!/usr/bin/env python
"""ncu cross-check of the benchmark's graph timing (MEASURING.md).  Three modes:

profile (default; run it under ncu, see ncu_check.sh): warm up, then --calls calls of one
kbit column (default kbitcupy.matmul) inside cudaProfilerStart/Stop, each on the next weight
copy, so with `--profile-from-start off` ncu sees exactly those calls:

    ncu --clock-control none --cache-control all --profile-from-start off \\
        --metrics gpu__time_duration.sum --csv --log-file x.csv \\
        python profiling/ncu_driver.py --shape gateup --k 4 --M 1 --calls 10

--parse x.csv --calls 10: per-call time = sum over every profiled kernel / calls (a call that
launches several kernels, e.g. dequantize + GEMM, counts all of them); prints it in us.

--graph: the harness's cold-L2 CUDA-graph time for the same cell (run without ncu).
"""
import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

METRIC = "gpu__time_duration.sum"
_UNIT_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
            "second": 1e6, "s": 1e6}


def _to_us(value: str, unit: str) -> float:
    if unit not in _UNIT_US:
        raise ValueError(f"unknown time unit {unit!r} in ncu output")
    return float(value.replace(",", "")) * _UNIT_US[unit]  # ',' = thousands separator (run with LC_ALL=C)


def parse_ncu_csv(text: str):
    """[(id, kernel name, us)] for every profiled kernel in `ncu --csv` output, from the
    details page (one row per metric) or the raw page (one column per metric, then a units row)."""
    rows = list(csv.reader([ln for ln in text.splitlines() if ln.startswith('"')]))
    if not rows:
        return []
    head, out = rows[0], {}
    if "Metric Name" in head:
        iid, ikn, imn, imu, imv = (head.index(c) for c in ("ID", "Kernel Name", "Metric Name", "Metric Unit",
                                                           "Metric Value"))
        for r in rows[1:]:
            if len(r) == len(head) and r[imn] == METRIC:
                out[r[iid]] = (r[ikn], _to_us(r[imv], r[imu]))
    elif METRIC in head:
        iid, ikn, im = head.index("ID"), head.index("Kernel Name"), head.index(METRIC)
        unit = "nsecond"
        for r in rows[1:]:
            if len(r) != len(head) or r == head:
                continue
            if r[iid] == "":  # the units row
                unit = r[im] or unit
                continue
            out[r[iid]] = (r[ikn], _to_us(r[im], unit))
    return [(i, name, us) for i, (name, us) in out.items()]


def per_call(kernels, calls: int):
    """(us per call, {kernel name: (launches, us per call)})."""
    by = {}
    for _, name, us in kernels:
        n, t = by.get(name, (0, 0.0))
        by[name] = (n + 1, t + us)
    return sum(us for _, _, us in kernels) / calls, {k: (n, t / calls) for k, (n, t) in by.items()}


def _cell(args):
    """Shape, column, weight copies (cold), A and out for one (shape, k, M) cell."""
    import cupy as cp

    from kbitcupy import bench as B

    shape = B.SHAPES[B.parse_shapes(args.shape)[0]]
    col = B.parse_columns(args.column)[0]
    if not col.applies(shape, args.M):
        sys.exit(f"column {col.name} does not apply to {shape.name} at M={args.M}")
    l2 = int(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["l2CacheSize"])
    _, copies, _ = B.kbit_weight_copies(shape, args.k, l2)
    a_shape = (args.M, shape.K) if shape.experts is None else (shape.E, args.M, shape.K)
    A, out = B._rand(a_shape, args.dtype), B._empty(a_shape[:-1] + (shape.N,), args.dtype)
    return B, shape, col, copies, A, out


def profile(args):
    import cupy as cp

    B, shape, col, copies, A, out = _cell(args)
    ctxs = [B.Ctx(A, q, out, shape, args.M) for q in copies]
    for c in ctxs[:2]:  # warm-up: NVRTC compile, kernel attributes, lazily made buffers
        col.launch(c)
    cp.cuda.Device().synchronize()
    cp.cuda.runtime.profilerStart()
    for i in range(args.calls):
        col.launch(ctxs[i % len(ctxs)])
    cp.cuda.Device().synchronize()
    cp.cuda.runtime.profilerStop()
    print(f"profiled {args.calls} calls of {col.name} on {shape.name} k={args.k} M={args.M}", file=sys.stderr)


def graph(args):
    B, shape, col, copies, A, out = _cell(args)
    us = B.time_kbit(col, shape, args.M, copies, A, out, args.reps)["us"]
    print(f"{us:.3f}" if args.quiet else f"graph {col.name} {shape.name} k={args.k} M={args.M}: {us:.2f} us")


def parse(args):
    with open(args.parse) as f:
        text = f.read()
    kernels = parse_ncu_csv(text)
    if not kernels:
        sys.stderr.write("no gpu__time_duration.sum rows in the ncu output; its end:\n" + text[-2000:] + "\n")
        sys.exit(1)
    us, by = per_call(kernels, args.calls)
    if len(kernels) % args.calls:
        print(f"warning: {len(kernels)} kernels for {args.calls} calls", file=sys.stderr)
    for name, (n, t) in by.items():
        print(f"  {n / args.calls:5.2f} x {name[:90]}: {t:.2f} us/call", file=sys.stderr)
    print(f"{us:.3f}" if args.quiet else f"ncu: {us:.2f} us per call ({len(kernels)} kernels, {args.calls} calls)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="gateup")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--M", type=int, default=1)
    p.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    p.add_argument("--column", default="matmul", help="kbit column of kbitcupy.bench.COLUMNS")
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--reps", type=int, default=20, help="graph replays (--graph)")
    p.add_argument("--graph", action="store_true", help="print the harness's graph time instead")
    p.add_argument("--parse", metavar="CSV", help="parse an ncu --csv log instead")
    p.add_argument("--quiet", action="store_true", help="print only the number (us)")
    args = p.parse_args(argv)
    if args.parse:
        parse(args)
    elif args.graph:
        graph(args)
    else:
        profile(args)


if __name__ == "__main__":
    main()
