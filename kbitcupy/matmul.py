"""matmul(A, qw): C = A @ W^T with W k-bit quantized; validation and kernel dispatch."""
from __future__ import annotations

import math

import numpy as np

from . import _launch as _fast
from . import reference as R
from . import gemv_stream as ST
from . import wgmma as WG
from ._arrays import ACT_DTYPES, cpu_result, from_backend, out_array, to_backend
from ._capture import gpu_call
from .dequant_matmul import dequant_matmul
from .dispatch import choose
from .gemm import gemm
from .gemv import MAX_M as GEMV_MAX_M, fits, gemv, reads as gemv_reads
from .weight import KbitWeight


def _dispatch_gpu(A, qw, out):
    """Run the kernel picked for this call from the measured crossovers (kbitcupy.dispatch);
    returns which one ran: 'gemv', 'stream', 'gemm', 'wgmma' or 'dq'."""
    M, K = A.shape
    # the flat layout has the GEMV (E4M4 or float32 absmax) and the dequantize path only (float16 absmax, an
    # interop format from_packed accepts, has no GEMV instantiation: dequantize)
    if qw.layout == "tiled":
        kind = choose(M, qw.shape[0], K, qw.k, A.dtype)
    else:
        kind = "gemv" if M <= GEMV_MAX_M and gemv_reads(qw) else "dq"
    return _run_kind(kind, A, qw, out)


def _run_kind(kind, A, qw, out):
    """Run kernel `kind` ('gemv' | 'stream' | 'wgmma' | 'gemm' | 'dq') on validated CuPy
    arrays, or the next one where it cannot run this call (the GEMV's plan not fitting -- its staged A
    too large, or k = 5 past 16 rows: the streaming GEMV, or dq for a flat weight; the streaming GEMV
    past its M or off sm_90: wgmma;
    wgmma off sm_90 or not fitting: kbit_gemm); returns which one ran."""
    M, K = A.shape
    N = qw.shape[0]
    tiled = qw.layout == "tiled"
    if kind == "gemv":
        if fits(N, K, M, qw.k, A.data.device_id, tiled):
            gemv(A, qw, out, validate=False)
            return "gemv"
        # (an unmeasured shape's band may name the GEMV past what fits: the streaming GEMV, then wgmma / kbit_gemm
        # where that cannot run either)
        kind = "stream" if tiled else "dq"
    if kind == "stream":
        if M <= ST.MAX_M and ST.supported(A.data.device_id):
            ST.gemv_stream(A, qw, out, validate=False)
            return "stream"
        kind = "wgmma"
    if kind == "wgmma":
        if WG.supported(A.data.device_id):
            try:
                WG.wgmma_gemm(A, qw, out, validate=False)
                return "wgmma"
            except WG.DoesNotFit:
                pass
        kind = "gemm"
    if kind == "gemm":
        gemm(A, qw, out, validate=False)
        return "gemm"
    dequant_matmul(A, qw, out, validate=False)
    return "dq"


def _check(A, qw: KbitWeight, out):
    if not isinstance(qw, KbitWeight):
        raise TypeError(f"qw must be a KbitWeight, got {type(qw).__name__}")
    if A.ndim < 1:
        raise ValueError("A must have at least one dimension (..., K)")
    N, K = qw.shape
    if A.shape[-1] != K:
        raise ValueError(f"A's last dimension ({A.shape[-1]}) must equal the weight's K ({K})")
    if A.dtype not in ACT_DTYPES:
        raise ValueError(f"A must be float16 or bfloat16, got {A.dtype}")
    if not A.flags.c_contiguous:
        raise ValueError("A must be C-contiguous")


def matmul(A, qw: KbitWeight, out=None):
    """C[..., N] = A[..., K] @ W^T.

    NumPy A with a CPU weight runs the reference (float32 result rounded to A's dtype).
    CuPy arrays or CUDA torch tensors run the kernels on the current stream (torch's
    current stream for torch tensors); torch in -> torch out.  ``out`` (same type and
    dtype as A, shape [..., N], contiguous) avoids the allocation.

    Repeated GEMV calls (same A shape and dtype, same weight object) launch through a
    cached plan (kbitcupy._launch: a few us of host time instead of ~16-25 us); every
    other call, and any call the plan's cheap re-checks reject, takes the path below.
    """
    if _fast.ENABLED:
        r = _fast.matmul_fast(A, qw, out)
        if r is not _fast.MISS:
            return r
    A_, kd = to_backend(A, "A")
    _check(A_, qw, None)
    lead = A_.shape[:-1]
    N, K = qw.shape
    M = math.prod(lead)
    if kd in ("numpy", "torch_cpu"):
        if qw.on_gpu:
            raise ValueError("A is on the CPU but the weight is on the GPU; move one of them")
        from .quantize import dequantize

        Wd = dequantize(qw, np.float32)
        C = (A_.reshape(M, K).astype(np.float32) @ Wd.T).astype(A_.dtype).reshape(lead + (N,))
        return cpu_result(C, out, kd, {"A": A_})
    if not qw.on_gpu:
        raise ValueError("A is on the GPU but the weight is on the CPU; call qw.cuda()")
    if A_.data.device_id != qw.packed.data.device_id:
        raise ValueError(f"A is on device {A_.data.device_id} but the weight on device {qw.packed.data.device_id}")
    if A_.data.ptr % 16:
        raise ValueError("A's data pointer must be 16-byte aligned")
    with gpu_call(A):
        out_ = out_array(out, lead + (N,), A_.dtype, inputs={"A": A_, "qw.packed": qw.packed, "qw.absmax": qw.absmax})
        if M == 0:
            return out if out is not None else from_backend(out_, kd)
        if A_.ndim == 2:  # the common case: no reshaped views to build
            A2, o2 = A_, out_
        else:
            A2, o2 = A_.reshape(M, K), out_.reshape(M, N)
        kind = _dispatch_gpu(A2, qw, o2)
        if kind in ("gemv", "stream") and _fast.ENABLED:
            _fast.remember(A, qw, out, A2, o2, kind)  # fully validated: plan for the next calls
        # (a torch result is handed over on the call's device and stream)
        return out if out is not None else from_backend(out_, kd)


def reference_matmul(A, qw: KbitWeight) -> np.ndarray:
    """float64 oracle: A (as given) times the float64 dequantized weight."""
    from .quantize import dequantize

    q = qw.cpu()
    Wd = dequantize(q, np.float32).astype(np.float64)
    A_, _ = to_backend(A, "A")
    A_ = A_.get() if hasattr(A_, "get") else np.asarray(A_)
    return R.matmul(A_.astype(np.float32), Wd)
