"""The wgmma kernels' split-K sum over a thread block cluster (DSMEM) on small shapes, for
compute-sanitizer (memcheck / racecheck): dense and grouped, every TOK, 2..8 splits, token
tails and N not a multiple of 128.  Exits non-zero if a result is wrong."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sanitize_common import check, finish, rng  # noqa: E402  (puts the package on the path)
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy.grouped import _err_buffer, quantize_experts, reference_grouped_matmul  # noqa: E402
from kbitcupy.wgmma import GROUPED_TOK_CHOICES, TOK_CHOICES, grouped_wgmma, wgmma_gemm  # noqa: E402


N, K = 200, 544  # N % 128 != 0, K % 64 == 32, 9 K tiles
for k in (3, 4):
    q = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k)
    Wd = kb.dequantize(q, np.float32).astype(cp.float64)
    for M in (5, 40):
        A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
        ref = A.astype(cp.float64) @ Wd.T
        for tok in TOK_CHOICES:
            for splits in (2, 3, 8):
                out = cp.full((M, N), np.nan, cp.float16)
                wgmma_gemm(A, q, out, k_splits=splits, tok=tok, cluster=True)
                check(f"wgmma cluster k={k} M={M} tok={tok} splits={splits}", out, ref)
E = 5
bank = quantize_experts(cp.asarray(rng.standard_normal((E, N, K), dtype=np.float32) * 0.02), 4)
counts = np.array([0, 3, 17, 1, 40], np.int32)
ids = cp.asarray(np.array([4, 0, 2, 1, 3], np.int32))
offs = cp.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
A = cp.asarray(rng.standard_normal((int(counts.sum()), K), dtype=np.float32)).astype(cp.float16)
ref = cp.asarray(reference_grouped_matmul(A, bank, ids.get(), offs.get()))
for tok in GROUPED_TOK_CHOICES:
    for splits in (2, 5):
        for mt in (40, 16):  # 16 < 40: split 0 alone on the extra token tiles after the cluster sum
            out = cp.full((A.shape[0], N), np.nan, cp.float16)
            grouped_wgmma(A, bank, ids, offs, out, mt, _err_buffer(), k_splits=splits, tok=tok, cluster=True)
            check(f"grouped wgmma cluster tok={tok} splits={splits} max_tokens={mt}", out, ref)
finish()
