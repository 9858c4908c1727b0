"""Large-M path: dequantize the weight into a reused buffer, then one cuBLAS GEMM.

out[M, N] = A[M, K] @ Wd[N, K]^T with Wd = dequantize(qw) in A's dtype (tensor_scale
included), fp32 accumulation (CUBLAS_COMPUTE_32F), fp16 or bf16 in and out.

cuBLAS is called directly (cublasGemmEx through cupy_backends), not through
cupy.matmul, which refuses cuBLAS during stream capture.  In cuBLAS' column-major
terms the row-major product is C^T[N, M] = Wd * A^T: transa = T on Wd (lda = K),
transb = N on A (ldb = K), ldc = N.  The handle (CuPy's per-thread handle of the
current device) gets the current stream before every call, host pointer mode for
alpha/beta (restored afterwards), so the call is capturable in a CUDA graph.

Buffers: one dequantization buffer per (device, stream, dtype), as large as the
largest weight seen on it (a view of its first N*K elements serves smaller weights).
Work on one stream is ordered, so it can share the buffer; two streams get two.
When a larger weight arrives the buffer is replaced, and the old one is kept alive
(``_RETIRED``) because a CUDA graph captured earlier may still write into it;
``release_buffers()`` drops everything (call it only when no graph or pending
kernel uses them).  The first call for a (stream, dtype) must not be inside a
capture if the buffer has to grow (``reserve`` sizes it ahead of a capture).
"""
from __future__ import annotations

import numpy as np

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
    """Size the current (or given) stream's buffer for an [N, K] weight ahead of a graph capture."""
    import cupy as cp

    stream = stream or cp.cuda.get_current_stream()
    _buffer(cp.cuda.Device().id, stream, dtype, N * K)


def release_buffers():
    _BUFFERS.clear()
    _RETIRED.clear()


def cublas_gemm_nt(A, W, out):
    """out[M, N] = A[M, K] @ W[N, K]^T (row-major, fp16/bf16, fp32 accumulation) on the
    current stream with cublasGemmEx; capturable."""
    import cupy as cp
    from cupy_backends.cuda.libs import cublas

    M, K = A.shape
    N = W.shape[0]
    dt = _CUDA_R_16BF if A.dtype == bfloat16 else _CUDA_R_16F
    handle = cp.cuda.device.get_cublas_handle()
    cublas.setStream(handle, cp.cuda.get_current_stream().ptr)
    mode = cublas.getPointerMode(handle)
    if mode != cublas.CUBLAS_POINTER_MODE_HOST:
        cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    try:
        cublas.gemmEx(handle, cublas.CUBLAS_OP_T, cublas.CUBLAS_OP_N, N, M, K,
                      _ONE.ctypes.data, W.data.ptr, dt, K, A.data.ptr, dt, K,
                      _ZERO.ctypes.data, out.data.ptr, dt, N,
                      cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_GEMM_DEFAULT)
    finally:
        if mode != cublas.CUBLAS_POINTER_MODE_HOST:
            cublas.setPointerMode(handle, mode)
    return out


def dequant_matmul(A, qw, out):
    """out[M, N] = A[M, K] @ W^T: dequantize (tiled or flat weight) into the reused buffer,
    then cuBLAS.  A, out: contiguous CuPy fp16/bf16 arrays of one dtype (validated by matmul)."""
    import cupy as cp

    from .quantize import dequantize

    M, K = A.shape
    N = qw.shape[0]
    if M == 0:
        return out
    stream = cp.cuda.get_current_stream()
    buf = _buffer(A.device.id, stream, A.dtype, N * K)
    Wd = buf[: N * K].reshape(N, K)
    dequantize(qw, A.dtype, out=Wd)
    return cublas_gemm_nt(A, Wd, out)
