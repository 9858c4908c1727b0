"""Registers / local memory of decode-GEMV kernels as the GPU machine's NVRTC builds them (it can differ from
this machine's NVRTC or nvcc), for compile-option variants:  python3 profiling/regs_probe.py "-DFLAG=1" ...
(the first column is the plain build).  Kernels: the dense plans of gate/up, down, Q, KV at M = 1 and 4, k = 2..5,
and the grouped GEMV's LB instantiations at 1 and 4 tokens."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from kbitcupy import gemv as G  # noqa: E402
from kbitcupy._compile import _options, read_source  # noqa: E402

variants = [()] + [tuple(v.split()) for v in sys.argv[1:]]
keys = set()
for k in (2, 3, 4, 5):
    for N, K in ((5120, 2048), (2048, 5120), (4096, 2048), (512, 2048)):
        for M in (1, 4):
            w, d, smem, grid, tiles, dual, late, gpb, c8, _ = G.plan(N, K, M, k)
            keys.add((k, "float16", "uint8", True, d, tiles, dual, late, gpb > 1, True, c8))
names = sorted({G.GEMV.instances[x] for x in keys if x in G.GEMV.instances})
names += [n for kk, n in G.GEMV.instances.items() if kk[0] == "grouped_lb" and kk[2] == "float16" and kk[1] == 4]
src = read_source("kbit_gemv.cu")
res = {}
for v in variants:
    mod = cp.RawModule(code=src, options=_options(v), name_expressions=names)
    for n in names:
        f = mod.get_function(n)
        res.setdefault(n, []).append(f"{f.num_regs}{'+L' + str(f.local_size_bytes) if f.local_size_bytes else ''}")
print("variants:", ["plain"] + [" ".join(v) for v in variants[1:]])
for n, r in res.items():
    print(" ".join(f"{x:>7}" for x in r), n)
