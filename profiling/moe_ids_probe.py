#!/usr/bin/env python
"""Does the grouped decode GEMV pay for reading cold expert ids?  (issue 5 at 1..4 tokens; run on the GPU machine)

    python profiling/moe_ids_probe.py [--shapes moe_gu_fused,moe_dn,moe_gu] [--E 8,10] [--M 1,4] [--reps 15]

bench.py's MoE cells give every launch of the graph its own ids array (experts (r E + i) mod 512, so the weights are
cold): after a pass over the bank those few bytes are out of the L2 too, and the kernel reads them before any weight
load (after its wait, or in the stable mode before it).  In a model the ids come from the routing kernel just
before (L2-resident).  Per shape, E, M (k = 4, fp16, one 512-expert bank): grouped_matmul as bench.py's Grouped and
Grouped:stable columns with
  cold -- bench.py's: launch r reads experts (r E + i) mod 512 through its own ids array;
  hot  -- launch r reads the same cold weights as a view of experts s_r .. s_r + E - 1 of the bank (s_r = r E mod
          (512 - E + 1)) through ids 0..E-1 in one array every launch shares (L2-resident after the first).
us per call (graph of the same launch count, median of replays), each output checked against the float64 product.
"""
import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from kbitcupy import bench as B  # noqa: E402
from kbitcupy.grouped import KbitExpertBank, grouped_matmul  # noqa: E402


def sub_bank(bank, s, E):
    """Experts s .. s + E - 1 of bank as a bank of their own (views, no copy)."""
    return KbitExpertBank(bank.packed[s:s + E], bank.absmax[s:s + E], bank.codebook, bank.tensor_scale[s:s + E],
                          bank.k, bank.shape, bank.dtype, tensor_scale_host=bank._ts_host()[s:s + E])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="moe_gu_fused,moe_dn,moe_gu")
    ap.add_argument("--E", default="8,10")
    ap.add_argument("--M", default="1,4")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    l2 = cp.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, k = 4, fp16, us per call")
    print("| shape | E | M | cold | hot | cold stable | hot stable | hot - cold | hot - cold (stable) | max err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.shapes.split(","):
        sh = B.SHAPES[name]
        N, K = sh.N, sh.K
        W = B.make_fp16_bank(B.MOE_BANK, N, K)
        bank = B.make_kbit_bank(W, 4)
        del W
        nb = bank.num_experts
        for E in (int(x) for x in args.E.split(",")):
            for M in (int(x) for x in args.M.split(",")):
                n = B.moe_launches(E * B.kbit_expert_bytes(N, K, 4), l2)
                A = (cp.random.standard_normal((E * M, K), dtype=cp.float32)).astype(cp.float16)
                out = cp.empty((E * M, N), cp.float16)
                offs = cp.arange(0, (E + 1) * M, M, dtype=cp.int32)
                shared_ids = cp.arange(E, dtype=cp.int32)
                cold = [(bank, cp.asarray(np.asarray(B.moe_launch_experts(r, E, nb), np.int32))) for r in range(n)]
                hot = [(sub_bank(bank, (r * E) % (nb - E + 1), E), shared_ids) for r in range(n)]
                t, errs = {}, []
                for label, ctxs in (("cold", cold), ("hot", hot)):
                    for stable in (False, True):
                        b0, i0 = ctxs[0]
                        out.fill(np.nan)
                        grouped_matmul(A, b0, i0, offs, M, out=out, method="kernel", ids_stable=stable)
                        ref = B._moe_reference(A, b0, i0.get().tolist(), M)
                        errs.append(float(cp.abs(out.astype(cp.float32) - ref).max() / cp.abs(ref).max()))
                        fns = [lambda b=b, i=i, s=stable: grouped_matmul(A, b, i, offs, M, out=out, method="kernel",
                                                                         ids_stable=s) for b, i in ctxs]
                        t[(label, stable)] = statistics.median(B.time_graph_cupy(fns, args.reps))
                bad = " BAD" if not max(errs) < 1e-2 else ""
                print(f"| {name} | {E} | {M} | {t[('cold', False)]:.2f} | {t[('hot', False)]:.2f} | "
                      f"{t[('cold', True)]:.2f} | {t[('hot', True)]:.2f} | {t[('hot', False)] - t[('cold', False)]:+.2f} | "
                      f"{t[('hot', True)] - t[('cold', True)]:+.2f} | {max(errs):.1e}{bad} |", flush=True)
        del bank


if __name__ == "__main__":
    main()
