"""NumPy reference of the kbit format: the oracle for every kernel and the CPU backend.

Format (bit-exact with the design documents, seed 000 sections 4-5):

* W[N, K] (PyTorch Linear layout) is cut into blocks of 32 consecutive elements
  along K; K must be a multiple of 32.
* Each element stores the k-bit index of a codebook level (2^k float32 levels in
  [-1, 1]); the block stores its scale (absmax).
* Bit-plane packing: k uint32 words per block, bit j of word b = bit b of the
  index of element j.
* Absmax as float32 (flat layout only) or as one E4M4 byte (bias 11):
  normal e>0: 2^(e-11) * (1 + m/16); subnormal e=0: 2^-10 * (m/16).
* Flat layout: packed[(n*K/32 + kb)*k + bit], absmax[n*K/32 + kb].
* Tiled layout (repack): tiles of TILE_K=64 x TILE_N=128, tile index
  k_tile*n_tiles + n_tile, inside a tile [col][kb][bit]; absmax the same with one
  byte per (col, kb).  N is padded up to a multiple of 128 and K up to a multiple
  of 64: padded words are 0 and padded absmax bytes are 0 (scale 0), so padded
  weights dequantize to exactly 0.

Additions of kbitcupy (documented in README):

* ``tensor_scale``: a power of two carried with the weight.  The stored E4M4
  scales are absmax / tensor_scale; the real weight is
  codebook[idx] * e4m4(absmax) * tensor_scale.  It is 1.0 (the plain seed format)
  whenever every block's absmax lies in E4M4's normal range [2^-10, 31]; otherwise
  it moves the largest block to (8, 16] so nothing clips or overflows.  It stays at
  least 2^-126 (a normal float32: blocks below 2^-141 then round to 0, like float
  underflow); magnitudes of ABSMAX_LIMIT (about 3.35e38) and above are refused.
* E4M4 encoding rounds to nearest (ties to even) and the indices are chosen
  against the *decoded* scale (see ``measure_scale_rounding`` for the SQNR that
  decided this).
"""
from __future__ import annotations

import numpy as np

BLOCKSIZE = 32
TILE_K = 64
TILE_N = 128
KB_PER_TILE = TILE_K // BLOCKSIZE
E4M4_BIAS = 11
E4M4_MAX = 31.0  # 2^4 * (1 + 15/16)
E4M4_MIN_NORMAL = 2.0 ** -10
# The smallest block absmax whose E4M4 scale is not finite: 4 mantissa bits round (1 + 15.5/16) 2^127
# and above up to 2^128 whatever the power-of-two tensor scale.  quantize refuses such weights.
ABSMAX_LIMIT = 2.0 ** 127 * (1 + 15.5 / 16)

try:  # numpy has no bfloat16 of its own; ml_dtypes gives one (CuPy accepts it too)
    import ml_dtypes as _ml_dtypes

    bfloat16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    bfloat16 = None


# ----------------------------------------------------------------------------- codebook
def create_codebook(k: int) -> np.ndarray:
    """Default codebook: normal-float levels for k bits.

    Definition (the one the design documents' implementation uses, so codebooks
    match bit for bit): the 2^k standard-normal quantiles at the bin centres
    (i + 0.5) / 2^k, divided by the largest magnitude so the levels span [-1, 1].
    It is symmetric, has no exact zero, and puts equal probability mass on every
    level for Gaussian weights, which is what blockwise-normalised LLM weights
    look like.
    """
    check_k(k)
    from scipy.special import ndtri

    n = 1 << k
    q = np.linspace(0.5 / n, 1.0 - 0.5 / n, n, dtype=np.float32)
    v = ndtri(q.astype(np.float64)).astype(np.float32)
    return (v / np.abs(v).max()).astype(np.float32)


def check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 2 <= int(k) <= 5:
        raise ValueError(f"k must be an integer in 2..5, got {k!r}")
    return int(k)


# ----------------------------------------------------------------------------- E4M4
def e4m4_decode(code) -> np.ndarray:
    code = np.asarray(code).astype(np.int32)
    e = code >> 4
    m = (code & 15).astype(np.float32)
    normal = np.ldexp(np.float32(1.0) + m / np.float32(16.0), e - E4M4_BIAS).astype(np.float32)
    sub = (m * np.float32(2.0 ** -14)).astype(np.float32)
    return np.where(e > 0, normal, sub).astype(np.float32)


def e4m4_encode(a, rounding: str = "nearest") -> np.ndarray:
    """Encode non-negative float32 scales to E4M4 bytes.

    Integer arithmetic on the float32 bits, the same as the GPU kernel, so both are
    bit-exact.  ``rounding='nearest'`` (ties to even, the default and the one the
    kernels use) or ``'up'`` (never below the input: no value clips).
    Raises ValueError for values above the largest code (31) after rounding.
    """
    a = np.ascontiguousarray(a, dtype=np.float32)
    if np.any(~np.isfinite(a)) or np.any(a < 0):
        raise ValueError("absmax must be finite and non-negative for E4M4 encoding")
    bits = a.view(np.uint32).astype(np.int64)
    normal = a >= np.float32(E4M4_MIN_NORMAL)
    ex = (bits >> 23) - 127
    mant = bits & 0x7FFFFF
    code = ((ex + E4M4_BIAS) << 4) | (mant >> 19)
    rem = mant & 0x7FFFF
    if rounding == "nearest":
        up = (rem > 0x40000) | ((rem == 0x40000) & ((code & 1) == 1))
        sub = np.rint(a * np.float32(16384.0)).astype(np.int64)
    elif rounding == "up":
        up = rem > 0
        sub = np.ceil(a * np.float32(16384.0)).astype(np.int64)
    else:
        raise ValueError(f"rounding must be 'nearest' or 'up', got {rounding!r}")
    code = np.where(normal, code + up, sub)
    if np.any(code > 255):
        raise ValueError("absmax above the E4M4 range (31); use a tensor scale")
    return code.astype(np.uint8)


def choose_tensor_scale(block_absmax: np.ndarray, name: str = "W") -> float:
    """Power-of-two tensor scale: 1.0 when every nonzero block scale is inside
    E4M4's normal range, else one that puts the largest block in (8, 16], at least
    2^-126 (a normal float32, as the kernels take it).  Raises ValueError naming
    ``name`` for scales that are negative, not finite, or at least ABSMAX_LIMIT."""
    block_absmax = np.asarray(block_absmax)
    amax = float(np.max(block_absmax)) if block_absmax.size else 0.0
    if not np.isfinite(amax) or (block_absmax.size and float(np.min(block_absmax)) < 0):
        raise ValueError(f"{name}: block scales must be finite and non-negative, got max {amax}")
    if amax >= ABSMAX_LIMIT:
        raise ValueError(f"{name}: largest magnitude {amax:.6g} is too large for E4M4 block scales, which hold "
                         f"magnitudes below {ABSMAX_LIMIT:.6g} (larger ones round up to 2^128, infinite in float32)")
    if amax == 0.0:
        return 1.0
    nz = block_absmax[block_absmax > 0]
    amin = float(nz.min())
    if amax <= 30.0 and amin >= E4M4_MIN_NORMAL:
        return 1.0
    return float(2.0 ** max(int(np.ceil(np.log2(amax))) - 4, -126))


# ----------------------------------------------------------------------------- indices
def nearest_index(x: np.ndarray, codebook: np.ndarray) -> np.ndarray:
    """argmin_i |x - codebook[i]| in float32, first minimum wins (the kernel's rule)."""
    cb = np.asarray(codebook, dtype=np.float32)
    x = np.asarray(x, dtype=np.float32)
    out = np.empty(x.shape, dtype=np.uint8)
    flat_x, flat_o = x.reshape(-1), out.reshape(-1)
    # Fast path for strictly increasing, well separated levels: float32 rounding of
    # x - c is monotone in c, so the minimum is one of the two neighbours of x, and the
    # gap keeps the two distances from different levels from rounding to a tie.
    fast = cb.size > 1 and bool(np.all(np.diff(cb) > 1e-5))
    step = 1 << 20
    for s in range(0, flat_x.size, step):
        xs = flat_x[s:s + step]
        if fast:
            j = np.clip(np.searchsorted(cb, xs), 1, cb.size - 1)
            lo = np.abs(xs - cb[j - 1])
            hi = np.abs(xs - cb[j])
            flat_o[s:s + step] = np.where(hi < lo, j, j - 1)
        else:
            d = np.abs(xs[:, None] - cb[None, :])
            flat_o[s:s + step] = np.argmin(d, axis=1)
    return out


def pack_bitplanes(idx: np.ndarray, k: int) -> np.ndarray:
    """[nblocks, 32] indices -> [nblocks * k] uint32 words (bit j of word b = bit b of idx[j])."""
    idx = np.asarray(idx, dtype=np.uint32).reshape(-1, BLOCKSIZE)
    weights = (np.uint64(1) << np.arange(BLOCKSIZE, dtype=np.uint64))
    words = np.empty((idx.shape[0], k), dtype=np.uint32)
    for b in range(k):
        bits = ((idx >> np.uint32(b)) & np.uint32(1)).astype(np.uint64)
        words[:, b] = (bits * weights).sum(axis=1).astype(np.uint32)
    return words.reshape(-1)


def unpack_bitplanes(words: np.ndarray, k: int) -> np.ndarray:
    """[nblocks * k] uint32 -> [nblocks, 32] uint8 indices."""
    w = np.asarray(words).view(np.uint32).reshape(-1, k)
    j = np.arange(BLOCKSIZE, dtype=np.uint32)
    idx = np.zeros((w.shape[0], BLOCKSIZE), dtype=np.uint32)
    for b in range(k):
        idx |= ((w[:, b:b + 1] >> j[None, :]) & np.uint32(1)) << np.uint32(b)
    return idx.astype(np.uint8)


# ----------------------------------------------------------------------------- quantize
def quantize_flat(W: np.ndarray, k: int, codebook: np.ndarray, absmax_format: str = "e4m4",
                  tensor_scale: float | None = None):
    """Quantize W[N, K] to the flat layout.

    Returns (packed uint32 [N*K/32*k], absmax (uint8 E4M4 or float32) [N*K/32], tensor_scale).
    """
    W = np.asarray(W)
    N, K = W.shape
    x = W.astype(np.float32).reshape(-1, BLOCKSIZE)
    absmax = np.max(np.abs(x), axis=1)
    cb = np.asarray(codebook, dtype=np.float32)
    if absmax_format == "float32":
        ts = 1.0
        scale = absmax
        stored = absmax.astype(np.float32)
    elif absmax_format == "e4m4":
        ts = choose_tensor_scale(absmax) if tensor_scale is None else float(tensor_scale)
        stored = e4m4_encode(absmax / np.float32(ts))
        scale = e4m4_decode(stored) * np.float32(ts)
    else:
        raise ValueError(f"absmax_format must be 'e4m4' or 'float32', got {absmax_format!r}")
    safe = np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)
    xn = np.where(scale[:, None] > 0, x / safe[:, None], np.float32(0.0)).astype(np.float32)
    idx = nearest_index(xn, cb)
    return pack_bitplanes(idx, k), stored, ts


def block_scales(absmax: np.ndarray, tensor_scale: float = 1.0) -> np.ndarray:
    a = np.asarray(absmax)
    if a.dtype == np.uint8:
        return e4m4_decode(a) * np.float32(tensor_scale)
    return a.astype(np.float32) * np.float32(tensor_scale)


def dequantize_flat(packed, absmax, codebook, k: int, shape, tensor_scale: float = 1.0,
                    dtype=np.float32) -> np.ndarray:
    N, K = shape
    idx = unpack_bitplanes(packed, k)
    cb = np.asarray(codebook, dtype=np.float32)
    w = cb[idx] * block_scales(absmax, tensor_scale)[:, None]
    return w.astype(np.float32).reshape(N, K).astype(dtype)


# ----------------------------------------------------------------------------- tiled layout
def tiled_dims(N: int, K: int):
    n_tiles = -(-N // TILE_N)
    k_tiles = -(-K // TILE_K)
    return n_tiles, k_tiles


def tiled_sizes(N: int, K: int, k: int):
    n_tiles, k_tiles = tiled_dims(N, K)
    nwords = k_tiles * n_tiles * TILE_N * KB_PER_TILE * k
    nabs = k_tiles * n_tiles * TILE_N * KB_PER_TILE
    return nwords, nabs


def _tile_maps(N: int, K: int, k: int):
    """Index maps flat block b=(n, kbg) -> tiled word base and absmax position."""
    n_tiles, _ = tiled_dims(N, K)
    kblocks = K // BLOCKSIZE
    n = np.arange(N)[:, None]
    kbg = np.arange(kblocks)[None, :]
    kt, kb = kbg // KB_PER_TILE, kbg % KB_PER_TILE
    nt, col = n // TILE_N, n % TILE_N
    tile = kt * n_tiles + nt
    slot = tile * (TILE_N * KB_PER_TILE) + col * KB_PER_TILE + kb  # absmax position
    return slot.reshape(-1)  # ordered like the flat blocks (n-major)


def repack(packed_flat, absmax_flat, k: int, shape, tensor_scale: float = 1.0):
    """Flat -> tiled.  float32 absmax is E4M4-encoded here (choosing a tensor scale)."""
    N, K = shape
    absmax_flat = np.asarray(absmax_flat)
    if absmax_flat.dtype != np.uint8:
        scales = absmax_flat.astype(np.float32) * np.float32(tensor_scale)
        tensor_scale = choose_tensor_scale(scales, "absmax")
        absmax_flat = e4m4_encode(scales / np.float32(tensor_scale))
    nwords, nabs = tiled_sizes(N, K, k)
    slot = _tile_maps(N, K, k)
    out_w = np.zeros((nabs, k), dtype=np.uint32)
    out_a = np.zeros(nabs, dtype=np.uint8)
    out_w[slot] = np.asarray(packed_flat).view(np.uint32).reshape(-1, k)
    out_a[slot] = absmax_flat
    return out_w.reshape(-1), out_a, tensor_scale


def unrepack(packed_tiled, absmax_tiled, k: int, shape):
    """Tiled -> flat (E4M4 absmax).  Padding is dropped."""
    N, K = shape
    slot = _tile_maps(N, K, k)
    w = np.asarray(packed_tiled).view(np.uint32).reshape(-1, k)[slot].reshape(-1)
    a = np.asarray(absmax_tiled)[slot]
    return np.ascontiguousarray(w), np.ascontiguousarray(a)


def dequantize_tiled(packed_tiled, absmax_tiled, codebook, k: int, shape, tensor_scale=1.0,
                     dtype=np.float32):
    pw, pa = unrepack(packed_tiled, absmax_tiled, k, shape)
    return dequantize_flat(pw, pa, codebook, k, shape, tensor_scale, dtype)


# ----------------------------------------------------------------------------- matmul
def matmul(A: np.ndarray, W_deq: np.ndarray, dtype=np.float64) -> np.ndarray:
    """C = A @ W^T in float64 (or the given dtype) from the dequantized weight."""
    return np.asarray(A).astype(dtype) @ np.asarray(W_deq).astype(dtype).T


def sqnr_db(ref: np.ndarray, approx: np.ndarray) -> float:
    ref = np.asarray(ref, dtype=np.float64)
    err = ref - np.asarray(approx, dtype=np.float64)
    return float(10.0 * np.log10(np.sum(ref * ref) / max(np.sum(err * err), 1e-300)))


def measure_scale_rounding(k: int, n: int = 1 << 20, seed: int = 0) -> dict:
    """SQNR (dB) of quantize-dequantize on Gaussian weights for the scale choices:
    exact float32 scale, E4M4 nearest with indices chosen against the decoded scale
    (the format's choice), E4M4 rounded up (nothing clips), and E4M4 nearest with
    indices chosen against the exact scale (what a naive encoder after the fact does)."""
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((n // 1024, 1024)).astype(np.float32) * 0.02
    cb = create_codebook(k)
    out = {}
    x = W.reshape(-1, BLOCKSIZE)
    absmax = np.abs(x).max(1)
    ts = choose_tensor_scale(absmax)
    for name, scale, pick in (
        ("float32", absmax, absmax),
        ("e4m4_nearest", e4m4_decode(e4m4_encode(absmax / ts)) * ts, None),
        ("e4m4_up", e4m4_decode(e4m4_encode(absmax / ts, "up")) * ts, None),
        ("e4m4_nearest_idx_vs_exact", e4m4_decode(e4m4_encode(absmax / ts)) * ts, absmax),
    ):
        pick = scale if pick is None else pick
        idx = nearest_index(x / pick[:, None], cb)
        deq = cb[idx] * scale[:, None]
        out[name] = sqnr_db(x, deq)
    return out
