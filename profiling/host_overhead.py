#!/usr/bin/env python
"""Host overhead of one Python kbitcupy.matmul call at decode sizes (run on the GPU machine).

    python profiling/host_overhead.py --out DIR [--M 1,4] [--k 4] [--calls 500] [--warmup 20] [--repeats 5]

Per dense shape (gateup N=5120 K=2048, down N=2048 K=5120, Q N=4096 K=2048, KV N=512
K=2048), fp16, each M, times `calls` back-to-back Python calls of:

  fast           matmul(A, qw, out=out) through the fast launch path (kbitcupy._launch)
  general        the same call with the fast path off (the old path)
  no_out         matmul(A, qw): fast path, result allocated per call
  fast_pdl       fast, with kbitcupy.pdl() on (cuLaunchKernelEx through ctypes)
  fast_plain     fast, with PDL off (kbitcupy.pdl(False); the default is PDL's safe mode)
  torch          matmul on CUDA torch tensors with out= (fast path), if torch with CUDA imports
  torch_general  the same with the fast path off
  torch_op       the kbitcupy::matmul torch custom op on a registered weight's tensors (output allocated)
  rawkernel      the bare CuPy RawKernel call with prebuilt arguments (the last step of gemv())
  launch         bare cupy driver.launchKernel with a prebuilt parameter block (the floor)

Each case: `warmup` calls, synchronise, `calls` calls timed with time.perf_counter,
synchronise.  enqueue = time before the final synchronise / calls (the host cost); wall =
time after it / calls (also waits for the GPU when the kernel is longer than the host
cost).  Median of `repeats` such runs.  kernel_us: the GEMV alone (a CUDA graph of 100
launches, timed with events), to read wall against.  Every case's output is compared
bit for bit with the general path's (OK/BAD).

Writes DIR/<gpu>_<date>_host.{md,json} and prints the table.
"""
import argparse
import datetime
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cupy as cp  # noqa: E402
from cupy_backends.cuda.api import driver  # noqa: E402

import kbitcupy as kb  # noqa: E402
from bench_foundation import time_rotated  # noqa: E402
from kbitcupy import _launch as L  # noqa: E402
from kbitcupy.bench import _device_info, _git_describe, _versions, output_paths, time_calls  # noqa: E402
from kbitcupy.gemv import launch_args  # noqa: E402

SHAPES = {"gateup": (5120, 2048), "down": (2048, 5120), "Q": (4096, 2048), "KV": (512, 2048)}  # (N, K)
CASES = ("fast", "general", "no_out", "fast_pdl", "fast_plain", "torch", "torch_general", "torch_op", "rawkernel", "launch")


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def kernel_time(launch, n=100, reps=7):
    """us per GEMV launch: n launches captured in one graph, median of reps replays."""
    return time_rotated([lambda: launch(cp.cuda.get_current_stream().ptr)] * n, reps=reps)


def bench_one(name, N, K, k, M, args, torch):
    rng = np.random.default_rng(0)
    W = cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02)
    qw = kb.quantize(W, k)
    A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
    out = cp.empty((M, N), cp.float16)
    ref = cp.empty((M, N), cp.float16)
    with L.disabled():
        kb.matmul(A, qw, out=ref)
    for _ in range(3):  # the second general-path call builds the plan
        kb.matmul(A, qw, out=out)
    row = dict(shape=name, N=N, K=K, k=k, M=M, dtype="fp16", plan=L.lookup(A, qw) is not None, cases={}, checks={})
    T = (args.calls, args.warmup, args.repeats)

    def check(case, got):
        cp.cuda.Device().synchronize()
        ok = bool(cp.array_equal(got, ref))
        row["checks"][case] = "OK" if ok else "BAD"
        if not ok:
            print(f"BAD: {name} M={M} {case} differs from the general path", file=sys.stderr)

    # (a) fast path, (b) general path, (c) no out=
    out.fill(np.nan)
    row["cases"]["fast"] = time_calls(lambda: kb.matmul(A, qw, out=out), *T)
    check("fast", out)
    with L.disabled():
        out.fill(np.nan)
        row["cases"]["general"] = time_calls(lambda: kb.matmul(A, qw, out=out), *T)
        check("general", out)
    row["cases"]["no_out"] = time_calls(lambda: kb.matmul(A, qw), *T)
    check("no_out", kb.matmul(A, qw))
    # (c2) fast path with programmatic dependent launch (cuLaunchKernelEx through ctypes)
    with kb.pdl():
        for _ in range(3):
            kb.matmul(A, qw, out=out)
        out.fill(np.nan)
        row["cases"]["fast_pdl"] = time_calls(lambda: kb.matmul(A, qw, out=out), *T)
        check("fast_pdl", out)
    # (c3) fast path launched plainly (the default is PDL's safe mode on Hopper: cuLaunchKernelEx too)
    with kb.pdl(False):
        for _ in range(3):
            kb.matmul(A, qw, out=out)
        out.fill(np.nan)
        row["cases"]["fast_plain"] = time_calls(lambda: kb.matmul(A, qw, out=out), *T)
        check("fast_plain", out)
    # (d) torch tensors in and out (views of the same data)
    if torch is not None:
        At = torch.from_dlpack(A)
        ot = torch.empty((M, N), dtype=torch.float16, device=At.device)
        for _ in range(3):
            kb.matmul(At, qw, out=ot)
        row["torch_plan"] = L.lookup(At, qw) is not None
        ot.fill_(float("nan"))
        row["cases"]["torch"] = time_calls(lambda: kb.matmul(At, qw, out=ot), *T)
        check("torch", cp.from_dlpack(ot))
        with L.disabled():
            ot.fill_(float("nan"))
            row["cases"]["torch_general"] = time_calls(lambda: kb.matmul(At, qw, out=ot), *T)
            check("torch_general", cp.from_dlpack(ot))
        # the kbitcupy::matmul custom op (what KbitLinearModule / torch.compile call) on the
        # tensors of a registered weight: allocates its output each call
        import kbitcupy.torch_ops as kt

        kt.register_weight(qw)
        wt = [torch.from_dlpack(a) for a in (qw.packed.view(np.int32), qw.absmax, qw.codebook)]

        def op():
            return kt.kbit_matmul(At, *wt, qw.k, N, qw.tensor_scale)
        for _ in range(3):
            op()
        row["cases"]["torch_op"] = time_calls(op, *T)
        check("torch_op", cp.from_dlpack(op()))
    # (e) the bare CuPy kernel call, (f) bare cuLaunchKernel, both with prebuilt arguments
    fn, grid, block, smem, kargs = launch_args(A, qw, out)
    row["cases"]["rawkernel"] = time_calls(lambda: fn(grid, block, kargs, shared_mem=smem), *T)
    check("rawkernel", out)
    pb = L.ParamBlock(kargs)
    g3 = tuple(grid) + (1,) * (3 - len(grid))
    b3 = tuple(block) + (1,) * (3 - len(block))
    fptr = fn.kernel.ptr
    stream = cp.cuda.get_current_stream().ptr

    def bare(st=stream):
        driver.launchKernel(fptr, g3[0], g3[1], g3[2], b3[0], b3[1], b3[2], smem, st, pb.address, 0)

    out.fill(np.nan)
    row["cases"]["launch"] = time_calls(bare, *T)
    check("launch", out)
    row["kernel_us"] = kernel_time(bare)
    f, g = row["cases"]["fast"], row["cases"]["general"]
    row["speedup_enqueue"] = g["enqueue_us"] / f["enqueue_us"]
    return row


def fmt(e, key):
    return "-" if not e else f"{e[key]:.2f}"


def markdown(res):
    m = res["meta"]
    lines = [f"# kbitcupy host overhead: {m['gpu']}, {m['date']}", "",
             f"Command: `{m['command']}`  ", f"git: {m['git']}  ",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()), "",
             f"One Python call at decode sizes, k = {m['k']}, fp16: {m['warmup']} warm-up calls, then {m['calls']} calls "
             "timed with time.perf_counter; enqueue = before the final synchronise (host cost per call), wall = after "
             f"it; median of {m['repeats']} runs.  kernel = the GEMV alone (CUDA graph of 100 launches).  fast = "
             "`matmul(A, qw, out=out)` through kbitcupy._launch; general = the same with the fast path off (the old "
             "path); no_out = `matmul(A, qw)`; fast_pdl = fast with `kbitcupy.pdl()` (cuLaunchKernelEx); fast_plain = fast with PDL off (fast itself runs in the default mode: safe PDL on Hopper); torch = torch tensors in/out (out=); torch_op = the `kbitcupy::matmul` custom op (KbitLinearModule, torch.compile), output allocated per call; rawkernel = bare CuPy RawKernel "
             "call with prebuilt args; launch = bare `driver.launchKernel` with a prebuilt parameter block.", ""]
    cases = [c for c in CASES if any(c in r["cases"] for r in res["rows"])]
    for key, title in (("enqueue_us", "Enqueue (host) us per call"), ("wall_us", "Wall us per call")):
        lines += [f"## {title}", "",
                  "| shape | M | kernel | " + " | ".join(cases) + " | general / fast |",
                  "|---|---:|---:|" + "---:|" * len(cases) + "---:|"]
        for r in res["rows"]:
            ratio = r["cases"]["general"][key] / r["cases"]["fast"][key]
            lines.append(f"| {r['shape']} (N={r['N']}, K={r['K']}) | {r['M']} | {r['kernel_us']:.2f} | "
                         + " | ".join(fmt(r["cases"].get(c), key) for c in cases) + f" | {ratio:.2f}x |")
        lines.append("")
    bad = [(r["shape"], r["M"], c) for r in res["rows"] for c, v in r["checks"].items() if v != "OK"]
    noplan = [(r["shape"], r["M"]) for r in res["rows"] if not r["plan"] or r.get("torch_plan") is False]
    lines += ["## Checks", "",
              "Every case's output equals the general path's bit for bit: "
              + ("OK" if not bad else "BAD: " + ", ".join(f"{s} M={M} {c}" for s, M, c in bad)), ""]
    if noplan:
        lines += ["No fast-path plan (dispatch did not pick the GEMV) for: "
                  + ", ".join(f"{s} M={M}" for s, M in noplan), ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="profiling/results")
    ap.add_argument("--M", default="1,4")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    if not L.ENABLED:
        print("note: KBITCUPY_NO_FASTPATH is set; turning the fast path on for the 'fast' cases", file=sys.stderr)
        L.set_enabled(True)
    torch = _torch()
    gpu = _device_info()[0]
    now = datetime.datetime.now(datetime.timezone.utc)
    meta = dict(gpu=gpu, date=now.strftime("%Y-%m-%d"), timestamp=now.isoformat(timespec="seconds"),
                command="python " + " ".join([sys.argv[0]] + list(argv if argv is not None else sys.argv[1:])),
                git=_git_describe(), versions=_versions(), k=args.k, calls=args.calls, warmup=args.warmup,
                repeats=args.repeats, torch=torch is not None)
    rows = []
    for name in args.shapes.split(","):
        N, K = SHAPES[name]
        for M in (int(x) for x in args.M.split(",")):
            r = bench_one(name, N, K, args.k, M, args, torch)
            rows.append(r)
            c = r["cases"]
            print(f"{name:7s} M={M}: kernel {r['kernel_us']:6.2f} | enqueue fast {c['fast']['enqueue_us']:6.2f} "
                  f"general {c['general']['enqueue_us']:6.2f} no_out {c['no_out']['enqueue_us']:6.2f} "
                  + (f"torch {c['torch']['enqueue_us']:6.2f} " if "torch" in c else "")
                  + f"raw {c['rawkernel']['enqueue_us']:6.2f} launch {c['launch']['enqueue_us']:6.2f} | wall fast "
                  f"{c['fast']['wall_us']:6.2f} general {c['general']['wall_us']:6.2f} | "
                  + " ".join(f"{k}:{v}" for k, v in r["checks"].items()), flush=True)
    res = dict(meta=meta, rows=rows)
    os.makedirs(args.out, exist_ok=True)
    paths = output_paths(args.out, gpu, meta["date"], "host")
    with open(paths["json"], "w") as f:
        json.dump(res, f, indent=1)
    md = markdown(res)
    with open(paths["md"], "w") as f:
        f.write(md)
    print(md)
    print(f"wrote {paths['md']} and {paths['json']}")
    bad = [c for r in rows for c, v in r["checks"].items() if v != "OK"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
