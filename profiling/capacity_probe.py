"""Does the cluster-capacity query change the kernel's later launches?  Q (N 4096, K 2048), k = 2,
M = 16, the wgmma kernel with its workspace sum (KBIT_WG_CLUSTER=0: no query at plan time), timed
(cold L2, graph replay) before and after each step on the kernel's CUfunction: (a) max dynamic shared
memory raised to half an SM and restored, (b) cuOccupancyMaxActiveClusters at the plan's shared
memory, (c) the same at half an SM's.  usage (GPU machine): KBIT_WG_CLUSTER=0 python3 profiling/capacity_probe.py"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from bench_foundation import dense_cases, time_rotated  # noqa: E402
from kbitcupy import _pdl  # noqa: E402
from kbitcupy import wgmma as WG  # noqa: E402
from kbitcupy.gemm import device_info  # noqa: E402

assert not WG.CLUSTER, "run with KBIT_WG_CLUSTER=0"
rng = np.random.default_rng()
dev = cp.cuda.Device().id
info = device_info(dev)
for name, N, K, k, M, q, Wd, _, cps, A, ref, out in dense_cases(rng, ["Q"], [2], [16]):
    p = WG.plan(M, N, K, k, "float16", dev)
    fn = p.fn
    t = lambda: time_rotated([lambda c=c: WG.wgmma_gemm(A, c, out) for c in cps])  # noqa: E731
    print(f"{p!r}; max dyn smem {fn.max_dynamic_shared_size_bytes}, carveout {fn.preferred_shared_memory_carveout}")
    print(f"start: {t():.2f} {t():.2f} us")
    old = fn.max_dynamic_shared_size_bytes
    fn.max_dynamic_shared_size_bytes = WG.spread_smem(info)
    fn.max_dynamic_shared_size_bytes = old
    print(f"(a) smem limit raised and restored: {t():.2f} {t():.2f} us")
    print("    mac at plan smem:", _pdl.max_active_clusters(int(fn.kernel.ptr), 8, WG.THREADS, p.smem, 8))
    print(f"(b) after the query at the plan's smem: {t():.2f} {t():.2f} us")
    fn.max_dynamic_shared_size_bytes = WG.spread_smem(info)
    print("    mac at spread smem:", _pdl.max_active_clusters(int(fn.kernel.ptr), 8, WG.THREADS, WG.spread_smem(info), 8))
    fn.max_dynamic_shared_size_bytes = old
    print(f"(c) after the query at half an SM: {t():.2f} {t():.2f} us")
    print(f"    max dyn smem {fn.max_dynamic_shared_size_bytes}, carveout {fn.preferred_shared_memory_carveout}")
