#!/usr/bin/env python
"""Host cost of a matmul call whose arrays are on another GPU than CuPy's current one (needs two GPUs).

    python profiling/device_overhead.py [--calls 300] [--repeats 5] [--M 1,4]

Arrays (weight, A, out) on GPU 1.  Per case, `calls` back-to-back Python calls timed with perf_counter after a
warm-up, GPU 1 synchronised before and after (enqueue = before the final sync / calls):

  same          GPU 1 current: the cached launch plan's same-device path
  other         GPU 0 current: the plan's GPU made current around the launch (_launch._on_plan_device)
  other_no_out  GPU 0 current, no out=: the result allocated on GPU 1 each call
  other_general GPU 0 current, the plan off: stream_ctx switches for the whole call
  torch_same / torch_other: the same with torch tensors (torch's current device 1 / 0)

Every case's output is compared with the first's (OK / BAD).  Prints a markdown table (us per call).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy import _launch as L  # noqa: E402


def timed(fn, calls, repeats, dev=1, warmup=20):
    runs = []
    for _ in range(repeats):
        for _ in range(warmup):
            fn()
        cp.cuda.Device(dev).synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        cp.cuda.Device(dev).synchronize()
        runs.append((t1 - t0) / calls * 1e6)
    return statistics.median(runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--M", default="1,4")
    args = ap.parse_args()
    if cp.cuda.runtime.getDeviceCount() < 2:
        sys.exit("needs two GPUs")
    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    rows = []
    for name, (N, K) in {"gateup": (5120, 2048), "KV": (512, 2048)}.items():
        for M in (int(m) for m in args.M.split(",")):
            with cp.cuda.Device(1):
                qw = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), 4)
                A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
                out = cp.empty((M, N), cp.float16)
                ref = kb.matmul(A, qw)
                cp.cuda.Device(1).synchronize()
            res, checks = {}, {}

            def poison():
                with cp.cuda.Device(1):
                    out.fill(np.nan)
                    cp.cuda.Device(1).synchronize()

            def check(case, got):
                cp.cuda.Device(1).synchronize()
                with cp.cuda.Device(1):
                    checks[case] = "OK" if bool(cp.array_equal(got, ref)) else "BAD"

            poison()
            with cp.cuda.Device(1):
                res["same"] = timed(lambda: kb.matmul(A, qw, out=out), args.calls, args.repeats)
            check("same", out)
            poison()
            with cp.cuda.Device(0):
                res["other"] = timed(lambda: kb.matmul(A, qw, out=out), args.calls, args.repeats)
                check("other", out)
                assert cp.cuda.runtime.getDevice() == 0
                res["other_no_out"] = timed(lambda: kb.matmul(A, qw), args.calls, args.repeats)
                check("other_no_out", kb.matmul(A, qw))
                poison()
                with L.disabled():
                    res["other_general"] = timed(lambda: kb.matmul(A, qw, out=out), args.calls, args.repeats)
                    check("other_general", out)
            if torch is not None:
                At, ot = torch.from_dlpack(A), torch.from_dlpack(out)
                poison()
                with torch.cuda.device(1), cp.cuda.Device(1):
                    res["torch_same"] = timed(lambda: kb.matmul(At, qw, out=ot), args.calls, args.repeats)
                    torch.cuda.synchronize(1)
                check("torch_same", out)
                poison()
                with torch.cuda.device(0), cp.cuda.Device(0):
                    res["torch_other"] = timed(lambda: kb.matmul(At, qw, out=ot), args.calls, args.repeats)
                    torch.cuda.synchronize(1)
                    check("torch_other", out)
            rows.append((name, M, res, checks))
    cases = list(rows[0][2])
    print("| shape | M | " + " | ".join(cases) + " | checks |")
    print("|---|---:|" + "---:|" * len(cases) + "---|")
    for name, M, res, checks in rows:
        bad = [c for c, v in checks.items() if v != "OK"]
        print(f"| {name} | {M} | " + " | ".join(f"{res[c]:.2f}" for c in cases) + f" | {'all OK' if not bad else 'BAD ' + ','.join(bad)} |")


if __name__ == "__main__":
    main()
