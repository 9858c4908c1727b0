"""compute-sanitizer driver for the grouped wgmma kernel at k = 5 with fewer pair-table copies
(kbitcupy.wgmma.GROUPED_K5_LC, the plan's choice for 10 experts at 64 tokens): the plan's own split
count (cluster sum), a forced workspace sum, a K % 64 == 32 shape with a partial strip, fp16 and
bf16, uneven counts with an empty slot; one line per check against the float64 reference.

usage (GPU machine): compute-sanitizer --tool memcheck|racecheck python3 profiling/sanitize_k5lc.py
"""
import numpy as np

from sanitize_common import check, cp, finish, rng
import kbitcupy as kb
from kbitcupy.grouped import _err_buffer, quantize_experts, reference_grouped_matmul
from kbitcupy.reference import bfloat16
from kbitcupy.wgmma import grouped_wgmma

for (N, K), dt in (((1024, 2048), cp.float16), ((2048, 512), bfloat16), ((1000, 2080), cp.float16)):
    bank = quantize_experts(cp.asarray((rng.standard_normal((12, N, K)) * 0.05).astype(np.float32)), 5)
    counts = rng.integers(30, 65, size=10)
    counts[0], counts[4] = 64, 0
    offs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    ids = rng.permutation(12)[:10].astype(np.int32)
    A32 = cp.asarray(rng.standard_normal((int(offs[-1]), K)).astype(np.float32))
    if dt == bfloat16:  # bf16 = the top half of f32 (CuPy has no bf16 arithmetic)
        A32 = ((A32.view(cp.uint32) >> 16) << 16).view(cp.float32)
        A = (A32.view(cp.uint32) >> 16).astype(cp.uint16).view(bfloat16)
    else:
        A = A32.astype(cp.float16)
        A32 = A.astype(cp.float32)
    ref = cp.asarray(reference_grouped_matmul(A32.get(), bank, ids, offs))
    for ks, cl in ((None, None), (3, False)):
        out = cp.full((int(offs[-1]), N), 0x7FC0 if dt == bfloat16 else 0x7E00, dtype=cp.uint16).view(dt)
        grouped_wgmma(A, bank, cp.asarray(ids), cp.asarray(offs), out, 64, _err_buffer(), k_splits=ks, cluster=cl,
                      fewer_copies=True)
        o32 = (out.view(cp.uint16).astype(cp.uint32) << 16).view(cp.float32) if dt == bfloat16 else out
        check(f"k=5 fewer copies N={N} K={K} {np.dtype(dt).name} splits={ks or 'plan'}"
              f"{' workspace' if cl is False else ''}", o32, ref)
    assert kb.grouped.read_errors() == 0
finish()
