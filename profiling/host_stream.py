"""Host cost of an eager kbitcupy.matmul call that dispatch sends to the streaming GEMV (H200
table: down, Q, O at M = 16..32), with and without the fast launch path (no graph: many
calls, one synchronise; us per call), beside the kernel's own time per call (wall).
    python3 profiling/host_stream.py"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy import _launch as L  # noqa: E402
from kbitcupy import dispatch as D  # noqa: E402
from kbitcupy.bench import time_calls  # noqa: E402


def per_call(f, calls=300):
    """(enqueue, wall) us per call: kbitcupy.bench.time_calls, the harness's host timer."""
    t = time_calls(f, calls, warmup=20)
    return t["enqueue_us"], t["wall_us"]


rng = np.random.default_rng(0)
print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, dispatch family {D.gpu_family()}")
for name, (N, K) in (("down", (2048, 5120)), ("O", (2048, 4096)), ("Q", (4096, 2048))):
    q = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), 4)
    for M in (16, 32):
        A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
        out = cp.empty((M, N), cp.float16)
        kind = D.choose(M, N, K, 4, A.dtype)
        f = lambda: kb.matmul(A, q, out=out)  # noqa: E731
        fast = per_call(f)
        with L.disabled():
            gen = per_call(f)
        print(f"{name:5} M={M:2} {kind:7} enqueue fast {fast[0]:6.2f} general {gen[0]:6.2f} | wall fast {fast[1]:6.2f} "
              f"general {gen[1]:6.2f} us/call (plan: {L.lookup(A, q) is not None})", flush=True)
