"""The grouped GEMV's wait-first launch (its LB instantiation, cuda_src/kbit_gemv.cu grouped_gemv_late) for
compute-sanitizer (memcheck / racecheck / synccheck): k = 2..5, fp16 / bf16, the plain, row-gather and SwiGLU
A stagings, slots with 0 rows, passes (max_tokens below a slot's rows), repeated ids, two launches back to back
(the second a programmatic dependent of the first), and a bad id (nothing written, error flag); then 10 experts'
down at k = 4 (two blocks of 5 x 2 warps per SM on kbit_gemv_grouped_slw), wait-first and stable.  Exits non-zero
if a result is wrong."""
import os

import numpy as np

from sanitize_common import bad, check, cp, finish, rng

import kbitcupy as kb  # noqa: E402
from kbitcupy import _pdl  # noqa: E402
from kbitcupy import gemv as G  # noqa: E402
from kbitcupy.grouped import _err_buffer, quantize_experts, read_errors, reference_grouped_matmul  # noqa: E402
from kbitcupy.moe import silu_mul  # noqa: E402

assert _pdl.grouped_mode(0, False, safe_early=True) == _pdl.GROUPED_WAIT, "not the wait-first launch"
E, N, K = 6, 256, 160  # K % 128 = 32: a partial last step
counts = np.array([0, 3, 9, 1, 2], np.int32)
ids_h = np.array([5, 0, 2, 2, 4], np.int32)
offs_h = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
rows = int(counts.sum())
ids, offs = cp.asarray(ids_h), cp.asarray(offs_h)
Wb = cp.asarray(rng.standard_normal((E, N, K), dtype=np.float32) * 0.02)
# GLB_ONLY10=1 in the environment: only the 10 experts' down part below (racecheck / synccheck of that plan)
for k in (() if os.environ.get("GLB_ONLY10") else (2, 3, 4, 5)):
    bank = quantize_experts(Wb, k)
    for dt in (np.float16, kb.bfloat16):
        X = rng.standard_normal((rows + 3, 2 * K), dtype=np.float32).astype(dt)  # host, rounded to dt
        perm = rng.permutation(rows + 3)[:rows].astype(np.int32)
        silu = silu_mul(X[:rows, :K], X[:rows, K:])  # (the NumPy path: fp32 math, one rounding)
        dev = (lambda a: cp.asarray(np.ascontiguousarray(a).view(np.uint16)).view(kb.bfloat16)) \
            if dt is kb.bfloat16 else (lambda a: cp.asarray(np.ascontiguousarray(a)))
        for name, A, kw, A_ref in (("plain", dev(X[:rows, :K]), {}, X[:rows, :K]),
                                   ("gather", dev(X[:, :K]), {"a_rows": cp.asarray(perm)}, X[perm, :K]),
                                   ("swiglu", dev(X[:rows]), {"a_silu": True}, silu)):
            ref = cp.asarray(reference_grouped_matmul(A_ref.astype(np.float32), bank, ids_h, offs_h))
            for mt in (int(counts.max()), 4):  # 4: the 9-row slot in three passes
                out = cp.full((rows, N), np.nan, cp.float16).view(cp.uint16)
                out = out.view(kb.bfloat16) if dt is kb.bfloat16 else out.view(cp.float16)
                err = _err_buffer()  # (4 < 9 rows: the max_tokens bit; read_errors() clears it below)
                G.grouped_gemv(A, bank, ids, offs, out, mt, err, **kw)
                G.grouped_gemv(A, bank, ids, offs, out, mt, err, **kw)  # a dependent of the first
                got = out.view(cp.uint16).astype(cp.uint32) << 16 if dt is kb.bfloat16 else out
                got = got.view(cp.float32) if dt is kb.bfloat16 else got
                check(f"k={k} {np.dtype(dt).name} {name} max_tokens={mt}", got, ref,
                      tol=1e-2 if dt is kb.bfloat16 else 3e-3)
    # a bad id: its slot writes nothing and the flag says why; the others are right
    out = cp.full((rows, N), np.nan, cp.float16)
    read_errors()  # (clears the flag)
    err = _err_buffer()
    bad_ids = cp.asarray(np.array([5, 0, E + 1, 2, 4], np.int32))
    A16 = cp.asarray(rng.standard_normal((rows, K), dtype=np.float32)).astype(cp.float16)
    G.grouped_gemv(A16, bank, bad_ids, offs, out, int(counts.max()), err)
    e = read_errors()
    print(f"k={k} bad id: error flag {e}")
    got = cp.isnan(out[offs_h[2]:offs_h[3]]).all() and not cp.isnan(out[:offs_h[2]]).any()
    if not bool(got) or not e:
        bad.append(f"k={k} bad id")
# 10 experts' down at k = 4 (grouped_plan: two blocks of 5 groups x 2 warps per SM, kbit_gemv_grouped_slw), in the
# wait-first and the stable launch, plain and SwiGLU staging, 0..4 rows a slot
E10, N10, K10 = 12, 2048, 512
assert G.grouped_plan(N10, K10, 4, 10, 4)[4::-4] == (5, 2), "not the two-block plan"
bank = quantize_experts(cp.asarray(rng.standard_normal((E10, N10, K10), dtype=np.float32) * 0.02), 4)
counts = np.array([1, 4, 0, 2, 3, 1, 4, 2, 1, 3], np.int32)
ids_h = rng.permutation(E10)[:10].astype(np.int32)
offs_h = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
rows = int(counts.sum())
ids, offs = cp.asarray(ids_h), cp.asarray(offs_h)
X = rng.standard_normal((rows, 2 * K10), dtype=np.float32).astype(np.float16)
silu = silu_mul(X[:, :K10], X[:, K10:])
for name, A, kw, A_ref in (("plain", cp.asarray(np.ascontiguousarray(X[:, :K10])), {}, X[:, :K10]),
                           ("swiglu", cp.asarray(X), {"a_silu": True}, silu)):
    ref = cp.asarray(reference_grouped_matmul(A_ref.astype(np.float32), bank, ids_h, offs_h))
    for stable in (False, True):
        out = cp.full((rows, N10), np.nan, cp.float16)
        err = _err_buffer()
        G.grouped_gemv(A, bank, ids, offs, out, 4, err, ids_stable=stable, **kw)
        G.grouped_gemv(A, bank, ids, offs, out, 4, err, ids_stable=stable, **kw)  # a dependent of the first
        check(f"10 experts down k=4 {name} stable={stable}", out, ref, tol=3e-3)
finish()
