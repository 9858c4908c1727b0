"""Small shapes through every kernel family, for compute-sanitizer (memcheck / racecheck /
synccheck): split-K GEMM with forced split counts, the wgmma GEMM (sm_90), GEMV, wgmma and grouped kernels (also launched with PDL), dequant
(pair table) + cuBLAS, grouped MoE, quantize/dequant.
Exits non-zero if any result is wrong, so a sanitizer run checks values too."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sanitize_common import check, finish, rng  # noqa: E402  (puts the package on the path)
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy.dequant_matmul import dequant_matmul  # noqa: E402
from kbitcupy.gemm import gemm  # noqa: E402
from kbitcupy.gemv import gemv  # noqa: E402


for k in (2, 4, 5):
    N, K = 200, 416  # N % 128 != 0, K % 64 == 32
    W = cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02)
    q = kb.quantize(W, k)
    Wd = kb.dequantize(q, np.float32).astype(cp.float64)
    for M in (1, 3, 17, 40):  # M = 1: the safe mode's one-step prefetch (PDL_SAFE_PF1)
        A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
        ref = A.astype(cp.float64) @ Wd.T
        if M <= 8:
            out = cp.full((M, N), np.nan, cp.float16)
            check(f"gemv k={k} M={M}", gemv(A, q, out), ref)
        for splits in (1, 2, 4):
            out = cp.full((M, N), np.nan, cp.float16)
            gemm(A, q, out, k_splits=splits)
            gemm(A, q, out, k_splits=splits)  # twice: counters must have been reset
            check(f"gemm k={k} M={M} splits={splits}", out, ref)
        if cp.cuda.Device().compute_capability == "90":  # Hopper wgmma kernel, every TOK variant
            from kbitcupy.wgmma import TOK_CHOICES, wgmma_gemm

            for tok in TOK_CHOICES:  # split-K: over a cluster (the default) and through the workspace
                for splits, cl in ((1, None), (3, None), (3, False)):
                    out = cp.full((M, N), np.nan, cp.float16)
                    wgmma_gemm(A, q, out, k_splits=splits, tok=tok, cluster=cl)
                    wgmma_gemm(A, q, out, k_splits=splits, tok=tok, cluster=cl)
                    check(f"wgmma k={k} M={M} tok={tok} splits={splits}{' workspace' if cl is False else ''}", out, ref)
        out = cp.full((M, N), np.nan, cp.float16)  # dequant (pair table) + cuBLAS
        check(f"dequant_matmul k={k} M={M}", dequant_matmul(A, q, out), ref)
# the GEMV's 8-column groups forced (N % 8 != 0, K % 256 == 160), M = 1 and 4
for k in (2, 4, 5):
    W = cp.asarray(rng.standard_normal((196, 416), dtype=np.float32) * 0.02)
    q = kb.quantize(W, k)
    Wd = kb.dequantize(q, np.float32).astype(cp.float64)
    for M in (1, 4):
        A = cp.asarray(rng.standard_normal((M, 416), dtype=np.float32)).astype(cp.float16)
        out = cp.full((M, 196), np.nan, cp.float16)
        check(f"gemv c8 k={k} M={M}", gemv(A, q, out, plan_override=(("c8", True),)), A.astype(cp.float64) @ Wd.T)
# programmatic dependent launch: a chain of GEMVs, each reading the previous one's output
if int(cp.cuda.Device().compute_capability) >= 90:
    q1 = kb.quantize(cp.asarray(rng.standard_normal((224, 416), dtype=np.float32) * 0.02), 4)
    q2 = kb.quantize(cp.asarray(rng.standard_normal((200, 224), dtype=np.float32) * 0.02), 5)
    x = cp.asarray(rng.standard_normal((3, 416), dtype=np.float32)).astype(cp.float16)
    ref = kb.matmul(kb.matmul(x, q1), q2).astype(cp.float64)
    with kb.pdl():
        for _ in range(3):  # general path, then the fast path
            y = kb.matmul(kb.matmul(x, q1), q2)
            check("gemv chain, PDL", y, ref, tol=1e-6)
    if cp.cuda.Device().compute_capability == "90":  # the wgmma GEMM as a dependent, split-K back to back
        from kbitcupy.wgmma import wgmma_gemm

        x = cp.asarray(rng.standard_normal((40, 416), dtype=np.float32)).astype(cp.float16)
        y1, y2 = cp.empty((40, 224), cp.float16), cp.empty((40, 200), cp.float16)
        wgmma_gemm(x, q1, y1, k_splits=3)
        ref = wgmma_gemm(y1, q2, y2, k_splits=2).astype(cp.float64)
        with kb.pdl():
            for _ in range(2):
                wgmma_gemm(x, q1, y1, k_splits=3)
                wgmma_gemm(y1, q2, y2, k_splits=2)
                check("wgmma chain, PDL", y2, ref, tol=1e-6)
try:
    from kbitcupy.grouped import grouped_matmul, quantize_experts

    E, N, K = 6, 256, 128
    Wb = cp.asarray(rng.standard_normal((E, N, K), dtype=np.float32) * 0.02)
    counts = np.array([0, 3, 17, 1], np.int32)
    ids = cp.asarray(np.array([5, 0, 2, 2], np.int32))
    offs = cp.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    A = cp.asarray(rng.standard_normal((int(counts.sum()), K), dtype=np.float32)).astype(cp.float16)
    for k in (4, 5):
        bank = quantize_experts(Wb, k)
        ref = cp.asarray(kb.grouped.reference_grouped_matmul(A, bank, ids.get(), offs.get()))
        # every grouped kernel; max_tokens 8 < 17: the GEMV in passes of 8, the MMA kernels'
        # extra token tiles (wgmma: split 0 loops over them); wgmma also with split-K
        impls = ["gemv", "mma"] + (["wgmma"] if cp.cuda.Device().compute_capability == "90" else [])
        for impl in impls:
            for mt in (int(counts.max()), 8):
                out = cp.full((A.shape[0], N), np.nan, cp.float16)
                grouped_matmul(A, bank, ids, offs, mt, out=out, impl=impl)
                grouped_matmul(A, bank, ids, offs, mt, out=out, impl=impl)  # counters reset
                check(f"grouped {impl} k={k} max_tokens={mt}", out, ref)
            if impl != "mma":  # the default (safe) mode's early ids read (GROUPED_SAFE_EARLY), a 0-row slot
                out = cp.full((A.shape[0], N), np.nan, cp.float16)
                grouped_matmul(A, bank, ids, offs, int(counts.max()), out=out, impl=impl, ids_stable=True)
                check(f"grouped {impl} k={k} ids_stable", out, ref)
            if int(cp.cuda.Device().compute_capability) >= 90:  # as programmatic dependents
                out = cp.full((A.shape[0], N), np.nan, cp.float16)
                with kb.pdl():
                    grouped_matmul(A, bank, ids, offs, int(counts.max()), out=out, impl=impl)
                    grouped_matmul(A, bank, ids, offs, int(counts.max()), out=out, impl=impl)
                check(f"grouped {impl} k={k}, PDL", out, ref)
        if "wgmma" in impls:
            from kbitcupy.grouped import _err_buffer
            from kbitcupy.wgmma import GROUPED_TOK_CHOICES, grouped_wgmma

            for tok in GROUPED_TOK_CHOICES:
                out = cp.full((A.shape[0], N), np.nan, cp.float16)
                grouped_wgmma(A, bank, ids, offs, out, int(counts.max()), _err_buffer(), k_splits=2, tok=tok)
                check(f"grouped wgmma k={k} tok={tok} splits=2", out, ref)
                out = cp.full((A.shape[0], N), np.nan, cp.float16)  # the safe early mode with split-K
                grouped_wgmma(A, bank, ids, offs, out, int(counts.max()), _err_buffer(), k_splits=2, tok=tok,
                              ids_stable=True)
                check(f"grouped wgmma k={k} tok={tok} splits=2 ids_stable", out, ref)
    # the MoE decode path: gather and SwiGLU fused into the grouped GEMV (row index 9 lies
    # outside x and must read as zeros, not out of bounds)
    from kbitcupy.grouped import grouped_gemv_fused
    from kbitcupy.moe import moe_forward, silu_mul

    bank = quantize_experts(Wb, 4)
    x = cp.asarray(rng.standard_normal((5, K), dtype=np.float32)).astype(cp.float16)
    rix = cp.asarray(np.array([3, 0, 4, 4, 9, 1, 2, 0, 3, 1, 4, 2, 0, 1, 3, 2, 4, 0, 1, 2, 3], np.int32))
    A = cp.where((rix < 5)[:, None], x[cp.minimum(rix, 4)], 0).astype(cp.float16)
    ref = cp.asarray(kb.grouped.reference_grouped_matmul(A, bank, ids.get(), offs.get()))
    check("grouped gemv fused row gather", grouped_gemv_fused(x, bank, ids, offs, 21, 17, a_rows=rix), ref)
    h = cp.asarray(rng.standard_normal((21, 2 * K), dtype=np.float32)).astype(cp.float16)
    act = silu_mul(h[:, :K], h[:, K:])
    ref = cp.asarray(kb.grouped.reference_grouped_matmul(act, bank, ids.get(), offs.get()))
    check("grouped gemv fused swiglu", grouped_gemv_fused(h, bank, ids, offs, 21, 17, a_silu=True), ref)
    bgu = quantize_experts(cp.asarray(rng.standard_normal((8, 256, 128), dtype=np.float32) * 0.05), 4)
    bdn = quantize_experts(cp.asarray(rng.standard_normal((8, 128, 128), dtype=np.float32) * 0.05), 4)
    xt = cp.asarray(rng.standard_normal((3, 128), dtype=np.float32)).astype(cp.float16)
    tid = cp.asarray(np.array([[0, 5], [2, 5], [7, 1]], np.int32))
    tw = cp.asarray(np.full((3, 2), 0.5, np.float32))
    ref = moe_forward(xt, bgu, bdn, tid, tw).astype(cp.float64)
    with kb.pdl():
        check("moe_forward decode (fused), PDL", moe_forward(xt, bgu, bdn, tid, tw), ref, tol=1e-6)
    # (6 choices: pair_route's one-row slots above; the sorted routing; an id outside the bank skips its slot)
    from kbitcupy.moe import moe_route

    check("moe_forward decode, sorted routing", moe_forward(xt, bgu, bdn, tid, tw, routing=moe_route(tid, 8)), ref)
    kb.grouped.read_errors(reset=True)
    moe_forward(xt, bgu, bdn, cp.asarray(np.array([[0, 9], [2, 5], [7, -1]], np.int32)), tw)
    print("moe_forward decode, ids outside the bank: flags", kb.grouped.read_errors(reset=True))
except ImportError as e:
    print("grouped skipped:", e)
finish()
