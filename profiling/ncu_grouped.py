"""ncu target: five plain launches of the grouped wgmma kernel over E experts of a 64-expert bank.
env ONE="E,M,N,K,k" (tokens per expert M, expert weight N x K), e.g. ONE="8,64,1024,2048,4" (MoE
gate/up fused at 64 tokens per expert).  usage (GPU machine):
  ncu -k regex:kbit_wgmma_grouped --launch-skip 2 --launch-count 1 ... python3 profiling/ncu_grouped.py"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from kbitcupy import wgmma as WG  # noqa: E402
from kbitcupy.grouped import _err_buffer, quantize_experts  # noqa: E402

E, M, N, K, k = (int(x) for x in os.environ.get("ONE", "8,64,1024,2048,4").split(","))
bank = quantize_experts((cp.random.standard_normal((64, N, K), dtype=cp.float32) * 0.02).astype(cp.float16), k)
ids = cp.arange(0, 64, 64 // E, dtype=cp.int32)[:E]
offs = cp.arange(E + 1, dtype=cp.int32) * M
A = cp.random.standard_normal((E * M, K), dtype=cp.float32).astype(cp.float16)
out = cp.empty((E * M, N), cp.float16)
for _ in range(5):
    WG.grouped_wgmma(A, bank, ids, offs, out, M, _err_buffer())
cp.cuda.runtime.deviceSynchronize()
print(WG.grouped_plan(N, K, k, "float16", cp.cuda.Device().id, E, M))
