"""Timeline of the grouped GEMV inside the benchmark's graph of back-to-back launches.

Why (twenty-ninth session, issue 5): the stable mode (pdl 3: ids read and the first weights L2-prefetched
before griddepcontrol.wait) is ~0.7 us a kernel faster than the default wait-first mode (pdl 1), and a form
of the default mode that did the same work before its wait (a checked guess of the ids) was not.  This
records where a launch's time goes in each mode.

The kernel built with -DKBIT_TRACE writes per block (row = linear block index): globaltimer at entry (slot
47) and when its wait passed (48), globaltimer / clock64 at gemv_block's entry (0 / 1), clock64 after the
prologue (3), when warp w's step-0 weights landed (4 + 4 w) and at exit (44, with globaltimer 45).  Every
launch overwrites the buffer and a launch's blocks write after the previous launch's (PDL starts them only
once that one's blocks have waited), so after a replay it holds the graph's last launch.

Prints per mode: the replay's time per launch (the trace build, a little slower than the kernel), and
percentiles over blocks (ns) of entry -> wait passed, wait passed -> ids read (gemv_block's entry) / weights
and A requested (slot 46) / prologue done / first weights landed /
exit, with the launch's spread of entries and of waits passed.
usage (GPU machine): python3 profiling/grouped_trace.py
env: SHAPE (moe_dn | moe_gu_fused), E (active experts, 8), M (tokens per expert, 1), KB (bits, 4),
     MODES (wait, stable, plain), OPTS (extra -D flags for the trace build)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy import bench as B  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402
from kbitcupy._compile import _options, read_source  # noqa: E402
from kbitcupy.grouped import _err_buffer, quantize_experts  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemv_trace import pct  # noqa: E402

STRIDE = 64  # KBIT_TRACE_STRIDE
_BUILT = {}


def trace_kernel(key):
    """The grouped instantiation `key` built from the current source with -DKBIT_TRACE (and $OPTS)."""
    if key not in _BUILT:
        expr = G.GEMV.instances[key]
        opts = ("-DKBIT_TRACE",) + tuple(os.environ.get("OPTS", "").split())
        mod = cp.RawModule(code=read_source("kbit_gemv.cu"), options=_options(opts), name_expressions=[expr])
        _BUILT[key] = (mod.get_function(expr), mod)
    return _BUILT[key][0]


def trace_buffers():
    """Every built instantiation's trace buffer (grouped_gemv may ask for more than the one it launches: the caller
    keeps the buffer its launches wrote)."""
    return [cp.ndarray((4096 * STRIDE,), cp.uint64, mod.get_global("kbit_trace")) for _, mod in _BUILT.values()]


def main():
    shape = os.environ.get("SHAPE", "moe_dn")
    E, M, k = (int(os.environ.get(v, d)) for v, d in (("E", "8"), ("M", "1"), ("KB", "4")))
    sh = B.moe_shapes(B.MOE_HIDDEN, B.MOE_INTER)[shape]
    N, K = sh.N, sh.K
    bank_n = B.MOE_BANK
    rs = cp.random.RandomState(0)
    W = (rs.standard_normal((bank_n, N, K), dtype=cp.float32) * 0.02).astype(cp.float16)
    bank = quantize_experts(W, k)
    del W
    dev = cp.cuda.runtime.getDeviceProperties(0)
    clock_khz = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrClockRate, 0)
    nspc = 1e6 / clock_khz
    R = B.moe_launches(E * B.kbit_expert_bytes(N, K, k), dev["l2CacheSize"])
    A = (rs.standard_normal((E * M, K), dtype=cp.float32)).astype(cp.float16)
    out = cp.empty((E * M, N), cp.float16)
    offs = cp.arange(0, (E + 1) * M, M, dtype=cp.int32)
    runs = [(bank, cp.asarray(np.asarray(B.moe_launch_experts(r, E, bank_n), np.int32))) for r in range(R)]
    err = _err_buffer()
    print(f"# {dev['name'].decode()}: {shape} (N={N}, K={K}) k={k}, {E} experts x {M} tokens, {R} launches a graph;"
          f" ns = clock x {nspc:.3f} (nominal clock)")
    for mode in os.environ.get("MODES", "wait,stable,plain").split(","):
        old = kb.set_pdl(False) if mode == "plain" else None
        try:
            stable = mode == "stable"
            launch = [lambda b=b, i=i: G.grouped_gemv(A, b, i, offs, out, M, err, kernel=trace_kernel,
                                                      ids_stable=stable) for b, i in runs]
            s = cp.cuda.Stream(non_blocking=True)
            with s:
                launch[0]()
                s.synchronize()
                s.begin_capture()
                for f in launch:
                    f()
                g = s.end_capture()
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                ts = []
                for _ in range(5):
                    e0.record(s)
                    g.launch(s)
                    e1.record(s)
                    e1.synchronize()
                    ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / R)
                trs = trace_buffers()
                for tr in trs:
                    tr.fill(0)
                s.synchronize()
                g.launch(s)
                s.synchronize()
            t = max((tr.get().reshape(4096, STRIDE).astype(np.int64) for tr in trs), key=lambda x: int((x[:, 45] > 0).sum()))
        finally:
            if old is not None:
                kb.set_pdl(old)
        t = t[t[:, 45] > 0]
        entry, waitp, g0, c1, exit_ = t[:, 47], t[:, 48], t[:, 0], t[:, 1], t[:, 45]
        at = lambda c: g0 + ((c - c1) * nspc).astype(np.int64)  # noqa: E731  (a clock64 of the block -> globaltimer)
        prol = at(t[:, 3])
        landed = t[:, [4 + 4 * w for w in range(8)]]
        first = at(np.where(landed > 0, landed, np.iinfo(np.int64).max).min(axis=1))
        waited = waitp > 0
        ref = np.where(waited, waitp, entry)  # plain launches do not wait
        print(f"\n## {mode}: {np.median(ts):.2f} us a launch (replays {' '.join(f'{x:.2f}' for x in ts)}); "
              f"{len(t)} blocks, {int(waited.sum())} waited")
        print(f"{'ns (min p10 p50 p90 max over blocks)':40} {'min':>7} {'p10':>7} {'p50':>7} {'p90':>7} {'max':>7}")
        print(f"{'entry, from the first block entry':40} {pct(entry - entry.min())}")
        print(f"{'wait passed, from the first block entry':40} {pct(waitp[waited] - entry.min())}")
        print(f"{'entry -> wait passed':40} {pct((waitp - entry)[waited])}")
        print(f"{'wait passed -> ids read (block entry)':40} {pct(g0 - ref)}")
        if (t[:, 49] > 0).any():
            print(f"{'wait passed -> first weights requested':40} {pct(at(t[:, 49]) - ref)}")
        print(f"{'wait passed -> loads requested':40} {pct(at(t[:, 46]) - ref)}")
        print(f"{'wait passed -> prologue done':40} {pct(prol - ref)}")
        print(f"{'wait passed -> first step-0 weights':40} {pct(first - ref)}")
        print(f"{'wait passed -> exit':40} {pct(exit_ - ref)}")
        print(f"{'exit, from the first block entry':40} {pct(exit_ - entry.min())}")


if __name__ == "__main__":
    main()
