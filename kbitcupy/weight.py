"""The quantized weight object."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import reference as R
from ._arrays import is_cupy, kind, to_backend

LAYOUTS = ("flat", "tiled")
FORMAT_VERSION = 1


@dataclass(frozen=True)
class KbitWeight:
    """k-bit quantized W[N, K] (PyTorch Linear layout).

    packed:   uint32 bit-plane words, flat [N*K/32*k] or tiled (see reference.py)
    absmax:   per-block scales: uint8 E4M4 codes (flat or tiled) or float32 (flat only)
    codebook: float32 [2^k]
    tensor_scale: power of two multiplying every block scale (1.0 = plain seed format)
    dtype:    dtype of the weight it came from (default output dtype of dequantize)
    Arrays are all NumPy (CPU backend) or all CuPy (GPU backend).
    """

    packed: object
    absmax: object
    codebook: object
    k: int
    shape: tuple
    layout: str = "tiled"
    tensor_scale: float = 1.0
    dtype: object = np.dtype(np.float16)

    # ------------------------------------------------------------------ properties
    @property
    def N(self) -> int:
        return self.shape[0]

    @property
    def K(self) -> int:
        return self.shape[1]

    @property
    def absmax_format(self) -> str:
        return "e4m4" if self.absmax.dtype == np.uint8 else self.absmax.dtype.name

    @property
    def on_gpu(self) -> bool:
        return is_cupy(self.packed)

    @property
    def nbytes(self) -> int:
        return int(self.packed.nbytes + self.absmax.nbytes + self.codebook.nbytes)

    def __repr__(self) -> str:
        dev = f"cuda:{self.packed.device.id}" if self.on_gpu else "cpu"
        return (f"KbitWeight(shape={self.shape}, k={self.k}, layout={self.layout!r}, absmax={self.absmax_format}, "
                f"tensor_scale={self.tensor_scale}, device={dev}, {self.nbytes / 2**20:.2f} MiB)")

    # ------------------------------------------------------------------ moves
    def cuda(self) -> "KbitWeight":
        if self.on_gpu:
            return self
        import cupy as cp

        return replace(self, packed=cp.asarray(self.packed), absmax=cp.asarray(self.absmax),
                       codebook=cp.asarray(self.codebook))

    def cpu(self) -> "KbitWeight":
        if not self.on_gpu:
            return self
        return replace(self, packed=self.packed.get(), absmax=self.absmax.get(), codebook=self.codebook.get())

    numpy = cpu

    # ------------------------------------------------------------------ checks
    def validate(self) -> "KbitWeight":
        k = R.check_k(self.k)
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if len(self.shape) != 2:
            raise ValueError(f"shape must be (N, K), got {self.shape}")
        N, K = self.shape
        if N <= 0 or K <= 0 or K % R.BLOCKSIZE:
            raise ValueError(f"shape {self.shape}: N must be positive and K a positive multiple of 32")
        nblocks = N * K // R.BLOCKSIZE
        if self.layout == "flat":
            nw, na = nblocks * k, nblocks
        else:
            nw, na = R.tiled_sizes(N, K, k)
            if self.absmax.dtype != np.uint8:
                raise ValueError("absmax of the tiled layout must be uint8 E4M4 codes")
        for nm, arr, n in (("packed", self.packed, nw), ("absmax", self.absmax, na)):
            if arr.ndim != 1 or arr.size != n:
                raise ValueError(f"{nm} must be 1-D with {n} elements for shape {self.shape}, k={k}, "
                                 f"layout={self.layout}; got shape {tuple(arr.shape)}")
            if not arr.flags.c_contiguous:
                raise ValueError(f"{nm} must be contiguous")
        if self.packed.dtype != np.uint32:
            raise ValueError(f"packed must be uint32 (or int32, viewed), got {self.packed.dtype}")
        if self.absmax.dtype not in (np.uint8, np.float32, np.float16):
            raise ValueError(f"absmax must be uint8 (E4M4), float32 or float16, got {self.absmax.dtype}")
        if self.codebook.shape != (1 << k,) or self.codebook.dtype != np.float32:
            raise ValueError(f"codebook must be float32 with {1 << k} entries for k={k}, "
                             f"got {self.codebook.dtype} {tuple(self.codebook.shape)}")
        kinds = {kind(a) for a in (self.packed, self.absmax, self.codebook)}
        if len(kinds) != 1:
            raise ValueError(f"packed, absmax and codebook must all be on the CPU or all on the GPU, got {kinds}")
        if self.on_gpu:
            devs = {a.device.id for a in (self.packed, self.absmax, self.codebook)}
            if len(devs) != 1:
                raise ValueError(f"packed, absmax and codebook are on different devices {devs}")
        ts = float(self.tensor_scale)
        if not (ts > 0 and np.isfinite(ts) and np.log2(ts) == round(np.log2(ts))):
            raise ValueError(f"tensor_scale must be a positive power of two, got {self.tensor_scale}")
        return self


def from_packed(packed, absmax, codebook, shape, k: int, layout: str = "tiled", tensor_scale: float = 1.0,
                dtype=np.float16) -> KbitWeight:
    """Wrap packed words, absmax and codebook produced elsewhere in this format, without copying.

    packed may be int32 or uint32 (int32 is viewed as uint32); torch CUDA tensors are
    viewed through DLPack.  Flat layout: float32 absmax, or uint8 E4M4 codes; tiled
    layout: uint8 E4M4 codes.
    """
    arrs = []
    for nm, a in (("packed", packed), ("absmax", absmax), ("codebook", codebook)):
        a, _ = to_backend(a, nm)
        if not a.flags.c_contiguous:
            raise ValueError(f"{nm} must be contiguous (wrapping does not copy)")
        arrs.append(a)
    packed, absmax, codebook = arrs
    if packed.dtype == np.int32:
        packed = packed.view(np.uint32)
    if absmax.dtype == np.int8:
        absmax = absmax.view(np.uint8)
    if codebook.dtype != np.float32:
        codebook = codebook.astype(np.float32)
    if kind(packed) == "cupy" and kind(codebook) == "numpy":
        import cupy as cp

        codebook = cp.asarray(codebook)
    return KbitWeight(packed.reshape(-1), absmax.reshape(-1), codebook, int(k), tuple(int(s) for s in shape),
                      layout, float(tensor_scale), np.dtype(dtype)).validate()
