"""Two consecutive launches of the dense decode GEMV inside the benchmark's graph of back-to-back launches.

Why (thirty-ninth / fortieth sessions, issue 3 on the H200): the H200 runs the M = 1 GEMV in the same us as
the H100 shape by shape, ~0.9 us over the speed-of-light read, and neither full PDL nor requesting the ring
early moves it.  gemv_trace.py times one cold launch alone; this times the chain.  The kernel is built twice
with -DKBIT_TRACE (two modules: two trace buffers) and the graph alternates them, so after a replay buffer X
holds launch n-2 and buffer Y launch n-1.  Per block: globaltimer at entry (slot 0), wait passed (48), exit
(45); clock64 at entry (1), after the prologue (3: A staged, table built), when warp w's step-0 weights
landed (4 + 4 w).  Prints per mode (safe = the default, full = set_pdl(True), plain = set_pdl(False)):
the replay's us a launch, and for launch n-1 (ns, over blocks) entry / wait passed / prologue / first
weights / exit from launch n-2's last block exit -- so the gap between one grid's end and the next
grid's wait passing, and the post-wait path, side by side.
usage (GPU machine): SHAPES=gateup,down KS=4 MODES=safe,full,plain VARIANTS="early:-DFLAG;..." \
    python3 profiling/chain_trace.py       (VARIANTS: the safe launch of trace builds with extra options;
    -DKBIT_EXP_A_COPIES=n there: the launches pass n identical copies of A, block b reading copy b % n)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from bench_foundation import SHAPES, rand_f16  # noqa: E402
from gemv_trace import pct  # noqa: E402
from kbitcupy import _pdl  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402
from kbitcupy._compile import _options, read_source  # noqa: E402

STRIDE = 64  # KBIT_TRACE_STRIDE


def trace_fns(fn, expr, warps, smem, extra=()):
    """Two separately loaded -DKBIT_TRACE builds of instantiation expr (its launch bounds at the kernel's
    blocks per SM, as gemv_trace.py: the trace build's extra registers must not cost occupancy)."""
    per_warp = -(-fn.num_regs * 32 // 256) * 256
    minb = max(1, min(65536 // (per_warp * warps), (228 * 1024) // (smem + 1024), 32))
    out = []
    for copy in range(2):  # (a distinct option per copy: CuPy shares one module between equal builds)
        opts = _options(tuple(G.GEMV.options) + ("-DKBIT_TRACE", f"-DKBIT_GEMV_BOUNDS={warps * 32},{minb}",
                                                 f"-DKBIT_TRACE_COPY={copy}") + tuple(extra))
        mod = cp.RawModule(code=read_source("kbit_gemv.cu"), options=opts, name_expressions=[expr])
        out.append((mod.get_function(expr), cp.ndarray((4096 * STRIDE,), cp.uint64, mod.get_global("kbit_trace"))))
    return out


def replay_chain(launch, R, tx, ty):
    """launch(i) for i < R captured in one graph (after two warm-up launches), replayed 7 times (us a launch, the
    list); then the trace buffers tx / ty zeroed and one more replay, whose last two launches they then hold."""
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        launch(0)
        launch(1)
        s.synchronize()
        s.begin_capture()
        for i in range(R):
            launch(i)
        g = s.end_capture()
        ts = []
        for _ in range(7):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(s)
            g.launch(s)
            e1.record(s)
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / R)
        tx.fill(0)
        ty.fill(0)
        s.synchronize()
        g.launch(s)
        s.synchronize()
    return ts


def report(tx, ty, ts, grid, block, nspc, title):
    """Print the chain timeline of launch n-1 (buffer ty) against launch n-2's (tx): the per-block table of main()."""
    X = tx.get().reshape(4096, STRIDE).astype(np.int64)
    Y = ty.get().reshape(4096, STRIDE).astype(np.int64)
    X, Y = X[X[:, 45] > 0], Y[Y[:, 45] > 0]
    ref = X[:, 45].max()  # launch n-2's last block exit
    g0, c1 = Y[:, 0], Y[:, 1]
    at = lambda c: g0 + ((c - c1) * nspc).astype(np.int64)  # noqa: E731
    landed = Y[:, [4 + 4 * w for w in range(8)]]
    first = at(np.where(landed > 0, landed, np.iinfo(np.int64).max).min(axis=1))
    waited = Y[:, 48] > 0
    print(f"\n## {title}: {np.median(ts):.2f} us a launch (replays "
          f"{' '.join(f'{x:.2f}' for x in ts)}); grid {grid[0]} x {block[0] // 32} warps, "
          f"{len(Y)} blocks traced, {int(waited.sum())} waited; launch n-2: exits "
          f"{X[:, 45].max() - X[:, 0].min()} ns after its first entry")
    print(f"{'ns from launch n-2 last exit':38} {'min':>7} {'p10':>7} {'p50':>7} {'p90':>7} {'max':>7}")
    print(f"{'launch n-2 exits':38} {pct(X[:, 45] - ref)}")
    print(f"{'entry':38} {pct(g0 - ref)}")
    if waited.any():
        print(f"{'wait passed':38} {pct(Y[waited, 48] - ref)}")
    if (Y[:, 49] > 0).any():
        print(f"{'first weights requested (thread 0)':38} {pct(at(Y[:, 49]) - ref)}")
    print(f"{'prologue done (A staged, table)':38} {pct(at(Y[:, 3]) - ref)}")
    print(f"{'first step-0 weights landed':38} {pct(first - ref)}")
    print(f"{'exit':38} {pct(Y[:, 45] - ref)}")
    # inside the block (clock64): each warp's steps, its loop's end, the block's exit
    nw = min(8, block[0] // 32)
    warp_at = lambda i: np.concatenate([at(Y[:, i + 4 * w]) - ref for w in range(nw)])  # noqa: E731
    for sl in range(2):
        if (Y[:, 4 + 2 * sl] > 0).any():
            print(f"{f'step {sl} weights landed (warps)':38} {pct(warp_at(4 + 2 * sl))}")
            print(f"{f'step {sl} computed (warps)':38} {pct(warp_at(5 + 2 * sl))}")
    print(f"{'warp loop done (warps)':38} "
          f"{pct(np.concatenate([at(Y[:, 36 + w]) - ref for w in range(nw)]))}")
    print(f"{'block exit (clock)':38} {pct(at(Y[:, 44]) - ref)}")
    w0 = np.median(Y[waited, 48]) if waited.any() else np.median(g0)
    print(f"summary: replay {np.median(ts):.2f} us a launch; launch n-1 last exit - launch n-2 last exit "
          f"{(Y[:, 45].max() - ref) / 1e3:.2f} us = gap (n-2 last exit -> n-1 median wait passed / entry) "
          f"{(w0 - ref) / 1e3:.2f} + first weights {(np.median(first) - w0) / 1e3:.2f} + to the median exit "
          f"{(np.median(Y[:, 45]) - np.median(first)) / 1e3:.2f} + exit tail {(Y[:, 45].max() - np.median(Y[:, 45])) / 1e3:.2f}")


def main():
    rng = np.random.default_rng()
    dev = cp.cuda.runtime.getDeviceProperties(0)
    clock_khz = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrClockRate, 0)
    nspc = 1e6 / clock_khz
    print(f"# {dev['name'].decode()}; ns = clock x {nspc:.3f} (nominal clock) inside a block, globaltimer across")
    for name in os.environ.get("SHAPES", "gateup,down").split(","):
        N, K = SHAPES[name]
        W = rand_f16(rng, (N, K), 0.02)
        for k in [int(x) for x in os.environ.get("KS", "4").split(",")]:
            q = kb.quantize(W, k)
            R = max(32, -(-4 * dev["l2CacheSize"] // (q.packed.nbytes + q.absmax.nbytes)))
            R += R % 2
            cps = [kb.quantize(W, k) for _ in range(min(R, 64))]
            cps = [cps[i % len(cps)] for i in range(R)]
            A = rand_f16(rng, (1, K))
            out = cp.empty((1, N), cp.float16)
            variants = [v.split(":", 1) for v in os.environ.get("VARIANTS", "").split(";") if v]
            runs = [(m, m, ()) for m in os.environ.get("MODES", "safe,full,plain").split(",") if m]
            runs += [(f"safe+{n}", "safe", tuple(o.split())) for n, o in variants]
            for label, mode, extra in runs:
                old = kb.set_pdl({"safe": "safe", "full": True, "plain": False}[mode])
                try:
                    G._LAUNCH.clear()
                    fn, grid, block, smem, args = G.launch_args(A, q, out)
                    expr = next(nm for (_, nm), f in G.GEMV._fns.items() if f is fn)
                    (fx, tx), (fy, ty) = trace_fns(fn, expr, block[0] * block[1] // 32, smem, extra)
                    for f in (fx, fy):
                        f.max_dynamic_shared_size_bytes = max(smem, fn.max_dynamic_shared_size_bytes)
                    pdl = args[-1]

                    ncp = next((int(o.split("=")[1]) for o in extra if o.startswith("-DKBIT_EXP_A_COPIES=")), 0)
                    A_in = cp.tile(A, (ncp, 1)) if ncp else A  # (the diagnostic's identical copies of A)

                    def launch(i):
                        _, _, _, _, a = G.launch_args(A, cps[i], out)
                        _pdl.launch(fx if i % 2 == 0 else fy, grid, block, (A_in,) + a[1:], smem, pdl=pdl)

                    ts = replay_chain(launch, R, tx, ty)
                finally:
                    kb.set_pdl(old)
                    G._LAUNCH.clear()
                report(tx, ty, ts, grid, block, nspc, f"{name} k={k} M=1 {label}")


if __name__ == "__main__":
    main()
