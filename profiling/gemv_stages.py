"""Where the GEMV's time goes: time variants that leave one stage out (METHOD.md),
compiled from the same source with -DKBIT_EXPERIMENT_* (results are wrong by design).
Cold L2, graph replay, M = 1, the plan's configuration.
  python profiling/gemv_stages.py [--k 4,5] [--shapes gateup,down,KV]
KBIT_K5_LOG2_COPIES in the environment changes the k = 5 table for every variant."""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from bench_foundation import SHAPES, quantized_case, rand_f16, time_rotated  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402
from kbitcupy._compile import _options, read_source  # noqa: E402

VARIANTS = {"full": [], "no_lut_build": ["-DKBIT_EXPERIMENT_NO_LUT"],
            "no_compute": ["-DKBIT_EXPERIMENT_NO_COMPUTE"],
            "loads_only": ["-DKBIT_EXPERIMENT_NO_LUT", "-DKBIT_EXPERIMENT_NO_COMPUTE"]}

ap = argparse.ArgumentParser()
ap.add_argument("--k", default="4")
ap.add_argument("--shapes", default="gateup,down,KV")
args = ap.parse_args()
rng = np.random.default_rng()
print(f"{'shape':8} {'k':>2} " + " ".join(f"{v:>13}" for v in VARIANTS))
for name in args.shapes.split(","):
    N, K = SHAPES[name]
    W = rand_f16(rng, (N, K), 0.02)
    A = rand_f16(rng, (1, K))
    out = cp.empty((1, N), cp.float16)
    for k in map(int, args.k.split(",")):
        q, _, _, cps = quantized_case(W, k)
        warps, depth, smem, grid, tiles, dual, late, gpb, c8, _ = G.plan(N, K, 1, k)
        expr = G.GEMV.instances[(k, "float16", "uint8", True, depth, tiles, dual, late, gpb > 1, q.default_codebook, c8)]
        row = []
        for v, opts in VARIANTS.items():
            mod = cp.RawModule(code=read_source("kbit_gemv.cu"), options=_options(opts), name_expressions=[expr])
            fn = mod.get_function(expr)
            fn.max_dynamic_shared_size_bytes = smem
            a = lambda c: G.launch_args(A, c, out)[4]  # noqa: E731  (the kernel's arguments as kbitcupy passes them)
            row.append(time_rotated([lambda c=c: fn((grid,), (warps * 32, gpb), a(c), shared_mem=smem) for c in cps]))
        print(f"{name:8} {k:2d} " + " ".join(f"{t:13.2f}" for t in row) + f"   ({warps} warps, {grid} blocks)",
              flush=True)
        del q, cps
