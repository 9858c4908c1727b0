"""moe_forward's decode pair timed as it runs: the grouped GEMV gate/up (row gather fused in, right after the routing)
then the grouped GEMV down (SwiGLU fused in, ids_stable) on the same slots, E experts x M tokens each, k = 4, one
graph of back-to-back pairs over the cold-L2 expert rotation of profiling/bench.py's MoE table.  Columns: the gate/up
kernel's prefetch of the down weights (kbitcupy.gemv.MOE_NEXT_PF modes 0 / 1 / 2), alternated twice in one process.
Env: MS (default 1,4,8,16), ES (8,10), MODES (0,1,2), KS (4), REPS (15).
usage (GPU machine): python3 profiling/moe_pair.py [--out DIR]"""
import argparse
import functools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

from kbitcupy import bench as B  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402
from kbitcupy.grouped import grouped_gemv_fused  # noqa: E402
from kbitcupy.moe import _gemv_runs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    env = lambda n, d: [int(v) for v in os.environ.get(n, d).split(",")]  # noqa: E731
    Ms, Es, modes, ks = env("MS", "1,4,8,16"), env("ES", "8,10"), env("MODES", "0,1,2"), env("KS", "4")
    reps = int(os.environ.get("REPS", "15"))
    H, I, NB = B.MOE_HIDDEN, B.MOE_INTER, B.MOE_BANK
    dev = cp.cuda.runtime.getDeviceProperties(0)
    l2 = dev["l2CacheSize"]
    res = []
    for k in ks:
        W = B.make_fp16_bank(NB, 2 * I, H, 1)
        bgu = B.make_kbit_bank(W, k)
        del W
        W = B.make_fp16_bank(NB, H, I, 2)
        bdn = B.make_kbit_bank(W, k)
        del W
        B._free_pool()
        per = B.kbit_expert_bytes(2 * I, H, k) + B.kbit_expert_bytes(H, I, k)
        for E in Es:
            for M in Ms:
                P = E * M
                x = B._rand((P, H), "fp16")
                rows = cp.arange(P, dtype=cp.int32)
                offs = cp.arange(0, (E + 1) * M, M, dtype=cp.int32)
                h, y = B._empty((P, 2 * I), "fp16"), B._empty((P, H), "fp16")
                if not _gemv_runs(x, bgu, bdn, M, E):
                    print(f"k={k} E={E} M={M}: not moe_forward's decode path, skipped", file=sys.stderr)
                    continue
                n = B.moe_launches(E * per, l2)
                ids = [cp.asarray(np.asarray(B.moe_launch_experts(r, E, NB), np.int32)) for r in range(n)]

                def pair(i, mode, gu=bgu, dn=bdn):
                    G.MOE_NEXT_PF = mode  # (read when the launch's arguments are built)
                    grouped_gemv_fused(x, gu, i, offs, P, M, a_rows=rows, out=h, prefetch=dn)
                    grouped_gemv_fused(h, dn, i, offs, P, M, a_silu=True, out=y, ids_stable=True)

                cell = dict(k=k, E=E, M=M, launches=n, us={})
                ref = None
                for rnd in range(2):
                    for mode in modes:
                        us = B.summarize(B.time_graph_cupy([functools.partial(pair, i, mode) for i in ids], reps))["us"]
                        cell["us"].setdefault(str(mode), []).append(round(us, 3))
                        pair(ids[0], mode)
                        got = y.get()
                        if ref is None:
                            ref = got
                        cell.setdefault("bit_exact", True)
                        cell["bit_exact"] &= bool(np.array_equal(got.view(np.uint16), ref.view(np.uint16)))
                res.append(cell)
                print(f"k={k} E={E:>2} M={M:>2}: " + "  ".join(f"pf{m} {' / '.join(f'{u:.2f}' for u in cell['us'][str(m)])}"
                                                          for m in modes) + f"  bit-exact {cell['bit_exact']}", flush=True)
        del bgu, bdn
        B._free_pool()
    if args.out:
        with open(os.path.join(args.out, "moe_pair.json"), "w") as fh:
            json.dump(dict(device=dev["name"].decode(), cells=res), fh, indent=1)


if __name__ == "__main__":
    main()
