"""The quantized weight object."""
from __future__ import annotations

import contextlib
import functools
import math
import sys
import threading
import weakref
from dataclasses import dataclass, replace

import numpy as np

from . import reference as R
from ._arrays import is_cupy, is_int, kind, normalize_dtype, to_backend

LAYOUTS = ("flat", "tiled")
FORMAT_VERSION = 1

# Whether a codebook is the default one (reference.create_codebook): the decode GEMV then takes
# its levels from immediates instead of loading them (cuda_src/kbit_common.cuh,
# kbit_default_level; profiling/NOTES.md, thirteenth session).
_GPU_DEFAULT: dict = {}   # id(GPU codebook array) -> (weakref to it, is default): one read per array
_NO_READS = threading.local()  # .on: within no_codebook_reads()


@functools.lru_cache(maxsize=None)
def _default_bits(k: int) -> bytes:
    """create_codebook(k) as float32 bytes."""
    return R.create_codebook(k).astype(np.float32).tobytes()


def _host_is_default(cb, k: int) -> bool:
    """A host float32 codebook of 2^k levels holds exactly create_codebook(k)."""
    return np.ascontiguousarray(cb, dtype=np.float32).tobytes() == _default_bits(k)


@contextlib.contextmanager
def no_codebook_reads():
    """Weights made within do not read an unseen GPU codebook back (default_codebook False,
    the kernels load it): for wrappers made per call (kbitcupy.torch_ops), where the read would
    be a host synchronisation on every call."""
    old, _NO_READS.on = getattr(_NO_READS, "on", False), True
    try:
        yield
    finally:
        _NO_READS.on = old


def note_codebook(gpu_codebook, host_codebook) -> None:
    """Record whether a GPU codebook array, just made from ``host_codebook``, is the default
    one, so the weights holding it need not read it back."""
    cb = np.asarray(host_codebook, dtype=np.float32)
    k = int(cb.size).bit_length() - 1
    if 2 <= k <= 5 and cb.shape == (1 << k,):
        _remember(gpu_codebook, _host_is_default(cb, k))


def gpu_copy(x, device, names, **fields):
    """x (a KbitWeight or KbitExpertBank) on GPU ``device`` (kbitcupy._arrays.gpu_target): itself when it is there,
    else a copy of its codebook and its array fields ``names`` (cupy.asarray copies onto the current device, from the
    host or another GPU; the codebook noted default or not from its host values), with ``fields`` replaced too."""
    from ._arrays import gpu_target, on_gpu_device

    dev = gpu_target(device)
    if x.on_gpu and x.packed.data.device_id == dev:
        return x
    import cupy as cp

    host_cb = x.codebook.get() if x.on_gpu else x.codebook  # (a few floats)
    with on_gpu_device(dev):
        cb = cp.asarray(x.codebook)
        note_codebook(cb, host_cb)
        return replace(x, codebook=cb, **{n: cp.asarray(getattr(x, n)) for n in names}, **fields)


def _remember(arr, flag: bool) -> bool:
    key = id(arr)
    if len(_GPU_DEFAULT) > 65536:
        _GPU_DEFAULT.clear()
    _GPU_DEFAULT[key] = (weakref.ref(arr, lambda _r, key=key: _GPU_DEFAULT.pop(key, None)), flag)
    return flag


def _no_read_now() -> bool:
    """Whether a device-to-host read must not happen now: within no_codebook_reads(), or while a
    CUDA graph is captured on CuPy's or torch's current stream (the read would break it)."""
    import cupy as cp

    if getattr(_NO_READS, "on", False) or cp.cuda.get_current_stream().is_capturing():
        return True
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except RuntimeError:  # the query itself refused (a capture elsewhere): do not copy
        return True


def is_default_codebook(codebook, k) -> bool:
    """Whether ``codebook`` holds exactly the default levels of k bits.  A GPU codebook array is
    read once (2^k floats, ordered on the current stream) and the answer kept while the array
    lives; while a CUDA graph is captured (or within no_codebook_reads) it is not read and the
    answer is False (the kernels then load the codebook, which is always correct).  So a codebook must not be changed in
    place once a KbitWeight holds it."""
    if not isinstance(k, (int, np.integer)) or not 2 <= int(k) <= 5:
        return False
    n = 1 << int(k)
    if getattr(codebook, "dtype", None) != np.float32 or getattr(codebook, "shape", None) != (n,):
        return False
    if kind(codebook) == "numpy":
        return _host_is_default(codebook, int(k))
    if not is_cupy(codebook):
        return False
    hit = _GPU_DEFAULT.get(id(codebook))
    if hit is not None and hit[0]() is codebook:
        return hit[1]
    if _no_read_now():
        return False
    return _remember(codebook, _host_is_default(codebook.get(), int(k)))


@dataclass(frozen=True)
class KbitWeight:
    """k-bit quantized W[N, K] (PyTorch Linear layout).

    packed:   uint32 bit-plane words, flat [N*K/32*k] or tiled (see reference.py)
    absmax:   per-block scales: uint8 E4M4 codes (flat or tiled) or float32 (flat only)
    codebook: float32 [2^k]; not to be changed in place once the weight holds it (whether it
              is the default codebook is decided at construction: ``default_codebook``)
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

    def __post_init__(self):
        # the decode GEMV's levels from immediates where this is the default codebook
        object.__setattr__(self, "default_codebook", is_default_codebook(self.codebook, self.k))

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
    def cuda(self, device=None) -> "KbitWeight":
        """This weight on GPU ``device`` (None / 'cuda': CuPy's current device; 'cuda:N', N, a torch.device):
        itself when it is there, else a copy (from the host, or from another GPU)."""
        return gpu_copy(self, device, ("packed", "absmax"))

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
        if len(self.shape) != 2 or not all(is_int(s) for s in self.shape):
            raise ValueError(f"shape must be (N, K) integers, got {self.shape}")
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
        # a normal float32 power of two (frexp: mantissa 0.5), as the kernels multiply by it in float32
        m, e = math.frexp(float(self.tensor_scale))
        if not (m == 0.5 and -125 <= e <= 128):
            raise ValueError(f"tensor_scale must be a power of two in [2^-126, 2^127], got {self.tensor_scale}")
        # the output dtype of dequantize and the kernels: any other (int32, float64) would be cast garbage
        if self.dtype is None:
            raise ValueError("dtype must be float16, bfloat16 or float32, got None")
        normalize_dtype(self.dtype, "dtype")
        return self


def from_packed(packed, absmax, codebook, shape, k: int, layout: str = "tiled", tensor_scale: float = 1.0,
                dtype=np.float16) -> KbitWeight:
    """Wrap packed words, absmax and codebook produced elsewhere in this format, without copying.

    packed may be int32 or uint32 (int32 is viewed as uint32); torch CUDA tensors are
    viewed through DLPack.  Flat layout: float32 absmax, or uint8 E4M4 codes; tiled
    layout: uint8 E4M4 codes.  A GPU codebook is read back once (2^k floats) to see whether
    it is the default one (``KbitWeight.default_codebook``), except during a CUDA graph capture;
    do not change it in place afterwards.
    """
    # checked, not int(): a k of 4.9 or '4', or a shape of floats, must not pass truncated
    k = R.check_k(k)
    try:
        dims = None if isinstance(shape, (str, bytes)) else tuple(shape)
    except TypeError:
        dims = None
    if dims is None or not all(is_int(s) for s in dims):
        raise TypeError(f"shape must be a sequence of integers (N, K), got {shape!r}")
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
    return KbitWeight(packed.reshape(-1), absmax.reshape(-1), codebook, k, tuple(int(s) for s in dims),
                      layout, float(tensor_scale), normalize_dtype(dtype, "dtype")).validate()
