"""Dequant + cuBLAS (the large-M matmul path), piece by piece (GPU machine): the dequantize alone, cuBLAS alone on the (L2-hot) dequantized buffer, the
whole dequant_matmul, fp16 cuBLAS on cold rotated fp16 weights and the speed of light of the
packed bytes.  Cold L2 and graph replay (bench_foundation.time_rotated).  (The eighth session's
A/B against the earlier dequantize kernel, KINDS=tile,lut, ran at commit 63cf4a4, which had both.)

    SHAPES=gateup,down KS=4 MS=32,128 python3 profiling/dq_ab.py > out.md
"""
import datetime
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from bench_foundation import SHAPES, copies_for, sol_time, time_rotated, weight_copies  # noqa: E402
import kbitcupy as kb  # noqa: E402
from kbitcupy import dequant_matmul as DM  # noqa: E402


def main():
    shapes = os.environ.get("SHAPES", "gateup,down,Q,O,KV").split(",")
    ks = [int(x) for x in os.environ.get("KS", "4").split(",")]
    Ms = [int(x) for x in os.environ.get("MS", "16,32,64,128,256,512").split(",")]
    kinds = ["tile"]
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    print(f"# dequant + cuBLAS pieces: {name}, {datetime.date.today().isoformat()}\n")
    print(f"- Command: `SHAPES={','.join(shapes)} KS={','.join(map(str, ks))} MS={','.join(map(str, Ms))} "
          "python3 profiling/dq_ab.py`")
    print("- us per launch, cold L2 (rotated weight copies), graph replay; fp16 = cuBLAS (cublasGemmEx, as "
          "dequant_matmul) on rotated fp16 weights; gemm(hot) = the same GEMM on one dequantized buffer "
          "(L2-resident, as dequant_matmul's); SOL = streaming read of the packed bytes.\n")
    rng = np.random.default_rng()
    rows = []
    for sname in shapes:
        N, K = SHAPES[sname]
        W = cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * np.float32(0.02))
        Wh = W.astype(cp.float16)
        wcopies = [Wh.copy() for _ in range(copies_for(Wh.nbytes))]
        hot = cp.empty_like(Wh)
        for k in ks:
            q = kb.quantize(W, k)
            nb, qs = weight_copies(q)
            sol = sol_time(nb)
            buf = cp.empty((N, K), cp.float16)
            dq = {}
            for kind in kinds:
                dq[kind] = time_rotated([lambda qq=qq: DM.dequant_lut(qq, "float16", buf) for qq in qs])
            for M in Ms:
                A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
                out = cp.empty((M, N), cp.float16)
                fp16 = time_rotated([lambda w=w: DM.cublas_gemm_nt(A, w, out) for w in wcopies])
                ghot = time_rotated([lambda: DM.cublas_gemm_nt(A, hot, out)] * 8)
                full = {}
                for kind in kinds:
                    full[kind] = time_rotated([lambda qq=qq: DM.dequant_matmul(A, qq, out) for qq in qs])
                    ref = A.astype(cp.float64) @ kb.dequantize(q, np.float32).astype(cp.float64).T
                    DM.dequant_matmul(A, q, out)
                    err = float(cp.abs(out.astype(cp.float64) - ref).max() / cp.abs(ref).max())
                    assert err < 1e-2, (sname, k, M, kind, err)
                rows.append((sname, k, M, sol, fp16, ghot, dq, full))
                print(f"<!-- {sname} k={k} M={M} done -->", file=sys.stderr)
    hdr = ["shape", "k", "M", "SOL", "fp16", "gemm(hot)"] + [f"dq {x}" for x in kinds] + \
        [f"dq+cuBLAS {x}" for x in kinds] + [f"vs fp16 ({x})" for x in kinds]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    tot = {}
    for sname, k, M, sol, fp16, ghot, dq, full in rows:
        vals = [sol, fp16, ghot] + [dq[x] for x in kinds] + [full[x] for x in kinds]
        t = tot.setdefault((k, M), [0.0] * len(vals))
        for i, v in enumerate(vals):
            t[i] += v
        print(f"| {sname} | {k} | {M} | " + " | ".join(f"{v:.2f}" for v in vals) + " | " +
              " | ".join(f"{fp16 / full[x]:.2f}x" for x in kinds) + " |")
    for (k, M), t in sorted(tot.items()):
        print(f"| TOTAL | {k} | {M} | " + " | ".join(f"{v:.2f}" for v in t) + " | " +
              " | ".join(f"{t[1] / t[3 + len(kinds) + i]:.2f}x" for i in range(len(kinds))) + " |")


if __name__ == "__main__":
    main()
