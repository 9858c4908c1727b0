"""moe_forward's routing A/B: pair_route's one-row slots (no routing kernel) against moe_route's expert-sorted
layout, the MoE layer bench's setting (top-10 of 512 experts, hidden 2048, expert intermediate 512; routing draws
that share no expert within the cold-L2 window; one CUDA graph of back-to-back moe_forward calls, median of REPS
replays), arms alternated in one process (kbitcupy.moe.PAIR_ROUTE_MAX_PAIRS set per arm), PASSES times.
Each arm's output on draw 0 against the float32 layer oracle (max rel err; the bench's 2e-2 bound).
Env: TS (decode batches, default 1,2,3,4,8), K (4), REPS (15), PASSES (2).
usage (GPU machine): python3 profiling/moe_route_ab.py"""
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

from kbitcupy import bench as B  # noqa: E402
from kbitcupy import moe as MOE  # noqa: E402
from kbitcupy.quantize import dequantize  # noqa: E402

ARMS = {"sorted": 0, "pairs": 1 << 30}


def main():
    Ts = [int(t) for t in os.environ.get("TS", "1,2,3,4,8").split(",")]
    k, reps, passes = int(os.environ.get("K", "4")), int(os.environ.get("REPS", "15")), int(os.environ.get("PASSES", "2"))
    dev = cp.cuda.Device()
    l2 = dev.attributes["L2CacheSize"]
    nb, H, I, topk = B.MOE_BANK, B.MOE_HIDDEN, B.MOE_INTER, B.MOE_TOPK
    setups = B.layer_setups(Ts, [k], topk, nb, H, I, l2)
    Wgu, Wdn = B.make_fp16_bank(nb, 2 * I, H, 101), B.make_fp16_bank(nb, H, I, 102)
    bgu, bdn = B.make_kbit_bank(Wgu, k), B.make_kbit_bank(Wdn, k)
    del Wgu, Wdn
    B._free_pool()
    print(f"# {cp.cuda.runtime.getDeviceProperties(dev.id)['name'].decode()}, k = {k}, top-{topk} of {nb}; "
          f"moe_forward us a step (graph), arms {list(ARMS)} x {passes} passes")
    rows = {}
    for p in range(passes):
        for T in Ts:
            st = setups[T]
            R, n = st["R"], st["launches"]
            x = B._from_host(st["x"], "fp16")
            ids = [cp.asarray(d[0]) for d in st["draws"]]
            ws = [cp.asarray(d[1]) for d in st["draws"]]
            if p == 0:
                ref = B.layer_reference(B._to_f32(x), *st["draws"][0], lambda q: dequantize(bgu.expert(q), np.float32),
                                        lambda q: dequantize(bdn.expert(q), np.float32), I)
            for arm, lim in ARMS.items():
                MOE.PAIR_ROUTE_MAX_PAIRS = lim
                fns = [functools.partial(MOE.moe_forward, x, bgu, bdn, ids[r % R], ws[r % R]) for r in range(n)]
                us = B.summarize(B.time_graph_cupy(fns, reps))["us"]
                cell = rows.setdefault((T, arm), {"us": []})
                cell["us"].append(us)
                if p == 0:
                    cell["err"] = B._rel_err(B._to_f32(MOE.moe_forward(x, bgu, bdn, ids[0], ws[0])) - ref, ref)
            print(f"  pass {p} T={T}: " + "  ".join(f"{a} {rows[(T, a)]['us'][-1]:.2f}" for a in ARMS), flush=True)
    print("\n| T | pairs | experts/step | " + " | ".join(f"{a} (us, passes)" for a in ARMS) + " | pairs / sorted | "
          "max rel err (sorted / pairs) |")
    print("|---:|---:|---:|" + "---:|" * (len(ARMS) + 2))
    for T in Ts:
        c = [rows[(T, a)] for a in ARMS]
        med = [float(np.median(e["us"])) for e in c]
        print(f"| {T} | {T * topk} | {np.mean(setups[T]['distinct']):.1f} | "
              + " | ".join(" / ".join(f"{u:.2f}" for u in e["us"]) for e in c)
              + f" | {med[1] / med[0]:.3f} | {c[0]['err']:.1e} / {c[1]['err']:.1e} |")


if __name__ == "__main__":
    main()
