"""Why `matmul` times ~0.15 us over the GEMV column on KV k = 4 M = 1 (final20 / final20b, H100): the
same weight copies timed through gemv(), matmul() (fast launch path) and matmul() with the fast path off,
in one process, twice in turn; and the copies' default_codebook flags.  usage (GPU machine): python3 profiling/check_kv_matmul.py"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import kbitcupy as kb  # noqa: E402
from bench_foundation import dense_cases, time_rotated  # noqa: E402
from kbitcupy import _launch  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402

rng = np.random.default_rng()
for name, N, K, k, M, q, Wd, nb, cps, A, ref, out in dense_cases(rng, os.environ.get("SHAPES", "KV,lin_key").split(","),
                                                                 [2, 4], [1]):
    flags = sorted({bool(c.default_codebook) for c in cps})
    row = {}
    for rep in range(2):
        for col, f in (("gemv", lambda c: G.gemv(A, c, out)), ("matmul", lambda c: kb.matmul(A, c, out=out)),
                       ("matmul_nofast", None)):
            if f is None:
                old = _launch.set_enabled(False)
                try:
                    t = time_rotated([lambda c=c: kb.matmul(A, c, out=out) for c in cps])
                finally:
                    _launch.set_enabled(old)
            else:
                t = time_rotated([lambda c=c, f=f: f(c) for c in cps])
            row.setdefault(col, []).append(t)
    print(f"{name:8} k={k} M={M} copies={len(cps)} default_codebook={flags} "
          + " ".join(f"{c}={' / '.join(f'{x:.2f}' for x in v)}" for c, v in row.items()), flush=True)
