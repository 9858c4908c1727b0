"""Where the GEMV's time goes: time variants that leave one stage out (METHOD.md),
compiled from the same source with -DKBIT_EXPERIMENT_* (results are wrong by design).
Cold L2, graph replay, gateup/down/KV at k=4, M=1."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from bench_foundation import rand_f16, time_rotated, weight_copies  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402
from kbitcupy._compile import _options, read_source  # noqa: E402

VARIANTS = {"full": [], "no_lut_build": ["-DKBIT_EXPERIMENT_NO_LUT"],
            "no_compute": ["-DKBIT_EXPERIMENT_NO_COMPUTE"],
            "loads_only": ["-DKBIT_EXPERIMENT_NO_LUT", "-DKBIT_EXPERIMENT_NO_COMPUTE"]}
rng = np.random.default_rng()
print(f"{'shape':8} " + " ".join(f"{v:>13}" for v in VARIANTS))
for name, (N, K) in {"gateup": (5120, 2048), "down": (2048, 5120), "KV": (512, 2048)}.items():
    W = rand_f16(rng, (N, K), 0.02)
    q = kb.quantize(W, 4)
    A = rand_f16(rng, (1, K))
    warps, depth, smem, grid, tiles, dual, late = G.plan(N, K, 1, 4)
    _, cps = weight_copies(q)
    out = cp.empty((1, N), cp.float16)
    row = []
    for v, opts in VARIANTS.items():
        expr = G.GEMV.instances[(4, "float16", "uint8", True, depth, tiles, dual, late)]
        mod = cp.RawModule(code=read_source("kbit_gemv.cu"), options=_options(opts), name_expressions=[expr])
        fn = mod.get_function(expr)
        fn.max_dynamic_shared_size_bytes = smem
        args = lambda c: (A, c.packed, c.absmax, c.codebook, out, np.int32(1), np.int32(N), np.int32(K),  # noqa: E731
                          np.float32(1.0), np.int32(0))
        row.append(time_rotated([lambda c=c: fn((grid,), (warps * 32,), args(c), shared_mem=smem) for c in cps]))
    print(f"{name:8} " + " ".join(f"{t:13.2f}" for t in row), flush=True)
