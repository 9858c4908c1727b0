"""Fast launch path of kbitcupy.matmul for the decode GEMV: cached per-call-shape launch plans.

Why: one Python ``matmul(A, qw, out=out)`` at M = 1 cost 16-25 us of host time on an
H200 (profiling/results/nvidia-h200_2026-11-21_final.md, "Host overhead"): backend
checks, validation, dispatch tables and CuPy's per-argument processing of the kernel
call -- several times the GEMV kernel itself.  Most of that work gives the same answer
for every call with the same (A.shape, A.dtype, weight object).

So once such a call shape has been through the full path in matmul.py (validation,
dispatch, gemv.launch_args) twice, its launch is remembered as a ``_Plan``: the
CUfunction, grid, block, dynamic shared memory and a ready cuLaunchKernel parameter
block (``ParamBlock``) built from the very argument tuple the general path passes to
the CuPy kernel (a kernel-signature change needs no code here).  A later call with the
same key only re-checks what can differ between such calls (A contiguous, 16-byte
aligned and on the plan's device, out's type/shape/dtype/contiguity/device), rewrites A's
and out's pointer slots and calls cuLaunchKernel on the caller's current stream (CuPy's
current stream; torch's current stream for torch tensors) of the plan's device -- made
current around the launch when the caller's current device is another one, as matmul's
general path does.  No allocation when out= is given, no host synchronisation, capturable in a
CUDA graph.  Anything else -- a first call, NumPy arrays, GEMM / dequantize paths, any
failed re-check -- returns ``MISS`` and matmul runs its general path, which raises the
usual errors.

The streaming GEMV (kbitcupy.gemv_stream, where dispatch picks it) gets plans the same way;
its arguments hold the split-K workspace of the stream the plan was built on, so such a plan
serves calls on that stream only (others take the general path).

Plans are built on the second sighting of a key, not the first, because
``torch_ops.kbit_matmul`` wraps its weight in a new KbitWeight on every call: such
keys never repeat and building a plan for each would only add cost.  A plan holds a
weak reference to its weight and is used only while ``ref() is qw`` (a new object may
reuse a dead one's id); it is dropped when the weight dies.  ``dispatch.set_table``
clears all plans (the dispatch choice is part of a plan).

Switch off: environment ``KBITCUPY_NO_FASTPATH=1`` (read at import), ``set_enabled(False)``
or ``with disabled(): ...`` (benchmarks compare both).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import threading
import warnings
import weakref

import numpy as np

from ._arrays import is_cupy

MISS = object()  # matmul_fast's "not handled here": run the general path
ENABLED = os.environ.get("KBITCUPY_NO_FASTPATH", "").strip().lower() not in ("1", "true", "yes", "on")
MAX_PLANS = 4096  # per table; a full table is cleared (plans rebuild on the next sightings)


def set_enabled(flag: bool) -> bool:
    """Turn the fast path on or off; returns the previous setting."""
    global ENABLED
    old, ENABLED = ENABLED, bool(flag)
    return old


@contextlib.contextmanager
def disabled():
    """Run a block with the fast path off (the general path for every call)."""
    old = set_enabled(False)
    try:
        yield
    finally:
        set_enabled(old)


# ----------------------------------------------------------------------------- parameter block
class DevPtr(int):
    """A device address passed as an 8-byte pointer argument (what a CuPy array becomes)."""


def arg_bytes(a):
    """(raw bytes, alignment, is_pointer) of one kernel argument, as CuPy's RawKernel
    passes it: CuPy arrays (and DevPtr) as 8-byte pointers, NumPy scalars as their own
    bytes; Python bool / int / float as CuPy converts them (bool, int64, float64)."""
    if isinstance(a, DevPtr):
        return int(a).to_bytes(8, sys.byteorder), 8, True
    if is_cupy(a):
        return int(a.data.ptr).to_bytes(8, sys.byteorder), 8, True
    if isinstance(a, bool):
        a = np.bool_(a)
    elif isinstance(a, int):
        a = np.int64(a)
    elif isinstance(a, float):
        a = np.float64(a)
    if isinstance(a, np.generic):
        return a.tobytes(), max(1, min(int(a.dtype.alignment), 8)), False
    raise TypeError(f"kernel argument of type {type(a).__name__} is not supported by the fast launch path")


class ParamBlock:
    """cuLaunchKernel's ``kernelParams`` for one argument tuple: every argument's bytes
    at its own aligned offset in one buffer, and a void*[] of their addresses
    (``address``).  Pointer arguments can be rewritten in place through ``slot(i)``."""

    def __init__(self, args):
        items = [arg_bytes(a) for a in args]
        offsets, off = [], 0
        for raw, align, _ in items:
            off = -(-off // align) * align
            offsets.append(off)
            off += len(raw)
        self.nbytes = off
        self.offsets = tuple(offsets)
        self.sizes = tuple(len(raw) for raw, _, _ in items)
        self.pointer_args = tuple(i for i, it in enumerate(items) if it[2])
        self._store = (ctypes.c_uint64 * max(1, -(-off // 8)))()  # 8-byte aligned storage
        base = ctypes.addressof(self._store)
        for (raw, _, _), o in zip(items, offsets):
            ctypes.memmove(base + o, raw, len(raw))
        self._argv = (ctypes.c_void_p * max(1, len(items)))(*[base + o for o in offsets])
        self.address = ctypes.addressof(self._argv)

    def __len__(self) -> int:
        return len(self.offsets)

    def slot(self, i: int):
        """A ctypes c_uint64 aliasing pointer argument i (set ``.value`` to rewrite it)."""
        if i not in self.pointer_args:
            raise ValueError(f"argument {i} is not a pointer argument")
        return ctypes.c_uint64.from_buffer(self._store, self.offsets[i])

    def arg_address(self, i: int) -> int:
        """Address stored in kernelParams[i] (where argument i's bytes are)."""
        return int(self._argv[i])

    def tobytes(self) -> bytes:
        return ctypes.string_at(ctypes.addressof(self._store), self.nbytes)

    def arg_bytes(self, i: int) -> bytes:
        return ctypes.string_at(self.arg_address(i), self.sizes[i])


# ----------------------------------------------------------------------------- plans
class _Plan:
    __slots__ = ("ref", "dev", "kernel", "func", "gx", "gy", "gz", "bx", "by", "bz", "smem", "block", "params",
                 "argv", "a_slot", "o_slot", "out_shape", "dtype", "tdevice", "lock", "pdl", "ws_stream", "keep",
                 "a_bytes", "o_bytes")


_PLANS: dict = {}   # CuPy arrays: (A.shape, A.dtype, id(qw)) -> _Plan
_TPLANS: dict = {}  # CUDA torch tensors: (A.shape, A.dtype, id(qw)) -> _Plan (separate: dtypes of two libraries)
_SEEN: dict = {}    # (table tag, key) -> weakref(qw): seen once by the general path
_FAILED: dict = {}  # (table tag, key) -> weakref(qw): no plan could be built; do not retry

# Bound when the first plan is built (this module imports neither CuPy nor torch).
_ND = None        # cupy.ndarray
_TT = None        # torch.Tensor
_launch_kernel = _get_device = _set_device = _cur_stream = _cp_empty = None
_c_contig = None  # CuPy array -> C-contiguous? (its _c_contiguous flag: ~20 ns, where .flags builds an object)
_t_empty = _t_stream = None
_DRIVER_ERROR: tuple = ()


def clear_plans() -> None:
    """Forget every plan (the next calls take the general path and rebuild them)."""
    for t in (_PLANS, _TPLANS, _SEEN, _FAILED):
        t.clear()


def plan_count() -> int:
    return len(_PLANS) + len(_TPLANS)


def _forget(table, key, wr):
    """weakref callback: drop the entry of a weight that died (if it is still that weight's)."""
    v = table.get(key)
    if v is wr or getattr(v, "ref", None) is wr:
        table.pop(key, None)


def _weak(qw, table, key):
    return weakref.ref(qw, functools.partial(_forget, table, key))


def lookup(A, qw):
    """The live plan for (A, qw), or None (for tests and benchmarks)."""
    table = _PLANS if type(A) is _ND else _TPLANS if type(A) is _TT else None
    if table is None:
        return None
    p = table.get((A.shape, A.dtype, id(qw)))
    return p if p is not None and p.ref() is qw else None


def matmul_fast(A, qw, out=None):
    """matmul(A, qw, out) through a cached plan, or MISS (then the caller runs the general path)."""
    t = type(A)
    if t is _ND:  # ------------------------------------------------ CuPy
        p = _PLANS.get((A.shape, A.dtype, id(qw)))
        if p is None or p.ref() is not qw:
            return MISS
        if not _c_contig(A):
            return MISS
        d = A.data
        a_ptr = d.ptr
        dev = p.dev
        if a_ptr & 15 or d.device_id != dev:
            return MISS
        cur = _get_device()
        if cur != dev:
            return _on_plan_device(A, qw, out, dev, cur)
        if out is None:
            res = _cp_empty(p.out_shape, p.dtype)
        else:
            if type(out) is not t or out.shape != p.out_shape or out.dtype != p.dtype:
                return MISS
            if not _c_contig(out):
                return MISS
            res = out
        d = res.data
        if d.device_id != dev:
            return MISS
        o_ptr = d.ptr
        stream = _cur_stream(dev).ptr
    elif t is _TT:  # ---------------------------------------------- torch (CUDA)
        p = _TPLANS.get((A.shape, A.dtype, id(qw)))
        if p is None or p.ref() is not qw:
            return MISS
        dev = p.dev
        if A.get_device() != dev or not A.is_contiguous() or A.is_neg():
            return MISS  # (device first: CPU / meta tensors stop here, before data_ptr)
        cur = _get_device()
        if cur != dev:
            return _on_plan_device(A, qw, out, dev, cur)
        a_ptr = A.data_ptr()
        if a_ptr & 15:
            return MISS
        if out is None:
            # torch's allocator, stream-ordered on torch's current stream (and its graph pool
            # under torch.cuda.graph); the general path allocates from CuPy's pool
            res = _t_empty(p.out_shape, dtype=p.dtype, device=p.tdevice)
        else:
            if (type(out) is not t or out.dtype != p.dtype or out.shape != p.out_shape or out.get_device() != dev
                    or not out.is_contiguous() or out.is_neg()):
                return MISS
            res = out
        o_ptr = res.data_ptr()
        stream = _t_stream(dev)
    else:
        return MISS
    if p.ws_stream is not None and stream != p.ws_stream:
        return MISS  # the plan's split-K workspace belongs to the stream it was built on
    if out is not None and o_ptr < a_ptr + p.a_bytes and a_ptr < o_ptr + p.o_bytes:
        return MISS  # out= overlapping A: the general path refuses it by name
    with p.lock:  # the parameter block is shared: rewrite + launch must not interleave
        p.a_slot.value = a_ptr
        p.o_slot.value = o_ptr
        try:
            if p.pdl is not None:  # programmatic dependent launch (kbitcupy.set_pdl)
                p.pdl(stream, p.argv)
            else:
                _launch_kernel(p.func, p.gx, p.gy, p.gz, p.bx, p.by, p.bz, p.smem, stream, p.params, 0)
        except _DRIVER_ERROR:
            # e.g. no current context in a fresh thread: the general path (CuPy's launch
            # makes one) handles it, or raises what the old path raised
            return MISS
    return res


def _on_plan_device(A, qw, out, dev, cur):
    """matmul_fast for a call made from another GPU (cur) than its arrays' (and its plan's, dev): the plan's device
    made current around it -- the kernel handle, the result's allocation and the stream are that device's -- then the
    caller's back, as matmul's general path does (kbitcupy._arrays.stream_ctx)."""
    _set_device(dev)
    try:
        return matmul_fast(A, qw, out)
    finally:
        _set_device(cur)


# ----------------------------------------------------------------------------- building
def remember(A, qw, out, A2, o2, kind: str = "gemv") -> None:
    """Called by matmul's general path right after it launched the GEMV ('gemv') or the
    streaming GEMV ('stream') for (A, qw, out) with the validated 2-D CuPy views A2 / o2:
    builds the plan on the second sighting."""
    tA = type(A)
    cp = sys.modules.get("cupy")
    torch = sys.modules.get("torch")
    if cp is not None and tA is cp.ndarray:
        tag, table = "cupy", _PLANS
    elif torch is not None and tA is torch.Tensor:
        tag, table = "torch", _TPLANS
    else:
        return  # subclasses and other types: general path only
    if out is not None and type(out) is not tA:
        return
    if not type(qw).__weakrefoffset__:  # a plan must be able to tell when its weight dies
        return
    if not _on_current_device(A2):
        return  # not now: the kernel handle must be taken with A's device current
    key = (A.shape, A.dtype, id(qw))
    p = table.get(key)
    if p is not None and p.ref() is qw:
        return
    skey = (tag, key)
    f = _FAILED.get(skey)
    if f is not None and f() is qw:
        return
    s = _SEEN.get(skey)
    if s is None or s() is not qw:
        if len(_SEEN) >= MAX_PLANS:
            _SEEN.clear()
        _SEEN[skey] = _weak(qw, _SEEN, skey)
        return
    try:
        p = _build(A, qw, A2, o2, tag, kind)
    except Exception as e:  # noqa: BLE001 - the optimisation must never break a call that worked
        warnings.warn(f"kbitcupy: no fast launch plan for A {tuple(A.shape)} {A.dtype}: {e!r}", RuntimeWarning,
                      stacklevel=3)
        p = None
    if p is None:
        if len(_FAILED) >= MAX_PLANS:
            _FAILED.clear()
        _FAILED[skey] = _weak(qw, _FAILED, skey)
        return
    _SEEN.pop(skey, None)
    if len(table) >= MAX_PLANS:
        table.clear()
    p.ref = _weak(qw, table, key)
    table[key] = p


def _on_current_device(A2) -> bool:
    cp = sys.modules.get("cupy")
    return cp is not None and cp.cuda.runtime.getDevice() == A2.data.device_id


def _bind_cupy(cp):
    global _ND, _launch_kernel, _get_device, _set_device, _cur_stream, _cp_empty, _DRIVER_ERROR, _c_contig
    import operator

    from cupy_backends.cuda.api import driver

    _c_contig = (operator.attrgetter("_c_contiguous") if hasattr(cp.ndarray, "_c_contiguous")
                 else lambda a: a.flags.c_contiguous)

    _launch_kernel = driver.launchKernel
    _DRIVER_ERROR = (driver.CUDADriverError,)
    _get_device = cp.cuda.runtime.getDevice
    _set_device = cp.cuda.runtime.setDevice
    _cur_stream = cp.cuda.get_current_stream
    _cp_empty = cp.empty
    _ND = cp.ndarray


def _bind_torch(torch):
    global _TT, _t_empty, _t_stream
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Triton uses; no Stream object per call
    if raw is None:  # pragma: no cover - older / unusual builds
        def raw(dev):
            return torch.cuda.current_stream(dev).cuda_stream
    _t_stream = raw
    _t_empty = torch.empty
    _TT = torch.Tensor


def _build(A, qw, A2, o2, tag, kind="gemv"):
    import cupy as cp

    if kind == "stream":  # the streaming GEMV: its arguments hold the current stream's split-K workspace
        from .gemv_stream import launch_args
    else:
        from .gemv import launch_args

    dev = A2.data.device_id
    fn, grid, block, smem, args = launch_args(A2, qw, o2)
    ia = [i for i, a in enumerate(args) if a is A2]
    io = [i for i, a in enumerate(args) if a is o2]
    if len(ia) != 1 or len(io) != 1:
        return None
    grid = (grid,) if isinstance(grid, int) else tuple(grid)
    block = (block,) if isinstance(block, int) else tuple(block)
    if not 1 <= len(grid) <= 3 or not 1 <= len(block) <= 3:
        return None
    grid, block = grid + (1,) * (3 - len(grid)), block + (1,) * (3 - len(block))
    pb = ParamBlock(args)
    if fn.max_dynamic_shared_size_bytes < smem:  # on this device's handle, as gemv's _launch_config does
        fn.max_dynamic_shared_size_bytes = smem
    kern = fn.kernel  # cupy.cuda.Function of the current device; .ptr is the CUfunction
    p = _Plan()
    p.dev, p.kernel, p.func = dev, kern, int(kern.ptr)
    p.gx, p.gy, p.gz = (int(x) for x in grid)
    p.bx, p.by, p.bz = (int(x) for x in block)
    p.smem = int(smem)
    p.block, p.params, p.argv = pb, pb.address, pb._argv
    p.a_slot, p.o_slot = pb.slot(ia[0]), pb.slot(io[0])
    p.lock = threading.Lock()
    p.pdl = None
    # the streaming GEMV's plan is used on its own stream only, and keeps its workspace alive
    p.ws_stream = cp.cuda.get_current_stream().ptr if kind == "stream" else None
    p.keep = args if kind == "stream" else None
    if args[-1]:  # the kernel's pdl argument: launched as a programmatic dependent
        from ._pdl import Launcher

        p.pdl = Launcher(p.func, grid, block, p.smem)
    N = o2.shape[1]
    p.out_shape = tuple(A.shape[:-1]) + (N,)
    p.dtype = A.dtype
    p.a_bytes = A2.size * A2.dtype.itemsize  # (both C-contiguous)
    p.o_bytes = o2.size * o2.dtype.itemsize
    _bind_cupy(cp)
    if tag == "cupy":
        p.tdevice = None
    else:
        import torch

        _bind_torch(torch)
        p.tdevice = A.device
    return p
