"""Quick fused-GEMM timings (cold L2, graph replay) for kernel iteration: kbit_gemm at its
default plan and forced split-K counts (SPLITS), and the dequant + cuBLAS path
with its two dequantize kernels alone.  The full tables (with fp16 cuBLAS) come from bench.py.  Env: KS (bit widths), MS, SHAPES_ (names of
bench_foundation.SHAPES), SPLITS (forced k_splits); ONE="shape,k,M,k_splits" runs 5 plain launches of one gemm
(the ncu target of profiling/ncu_gemm.sh).  WG=1 adds the Hopper wgmma kernel at its default plan and
WGSPLITS / WGTOKS / WGSTAGES forced variants (WGNOCL=1: each also with the workspace split-K sum,
cluster=False; WGCL=1: each also forced onto clusters, cluster=True, and the clustered grids' capacity printed); ONE_WG=1 makes ONE launch it instead of kbit_gemm."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from bench_foundation import SHAPES, dense_cases, rand_f16, time_rotated  # noqa: E402
from kbitcupy import gemm as G  # noqa: E402

rng = np.random.default_rng()
ks = [int(x) for x in os.environ.get("KS", "4").split(",")]
Ms = [int(x) for x in os.environ.get("MS", "16,32,64,128,256,512").split(",")]
names = [x for x in os.environ.get("SHAPES_", ",".join(SHAPES)).split(",") if x]
splits = [int(x) for x in os.environ.get("SPLITS", "1").split(",") if x]


dev = cp.cuda.Device().id
if os.environ.get("ONE"):  # ncu target: ONE="name,k,M,k_splits" -> 5 plain launches
    name, k, M, ksp = os.environ["ONE"].split(",")
    N, K = SHAPES[name]
    W = rand_f16(rng, (N, K), 0.02)
    q = kb.quantize(W, int(k))
    A = rand_f16(rng, (int(M), K))
    out = cp.empty((int(M), N), cp.float16)
    for _ in range(5):
        if os.environ.get("ONE_WG") == "1":
            from kbitcupy.wgmma import wgmma_gemm

            wgmma_gemm(A, q, out, k_splits=int(ksp) if ksp else None)
        else:
            G.gemm(A, q, out, k_splits=int(ksp) if ksp else None)
    cp.cuda.runtime.deviceSynchronize()
    names = []
for name, N, K, k, M, q, Wd, _, cps, A, ref, out in dense_cases(rng, names, ks, Ms):
    row = {}
    gemms = [("gemm", {})] + [(f"gemm/ks{s}", dict(k_splits=s)) for s in splits if s <= G.k_steps(K)]
    for label, kw in (gemms if os.environ.get("GEMM", "1") == "1" else []):
        try:
            out.fill(np.nan)
            G.gemm(A, q, out, **kw)
            err = float(cp.abs(out.astype(cp.float64) - ref).max() / cp.abs(ref).max())
            t = time_rotated([lambda c=c: G.gemm(A, c, out, **kw) for c in cps])
            p = G.plan(M, N, K, k, "float16", dev, kw.get("k_splits"))
            row[label] = f"{t:7.2f}{'!' if not err < 1e-2 else ''} (ks={p.k_splits} st={p.stages} g={p.grid})"
        except Exception as e:  # noqa: BLE001
            row[label] = f"err {type(e).__name__}: {str(e)[:80]}"
    if os.environ.get("WG", "0") == "1":
        from kbitcupy import wgmma as WGM

        envl = lambda v: [int(x) for x in os.environ.get(v, "").split(",") if x]  # noqa: E731
        wgs = [("wg", {})] + [(f"wg/ks{s}", dict(k_splits=s)) for s in envl("WGSPLITS")] + \
            [(f"wg/tok{t}", dict(tok=t)) for t in envl("WGTOKS")] + \
            [(f"wg/st{t}", dict(stages=t)) for t in envl("WGSTAGES")]
        if os.environ.get("WGNOCL", "0") == "1":  # each variant also with the workspace split-K sum
            wgs = [v for label, kw in wgs for v in ((label, kw), (label + "/ws", dict(kw, cluster=False)))]
        if os.environ.get("WGCL", "0") == "1":  # each variant also forced onto clusters (2..8 splits)
            wgs = [v for label, kw in wgs for v in ((label, kw), (label + "/cl", dict(kw, cluster=True)))]
            from kbitcupy.gemm import device_info as _di
            for s_ in envl("WGSPLITS"):
                p_ = WGM.plan(M, N, K, k, "float16", dev, s_, None, None, True)
                print(f"  {name} M={M} ks={s_}: cluster capacity (all, one per SM) "
                      f"{WGM.cluster_capacity(p_.fn, p_.launch_smem, s_, _di(dev))} for {p_.grid} CTAs", flush=True)
        for label, kw in wgs:
            try:
                out.fill(np.nan)
                WGM.wgmma_gemm(A, q, out, **kw)
                err = float(cp.abs(out.astype(cp.float64) - ref).max() / cp.abs(ref).max())
                t = time_rotated([lambda c=c: WGM.wgmma_gemm(A, c, out, **kw) for c in cps])
                p = WGM.plan(M, N, K, k, "float16", dev, kw.get("k_splits"), kw.get("tok"), kw.get("stages"),
                             kw.get("cluster"))
                row[label] = (f"{t:7.2f}{'!' if not err < 1e-2 else ''} (tok={p.tok} ks={p.k_splits} "
                              f"st={p.stages} g={p.grid} occ={p.occ}{' cl' if p.cluster else ''})")
            except Exception as e:  # noqa: BLE001
                row[label] = f"err {type(e).__name__}: {str(e)[:80]}"
    if os.environ.get("DQ", "1") == "1":
        from kbitcupy.dequant_matmul import dequant_lut, dequant_matmul

        Wd16 = cp.empty((N, K), cp.float16)
        out.fill(np.nan)
        dequant_matmul(A, q, out)
        err = float(cp.abs(out.astype(cp.float64) - ref).max() / cp.abs(ref).max())
        row["dq+cuBLAS"] = f"{time_rotated([lambda c=c: dequant_matmul(A, c, out) for c in cps]):7.2f}" + \
            ("!" if not err < 1e-2 else "")
        row["dq_lut"] = f"{time_rotated([lambda c=c: dequant_lut(c, 'float16', Wd16) for c in cps]):7.2f}"
        row["dq_exact"] = f"{time_rotated([lambda c=c: kb.dequantize(c, np.float16, out=Wd16) for c in cps]):7.2f}"
    print(f"{name:9} k={k} M={M:4d} " + "  ".join(f"{a}={b}" for a, b in row.items()), flush=True)
