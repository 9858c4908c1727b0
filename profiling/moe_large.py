"""Grouped matmul with many tokens per expert (prefill): the grouped wgmma kernel (one
launch, capturable) against the per-expert dequantize + cuBLAS path (method='dequant': a host
loop over the slots), to place grouped_matmul's method='auto' switch on sm_90.

usage (GPU machine): python3 profiling/moe_large.py     (env MS=64,128,256,512 ES=8,10)
Times: CUDA events around 20 back-to-back calls after 3 warm-up calls (eager; the dequant
path's host loop included), L2 not flushed (both paths alike), k = 4, fp16."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from kbitcupy.grouped import grouped_matmul, quantize_experts  # noqa: E402


def timed(fn, n=20):
    for _ in range(3):
        fn()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    s.record()
    for _ in range(n):
        fn()
    e.record()
    e.synchronize()
    return cp.cuda.get_elapsed_time(s, e) * 1e3 / n


def main():
    rng = np.random.default_rng(0)
    Ms = [int(x) for x in os.environ.get("MS", "64,128,256,512").split(",")]
    Es = [int(x) for x in os.environ.get("ES", "8,10").split(",")]
    print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, k = 4, fp16, us per call")
    print(f"{'shape':14} {'E':>3} {'M':>4} {'wgmma':>9} {'dequant':>9} {'ratio':>6} {'max rel diff':>12}")
    for name, (N, K) in (("moe_gu_fused", (1024, 2048)), ("moe_dn", (2048, 512))):
        bank = quantize_experts(cp.asarray(rng.standard_normal((16, N, K), dtype=np.float32) * 0.02), 4)
        for E in Es:
            for M in Ms:
                ids = np.arange(E, dtype=np.int32)
                offs = (np.arange(E + 1) * M).astype(np.int32)
                A = cp.asarray(rng.standard_normal((E * M, K), dtype=np.float32)).astype(cp.float16)
                o1, o2 = cp.empty((E * M, N), cp.float16), cp.empty((E * M, N), cp.float16)
                ids_d, offs_d = cp.asarray(ids), cp.asarray(offs)
                t1 = timed(lambda: grouped_matmul(A, bank, ids_d, offs_d, M, out=o1, method="kernel", impl="wgmma"))
                t2 = timed(lambda: grouped_matmul(A, bank, ids, offs, M, out=o2, method="dequant"))
                d = float(cp.abs(o1.astype(cp.float32) - o2.astype(cp.float32)).max() /
                          cp.abs(o2.astype(cp.float32)).max())
                print(f"{name:14} {E:>3} {M:>4} {t1:9.2f} {t2:9.2f} {t2 / t1:6.2f} {d:12.2e}")


if __name__ == "__main__":
    main()
