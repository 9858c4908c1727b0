"""moe_forward's layer step with and without the routing kernel's L2 prefetch of the chosen experts
(kbitcupy.moe.ROUTE_PREFETCH), same run, alternating passes; outputs compared bit for bit.

Why (fifty-sixth session, issue 5): the grouped kernels can request an expert's weights only once they have read
its id -- a DRAM round trip after their wait -- so their first weights come from DRAM ~1.5 us after it (down, stable
launch) where the dense GEMV's, prefetched at block entry, land ~1.0 us after.  The routing kernel knows the chosen
experts first: kbit_moe_route_warp_pf prefetches their gate/up and down weights into L2 on a grid of one-warp blocks.

usage (GPU machine): python3 profiling/moe_route_pf.py    env: TS (decode batches, 1,2,3), KS (4), PASSES (2), REPS (15)
"""
import functools
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from kbitcupy import bench as B  # noqa: E402
from kbitcupy import moe  # noqa: E402


def main():
    Ts = [int(x) for x in os.environ.get("TS", "1,2,3").split(",")]
    ks = [int(x) for x in os.environ.get("KS", "4").split(",")]
    passes, reps = int(os.environ.get("PASSES", "2")), int(os.environ.get("REPS", "15"))
    dev = cp.cuda.runtime.getDeviceProperties(0)
    l2 = dev["l2CacheSize"]
    Bn, H, I, topk = B.MOE_BANK, B.MOE_HIDDEN, B.MOE_INTER, B.MOE_TOPK
    setups = B.layer_setups(Ts, ks, topk, Bn, H, I, l2)
    Wgu, Wdn = B.make_fp16_bank(Bn, 2 * I, H, 101), B.make_fp16_bank(Bn, H, I, 102)
    print(f"# {dev['name'].decode()}: moe_forward layer step, banks {Bn} x ([{2 * I}, {H}] + [{H}, {I}]), top-{topk}; "
          f"us a step (CUDA graph of the rotation's steps, median of {reps} replays), route prefetch off / on")
    for k in ks:
        bgu, bdn = B.make_kbit_bank(Wgu, k), B.make_kbit_bank(Wdn, k)
        for T in Ts:
            st = setups[T]
            R, n = st["R"], st["launches"]
            x = cp.asarray(st["x"]).astype(cp.float16)
            ids = [cp.asarray(d[0]) for d in st["draws"]]
            ws = [cp.asarray(d[1]) for d in st["draws"]]
            outs = {}
            for flag in (False, True):
                moe.ROUTE_PREFETCH = flag
                outs[flag] = moe.moe_forward(x, bgu, bdn, ids[0], ws[0])
            same = bool(cp.array_equal(outs[False].view(cp.uint16), outs[True].view(cp.uint16)))
            # PARTS: the shares of gate/up / down prefetched ("g,d;g,d;..."; 0,0 = the prefetch grid with no lines)
            parts = [tuple(float(v) for v in p.split(",")) for p in os.environ.get("PARTS", "1,1").split(";")]
            cols = [("off", False, None)] + [(f"on {p[0]:g}/{p[1]:g}", True, p) for p in parts]
            res = {c: [] for c, _, _ in cols}
            for _ in range(passes):
                for c, flag, p in cols:
                    moe.ROUTE_PREFETCH = flag
                    if p is not None:
                        moe.ROUTE_PREFETCH_PARTS = p
                    fns = [functools.partial(moe.moe_forward, x, bgu, bdn, ids[r % R], ws[r % R]) for r in range(n)]
                    e = B.time_graph_or_eager(fns, reps, R=R, launches=n)
                    res[c].append(round(e["us"], 2) if e["method"] == "graph" else None)
            best = {c: min(v for v in res[c] if v) for c in res}
            print(f"T={T} k={k} experts/step {np.mean(st['distinct']):.1f}: "
                  + ", ".join(f"{c} {best[c]:.2f} us ({100 * (best[c] / best['off'] - 1):+.1f} %)" for c in res)
                  + f"; passes {res}; outputs bit-identical: {same}", flush=True)


if __name__ == "__main__":
    main()
