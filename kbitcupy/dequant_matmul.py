"""Large-M path: dequantize the tiled weight into a reused buffer, then cuBLAS."""
from __future__ import annotations

_BUFFERS: dict = {}


def dequant_matmul(A, qw, out):
    import cupy as cp

    from .quantize import dequantize

    key = (A.device.id, qw.shape, A.dtype.str)
    buf = _BUFFERS.get(key)
    if buf is None:
        buf = _BUFFERS[key] = cp.empty(qw.shape, dtype=A.dtype)
    dequantize(qw, A.dtype, out=buf)
    cp.matmul(A, buf.T, out=out)
    return out
