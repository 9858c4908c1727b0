"""The decode GEMV with several column groups per block (plan gpb > 1, k = 5; the grouped kernel's at one and two token
tiles), for
compute-sanitizer (memcheck / racecheck): last blocks the groups do not fill, flat N % 16 != 0,
K tails, the default plans of gate/up and Q.  Exits non-zero if a result is wrong."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy.gemv import gemv  # noqa: E402

rng = np.random.default_rng(0)
bad, n = [], 0
cases = [((1040, 2080), "tiled", (("gpb", 3), ("warps", 4))), ((1000, 2112), "flat", (("gpb", 2), ("warps", 3))),
         ((200, 4160), "tiled", (("gpb", 4), ("warps", 4))), ((5120, 2048), "tiled", None), ((4096, 2048), "tiled", None)]
for (N, K), layout, ov in cases:
    W = cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02)
    q = kb.quantize(W, 5, layout=layout)
    Wd = kb.dequantize(q, np.float32).astype(cp.float64)
    for M in (1, 5):
        A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
        out = cp.full((M, N), np.nan, dtype=cp.float16)
        gemv(A, q, out, plan_override=ov)
        ref = A.astype(cp.float64) @ Wd.T
        err = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
        n += 1
        print(f"gemv slices N={N} K={K} {layout} M={M} plan={ov}: rel err {err:.2e}")
        if not err < 2e-3:
            bad.append((N, K, layout, M, ov))
# the grouped GEMV's slices kernel (kbit_gemv_grouped_sl)
from kbitcupy.gemv import grouped_gemv, grouped_plan  # noqa: E402
from kbitcupy.grouped import _err_buffer, quantize_experts, reference_grouped_matmul  # noqa: E402


def check_grouped(kq, counts, ids, max_tokens, plans, label):
    """A bank of 5 experts 200 x 608 (K % 64 == 32) at k = kq, rows per slot `counts`: the grouped GEMV under each
    plan override in plans (None: the default plan) against the reference."""
    global n
    bank = quantize_experts(rng.standard_normal((5, 200, 608)).astype(np.float32) * 0.05, kq).cuda()
    offs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    A = rng.standard_normal((offs[-1], 608)).astype(np.float16)
    ref = reference_grouped_matmul(A, bank, ids, offs)
    for ov in plans:
        out = cp.full((offs[-1], 200), np.nan, dtype=cp.float16)
        grouped_gemv(cp.asarray(A), bank, cp.asarray(ids), cp.asarray(offs), out, max_tokens, _err_buffer(),
                     plan_override=ov)
        err = float(np.abs(out.get().astype(np.float64) - ref).max() / np.abs(ref).max())
        n += 1
        print(f"grouped {label} k={kq} plan={ov}: rel err {err:.2e}")
        if not err < 3e-3:
            bad.append((label, kq, ov))


# uneven groups, empty slots, a slot over max_tokens
check_grouped(4, [3, 0, 11, 2], np.array([4, 1, 0, 4], np.int32), 8,
              ((("gpb", 3), ("warps", 4)), (("gpb", 16), ("warps", 1)), None), "slices")
# several waves of 4-warp slice blocks (300 slots x 13 groups): the 96-register kernel (grouped_slw), k = 2 / 4
for kq in (2, 4):
    counts = rng.integers(0, 4, size=300)
    counts[7] = 11  # over max_tokens: a second pass
    check_grouped(kq, counts, rng.integers(0, 5, size=300).astype(np.int32), 8, (None,), "several waves")
# two token tiles (9..16 tokens) in the slices kernel (MT = 2): the default plan (60 slots x 13 groups: 7 groups x 2 warps
# a block, a slot's second block 6 groups), empty slots, a slot over max_tokens (a second pass), and an override
for kq in (2, 3, 4):
    assert grouped_plan(200, 608, kq, 60, 16)[4] == 7, grouped_plan(200, 608, kq, 60, 16)
    counts = rng.integers(0, 17, size=60)
    counts[3], counts[5] = 0, 20
    check_grouped(kq, counts, rng.integers(0, 5, size=60).astype(np.int32), 16, (None, (("gpb", 4), ("warps", 2))),
                  "two-tile slices")
print(f"{n} checks; BAD: {bad}" if bad else f"{n} checks, all good")
sys.exit(1 if bad else 0)
