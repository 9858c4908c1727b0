"""Which backend an array belongs to, and zero-copy moves between torch and CuPy."""
from __future__ import annotations

import contextlib
import warnings
import sys

import numpy as np

from .reference import bfloat16


def _cupy():
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def is_torch(x) -> bool:
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def is_cupy(x) -> bool:
    cp = sys.modules.get("cupy")
    return cp is not None and isinstance(x, cp.ndarray)


def is_numpy(x) -> bool:
    return isinstance(x, np.ndarray)


def kind(x) -> str:
    if is_cupy(x):
        return "cupy"
    if is_torch(x):
        return "torch"
    if is_numpy(x):
        return "numpy"
    return "other"


def torch_to_cupy(t, name: str = "tensor"):
    """Zero-copy view of a CUDA torch tensor as a CuPy array (bf16 through int16)."""
    import torch

    if not t.is_cuda:
        raise ValueError(f"{name} is a CPU torch tensor; pass a CUDA tensor or a NumPy array")
    cp = _cupy()
    dev = t.get_device()
    with on_gpu_device(dev):  # the exchange on the tensor's own device (its stream handshake too)
        # ... and on torch's current stream, where the package runs its work on torch tensors: then the
        # handshake waits for nothing.  (From CuPy's legacy stream it made that stream wait on torch's, which
        # is illegal while torch.cuda.graph captures: cudaErrorStreamCaptureImplicit.)
        same = cp.cuda.get_current_stream().ptr == torch.cuda.current_stream(dev).cuda_stream
        with contextlib.nullcontext() if same else torch_stream(t):
            if t.dtype == torch.bfloat16:
                return cp.from_dlpack(t.detach().view(torch.int16)).view(bfloat16)
            return cp.from_dlpack(t.detach())


def cupy_to_torch(a):
    import torch

    if bfloat16 is not None and a.dtype == bfloat16:
        return torch.from_dlpack(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_dlpack(a)


def to_backend(x, name: str):
    """(array, kind): NumPy or CuPy array; torch CUDA tensors become zero-copy CuPy views
    (kind 'torch'), CPU torch tensors NumPy views (kind 'torch_cpu')."""
    k = kind(x)
    if k == "torch":
        if not x.is_cuda:
            return _torch_cpu_to_numpy(x), "torch_cpu"
        return torch_to_cupy(x, name), "torch"
    if k in ("numpy", "cupy"):
        return x, k
    raise TypeError(f"{name} must be a NumPy array, a CuPy array or a torch tensor, got {type(x).__name__}")


def from_backend(a, k: str):
    """Return a result in the caller's array type."""
    if k == "torch":
        return cupy_to_torch(a)
    if k == "torch_cpu":
        import torch

        if bfloat16 is not None and a.dtype == bfloat16:
            return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(np.ascontiguousarray(a))
    return a


def _torch_cpu_to_numpy(x):
    import torch

    if x.dtype == torch.bfloat16:
        return x.detach().view(torch.int16).numpy().view(bfloat16)
    return x.detach().numpy()


def torch_stream(x):
    """Context that runs CuPy work on torch's current stream for x's device."""
    import torch

    cp = _cupy()
    s = torch.cuda.current_stream(x.device)
    if _FROM_EXTERNAL[0]:
        try:  # the CUDA stream protocol (CuPy >= 14, torch's __cuda_stream__)
            return cp.cuda.Stream.from_external(s)
        except (AttributeError, TypeError):
            _FROM_EXTERNAL[0] = False
    with warnings.catch_warnings():  # ExternalStream: deprecated in CuPy 14, the only way before it
        warnings.simplefilter("ignore", DeprecationWarning)
        return cp.cuda.ExternalStream(s.cuda_stream, x.device.index)


_FROM_EXTERNAL = [True]


# The activation dtypes the GPU kernels take (fp16, bf16).
ACT_DTYPES = (np.dtype(np.float16),) + ((bfloat16,) if bfloat16 is not None else ())


class _OnDevice:
    """Device `dev` made CuPy's current device for a call (restored after), then, for a torch tensor, torch's current
    stream on it (built after the switch: a CuPy stream object belongs to the device current at its making)."""

    __slots__ = ("dev", "torch_x", "_dev_ctx", "_stream_ctx")

    def __init__(self, dev: int, torch_x=None):
        self.dev, self.torch_x = dev, torch_x

    def __enter__(self):
        self._dev_ctx = _cupy().cuda.Device(self.dev)
        self._dev_ctx.__enter__()
        self._stream_ctx = torch_stream(self.torch_x) if self.torch_x is not None else None
        if self._stream_ctx is not None:
            try:
                self._stream_ctx.__enter__()
            except BaseException:
                self._dev_ctx.__exit__(None, None, None)
                raise
        return self

    def __exit__(self, *exc):
        try:
            if self._stream_ctx is not None:
                self._stream_ctx.__exit__(*exc)
        finally:
            self._dev_ctx.__exit__(*exc)
        return False


def stream_ctx(orig):
    """The context every GPU entry point runs its work in, given its main array: that array's device made current
    when it is not (so a call runs where its inputs live, as torch ops do, whatever CuPy's current device is: the
    kernels, their caches and every allocation follow the current device) and, for a CUDA torch tensor, torch's
    current stream on it.  CPU arrays and other objects: nothing."""
    dev = gpu_index_of(orig)
    if dev is None or not is_torch(orig):
        return on_gpu_device(dev)
    return torch_stream(orig) if dev == current_device() else _OnDevice(dev, orig)


def check_out(out, shape, dtype, name: str = "out", gpu: bool = True):
    """The backend view of a caller's out= array, checked for its device (the GPU, or the CPU
    for the NumPy backend), shape, dtype and contiguity."""
    o, k = to_backend(out, name)
    if (k in ("cupy", "torch")) != gpu:
        raise ValueError(f"{name} must be on the {'GPU' if gpu else 'CPU'}, where this call runs, like its inputs")
    if tuple(o.shape) != tuple(shape) or o.dtype != dtype or not o.flags.c_contiguous:
        raise ValueError(f"{name} must be a contiguous {dtype_name(dtype)} array of shape {tuple(shape)}")
    return o


def out_array(out, shape, dtype, name: str = "out", inputs=None, same_ok=()):
    """The GPU result buffer of a call: a new CuPy array, or the checked view of out= (not overlapping `inputs`:
    check_no_overlap)."""
    import cupy

    if out is None:
        return cupy.empty(shape, dtype=dtype)
    o = check_out(out, shape, dtype, name)
    dev = current_device()  # the call's device (its entry point made its inputs' device current)
    if o.data.device_id != dev:
        raise ValueError(f"{name} is on device {o.data.device_id}, the call runs on device {dev} (where its inputs "
                         "are)")
    if inputs:
        check_no_overlap(o, name, inputs, same_ok)
    return o


def _span(a):
    """The byte range [lo, hi) a CuPy / NumPy array can touch; None when it is empty."""
    if a.size == 0:
        return None
    if isinstance(a, np.ndarray):
        lo = a.ctypes.data
    else:
        lo = a.data.ptr
        if getattr(a, "_c_contiguous", False):  # (CuPy's flag: the common case without the loop below)
            return lo, lo + a.nbytes
    hi = lo + a.itemsize
    for n, st in zip(a.shape, a.strides):
        if st < 0:
            lo += st * (n - 1)
        else:
            hi += st * (n - 1)
    return lo, hi


def check_no_overlap(o, name: str, inputs: dict, same_ok=()):
    """Refuse an out= whose memory overlaps an input the call reads (backend arrays; None entries skipped): the
    kernels read inputs while other blocks write the output, so the result would depend on the schedule.  Inputs
    named in same_ok may be the output itself, element for element (an elementwise kernel reads each element before
    it writes it)."""
    so = _span(o)
    if so is None:
        return
    for nm, a in inputs.items():
        if a is None:
            continue
        sa = _span(a)
        if sa is not None and sa[0] < so[1] and so[0] < sa[1]:
            if nm in same_ok and sa == so and tuple(a.strides) == tuple(o.strides) and a.dtype == o.dtype:
                continue
            raise ValueError(f"{name} overlaps {nm} in memory; pass an output array of its own")


def cpu_result(r, out, k: str, inputs=None, same_ok=()):
    """Hand a CPU-backend result back: written into out= (returned as given), else in
    the caller's array type.  inputs / same_ok: as out_array's (the backends refuse the same aliasing)."""
    if out is None:
        return from_backend(r, k)
    o = check_out(out, r.shape, r.dtype, gpu=False)  # the GPU path's rules
    if inputs:
        check_no_overlap(o, "out", inputs, same_ok)
    o[...] = r
    return out


def current_device() -> int:
    """CuPy's current device (the CUDA runtime's, shared with torch in this thread)."""
    return _cupy().cuda.runtime.getDevice()


def cuda_index(device):
    """None for the CPU, else the CUDA device index of ``device``: 'cpu' / None; 'cuda' or torch.device('cuda')
    (CuPy's current device, where the rest of kbitcupy allocates); 'cuda:N', N, torch.device('cuda', N)."""
    if device is None:
        return None
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    s = str(device)
    if s == "cpu":
        return None
    if s == "cuda":
        # Only a torch.device carries an index attribute worth reading: a str has a *method*
        # called index (str.index), which used to leak into cupy.cuda.Device(...) as the device.
        idx = None if isinstance(device, str) else getattr(device, "index", None)
        if isinstance(idx, int) and not isinstance(idx, bool):
            return idx
        return current_device()
    if s.startswith("cuda:") and s[5:].isdigit():
        return int(s[5:])
    raise ValueError(f"device must be None, 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def gpu_index_of(a):
    """The CUDA device of a CuPy array or CUDA torch tensor, else None."""
    if is_cupy(a):
        return a.data.device_id
    if is_torch(a) and a.is_cuda:
        return a.get_device()
    return None


def on_gpu_device(dev):
    """Context making GPU ``dev`` current for a block, the caller's device back after (nothing when ``dev`` is None or
    current already)."""
    return contextlib.nullcontext() if dev is None or dev == current_device() else _OnDevice(dev)


def gpu_target(device) -> int:
    """The GPU a ``.cuda(device)`` move goes to: None / 'cuda' CuPy's current one, else as cuda_index."""
    dev = current_device() if device is None else cuda_index(device)
    if dev is None:
        raise ValueError(f"device must name a GPU, got {device!r}; use .cpu()")
    return dev


def check_same_device(**arrays):
    """Raise a ValueError naming them unless the CuPy arrays given are on one device, the current one (the call's:
    its entry point's stream_ctx made its main array's device current)."""
    devs = {n: a.data.device_id for n, a in arrays.items() if is_cupy(a)}
    if len(set(devs.values())) > 1:
        raise ValueError(f"arrays are on different devices: {devs}")
    if devs:
        cur = current_device()
        d = next(iter(devs.values()))
        if d != cur:
            raise ValueError(f"arrays are on device {d} but the current CuPy device is {cur}")


def is_int(x) -> bool:
    """An integer argument (Python or NumPy int; not a bool, a float or a string)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def dtype_name(dt) -> str:
    dt = np.dtype(dt)
    if bfloat16 is not None and dt == bfloat16:
        return "bfloat16"
    return dt.name


def normalize_dtype(dtype, name: str = "dtype"):
    """Accept numpy/cupy dtypes, strings and torch dtypes -> numpy dtype."""
    if dtype is None:
        return None
    t = sys.modules.get("torch")
    if t is not None and isinstance(dtype, t.dtype):
        dtype = {t.float16: np.float16, t.float32: np.float32, t.bfloat16: bfloat16}.get(dtype, dtype)
    if isinstance(dtype, str) and dtype in ("bf16", "bfloat16"):
        dtype = bfloat16
    if isinstance(dtype, str) and dtype in ("fp16", "half"):
        dtype = np.float16
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"{name} must be float16, bfloat16 or float32, got {dtype!r}") from None
    if dt not in (np.dtype(np.float16), np.dtype(np.float32)) and dt != bfloat16:
        raise ValueError(f"{name} must be float16, bfloat16 or float32, got {dtype_name(dt)}")
    return dt
