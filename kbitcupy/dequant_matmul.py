"""Large-M path: dequantize the weight into a reused buffer, then one cuBLAS GEMM.

out[M, N] = A[M, K] @ Wd[N, K]^T with Wd = dequantize(qw) in A's dtype (tensor_scale
included), fp32 accumulation (CUBLAS_COMPUTE_32F), fp16 or bf16 in and out.

cuBLAS is called through ctypes on libcublas itself (the library CuPy loads), with a
handle of our own per (thread, device): CuPy refuses cuBLAS during stream capture at
every level (cupy.matmul and cupy_backends' setStream/gemmEx raise
NotImplementedError while the stream is capturing), while cuBLAS itself supports
capture.  Before every call the handle gets the current stream and a workspace of
our own (cublasSetStream resets the workspace to cuBLAS' default pool, which may
allocate), so the call is capturable in a CUDA graph.  In cuBLAS' column-major
terms the row-major product is C^T[N, M] = Wd * A^T: transa = T on Wd (lda = K),
transb = N on A (ldb = K), ldc = N; alpha = 1, beta = 0 as host float32.

Buffers: one dequantization buffer and one cuBLAS workspace per (device, stream,
dtype) / (device, stream); the dequantization buffer is as large as the largest
weight seen on it (a view of its first N*K elements serves smaller weights).  Work
on one stream is ordered, so it can share them; two streams get two.  When a larger
weight arrives the buffer is replaced and the old one kept alive (``_RETIRED``)
because a CUDA graph captured earlier may still write into it;
``release_buffers()`` drops everything (call it only when no graph or pending kernel
uses them).  The first call on a stream (handle, workspace, buffer) must not be
inside a capture; ``reserve`` prepares a stream ahead of a capture.
"""
from __future__ import annotations

import threading

import numpy as np

from ._checks import check_kernel_call
from .reference import bfloat16

_BUFFERS: dict = {}
_RETIRED: list = []
_ONE = np.ones(1, dtype=np.float32)   # host alpha / beta for CUBLAS_COMPUTE_32F
_ZERO = np.zeros(1, dtype=np.float32)
_CUDA_R_16F = 2
_CUDA_R_16BF = 14


def _buffer(dev: int, stream, dtype, n: int):
    key = (dev, stream.ptr, np.dtype(dtype).str if np.dtype(dtype) != bfloat16 else "bf16")
    buf = _BUFFERS.get(key)
    if buf is None or buf.size < n:
        if stream.is_capturing():
            raise RuntimeError("kbitcupy.dequant_matmul: the dequantization buffer must grow during CUDA graph "
                               "capture; run the same call once before capturing, or call reserve(...) first")
        import cupy as cp

        if buf is not None:
            _RETIRED.append(buf)
        buf = cp.empty(n, dtype=dtype)
        _BUFFERS[key] = buf
    return buf


def reserve(N: int, K: int, dtype=np.float16, stream=None):
    """Prepare the current (or given) stream for an [N, K] weight ahead of a graph capture:
    dequantization buffer, cuBLAS handle and workspace."""
    import cupy as cp

    stream = stream or cp.cuda.get_current_stream()
    dev = cp.cuda.Device().id
    _buffer(dev, stream, dtype, N * K)
    _handle(dev)
    _cublas_workspace(dev, stream)


def release_buffers():
    _BUFFERS.clear()
    _RETIRED.clear()


# ----------------------------------------------------------------------------- cuBLAS via ctypes
_LIB: list = []
_TLS = threading.local()
_WORKSPACES: dict = {}
_CUBLAS_OP_N, _CUBLAS_OP_T = 0, 1
_CUBLAS_COMPUTE_32F = 68
_CUBLAS_GEMM_DEFAULT = -1


def _cublas_lib():
    if _LIB:
        return _LIB[0]
    import ctypes
    import importlib

    paths = []
    try:  # load the libcublas CuPy uses (CuPy >= 14 finds it through cuda.pathfinder)
        importlib.import_module("cupy_backends.cuda.libs.cublas")
    except Exception:
        pass
    try:
        from cuda import pathfinder

        p = pathfinder.load_nvidia_dynamic_lib("cublas").abs_path
        if p:
            paths.append(p)
    except Exception:
        pass
    paths += ["libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"]
    lib, errors = None, []
    for p in paths:
        try:
            lib = ctypes.CDLL(p)
            break
        except OSError as e:
            errors.append(str(e))
    if lib is None:
        raise RuntimeError("kbitcupy: cannot load libcublas: " + "; ".join(errors))
    vp, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    for name, args in (("cublasCreate_v2", [ctypes.POINTER(vp)]),
                       ("cublasSetStream_v2", [vp, vp]),
                       ("cublasSetWorkspace_v2", [vp, vp, sz]),
                       ("cublasSetPointerMode_v2", [vp, i]),
                       ("cublasGemmEx", [vp, i, i, i, i, i, vp, vp, i, i, vp, i, i, vp, vp, i, i, i, i])):
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = i
    _LIB.append(lib)
    return lib


def _check(status, what):
    if status != 0:
        raise RuntimeError(f"{what} failed with cuBLAS status {status}")


def _handle(dev: int, stream=None):
    """This thread's cuBLAS handle for device `dev` (host pointer mode)."""
    import ctypes

    handles = getattr(_TLS, "handles", None)
    if handles is None:
        handles = _TLS.handles = {}
    h = handles.get(dev)
    if h is None:
        import cupy as cp

        if stream is not None and stream.is_capturing():
            raise RuntimeError("kbitcupy.dequant_matmul: first call of this thread inside a CUDA graph capture; "
                               "run it once before capturing, or call reserve(...) first")

        lib = _cublas_lib()
        hv = ctypes.c_void_p()
        with cp.cuda.Device(dev):
            _check(lib.cublasCreate_v2(ctypes.byref(hv)), "cublasCreate")
        _check(lib.cublasSetPointerMode_v2(hv, 0), "cublasSetPointerMode")  # CUBLAS_POINTER_MODE_HOST
        h = handles[dev] = hv
    return h


def _cublas_workspace(dev: int, stream):
    key = (dev, stream.ptr)
    ws = _WORKSPACES.get(key)
    if ws is None:
        import cupy as cp

        if stream.is_capturing():
            raise RuntimeError("kbitcupy.dequant_matmul: first call on this stream inside a CUDA graph capture; "
                               "run it once before capturing, or call reserve(...) first")
        major = cp.cuda.Device(dev).compute_capability[:-1]
        size = (32 << 20) if int(major) >= 9 else (4 << 20)  # cuBLAS' recommended sizes
        ws = _WORKSPACES[key] = cp.empty(size, dtype=cp.uint8)
    return ws


_ALPHAS: dict = {1.0: _ONE}  # host float32 scalars by value (cuBLAS reads them at enqueue time)


def _alpha(v: float):
    a = _ALPHAS.get(v)
    if a is None:
        a = _ALPHAS[v] = np.full(1, v, dtype=np.float32)
    return a


def cublas_gemm_nt(A, W, out, alpha: float = 1.0):
    """out[M, N] = alpha * A[M, K] @ W[N, K]^T (row-major, fp16/bf16, fp32 accumulation) on
    the current stream with cublasGemmEx; capturable once the stream has been used."""
    import ctypes

    import cupy as cp

    M, K = A.shape
    N = W.shape[0]
    dt = _CUDA_R_16BF if A.dtype == bfloat16 else _CUDA_R_16F
    dev = A.device.id
    stream = cp.cuda.get_current_stream()
    lib = _cublas_lib()
    h = _handle(dev, stream)
    ws = _cublas_workspace(dev, stream)
    _check(lib.cublasSetStream_v2(h, ctypes.c_void_p(stream.ptr)), "cublasSetStream")
    _check(lib.cublasSetWorkspace_v2(h, ctypes.c_void_p(ws.data.ptr), ws.nbytes), "cublasSetWorkspace")
    _check(lib.cublasGemmEx(h, _CUBLAS_OP_T, _CUBLAS_OP_N, N, M, K,
                            _alpha(alpha).ctypes.data, W.data.ptr, dt, K, A.data.ptr, dt, K,
                            _ZERO.ctypes.data, out.data.ptr, dt, N,
                            _CUBLAS_COMPUTE_32F, _CUBLAS_GEMM_DEFAULT), "cublasGemmEx")
    return out


# ----------------------------------------------------------------------------- dequantize
_LUT_LAUNCH: dict = {}  # (device, k, dtype name) -> (kernel, max grid, dynamic shared memory)
_ROW_BYTES = 2 * 128 * 144  # kbit_dequant_tile's two row buffers


def _lut_needs(qw) -> bool:
    return qw.layout == "tiled" and qw.absmax.dtype == np.uint8


def _dequant_lut(qw, dtype_name: str, out, dev: int):
    """Launch kbit_dequant_tile on the current stream (arguments already checked)."""
    key = (dev, qw.k, dtype_name)
    launch = _LUT_LAUNCH.get(key)
    if launch is None:
        from .gemm import device_info
        from .gemv import lut_bytes
        from .quantize import QUANT

        fn = QUANT.function(("dqt", qw.k, dtype_name))
        smem = lut_bytes(qw.k) + 128 + _ROW_BYTES  # pair table + codebook + row buffers
        if smem > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = smem
        info = device_info(dev)
        per_sm = max(1, min(8, info["smem_sm"] // (smem + info["smem_reserved"])))  # 256-thread CTAs
        launch = _LUT_LAUNCH[key] = (fn, info["sms"] * per_sm, smem)
    fn, grid, smem = launch
    N, K = qw.shape
    tiles = ((N + 127) // 128) * ((K + 63) // 64)
    fn((min(tiles, grid),), (256,), (qw.packed, qw.absmax, qw.codebook, out, np.int32(N), np.int32(K)), shared_mem=smem)
    return out


def dequant_lut(qw, dtype_name: str, out):
    """out[N, K] = W / tensor_scale (tiled weight, E4M4 absmax) with the pair-table kernel
    (cuda_src/kbit_quant.cu, kbit_dequant_tile): the fused kernels' operand arithmetic, within
    fp16/bf16 rounding of kbitcupy.dequantize (which is bit-exact with the reference)."""
    N, K = qw.shape
    if not _lut_needs(qw):
        raise ValueError("dequant_lut needs a tiled weight with E4M4 absmax (kbitcupy.repack)")
    if out.shape != (N, K) or not out.flags.c_contiguous or out.data.ptr % 16:
        raise ValueError(f"out must be a contiguous, 16-byte aligned [{N}, {K}] array")
    return _dequant_lut(qw, dtype_name, out, out.device.id)


def dequant_matmul(A, qw, out, *, validate=True):
    """out[M, N] = A[M, K] @ W^T: dequantize (tiled or flat weight) into the reused buffer,
    then cuBLAS.  A, out: contiguous CuPy fp16/bf16 arrays of one dtype (validate=False:
    already checked, as kbitcupy.matmul does).
    A tiled weight with E4M4 absmax goes through dequant_lut (gate/up k = 4 on an H200,
    2026-11-25: 7.6 us against kbitcupy.dequantize's 12.7) and the tensor scale becomes
    cuBLAS' alpha."""
    import cupy as cp

    if validate:
        check_kernel_call(A, qw, out, "dequant_matmul")

    from .quantize import dequantize

    M, K = A.shape
    N = qw.shape[0]
    if M == 0:
        return out
    stream = cp.cuda.get_current_stream()
    buf = _buffer(A.device.id, stream, A.dtype, N * K)
    Wd = buf[: N * K].reshape(N, K)
    if _lut_needs(qw):  # Wd: a contiguous view of the 16-byte aligned buffer
        _dequant_lut(qw, "bfloat16" if A.dtype == bfloat16 else "float16", Wd, A.device.id)
        return cublas_gemm_nt(A, Wd, out, alpha=float(qw.tensor_scale))
    dequantize(qw, A.dtype, out=Wd)
    return cublas_gemm_nt(A, Wd, out)
