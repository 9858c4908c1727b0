"""Is the host overhead that bench.py reports (one matmul(A, qw, out=out) at M = 1, 200 calls, no graph) the host's
cost, or the GPU's pace?  Its tables read 6-7 us in some runs and 9-11 us in others for the same code path.

Per shape (k = 4, M = 1, fp16), interleaved over `--rounds` rounds, enqueue time per call (perf_counter before the
final synchronise) of:
  free        bench.py's measurement: 200 fast-path calls on an idle GPU
  held        the same 200 calls queued behind a spin kernel (~40 ms) on the same stream: the GPU cannot run them
              while they are enqueued, so this is the host's own cost (unless the launch queue fills: `held_1000`)
  held_gcoff  held, with Python's cyclic GC off
  launch      a bare cuLaunchKernel (kbitcupy.bench.bare_launch: an empty kernel, a prebuilt parameter block), free
  launch_held the same, held
and the GEMV's own time per launch in a stream (not a graph): wall of `free`.
usage (GPU machine): python3 profiling/host_probe.py [--out DIR] [--rounds 5]
"""
import argparse
import gc
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from bench_foundation import dump_json  # noqa: E402
from kbitcupy.bench import bare_launch  # noqa: E402

SRC = r"""
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"""
SHAPES = {"gateup": (5120, 2048), "down": (2048, 5120), "KV": (512, 2048)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    spin = cp.RawModule(code=SRC).get_function("spin")
    clock_khz = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrClockRate, 0)
    hold_cycles = np.int64(clock_khz * 40)  # ~40 ms at the base clock (longer at boost: fine)
    rng = np.random.default_rng(0)
    cases = {}
    for name, (N, K) in SHAPES.items():
        qw = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), 4)
        A = cp.asarray(rng.standard_normal((1, K), dtype=np.float32)).astype(cp.float16)
        out = cp.empty((1, N), cp.float16)
        for _ in range(3):
            kb.matmul(A, qw, out=out)  # the second sighting builds the fast-path plan
        assert kb._launch.lookup(A, qw) is not None, name
        cases[name] = (lambda A=A, qw=qw, out=out: kb.matmul(A, qw, out=out))
    cases["launch"] = bare_launch()
    cp.cuda.Device().synchronize()

    def run(fn, calls, hold, gcoff=False):
        for _ in range(10):
            fn()
        cp.cuda.Device().synchronize()
        if hold:
            spin((1,), (1,), (hold_cycles,))
        if gcoff:
            gc.disable()
        try:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            t1 = time.perf_counter()
        finally:
            if gcoff:
                gc.enable()
        held_ok = True
        if hold:  # the spin must still be running when the last call was enqueued
            ev = cp.cuda.Event()
            ev.record()
            held_ok = not ev.done
        cp.cuda.Device().synchronize()
        t2 = time.perf_counter()
        return (t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6, held_ok

    res = {}
    for r in range(args.rounds):
        for name, fn in cases.items():
            for mode, calls, hold, gcoff in (("free", args.calls, False, False), ("held", args.calls, True, False),
                                             ("held_gcoff", args.calls, True, True),
                                             ("held_1000", 1000, True, False)):
                enq, wall, ok = run(fn, calls, hold, gcoff)
                res.setdefault((name, mode), []).append(dict(enqueue=enq, wall=wall, held_ok=ok))
        print(f"round {r}: " + "  ".join(f"{n}/{m} {v[-1]['enqueue']:.2f}" for (n, m), v in res.items()), flush=True)
    print("\n| case | mode | enqueue median | enqueue min | enqueue max | wall median (free: the GPU's pace) | held? |")
    print("|---|---|---:|---:|---:|---:|---|")
    summary = []
    for (name, mode), v in res.items():
        e = [x["enqueue"] for x in v]
        w = [x["wall"] for x in v]
        s = dict(case=name, mode=mode, enqueue_median=statistics.median(e), enqueue_min=min(e), enqueue_max=max(e),
                 wall_median=statistics.median(w), held_ok=all(x["held_ok"] for x in v), runs=v)
        summary.append(s)
        print(f"| {name} | {mode} | {s['enqueue_median']:.2f} | {s['enqueue_min']:.2f} | {s['enqueue_max']:.2f} | "
              f"{s['wall_median']:.2f} | {'yes' if s['held_ok'] else 'NO'} |")
    dump_json(args.out, "host_probe.json", summary)


if __name__ == "__main__":
    main()
