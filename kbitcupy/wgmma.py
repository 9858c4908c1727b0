"""Launcher for the Hopper fused dequant + wgmma GEMM (cuda_src/kbit_wgmma.cu, sm_90a).

``wgmma_gemm(A, qw, out)`` computes out[M, N] = A[M, K] @ W^T for a TILED k-bit weight on
an sm_90 GPU (H100/H200).  Like ``kbitcupy.gemm`` it allocates nothing on the hot path
(it shares gemm's per-stream split-K workspace), never synchronises with the host and
is capturable in a CUDA graph once a first call of the same shape has run (``reserve``).

Configuration (see the .cu header for the design):
  * TOK tokens per CTA (the wgmma n side): the smallest of TOK_CHOICES covering M, at
    most the largest; larger M runs ceil(M / TOK) token tiles.
  * one 128-column strip of the layout per CTA (2 warpgroups of 64 columns).
  * K tiles of 64 through a `stages`-deep cp.async pipeline (3..MAX_STAGES), the most
    CTAs per SM first (at most 2), then the deepest pipeline that fits.
  * split-K over K tiles to fill one wave of resident CTAs, >= MIN_TILES_PER_SPLIT
    tiles each; partial sums as in kbitcupy.gemm (per-split slots, last CTA sums).
"""
from __future__ import annotations

import os

import numpy as np

from ._compile import Family, register
from .gemm import DoesNotFit, _workspace, best_stages, device_info, launch_fused, set_smem
from .gemv import lut_bytes
from .quantize import CTYPE
from .reference import TILE_K, TILE_N, bfloat16

THREADS = 256
TOK_CHOICES = (16, 32, 64, 128, 192)
MAX_STAGES = 8
MIN_TILES_PER_SPLIT = 2   # K tiles of 64 per split-K slice (default heuristic)
MAX_OCCUPANCY = int(os.environ.get("KBIT_WG_MAXOCC", "2"))  # CTAs per SM the stage choice aims for (env: experiment)


def _instances():
    return {(k, t, tok): f"kbit_wgmma<{k}, {CTYPE[t]}, {tok}>"
            for k in (2, 3, 4, 5) for t in ("float16", "bfloat16") for tok in TOK_CHOICES}


# wgmma exists on sm_90a only; one NVRTC call per (k, dtype) compiles its TOK variants.
# KBIT_WGMMA_OPTS: extra NVRTC options, an experiment hook (e.g. -DKBIT_WG_NO_MMA, see the .cu).
WGMMA = register("wgmma", Family("kbit_wgmma.cu", _instances(), group_of=lambda key: (key[0], key[1]),
                                 options=tuple(os.environ.get("KBIT_WGMMA_OPTS", "").split()), arch="sm_90a"))


_SUPPORTED: dict = {}


def supported(dev_id: int) -> bool:
    """Whether the wgmma kernel runs on this device (compute capability 9.0)."""
    ok = _SUPPORTED.get(dev_id)
    if ok is None:
        import cupy as cp

        ok = _SUPPORTED[dev_id] = cp.cuda.Device(dev_id).compute_capability == "90"
    return ok


# ----------------------------------------------------------------------------- sizes
def stage_bytes(k: int, tok: int) -> int:
    return -(-(tok * 128 + 1024 * k + 256) // 128) * 128


def smem_bytes(k: int, tok: int, stages: int) -> int:
    return lut_bytes(k) + 1024 + 256 + stages * stage_bytes(k, tok)


def choose_tok(M: int) -> int:
    return next((tok for tok in TOK_CHOICES if M <= tok), TOK_CHOICES[-1])


def choose_stages(info: dict, k: int, tok: int, regs: int):
    """(stages, CTAs per SM): the most resident CTAs (up to MAX_OCCUPANCY), then the deepest pipeline."""
    return best_stages(info, range(MAX_STAGES, 2, -1), lambda st: smem_bytes(k, tok, st), regs,
                       MAX_OCCUPANCY, f"kbit_wgmma<k={k}, TOK={tok}>", THREADS)


# ----------------------------------------------------------------------------- plan
class Plan:
    __slots__ = ("fn", "grid", "smem", "tok", "m_tiles", "k_splits", "stages", "tiles", "ws_floats", "occ")

    def __repr__(self):
        return (f"WgmmaPlan(TOK={self.tok}, m_tiles={self.m_tiles}, k_splits={self.k_splits}, stages={self.stages}, "
                f"grid={self.grid}, smem={self.smem}, occ={self.occ})")


_PLANS: dict = {}


def plan(M: int, N: int, K: int, k: int, dtype_name: str, dev_id: int, k_splits=None, tok=None,
         stages=None) -> Plan:
    key = (dev_id, M, N, K, k, dtype_name, k_splits, tok, stages)
    p = _PLANS.get(key)
    if p is not None:
        return p
    info = device_info(dev_id)
    tok = choose_tok(M) if tok is None else int(tok)
    if tok not in TOK_CHOICES:
        raise ValueError(f"tok must be one of {TOK_CHOICES}, got {tok}")
    fn = WGMMA.function((k, dtype_name, tok))
    st, occ = choose_stages(info, k, tok, fn.num_regs)
    m_tiles = -(-M // tok)
    n_tiles = -(-N // TILE_N)
    k_tiles = -(-K // TILE_K)
    tiles = m_tiles * n_tiles
    if k_splits is None:
        capacity = info["sms"] * occ
        ks = max(1, min(k_tiles // MIN_TILES_PER_SPLIT, capacity // tiles))
    else:
        ks = int(k_splits)
        if not 1 <= ks <= k_tiles:
            raise ValueError(f"k_splits must be in 1..{k_tiles} (K tiles of 64) for K = {K}, got {k_splits}")
    per_split = -(-k_tiles // ks)
    st = max(3, min(st, per_split + 2))
    if stages is not None:
        st = int(stages)
        if not 3 <= st <= MAX_STAGES:
            raise ValueError(f"stages must be in 3..{MAX_STAGES}, got {stages}")
    p = Plan()
    p.fn, p.tok, p.m_tiles, p.k_splits, p.stages, p.tiles, p.occ = fn, tok, m_tiles, ks, st, tiles, occ
    p.grid = tiles * ks
    p.smem = smem_bytes(k, tok, st)
    if p.smem > info["smem_block"]:
        raise DoesNotFit(f"kbit_wgmma<k={k}, TOK={tok}> with {st} stages needs {p.smem} bytes of shared memory")
    p.ws_floats = ks * tiles * 128 * tok if ks > 1 else 0
    _PLANS[key] = p
    return p


def reserve(M: int, N: int, K: int, k: int, dtype=np.float16, k_splits=None, tok=None, stream=None):
    """Compile/load the kernel and size the stream's workspace for this call, so that a
    later capture of the same call allocates nothing."""
    import cupy as cp

    dev = cp.cuda.Device().id
    tname = "bfloat16" if np.dtype(dtype) == bfloat16 else "float16"
    p = plan(M, N, K, k, tname, dev, k_splits, tok)
    set_smem(p.fn, p.smem)
    stream = stream or cp.cuda.get_current_stream()
    if p.k_splits > 1:
        _workspace(dev, stream, p.ws_floats, p.tiles)
    return p


# ----------------------------------------------------------------------------- launch
def wgmma_gemm(A, qw, out, k_splits=None, tok=None, stages=None):
    """out[M, N] = A[M, K] @ W^T with the wgmma kernel (sm_90 only).

    A: contiguous CuPy float16/bfloat16 [M, K] (16-byte aligned); qw: KbitWeight, tiled,
    on A's device; out: contiguous [M, N] of A's dtype.  Runs on the current stream.
    k_splits / tok / stages override the heuristic.
    """
    M, K = A.shape
    N = qw.shape[0]
    if qw.layout != "tiled" or qw.absmax.dtype != np.uint8:
        raise ValueError("wgmma_gemm needs a tiled weight with E4M4 absmax (kbitcupy.repack)")
    if qw.shape[1] != K or out.shape != (M, N) or out.dtype != A.dtype:
        raise ValueError(f"shape/dtype mismatch: A {A.shape} {A.dtype}, W {qw.shape}, out {out.shape} {out.dtype}")
    if A.data.ptr % 16 or qw.packed.data.ptr % 16 or qw.absmax.data.ptr % 16:
        raise ValueError("A, packed and absmax must be 16-byte aligned")
    dev = A.device.id
    if not supported(dev):
        raise RuntimeError("wgmma_gemm needs a compute capability 9.0 GPU (H100/H200)")
    if M == 0:
        return out
    tname = "bfloat16" if A.dtype == bfloat16 else "float16"
    p = plan(M, N, K, qw.k, tname, dev, k_splits, tok, stages)
    vec8 = 1 if (N % 8 == 0 and out.data.ptr % 16 == 0) else 0
    return launch_fused(p, THREADS, A, qw, out, vec8)
