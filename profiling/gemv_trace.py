"""Timeline of one decode-GEMV launch (cold L2): the kernel built with -DKBIT_TRACE
records clock64 per block at entry, after the prologue (A staged, pair table built),
when each warp's weights of step 0 / 1 arrive and are consumed, after its steps, and at
exit; globaltimer at entry/exit aligns the blocks.  Prints percentiles in ns.
usage: python3 profiling/gemv_trace.py   (env SHAPES=gateup,down KS=4,5)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from bench_foundation import SHAPES, rand_f16  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402
from kbitcupy._compile import _options, read_source  # noqa: E402

STRIDE = 64


def pct(x):
    """min / p10 / p50 / p90 / max of x in one line ('(none)' for no values)."""
    x = np.asarray(x, dtype=np.float64)
    return " ".join(f"{np.percentile(x, p):7.0f}" for p in (0, 10, 50, 90, 100)) if x.size else "   (none)"


def main():
    clock_khz = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrClockRate, 0)
    ns_per_clk = 1e6 / clock_khz
    flush = cp.empty(512 << 20, cp.uint8)
    rng = np.random.default_rng()
    print(f"# clock {clock_khz / 1e6:.2f} GHz (nominal max; ns below use it)")
    for name in os.environ.get("SHAPES", "gateup,down").split(","):
        N, K = SHAPES[name]
        W = rand_f16(rng, (N, K), 0.02)
        for k in [int(x) for x in os.environ.get("KS", "4,5").split(",")]:
            q = kb.quantize(W, k)
            A = rand_f16(rng, (1, K))
            out = cp.empty((1, N), cp.float16)
            p = G.plan(N, K, 1, k)
            warps, depth, smem, grid, tiles = p[:5]
            key = (k, "float16", "uint8", True) + (depth, tiles) + tuple(p[5:7]) + (False, q.default_codebook, p[8])
            expr = G.GEMV.instances[key]
            # The trace build takes more registers (gate/up k = 4: 88 against 76), which cost it the
            # third block per SM that the kernel itself gets: cap it at the kernel's blocks per SM.
            prod = G.GEMV.function(key)
            per_warp = -(-prod.num_regs * 32 // 256) * 256
            minb = max(1, min(65536 // (per_warp * warps), (228 * 1024) // (smem + 1024), 32))
            opts = ("-DKBIT_TRACE", f"-DKBIT_GEMV_BOUNDS={warps * 32},{minb}")
            mod = cp.RawModule(code=read_source("kbit_gemv.cu"), options=_options(opts + tuple(os.environ.get("TRACE_OPTS", "").split())),
                               name_expressions=[expr])
            fn = mod.get_function(expr)
            fn.max_dynamic_shared_size_bytes = smem
            buf = mod.get_global("kbit_trace")
            tr = cp.ndarray((4096 * STRIDE,), cp.uint64, buf)
            runs = []
            for rep in range(6):
                flush.fill(rep)  # evict L2
                tr.fill(0)
                cp.cuda.runtime.deviceSynchronize()
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record()
                fn((grid,), (warps * 32,), G.launch_args(A, q, out)[4], shared_mem=smem)
                e1.record()
                e1.synchronize()
                runs.append((cp.cuda.get_elapsed_time(e0, e1) * 1e3, tr[:grid * STRIDE].get().reshape(grid, STRIDE)))
            ev, t = runs[-1]
            g0, c0 = t[:, 0].astype(np.int64), t[:, 1].astype(np.int64)
            start = (g0 - g0.min())
            span = (t[:, 45].astype(np.int64).max() - g0.min())
            print(f"\n## {name} k={k} M=1: grid {grid} x {warps} warps, smem {smem}; registers {fn.num_regs} (the "
                  f"kernel: {prod.num_regs}; capped for {minb} blocks per SM); event {ev:.2f} us "
                  f"(runs: {' '.join(f'{r[0]:.1f}' for r in runs)}); globaltimer span {span} ns")
            sms = np.bincount(t[:, 2].astype(np.int64), minlength=132)
            print(f"blocks per SM: {np.bincount(sms)}")
            print(f"{'stage (ns from block entry)':34} {'min':>7} {'p10':>7} {'p50':>7} {'p90':>7} {'max':>7}")
            print(f"{'block entry (globaltimer, from first)':34} {pct(start)}")
            rel = lambda i: (t[:, i].astype(np.int64) - c0) * ns_per_clk  # noqa: E731
            print(f"{'codebook barrier passed':34} {pct(rel(46))}")
            print(f"{'prologue done (A, LUT)':34} {pct(rel(3))}")
            S = -(-(-(-K // (256 if p[8] else 128))) // warps)  # steps per warp (c8: steps of 256)
            for sl in range(min(2, S)):
                d = np.concatenate([rel(4 + 4 * w + 2 * sl) for w in range(min(8, warps))])
                c = np.concatenate([rel(5 + 4 * w + 2 * sl) for w in range(min(8, warps))])
                print(f"{f'step {sl} weights arrived':34} {pct(d)}")
                print(f"{f'step {sl} computed':34} {pct(c)}")
                print(f"{f'step {sl} compute (computed - arrived)':34} {pct(c - np.maximum(d, np.tile(rel(3), min(8, warps))))}")
            ld = np.concatenate([rel(36 + w) for w in range(min(8, warps))])
            print(f"{'warp loop done':34} {pct(ld)}")
            print(f"{'block exit':34} {pct(rel(44))}")
            ex = t[:, 45].astype(np.int64) - g0.min()
            print(f"{'block exit (globaltimer, from first)':34} {pct(ex)}")


if __name__ == "__main__":
    main()
