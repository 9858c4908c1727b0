"""torch integration: the ``kbitcupy::matmul`` custom op and an nn.Module around KbitLinear.

The op takes the weight as plain tensors (packed words viewed as int32, E4M4 absmax
uint8, float32 codebook) plus k, N and the tensor scale, so torch.compile treats it
as one opaque node (``register_fake`` gives the output shape): fullgraph=True works.
Inside, CUDA tensors are viewed zero-copy as CuPy arrays (DLPack) and the kernels run
on torch's current stream; the output is allocated by torch, so under CUDA-graph
capture it comes from the graph's pool and the decode GEMV path (M <= 8) launches
without allocating or synchronising.  CPU tensors run the NumPy reference.

    import torch, kbitcupy.torch_ops as kt
    model = kt.replace_linear(model, k=4)          # every nn.Linear -> KbitLinearModule
    model = torch.compile(model, fullgraph=True)
"""
from __future__ import annotations

import weakref
from typing import Optional, Sequence

import torch
from torch import Tensor

from . import _launch
from ._arrays import kind, stream_ctx
from .layers import KbitLinear
from .matmul import matmul
from .weight import KbitWeight, from_packed, no_codebook_reads

if not hasattr(torch.library, "custom_op"):  # pragma: no cover
    raise ImportError(f"kbitcupy.torch_ops needs torch >= 2.4 (torch.library.custom_op); found {torch.__version__}")


# Weights the op will meet again, by device and address of their packed words
# (KbitLinearModule registers its own).  The op then hands matmul the same KbitWeight
# object call after call, so matmul's fast launch path keeps its plan: 5-9 us of host
# time instead of a new wrapper and the general path per call (~100 us).  Weak values:
# an entry goes with its weight, whose arrays hold the memory the key names.
_KNOWN: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def register_weight(qw: KbitWeight) -> None:
    """Let kbitcupy::matmul reuse this (tiled, GPU) weight object when called on its tensors."""
    if qw.layout == "tiled" and kind(qw.packed) == "cupy":
        _KNOWN[(qw.packed.data.device_id, qw.packed.data.ptr)] = qw


def _known_weight(packed: Tensor, absmax: Tensor, codebook: Tensor, k: int, n: int, K: int, tensor_scale: float):
    if not packed.is_cuda:
        return None
    qw = _KNOWN.get((packed.get_device(), packed.data_ptr()))
    if (qw is None or qw.k != k or qw.shape != (n, K) or qw.tensor_scale != tensor_scale
            or qw.packed.size != packed.numel() or qw.absmax.data.ptr != absmax.data_ptr()
            or qw.codebook.data.ptr != codebook.data_ptr()):
        return None
    return qw


@torch.library.custom_op("kbitcupy::matmul", mutates_args=())
def kbit_matmul(x: Tensor, packed: Tensor, absmax: Tensor, codebook: Tensor, k: int, n: int,
                tensor_scale: float) -> Tensor:
    """y[..., n] = x[..., K] @ W^T for a tiled k-bit W[n, K] given as its tensors."""
    out = x.new_empty((*x.shape[:-1], n))
    if out.numel() == 0:
        return out
    x = x.contiguous()
    qw = _known_weight(packed, absmax, codebook, k, n, x.shape[-1], tensor_scale)
    if qw is not None and _launch.ENABLED and _launch.matmul_fast(x, qw, out) is not _launch.MISS:
        return out  # launched on torch's current stream through a cached plan
    with stream_ctx(x):  # DLPack views + launches on torch's current stream: no cross-stream sync
        if qw is None:  # a wrapper per call: no codebook read-back (a host sync) for it
            with no_codebook_reads():
                qw = from_packed(packed, absmax, codebook, (n, x.shape[-1]), k, "tiled", tensor_scale)
        matmul(x, qw, out=out)
    return out


@kbit_matmul.register_fake
def _(x, packed, absmax, codebook, k, n, tensor_scale):
    return x.new_empty((*x.shape[:-1], n))


def kbit_linear(x: Tensor, packed: Tensor, absmax: Tensor, codebook: Tensor, k: int, n: int, tensor_scale: float,
                bias: Optional[Tensor] = None) -> Tensor:
    """The custom op plus a float32 bias add rounded to x's dtype (as KbitLinear does on CuPy)."""
    y = kbit_matmul(x, packed, absmax, codebook, k, n, tensor_scale)
    if bias is not None:
        y = (y.float() + bias).to(x.dtype)
    return y


class KbitLinearModule(torch.nn.Module):
    """nn.Module face of a KbitLinear: weight tensors are buffers (zero-copy views of
    the KbitLinear's arrays), forward is the custom op (+ bias)."""

    def __init__(self, layer: KbitLinear):
        super().__init__()
        packed, absmax, codebook, self.k, self.out_features, self.tensor_scale, bias = layer.torch_tensors()
        self.in_features = layer.in_features
        self.splits = layer.splits
        self.register_buffer("packed", packed)
        self.register_buffer("absmax", absmax)
        self.register_buffer("codebook", codebook.view(torch.int32))  # int bits: model.half() leaves it alone
        self.register_buffer("bias", bias)
        self.layer = layer  # keeps the CuPy arrays the buffers view alive
        register_weight(layer.weight)  # the op reuses this weight object (fast launch path)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, k: int = 4, codebook=None) -> "KbitLinearModule":
        """Quantize an nn.Linear (on its device: CUDA -> kernels, CPU -> reference)."""
        w = linear.weight.detach().contiguous()
        b = linear.bias.detach() if linear.bias is not None else None
        return cls(KbitLinear.from_float(w, b, k=k, codebook=codebook))

    @classmethod
    def from_float(cls, weight, bias=None, k: int = 4, codebook=None, device=None) -> "KbitLinearModule":
        return cls(KbitLinear.from_float(weight, bias, k, codebook, device))

    @classmethod
    def from_quantized(cls, weight, bias=None, device=None) -> "KbitLinearModule":
        return cls(KbitLinear.from_quantized(weight, bias, device))

    def forward(self, x: Tensor) -> Tensor:
        return kbit_linear(x, self.packed, self.absmax, self.codebook.view(torch.float32), self.k, self.out_features, self.tensor_scale,
                           self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, k={self.k}"


def replace_linear(module: torch.nn.Module, k: int = 4, skip: Sequence[str] = ("lm_head",),
                   codebook=None) -> torch.nn.Module:
    """Swap every nn.Linear (in_features a multiple of 32, name not containing a string
    of ``skip``) for a KbitLinearModule, in place; returns the module."""
    for name, child in list(module.named_modules()):
        for cname, c in list(child.named_children()):
            full = f"{name}.{cname}" if name else cname
            if isinstance(c, torch.nn.Linear) and c.in_features % 32 == 0 and not any(s in full for s in skip):
                setattr(child, cname, KbitLinearModule.from_linear(c, k, codebook))
    return module
