"""Timeline of one launch of the wgmma GEMM (dense or grouped), cold L2: the kernel built
with -DKBIT_WG_TRACE stores, per CTA, clock64 at entry, after the pair/scale tables, when
K tile 0 has landed, after the main loop, after the split-K step and at exit (and the cluster
sum's steps), plus globaltimer at entry and exit, and thread 0's phase boundaries in main-loop iterations 0..7
(steady state = iterations 2..6).  Prints percentiles over the CTAs (ns at the nominal clock).

usage (GPU machine): KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE python3 profiling/wgmma_trace.py
env CASES="d:N,K,M[,ks];g:N,K,E,M[,ks]" (d = dense, g = grouped over E experts), KBITS=4
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if "-DKBIT_WG_TRACE" not in os.environ.get("KBIT_WGMMA_OPTS", ""):
    sys.exit("set KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE")
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy import wgmma as WG  # noqa: E402
from kbitcupy.grouped import _err_buffer, quantize_experts  # noqa: E402

STRIDE = 13
DEFAULT = "d:5120,2048,32;d:5120,2048,32,1;d:5120,2048,32,3;d:2048,5120,32;d:5120,2048,128;g:1024,2048,8,32;g:2048,512,8,32"


def pct(x):
    x = np.asarray(x, dtype=np.float64)
    return " ".join(f"{np.percentile(x, p):7.0f}" for p in (0, 10, 50, 90, 100))


ITS = 8  # KBIT_WG_ITS in the .cu: main-loop iterations stamped per CTA, 8 stamps each
PHASES = ("cp.async wait", "proxy fence", "barrier", "wgmma issue", "copy issue", "wgmma wait", "dequantize")


def trace_buffer(groups, name="kbit_wg_trace", size=65536 * STRIDE):
    """The trace global of the first loaded group among `groups` (the plan's: TMA or cp.async, the
    default codebook compiled in or not)."""
    dev = cp.cuda.Device().id
    mod = next(WG.WGMMA._modules[(dev, g)][0] for g in groups if (dev, g) in WG.WGMMA._modules)
    return cp.ndarray((size,), cp.uint64, mod.get_global(name))


def iteration_phases(itr, grid, ns_per_clk):
    """Per-iteration phase times of thread 0 (steady state: iterations 2..ITS-2), ns."""
    t = itr[:grid * ITS * 8].get().reshape(grid, ITS, 8).astype(np.int64)
    rows = []
    for i, name in enumerate(PHASES):
        x = (t[:, 2:ITS - 1, i + 1] - t[:, 2:ITS - 1, i]).ravel() * ns_per_clk
        rows.append((f"  it: {name}", x))
    rows.append(("  it: loop back", (t[:, 3:ITS, 0] - t[:, 2:ITS - 1, 7]).ravel() * ns_per_clk))
    rows.append(("  it: whole iteration", (t[:, 3:ITS, 0] - t[:, 2:ITS - 1, 0]).ravel() * ns_per_clk))
    return rows


def main():
    rng = np.random.default_rng(0)
    k = int(os.environ.get("KBITS", "4"))
    ns_per_clk = 1e6 / cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrClockRate, 0)
    flush = cp.empty(512 << 20, cp.uint8)
    print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, k = {k}; ns = cycles x {ns_per_clk:.3f} "
          "(nominal clock); columns: min p10 p50 p90 max over CTAs")
    for case in os.environ.get("CASES", DEFAULT).split(";"):
        kind, vals = case.split(":")
        v = [int(x) for x in vals.split(",")]
        if kind == "d":
            N, K, M = v[:3]
            ks = v[3] if len(v) > 3 else None
            q = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k)
            A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
            out = cp.empty((M, N), cp.float16)
            launch = lambda: WG.wgmma_gemm(A, q, out, k_splits=ks)  # noqa: E731
            p = WG.plan(M, N, K, k, "float16", cp.cuda.Device().id, ks)
            group = [(pre, k, "float16") for pre in ("tma_cbd", "tma", "cbd")] + [(k, "float16")]
            label = f"dense N={N} K={K} M={M}"
        else:
            N, K, E, M = v[:4]
            ks = v[4] if len(v) > 4 else None
            bank = quantize_experts(cp.asarray(rng.standard_normal((E, N, K), dtype=np.float32) * 0.02), k)
            ids = cp.arange(E, dtype=cp.int32)
            offs = cp.arange(0, (E + 1) * M, M, dtype=cp.int32)
            A = cp.asarray(rng.standard_normal((E * M, K), dtype=np.float32)).astype(cp.float16)
            out = cp.empty((E * M, N), cp.float16)
            launch = lambda: WG.grouped_wgmma(A, bank, ids, offs, out, M, _err_buffer(), k_splits=ks)  # noqa: E731
            p = WG.grouped_plan(N, K, k, "float16", cp.cuda.Device().id, E, M, ks)
            group = [(pre, k, "float16") for pre in ("grouped_cbd", "grouped")]
            label = f"grouped N={N} K={K} E={E} M={M}"
        launch()
        tr = trace_buffer(group)
        itr = trace_buffer(group, "kbit_wg_itrace", 65536 * ITS * 8)
        spans = []
        for rep in range(3):
            tr.fill(0)
            itr.fill(0)
            flush.fill(rep)  # cold L2
            cp.cuda.runtime.deviceSynchronize()
            launch()
            cp.cuda.runtime.deviceSynchronize()
            t = tr[:p.grid * STRIDE].get().reshape(p.grid, STRIDE).astype(np.int64)
            spans.append((t[:, 7].max() - t[:, 6].min()))
        print(f"\n## {label}: {p!r}; span (first entry -> last exit) of 3 launches: "
              + ", ".join(f"{s:.0f}" for s in spans) + " ns")
        c = (t[:, :6] - t[:, [0]]) * ns_per_clk
        rows = [("pair/scale tables", c[:, 1]), ("-> K tile 0 landed", c[:, 2] - c[:, 1]),
                ("main loop (after tile 0)", c[:, 3] - c[:, 2])]
        if p.k_splits > 1 and p.cluster:
            rows += [("cluster sum: partial to smem", (t[:, 10] - t[:, 3]) * ns_per_clk),
                     ("cluster sum: first barrier", (t[:, 11] - t[:, 10]) * ns_per_clk),
                     ("cluster sum: share summed, stored", (t[:, 12] - t[:, 11]) * ns_per_clk),
                     ("cluster sum: second barrier", (t[:, 4] - t[:, 12]) * ns_per_clk)]
        if p.k_splits > 1:
            last = t[:, 9] == 1
            rows += [("split-K: partial stored (not last)", (c[:, 4] - c[:, 3])[~last]),
                     ("split-K: wait + sum (last)", (c[:, 4] - c[:, 3])[last]),
                     ("epilogue (last)", (c[:, 5] - c[:, 4])[last])]
        else:
            rows += [("epilogue", c[:, 5] - c[:, 3])]
        g0 = t[:, 6].min()
        rows += [("CTA lifetime (clock)", c[:, 5]), ("entry (globaltimer, from first)", t[:, 6] - g0),
                 ("exit (globaltimer, from first entry)", t[:, 7] - g0)]
        sm = np.bincount(t[:, 8].astype(np.int64))
        print(f"CTAs {p.grid}, CTAs per SM {sm[sm > 0].min()}..{sm.max()}")
        n_my = (-(-K // 64)) // p.k_splits  # K tiles of the shortest split
        if n_my >= ITS:  # every CTA ran ITS iterations (else the stamps are partial)
            rows += iteration_phases(itr, p.grid, ns_per_clk)
        for name, x in rows:
            if len(x):
                print(f"{name:38s} {pct(x)}")


if __name__ == "__main__":
    main()
