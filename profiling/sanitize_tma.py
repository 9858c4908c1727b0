"""compute-sanitizer driver for the wgmma kernels' TMA stages (kbit_wgmma_tma and
kbit_wgmma_grouped: token tiles by tensor copies, weight tiles and absmax by bulk copies, on the stage
mbarriers): token tails
(rows past M: the tensor map's zero fill), K % 64 == 32, N tails, every TOK, split-K through a cluster and
through the workspace, fp16 and bf16; the grouped kernel with uneven counts, an
empty slot and a slot past max_tokens (extra token tiles: the mbarriers invalidated and set up again).
One line per check against the float64 reference.

usage (GPU machine): compute-sanitizer --tool memcheck python3 profiling/sanitize_tma.py
(env SAN_QUICK=1: dense M = 70 at TOK = 16 / 128 only, for the slower racecheck / synccheck)
"""
import os

import numpy as np

from sanitize_common import check, cp, finish, rng
import kbitcupy as kb
from kbitcupy import wgmma as WG
from kbitcupy.grouped import _err_buffer, quantize_experts, reference_grouped_matmul
from kbitcupy.reference import bfloat16

QUICK = os.environ.get("SAN_QUICK") == "1"


def operand(M, K, dt):
    """(A in dt, the same values in float32): bf16 = the top half of f32 (CuPy has no bf16 arithmetic)."""
    A32 = cp.asarray(rng.standard_normal((M, K)).astype(np.float32))
    if dt == bfloat16:
        A32 = ((A32.view(cp.uint32) >> 16) << 16).view(cp.float32)
        return (A32.view(cp.uint32) >> 16).astype(cp.uint16).view(bfloat16), A32
    A = A32.astype(cp.float16)
    return A, A.astype(cp.float32)


def as_f32(out, dt):
    return (out.view(cp.uint16).astype(cp.uint32) << 16).view(cp.float32) if dt == bfloat16 else out


def nan_out(shape, dt):
    return cp.full(shape, 0x7FC0 if dt == bfloat16 else 0x7E00, dtype=cp.uint16).view(dt)


for (N, K, k), dt in (((200, 544, 4), cp.float16), ((136, 160, 5), bfloat16), ((2048, 512, 2), cp.float16)):
    W = cp.asarray((rng.standard_normal((N, K)) * 0.05).astype(np.float32))
    q = kb.quantize(W, k)
    Wd = kb.dequantize(q, np.float32).astype(cp.float64)
    for M in ((70,) if QUICK else (5, 70)):
        A, A32 = operand(M, K, dt)
        ref = A32.astype(cp.float64) @ Wd.T
        for tok in ((16, 128) if QUICK else WG.TOK_CHOICES):
            for ks, cl in ((1, None), (3, True), (3, False)):
                out = nan_out((M, N), dt)
                WG.wgmma_gemm(A, q, out, k_splits=ks, tok=tok, cluster=cl, tma=True)
                check(f"dense tma k={k} N={N} K={K} M={M} {np.dtype(dt).name} TOK={tok} splits={ks}"
                      f"{' cluster' if cl else ' workspace' if cl is False else ''}", as_f32(out, dt), ref)

for (N, K, k), dt in (((1024, 512, 4), cp.float16), ((256, 544, 5), bfloat16)):
    bank = quantize_experts(cp.asarray((rng.standard_normal((6, N, K)) * 0.05).astype(np.float32)), k)
    counts = np.array([40, 0, 17, 64, 3])
    offs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    ids = np.array([4, 0, 2, 5, 1], np.int32)
    A, A32 = operand(int(offs[-1]), K, dt)
    ref = cp.asarray(reference_grouped_matmul(A32.get(), bank, ids, offs))
    for mt, ks, cl in ((64, None, None), (64, 3, False), (16, None, None)):  # 16: extra token tiles
        out = nan_out((int(offs[-1]), N), dt)
        WG.grouped_wgmma(A, bank, cp.asarray(ids), cp.asarray(offs), out, mt, _err_buffer(), k_splits=ks,
                         cluster=cl)
        check(f"grouped tma k={k} N={N} K={K} {np.dtype(dt).name} max_tokens={mt} splits={ks or 'plan'}",
              as_f32(out, dt), ref)
    kb.grouped.read_errors(reset=True)
finish()
