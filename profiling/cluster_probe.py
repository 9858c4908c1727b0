"""The wgmma kernel's split-K sum over a thread block cluster against the workspace sum, per
split count, and what the cluster launch can keep resident (cuOccupancyMaxActiveClusters):
cold L2, graph replay (bench_foundation.time_rotated), k = 4, fp16.  Variants per (shape, M, ks):
ws (workspace sum), cl (cluster sum), cl+sp (cluster sum launched with half an SM's shared
memory, one CTA per SM).  Env: SHAPES_ (gateup,down,Q,O,KV), MS (16,32,64,128), KSL (split counts;
'd' = the plan's default).  usage (GPU machine): python3 profiling/cluster_probe.py"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from bench_foundation import dense_cases, time_rotated  # noqa: E402
from kbitcupy import wgmma as WG  # noqa: E402
from kbitcupy.gemm import device_info  # noqa: E402

rng = np.random.default_rng()
names = os.environ.get("SHAPES_", "gateup,down,Q,O,KV").split(",")
Ms = [int(x) for x in os.environ.get("MS", "16,32,64,128").split(",")]
ksl = os.environ.get("KSL", "d,2,3,4,6,8").split(",")
dev = cp.cuda.Device().id
info = device_info(dev)
print(f"# {cp.cuda.runtime.getDeviceProperties(dev)['name'].decode()}: {info['sms']} SMs; times in us; "
      "resident = CTAs of the clustered launch resident at once (cuOccupancyMaxActiveClusters x cluster size), at the launch's shared memory and one an SM")
for name, N, K, k, M, q, Wd, _, cps, A, ref, out in dense_cases(rng, names, [4], Ms):
    kt = -(-K // 64)
    cells = []
    for ks in ksl:
        ks = None if ks == "d" else int(ks)
        if ks is not None and ks > kt:
            continue
        p0 = WG.plan(M, N, K, k, "float16", dev, ks, cluster=False)
        if p0.k_splits == 1 or (ks is None and "d" in ksl and p0.k_splits in [int(x) for x in ksl if x != "d"]):
            continue
        row = f"ks={p0.k_splits:2d} g={p0.grid:3d} occ={p0.occ}"
        for label, kw in (("ws", dict(cluster=False)), ("cl", dict(cluster=True)), ("cl+sp", dict(cluster=True, spread=True))):
            if kw.get("cluster") and not 2 <= p0.k_splits <= WG.MAX_CLUSTER:
                continue
            kw = dict(kw, k_splits=p0.k_splits)
            p = WG.plan(M, N, K, k, "float16", dev, kw["k_splits"], cluster=kw["cluster"], spread=kw.get("spread"))
            out.fill(np.nan)
            WG.wgmma_gemm(A, q, out, **kw)
            err = float(cp.abs(out.astype(cp.float64) - ref).max() / cp.abs(ref).max())
            t = time_rotated([lambda c=c: WG.wgmma_gemm(A, c, out, **kw) for c in cps])
            extra = ""
            if p.cluster:
                # (wgmma.cluster_capacity raises the kernel's dynamic shared memory limit for the query: without
                # it the query of a launch above the limit answered 0, run56.sh cl)
                full, one = WG.cluster_capacity(p.fn, p.launch_smem, p.k_splits, info)
                extra = f" [resident {full} CTAs, one an SM {one}]"
            row += f"  {label} {t:6.2f}{'!' if not err < 1e-2 else ''}{extra}"
        cells.append(row)
    print(f"{name:6} M={M:4d}: " + "\n                ".join(cells), flush=True)
