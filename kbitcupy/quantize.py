"""quantize / dequantize / repack: NumPy reference on CPU arrays, CUDA kernels on GPU arrays."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import reference as R
from ._arrays import cpu_result, from_backend, is_torch, normalize_dtype, out_array, stream_ctx, to_backend
from ._compile import Family, register
from .weight import KbitWeight, note_codebook

# ----------------------------------------------------------------------------- kernels
CTYPE = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "uint8": "unsigned char"}
_T = ("float16", "bfloat16", "float32")


def _instances():
    inst = {}
    for k in (2, 3, 4, 5):
        for t in _T:
            for a in ("uint8", "float32"):
                inst[("q", t, k, a)] = f"kbit_quantize<{CTYPE[t]}, {k}, {CTYPE[a]}>"
        for t in _T:
            for a in ("uint8", "float32", "float16"):
                inst[("dq", k, t, a, False)] = f"kbit_dequantize<{k}, {CTYPE[t]}, {CTYPE[a]}, false>"
            inst[("dq", k, t, "uint8", True)] = f"kbit_dequantize<{k}, {CTYPE[t]}, unsigned char, true>"
            if t != "float32":
                inst[("dqt", k, t)] = f"kbit_dequant_tile<{k}, {CTYPE[t]}>"
        for a in ("uint8", "float32"):
            inst[("rp", k, a)] = f"kbit_repack<{k}, {CTYPE[a]}>"
    return inst


QUANT = register("quant", Family("kbit_quant.cu", _instances(), group_of=lambda key: (key[0], key[1] if key[0] != "q" else key[2])))


def _dname(dt) -> str:
    from ._arrays import dtype_name

    return dtype_name(dt)


def _grid(work: int, threads: int = 256) -> int:
    return int(max(1, min((work + threads - 1) // threads, 132 * 16)))


# ----------------------------------------------------------------------------- checks
def _check_weight_input(W, name="W"):
    if W.ndim != 2:
        raise ValueError(f"{name} must be 2-D [N, K] (PyTorch Linear layout), got shape {tuple(W.shape)}")
    N, K = W.shape
    if N == 0 or K == 0:
        raise ValueError(f"{name} is empty (shape {tuple(W.shape)})")
    if K % R.BLOCKSIZE:
        raise ValueError(f"{name}: K = {K} must be a multiple of 32 (the quantization block size)")
    if _dname(W.dtype) not in _T + ("float64",):
        raise ValueError(f"{name} must be float16, bfloat16, float32 or float64, got {_dname(W.dtype)}")
    if not W.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (row-major [N, K])")


def _check_codebook(codebook, k, xp):
    if codebook is None:
        return _on(xp, R.create_codebook(k))
    cb, _ = to_backend(codebook, "codebook")
    cb = np.asarray(cb.get() if hasattr(cb, "get") else cb, dtype=np.float32)
    if cb.shape != (1 << k,):
        raise ValueError(f"codebook must have 2^k = {1 << k} entries for k={k}, got shape {cb.shape}")
    if not np.all(np.isfinite(cb)) or np.abs(cb).max() > 1.0:
        raise ValueError("codebook levels must be finite and lie in [-1, 1]")
    return _on(xp, cb)


def _on(xp, cb):
    """The host codebook cb on xp's device; a GPU copy is noted as default or not (no read-back)."""
    out = xp.asarray(cb)
    if xp is not np:
        note_codebook(out, cb)
    return out


# ----------------------------------------------------------------------------- public API
def quantize(W, k: int = 4, codebook=None, layout: str = "tiled", absmax_format: str = "e4m4") -> KbitWeight:
    """Quantize W[N, K] (PyTorch Linear layout) to k bits.

    layout='tiled' (the runtime format every matmul kernel reads) or 'flat';
    absmax_format='e4m4' (1 byte per block; required for tiled) or 'float32' (flat only).
    NaN/Inf weights raise ValueError (they have no k-bit representation), and so do magnitudes
    of 3.35e38 and above with E4M4 absmax (reference.ABSMAX_LIMIT: the scale would round to inf).
    NumPy input runs the reference; CuPy arrays or CUDA torch tensors run the kernels.
    """
    k = R.check_k(k)
    if layout not in ("flat", "tiled"):
        raise ValueError(f"layout must be 'flat' or 'tiled', got {layout!r}")
    if absmax_format not in ("e4m4", "float32"):
        raise ValueError(f"absmax_format must be 'e4m4' or 'float32', got {absmax_format!r}")
    if layout == "tiled" and absmax_format != "e4m4":
        raise ValueError("the tiled layout stores E4M4 absmax; use absmax_format='e4m4'")
    Wa, kd = to_backend(W, "W")
    _check_weight_input(Wa)
    src_dtype = Wa.dtype if _dname(Wa.dtype) in _T else np.dtype(np.float32)
    if kd in ("numpy", "torch_cpu"):
        x = np.asarray(Wa, dtype=np.float32)
        if not np.all(np.isfinite(x)):
            raise ValueError("W contains NaN or Inf; they cannot be quantized")
        cb = _check_codebook(codebook, k, np)
        packed, absmax, ts = R.quantize_flat(x, k, cb, absmax_format)
        qw = KbitWeight(packed, absmax, cb, k, tuple(Wa.shape), "flat", ts, src_dtype)
        return repack(qw) if layout == "tiled" else qw
    with stream_ctx(W):
        return _quantize_gpu(Wa, k, codebook, layout, absmax_format, src_dtype)


def _quantize_gpu(W, k, codebook, layout, absmax_format, src_dtype):
    import cupy as cp

    from ._arrays import check_same_device

    cb = _check_codebook(codebook, k, cp)
    check_same_device(W=W, codebook=cb)
    if _dname(W.dtype) == "float64":
        W = W.astype(cp.float32)
    N, K = W.shape
    nblocks = N * K // R.BLOCKSIZE
    blk_amax = cp.abs(W.reshape(nblocks, R.BLOCKSIZE).astype(cp.float32)).max(axis=1)
    amax, amin_nz = (float(v) for v in cp.stack([blk_amax.max(), cp.where(blk_amax > 0, blk_amax, cp.inf).min()]).get())
    if not np.isfinite(amax):
        raise ValueError("W contains NaN or Inf; they cannot be quantized")
    if absmax_format == "e4m4":
        ts = R.choose_tensor_scale(np.array([amax, amin_nz if np.isfinite(amin_nz) else amax], np.float32))
        absmax = cp.empty(nblocks, dtype=cp.uint8)
    else:
        ts = 1.0
        absmax = cp.empty(nblocks, dtype=cp.float32)
    packed = cp.empty(nblocks * k, dtype=cp.uint32)
    fn = QUANT.function(("q", _dname(W.dtype), k, _dname(absmax.dtype)))
    fn((_grid(nblocks, 8),), (256,), (W, cb, packed, absmax, np.int64(nblocks), np.float32(ts)))
    qw = KbitWeight(packed, absmax, cb, k, (N, K), "flat", ts, src_dtype)
    return repack(qw) if layout == "tiled" else qw


def repack(qw: KbitWeight) -> KbitWeight:
    """Flat -> tiled (the runtime layout).  float32 absmax is E4M4-encoded here."""
    if not isinstance(qw, KbitWeight):
        raise TypeError(f"qw must be a KbitWeight, got {type(qw).__name__}")
    qw.validate()
    if qw.layout == "tiled":
        return qw
    if not qw.on_gpu:
        packed, absmax, ts = R.repack(qw.packed, qw.absmax, qw.k, qw.shape, qw.tensor_scale)
        return replace(qw, packed=packed, absmax=absmax, layout="tiled", tensor_scale=ts)
    with stream_ctx(qw.packed):  # on the weight's device
        return _repack_gpu(qw)


def _repack_gpu(qw: KbitWeight) -> KbitWeight:
    import cupy as cp

    N, K = qw.shape
    absmax = qw.absmax
    ts = qw.tensor_scale
    if absmax.dtype != np.uint8:
        a32 = absmax.astype(cp.float32) * np.float32(ts)
        amax, amin, lo = (float(v) for v in cp.stack([a32.max(), cp.where(a32 > 0, a32, cp.inf).min(),
                                                      a32.min()]).get())
        # with the least scale, so a negative one is refused by name like NaN / Inf (CuPy's max propagates NaN)
        ts = R.choose_tensor_scale(np.array([amax, amin if np.isfinite(amin) else amax, min(lo, 0.0)], np.float32),
                                   "absmax")
        absmax = a32
    nw, na = R.tiled_sizes(N, K, qw.k)
    packed_t = cp.empty(nw, dtype=cp.uint32)
    absmax_t = cp.empty(na, dtype=cp.uint8)
    fn = QUANT.function(("rp", qw.k, _dname(absmax.dtype)))
    fn((_grid(na),), (256,), (qw.packed, absmax, packed_t, absmax_t, np.int32(N), np.int32(K), np.float32(1.0 / ts)))
    return replace(qw, packed=packed_t, absmax=absmax_t, layout="tiled", tensor_scale=ts)


def dequantize(qw: KbitWeight, dtype=None, out=None):
    """Dequantize to W[N, K] in float16 / bfloat16 / float32 (default: the source dtype)."""
    if not isinstance(qw, KbitWeight):
        raise TypeError(f"qw must be a KbitWeight, got {type(qw).__name__}")
    qw.validate()
    dt = normalize_dtype(dtype) if dtype is not None else np.dtype(qw.dtype)
    N, K = qw.shape
    if not qw.on_gpu:
        ref = R.dequantize_flat if qw.layout == "flat" else R.dequantize_tiled
        r = ref(qw.packed, qw.absmax, qw.codebook, qw.k, qw.shape, qw.tensor_scale, dt)
        return cpu_result(r, out, "numpy", {"qw.packed": qw.packed, "qw.absmax": qw.absmax})
    # on the weight's device; a torch out= is written on torch's current stream
    with stream_ctx(out if is_torch(out) and out.is_cuda else qw.packed):
        o = out_array(out, (N, K), dt, inputs={"qw.packed": qw.packed, "qw.absmax": qw.absmax})
        if o.data.device_id != qw.packed.data.device_id:
            raise ValueError(f"out is on device {o.data.device_id} but the weight on device {qw.packed.data.device_id}")
        if o.data.ptr % 16:  # the kernel stores 8 elements as 16-byte vectors: misaligned, it faults the context
            raise ValueError("out's data pointer must be 16-byte aligned")
        fn = QUANT.function(("dq", qw.k, _dname(dt), _dname(qw.absmax.dtype), qw.layout == "tiled"))
        fn((_grid(N * K // 8),), (256,), (qw.packed, qw.absmax, qw.codebook, o, np.int32(N), np.int32(K),
                                           np.float32(qw.tensor_scale)))
    return o if out is None else out  # out= comes back as given (a torch tensor stays one)


# ----------------------------------------------------------------------------- seed-named low level
def quantize_kbit(W, k: int = 4, codebook=None, absmax_format: str = "e4m4"):
    """Flat quantize: returns (packed uint32, absmax, codebook, tensor_scale) in W's array type."""
    Wa, kd = to_backend(W, "W")
    qw = quantize(W, k, codebook, layout="flat", absmax_format=absmax_format)
    return (from_backend(qw.packed, kd), from_backend(qw.absmax, kd), from_backend(qw.codebook, kd), qw.tensor_scale)


def dequantize_kbit(packed, absmax, codebook, k: int, shape, dtype=np.float16, layout: str = "flat",
                    tensor_scale: float = 1.0):
    from .weight import from_packed

    _, kd = to_backend(packed, "packed")
    qw = from_packed(packed, absmax, codebook, shape, k, layout, tensor_scale)
    return from_backend(dequantize(qw, dtype), kd)


def repack_kbit(packed, absmax, codebook, k: int, shape, tensor_scale: float = 1.0):
    """Flat -> tiled: returns (packed_tiled, absmax_tiled uint8, tensor_scale)."""
    from .weight import from_packed

    _, kd = to_backend(packed, "packed")
    qw = repack(from_packed(packed, absmax, codebook, shape, k, "flat", tensor_scale))
    return from_backend(qw.packed, kd), from_backend(qw.absmax, kd), qw.tensor_scale
