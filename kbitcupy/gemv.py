"""Launcher for the decode GEMV kernel (cuda_src/kbit_gemv.cu), M = 1..16."""
from __future__ import annotations

import functools

import numpy as np

from ._compile import Family, register
from .quantize import CTYPE
from .reference import bfloat16

MAX_M = 16
DEPTHS = (2, 4)
# token tiles of 8 per MMA: (tiles, depths compiled for it)
TILES = ((1, DEPTHS), (2, (2,)))
_VARIANTS = (("uint8", True), ("float32", False), ("uint8", False))


def _instances():
    inst = {}
    for k in (2, 3, 4, 5):
        for t in ("float16", "bfloat16"):
            for a, tiled in _VARIANTS:
                for mt, depths in TILES:
                    for d in depths:
                        inst[(k, t, a, tiled, d, mt)] = (f"kbit_gemv<{k}, {CTYPE[t]}, {CTYPE[a]}, "
                                                         f"{'true' if tiled else 'false'}, {d}, {mt}>")
    return inst


GEMV = register("gemv", Family("kbit_gemv.cu", _instances(), group_of=lambda key: key[:2]))

# Hopper has 132 SMs; the plan aims for enough warps to keep ~all weight bytes in flight.
TARGET_WARPS = 132 * 24


def lut_bytes(k: int) -> int:
    copies = 32 if k <= 4 else 16
    return (1 << (2 * k)) * copies * 4


def plan(N: int, K: int, M: int, k: int, itemsize: int = 2, warps: int | None = None, depth: int | None = None):
    """(warps per block, register ring depth, dynamic smem bytes, grid, token tiles)."""
    groups = -(-N // 16)
    tiles = 1 if M <= 8 else 2
    ks = -(-K // 128)
    if warps is None:
        # Measured on H200 (profiling/results, 2026-11-21): 8 warps per block for the
        # wide shapes (>= 256 column groups), 16 for the rest; ring depth 2 everywhere.
        warps = min(8 if groups >= 256 else 16, ks)
    if depth is None or tiles > 1:
        depth = 2
    smem = lut_bytes(k) + M * ks * 128 * itemsize + warps * 128 * tiles * 4 + 32 * 4
    return warps, depth, smem, groups, tiles


@functools.lru_cache(maxsize=4096)
def fits(N: int, K: int, M: int, k: int, device_id: int) -> bool:
    """Whether the GEMV's shared memory (pair table + staged A) fits this device."""
    import cupy as cp

    limit = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, device_id)
    return 1 <= M <= MAX_M and plan(N, K, M, k)[2] <= limit


_LAUNCH: dict = {}


def _launch_config(dev, M, N, K, qw, tname, plan_override):
    """(kernel, grid, block, smem, scalar args) for one call shape, built once."""
    p = plan(N, K, M, qw.k, **(dict(plan_override) if plan_override else {}))
    warps, depth, smem, grid, tiles = p
    if not fits(N, K, M, qw.k, dev):
        raise ValueError(f"gemv: M={M}, K={K} needs {smem} bytes of shared memory, more than this GPU has; "
                         "use kbitcupy.matmul (it dispatches to the GEMM)")
    fn = GEMV.function((qw.k, tname, qw.absmax.dtype.name, qw.layout == "tiled", depth, tiles))
    if fn.max_dynamic_shared_size_bytes < smem:
        fn.max_dynamic_shared_size_bytes = smem
    return fn, (grid,), (warps * 32,), smem, (np.int32(M), np.int32(N), np.int32(K))


def gemv(A, qw, out, plan_override=None):
    """C[M, N] = A[M, K] @ W^T on CuPy arrays already validated by matmul(); out given.

    No allocation, no host synchronisation: capturable in a CUDA graph.  The launch
    configuration is cached per (device, shape, k, dtype, layout), so a call is a dict
    lookup and the kernel launch."""
    M, K = A.shape
    N = qw.shape[0]
    if not 1 <= M <= MAX_M:
        raise ValueError(f"gemv handles M = 1..{MAX_M} rows of A, got M = {M}; use kbitcupy.matmul")
    tname = "bfloat16" if A.dtype == bfloat16 else "float16"
    key = (A.data.device_id, M, N, K, qw.k, tname, qw.absmax.dtype.char, qw.layout, plan_override)
    cfg = _LAUNCH.get(key)
    if cfg is None:
        cfg = _LAUNCH[key] = _launch_config(key[0], M, N, K, qw, tname, plan_override)
    fn, grid, block, smem, dims = cfg
    fn(grid, block, (A, qw.packed, qw.absmax, qw.codebook, out) + dims + (np.float32(qw.tensor_scale),),
       shared_mem=smem)
    return out
