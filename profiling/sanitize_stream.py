"""Small shapes through the streaming GEMV (kbitcupy.gemv_stream, sm_90) for compute-sanitizer
(memcheck / racecheck / synccheck): partial strips, K % 64 == 32, a refilled stage ring
(stages = 1), strips split over many CTAs (split-K slots and counters, called twice), a PDL
chain.  Exits non-zero if any result is wrong, so a sanitizer run checks values too.
    compute-sanitizer --tool racecheck python3 profiling/sanitize_stream.py"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy.gemv_stream import gemv_stream  # noqa: E402

rng = np.random.default_rng(0)
bad = []
for k in (2, 4, 5):
    for N, K in ((200, 416), (130, 1088)):  # N % 128 != 0; K % 64 == 32 / K % 128 == 64
        q = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k)
        Wd = kb.dequantize(q, np.float32).astype(cp.float64)
        for M in (3, 17, 30, 50):  # MT = 1, 4, 4, 8
            A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
            ref = A.astype(cp.float64) @ Wd.T
            for ov in (None, (("stages", 1), ("ctas", 3)), (("ctas", 50),)):
                out = cp.full((M, N), np.nan, cp.float16)
                gemv_stream(A, q, out, ov)
                gemv_stream(A, q, out, ov)  # twice: counters must have been reset
                err = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
                print(f"stream k={k} N={N} K={K} M={M} {ov}: rel err {err:.2e}")
                if not err < 3e-3:
                    bad.append((k, N, K, M, ov))
q1 = kb.quantize(cp.asarray(rng.standard_normal((224, 416), dtype=np.float32) * 0.02), 4)
q2 = kb.quantize(cp.asarray(rng.standard_normal((200, 224), dtype=np.float32) * 0.02), 5)
x = cp.asarray(rng.standard_normal((3, 416), dtype=np.float32)).astype(cp.float16)
y0 = gemv_stream(gemv_stream(x, q1, cp.empty((3, 224), cp.float16)), q2, cp.empty((3, 200), cp.float16))
with kb.pdl():
    y1 = gemv_stream(gemv_stream(x, q1, cp.empty((3, 224), cp.float16)), q2, cp.empty((3, 200), cp.float16))
cp.cuda.runtime.deviceSynchronize()
print("stream PDL chain: rel err", "0.00e+00" if bool((y0 == y1).all()) else "MISMATCH")
if not bool((y0 == y1).all()):
    bad.append("pdl chain")
print("BAD:", bad if bad else "none")
sys.exit(1 if bad else 0)
