"""compute-sanitizer driver for the MoE routing kernels (kbit_moe_route and the grid passes
kbit_moe_route_count / _scan / _scatter): layouts against moe.reference_route, one line per check.

usage (GPU machine): compute-sanitizer --tool memcheck|racecheck python3 profiling/sanitize_route.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from kbitcupy.moe import moe_route, reference_route  # noqa: E402

rng = np.random.default_rng(0)
bad = 0
for T, topk, E in ((3, 10, 512), (300, 10, 512), (1100, 8, 64), (205, 10, 2000)):
    ids = np.array([rng.choice(E, topk, replace=False) for _ in range(T)], np.int32)
    ref = reference_route(ids, E)
    r = moe_route(cp.asarray(ids), E)
    ok = all(np.array_equal(getattr(r, n).get(), getattr(ref, n)) for n in ("sorted_token", "pos", "expert_ids",
                                                                           "offsets"))
    bad += not ok
    print(f"route T={T} topk={topk} E={E} ({T * topk} choices): {'ok' if ok else 'MISMATCH'}")
print(f"BAD: {bad or 'none'}")
