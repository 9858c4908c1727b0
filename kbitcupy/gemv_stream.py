"""Launcher for the streaming decode GEMV (cuda_src/kbit_gemv_stream.cu), sm_90, M = 1..64.

kbitcupy.matmul runs it where the GPU family's dispatch table has a measured stream band
(kbitcupy.dispatch; H200: M = 16..32 on every big Qwen3-Coder-Next shape, up to 64 on gate/up,
down, Q and O, from M = 4..8 on gate/up: the fastest kernel there).  At M <= 8 it is slower than
kbit_gemv on most shapes: its 8 consumer warps per SM take longer per unit than the data takes to
arrive (latency-bound; profiling/NOTES.md, seventh to ninth sessions).  Bench columns STREAM /
STREAM+PDL.

Work unit = one 128-column strip of the tiled layout x 128 K; the units in n-major order,
every CTA (one per SM) a contiguous equal share (stream-K), weights + absmax + A rows
copied by producer warps into a ring of `stages` shared-memory stages.  Strips split over several
CTAs are summed through the per-stream split-K workspace of kbitcupy.gemm (per-CTA
slots, the last CTA sums them in order: deterministic; counters return to zero).

No allocation on the hot path once the stream's workspace exists (the first call of a
shape on a stream sizes it; a CUDA-graph capture of a shape that needs a larger one
raises, as kbitcupy.gemm does), no host synchronisation, capturable.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from ._checks import check_kernel_call
from . import _pdl
from ._compile import STREAM_Q2, Family, register
from .gemm import _workspace, device_info
from .gemv import layout_bytes
from .wgmma import supported as WG_SUPPORTED
from .quantize import CTYPE
from .reference import TILE_K, TILE_N, bfloat16

CONSUMERS, PRODUCERS = 8, 4  # warps (KBIT_STREAM_PRODUCERS in the .cu file)
THREADS = 32 * (CONSUMERS + PRODUCERS)
MAX_M = 64
TILES = (1, 2, 4, 8)  # token tiles of 8 (M <= 8, 16, 32, 64)
MAX_STAGES = 16


def _instances():
    return {(k, t, mt): f"kbit_gemv_stream<{k}, {CTYPE[t]}, {mt}>"
            for k in (2, 3, 4, 5) for t in ("float16", "bfloat16") for mt in TILES}


# mbarrier-paced cp.async stages, PDL: compiled for sm_90 only (like wgmma).  KBIT_STREAM_OPTS
# (environment, read at import): extra compiler options, an experiment hook
# (profiling/sanitize_stream.py runs once with -DKBIT_STREAM_SYNC_ARRIVE).
STREAM = register("gemv_stream", Family("kbit_gemv_stream.cu", _instances(), group_of=lambda key: key[:2],
                                        options=tuple(os.environ.get("KBIT_STREAM_OPTS", "").split()), arch="sm_90"))
# Runs where the wgmma kernel runs (compute capability 9.0: both are built for sm_90 only).
supported = WG_SUPPORTED


def tiles_for(M: int) -> int:
    return next(mt for mt in TILES if M <= 8 * mt)


def stage_bytes(k: int, mt: int) -> int:
    """StageLayout<K, MT>::BYTES in the .cu file: two K tiles (+64 B pad), two absmax tiles, 8 MT A rows of 272 B."""
    tile = TILE_N * 2 * k * 4
    return -(-(2 * tile + 64 + 512 + 8 * mt * 272) // 128) * 128


FIXED_SMEM = 16 + 32 * 4 + 16 + 256 * 4  # two mbarriers, codebook, flags, scale table


def table_bytes(k: int) -> int:
    """The table the kernel builds (LutLayout in the .cu file): k = 2's quad table where KBIT_STREAM_Q2 is on."""
    return layout_bytes(k, bool(STREAM_Q2))


def smem_bytes(k: int, mt: int, stages: int) -> int:
    return table_bytes(k) + stages * (stage_bytes(k, mt) + 16) + FIXED_SMEM  # + a full and an empty mbarrier per stage


def _cta_of(u: int, q: int, r: int) -> int:
    big = r * (q + 1)
    return u // (q + 1) if u < big else r + (u - big) // q


@functools.lru_cache(maxsize=4096)
def plan(N: int, K: int, M: int, k: int, dev_id: int, stages: int | None = None, ctas: int | None = None):
    """(mt, grid, stages, smem, max CTAs per strip, workspace floats, strips)."""
    if not 1 <= M <= MAX_M:
        raise ValueError(f"the streaming GEMV handles M = 1..{MAX_M}, got M = {M}")
    info = device_info(dev_id)
    mt = tiles_for(M)
    n_tiles = -(-N // TILE_N)
    U = -(-(-(-K // TILE_K)) // 2)
    total = n_tiles * U
    G = max(1, min(total, int(ctas) if ctas else info["sms"]))
    q, r = divmod(total, G)
    per_cta = q + (r > 0)
    fit = (info["smem_block"] - table_bytes(k) - FIXED_SMEM) // (stage_bytes(k, mt) + 16)
    if fit < 1:
        raise ValueError(f"gemv_stream: k={k}, M={M} does not fit in shared memory")
    st = min(per_cta, fit, MAX_STAGES) if stages is None else int(stages)
    if not 1 <= st <= fit:
        raise ValueError(f"stages must be in 1..{fit} for k={k}, M={M}, got {stages}")
    maxc = max(_cta_of(j * U + U - 1, q, r) - _cta_of(j * U, q, r) + 1 for j in range(n_tiles))
    ws = maxc * n_tiles * mt * 4 * 256 if maxc > 1 else 0  # slots of the 256 consumer threads
    return mt, G, st, smem_bytes(k, mt, st), maxc, ws, n_tiles


_LAUNCH: dict = {}


def launch_args(A, qw, out, plan_override=None):
    """(kernel, grid, block, dynamic smem, argument tuple) of one call on the current
    stream (the stream's split-K workspace is among the arguments)."""
    import cupy as cp

    M, K = A.shape
    N = qw.shape[0]
    if qw.layout != "tiled" or qw.absmax.dtype != np.uint8:
        raise ValueError("the streaming GEMV needs a tiled weight with E4M4 absmax (kbitcupy.repack)")
    tname = "bfloat16" if A.dtype == bfloat16 else "float16"
    dev = A.data.device_id
    key = (dev, M, N, K, qw.k, tname, plan_override)
    cfg = _LAUNCH.get(key)
    if cfg is None:
        ov = dict(plan_override or ())
        mt, G, st, smem, maxc, wsf, n_tiles = plan(N, K, M, qw.k, dev, ov.get("stages"), ov.get("ctas"))
        fn = STREAM.function((qw.k, tname, mt))
        if fn.max_dynamic_shared_size_bytes < smem:
            fn.max_dynamic_shared_size_bytes = smem
        cfg = _LAUNCH[key] = (fn, G, st, smem, wsf, n_tiles)
    fn, G, st, smem, wsf, n_tiles = cfg
    if wsf:
        ws, cnt = _workspace(dev, cp.cuda.get_current_stream(), wsf, n_tiles)
    else:
        ws, cnt = out, out  # never read: every strip has one CTA
    return fn, (G,), (THREADS,), smem, (A, qw.packed, qw.absmax, qw.codebook, out, ws, cnt, np.int32(M), np.int32(N),
                                        np.int32(K), np.int32(st), np.float32(qw.tensor_scale),
                                        np.int32(_pdl.dense_arg(dev)))


def gemv_stream(A, qw, out, plan_override=None, *, validate=True):
    """out[M, N] = A[M, K] @ W^T (M = 1..64) with the streaming kernel, on the current
    stream; CuPy arrays (validate=False: already checked, as kbitcupy.matmul does)."""
    if validate:
        check_kernel_call(A, qw, out, "gemv_stream", MAX_M, 1)
    fn, grid, block, smem, args = launch_args(A, qw, out, plan_override)
    _pdl.launch(fn, grid, block, args, smem, pdl=args[-1])
    return out
