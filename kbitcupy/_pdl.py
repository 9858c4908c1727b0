"""Programmatic dependent launch (PDL, Hopper and later) for the decode GEMV, the wgmma
GEMM and the grouped (MoE) kernels.

With PDL on, ``matmul`` launches the decode GEMV as a programmatic dependent of the
previous kernel in the stream (``cuLaunchKernelEx`` with the programmatic-stream-
serialization attribute).  Its blocks may then start while that kernel finishes: they
request their weights and build the pair table, and wait (``griddepcontrol.wait``) for
the previous grid to complete -- its memory visible -- only before they read A.  Each
GEMV also lets the next launch start once its own A has landed.  The launch latency and
the prologue overlap the previous kernel's tail.  H200, 2026-11-22: back-to-back
decode matmuls (M = 1, k = 4, the five dense shapes of a block) 24.8 -> 20.2 us in
all (profiling/pdl_ab.py).

The Hopper wgmma GEMM (``kbitcupy.wgmma``, M >= 8 where dispatch picks it) does the same
with its first K tiles: it requests their weight tiles and builds its tables before the
wait, and its tokens, split-K workspace and output only after it (kbit_gemm waits at
entry).  The grouped MoE kernels wait before anything (``grouped_mode``: GROUPED_WAIT),
because their expert ids and offsets may come from the kernel right before them (device
routing), unless the caller says they do not (``ids_stable``: GROUPED_EARLY, the grouped
GEMV and wgmma kernels then request the experts' weights before the wait).

Full PDL is off by default, because the kernels read weights before that wait: turn it on
only where no kernel writes a weight (packed words, absmax, codebook) right before a matmul
that uses it -- true in inference, where weights are written once at load time.  A and
``out`` are safe: A is read and ``out`` written after the wait.  On: ``kbitcupy.set_pdl(True)``,
``with kbitcupy.pdl(): ...`` or the environment ``KBITCUPY_PDL=1`` (read at import).

The default is the safe mode (``set_pdl("safe")``, ``KBITCUPY_PDL=safe`` or unset): every
kernel is launched as a programmatic dependent but waits for the previous grid before
touching any memory (the dense kernels' pdl argument KBIT_PDL_SAFE, the grouped kernels'
GROUPED_WAIT), so only the launch and the blocks' start overlap the previous kernel's tail,
and the decode GEMV's L2 prefetch of its first weights (a hint: the loads after the wait
return what they would without it; the grouped GEMV does the same where the caller passes
ids_stable, GROUPED_SAFE_EARLY, reading the ids before its wait): bit-exact with a plain
launch and safe whatever that kernel wrote, weights included (H100, 2026-11-25, seventeenth session: k = 4 dense TOTAL at
M = 1 24.5 us plain, 22.2 waiting at entry, 20.5 with the GEMV's prefetch; full PDL 18.2).
The dispatch tables are the default ones (no "+PDL" table).  Plain launches:
``set_pdl(False)`` or ``KBITCUPY_PDL=0``.

Devices below compute capability 9.0 launch as usual.  Works under CUDA-graph capture (the
dependency becomes a programmatic edge).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading

_ENV = os.environ.get("KBITCUPY_PDL", "").strip().lower()
ENABLED = _ENV in ("1", "true", "yes", "on")  # full PDL: weights before the wait
SAFE = _ENV in ("", "safe")  # safe PDL (the default): wait before anything
if not ENABLED and not SAFE and _ENV not in ("0", "false", "no", "off"):
    raise ValueError(f"KBITCUPY_PDL must be 1 / on (full PDL), safe (the default) or 0 / off, got {_ENV!r}")
PDL_SAFE = 3  # the dense kernels' pdl argument in safe mode (KBIT_PDL_SAFE, cuda_src/kbit_common.cuh)
PDL_SAFE_PF1 = 4  # the decode GEMV's safe mode prefetching one ring step (KBIT_PDL_SAFE_PF1; gemv.safe_prefetch_steps)
_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID
_CLUSTER_DIMENSION = 4  # CUlaunchAttributeID (value: unsigned x, y, z)
_CC: dict = {}
_LIB: list = []
_lock = threading.Lock()


def enabled() -> bool:
    return ENABLED


def set_pdl(flag) -> bool | str:
    """Turn PDL on (True), off (False) or to its safe mode ("safe"); returns the previous
    setting (True, False or "safe")."""
    global ENABLED, SAFE
    from . import _launch

    if isinstance(flag, str):
        if flag.strip().lower() != "safe":
            raise ValueError(f"set_pdl takes True, False or 'safe', got {flag!r}")
        new = (False, True)
    else:
        new = (bool(flag), False)
    old = "safe" if SAFE else ENABLED
    if (ENABLED, SAFE) != new:
        ENABLED, SAFE = new
        _launch.clear_plans()  # a plan's parameter block holds the kernel's pdl argument
    return old


@contextlib.contextmanager
def pdl(flag: bool = True):
    """``with kbitcupy.pdl(): ...`` -- PDL on (or off) for the block."""
    old = set_pdl(flag)
    try:
        yield
    finally:
        set_pdl(old)


def safe_active(device_id: int) -> bool:
    """Safe PDL is on and this device supports it (compute capability >= 9.0)."""
    return SAFE and _sm90(device_id)


def dense_arg(device_id: int) -> int:
    """The pdl argument of a dense kernel (GEMV, streaming GEMV, kbit_gemm, wgmma) launched now:
    1 (full PDL), PDL_SAFE (safe mode) or 0; nonzero = launched as a programmatic dependent."""
    return 1 if active(device_id) else (PDL_SAFE if safe_active(device_id) else 0)


def active(device_id: int) -> bool:
    """PDL is on and this device supports it (compute capability >= 9.0)."""
    return ENABLED and _sm90(device_id)


def _sm90(device_id: int) -> bool:
    cc = _CC.get(device_id)
    if cc is None:
        import cupy as cp

        cc = _CC[device_id] = int(cp.cuda.Device(device_id).compute_capability) >= 90
    return cc


class _AttrValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("ptr", ctypes.c_void_p), ("i", ctypes.c_int),
                ("dim", ctypes.c_uint * 3)]


class _Attr(ctypes.Structure):  # CUlaunchAttribute: id, pad to 8, 64-byte value
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _AttrValue)]


class _Config(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint), ("bx", ctypes.c_uint),
                ("by", ctypes.c_uint), ("bz", ctypes.c_uint), ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_Attr)), ("nattrs", ctypes.c_uint)]


class TensorMap:
    """A CUtensorMap (128 bytes, encode_tensor_map_2d) passed by value as a kernel's first argument
    (a __grid_constant__ parameter, e.g. kbit_wgmma_tma's; first, so that _packed_params' offsets are
    the driver's).  item() is its packed value, as a NumPy scalar argument's."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes):
        if len(raw) != 128:
            raise ValueError(f"a CUtensorMap is 128 bytes, got {len(raw)}")
        self.raw = bytes(raw)

    def item(self) -> bytes:
        return self.raw


def encode_tensor_map_2d(ptr: int, dtype: int, dim0: int, dim1: int, stride1_bytes: int, box0: int, box1: int,
                         swizzle: int, l2_promotion: int) -> TensorMap:
    """cuTensorMapEncodeTiled of a 2-D tensor at device address ptr (dim0 elements inner, dim1 rows
    stride1_bytes apart; CUtensorMapDataType dtype), boxes box0 x box1, no interleave, the given
    CUtensorMapSwizzle / CUtensorMapL2promotion, out-of-bounds elements read as zeros.  Host only."""
    raw = (ctypes.c_uint64 * 24)()  # a CUtensorMap is 64-byte aligned (alignas(64) in cuda.h)
    addr = -(-ctypes.addressof(raw) // 64) * 64
    buf = ctypes.cast(addr, ctypes.POINTER(ctypes.c_uint64))
    dims = (ctypes.c_uint64 * 2)(int(dim0), int(dim1))
    strides = (ctypes.c_uint64 * 1)(int(stride1_bytes))
    box = (ctypes.c_uint32 * 2)(int(box0), int(box1))
    estr = (ctypes.c_uint32 * 2)(1, 1)
    r = _lib().cuTensorMapEncodeTiled(buf, int(dtype), 2, ctypes.c_void_p(int(ptr)), dims, strides, box, estr,
                                      0, int(swizzle), int(l2_promotion), 0)
    if r:
        raise RuntimeError(f"kbitcupy: cuTensorMapEncodeTiled failed: CUresult {r} (dims {dim0} x {dim1}, "
                           f"row stride {stride1_bytes} B, box {box0} x {box1})")
    return TensorMap(ctypes.string_at(addr, 128))


def _lib():
    if not _LIB:
        with _lock:
            if not _LIB:
                lib = ctypes.CDLL("libcuda.so.1")
                lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.c_void_p,
                                                 ctypes.c_void_p]
                lib.cuLaunchKernelEx.restype = ctypes.c_int
                lib.cuOccupancyMaxActiveClusters.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                                                             ctypes.POINTER(_Config)]
                lib.cuOccupancyMaxActiveClusters.restype = ctypes.c_int
                u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
                lib.cuTensorMapEncodeTiled.argtypes = [u64p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p,
                                                       u64p, u32p, u32p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                                       ctypes.c_int]
                lib.cuTensorMapEncodeTiled.restype = ctypes.c_int
                _LIB.append(lib)
    return _LIB[0]


def max_active_clusters(func_ptr: int, grid: int, threads: int, smem: int, cluster: int) -> int:
    """How many clusters of `cluster` CTAs (threads each, smem dynamic bytes) of the kernel can
    be resident on the current device at once (cuOccupancyMaxActiveClusters)."""
    attr = _Attr(id=_CLUSTER_DIMENSION)
    attr.value.dim[:] = (int(cluster), 1, 1)
    cfg = _Config(int(grid), 1, 1, int(threads), 1, 1, int(smem), None, ctypes.pointer(attr), 1)
    n = ctypes.c_int(0)
    r = _lib().cuOccupancyMaxActiveClusters(ctypes.byref(n), ctypes.c_void_p(int(func_ptr)), ctypes.byref(cfg))
    if r:
        raise RuntimeError(f"kbitcupy: cuOccupancyMaxActiveClusters failed: CUresult {r}")
    return n.value


class Launcher:
    """cuLaunchKernelEx of one kernel and configuration with the PDL attribute (pdl) and / or
    thread block clusters of `cluster` CTAs along x (cluster > 1); the caller passes the
    stream and a kernelParams address (e.g. ParamBlock.address)."""

    __slots__ = ("_cfg", "_cfg_p", "_attrs", "_fn", "_call", "_what")

    def __init__(self, func_ptr: int, grid, block, smem: int, pdl: bool = True, cluster: int = 1):
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        attrs = []
        if pdl:
            attrs.append(_Attr(id=_PROGRAMMATIC_STREAM_SERIALIZATION))
            attrs[-1].value.i = 1
        if cluster > 1:
            attrs.append(_Attr(id=_CLUSTER_DIMENSION))
            attrs[-1].value.dim[:] = (int(cluster), 1, 1)
        self._attrs = (_Attr * max(1, len(attrs)))(*attrs)
        self._cfg = _Config(*(int(x) for x in grid), *(int(x) for x in block), int(smem), None,
                            self._attrs, len(attrs))
        self._fn = ctypes.c_void_p(int(func_ptr))
        self._cfg_p = ctypes.c_void_p(ctypes.addressof(self._cfg))
        # An untyped handle of cuLaunchKernelEx called with ready ctypes arguments: the typed one converts its
        # arguments on every call (byref, POINTER(_Config), int -> c_void_p: ~0.5 of ~0.8 us a launch through ctypes,
        # measured on the CPU; profiling/host_probe.py has the launch's share on the GPU machine)
        f = _lib().cuLaunchKernelEx
        self._call = type(f)(ctypes.cast(f, ctypes.c_void_p).value)
        self._call.restype = ctypes.c_int
        self._what = " and ".join((["programmatic dependent launch"] if pdl else [])
                                  + ([f"clusters of {cluster}"] if cluster > 1 else [])) or "plain launch"

    def __call__(self, stream_ptr: int, params) -> None:
        """Launch on stream_ptr; params: the kernelParams array as a ctypes object (a c_void_p array, or a c_void_p
        holding its address -- not a Python int, which the untyped call would pass as a 32-bit C int)."""
        self._cfg.stream = stream_ptr
        r = self._call(self._cfg_p, self._fn, params, None)
        if r:
            raise RuntimeError(f"kbitcupy: cuLaunchKernelEx ({self._what}) failed: CUresult {r}")


_LAUNCHERS: dict = {}
_PACKERS: dict = {}  # struct format -> (Struct, ctypes buffer, kernelParams array, lock)
_CODE: dict = {}  # argument type -> struct code (NumPy scalar types; filled on first use)


def _codes():
    import numpy as np

    _CODE.update({TensorMap: "128s", np.int32: "i", np.uint32: "I", np.int64: "q", np.uint64: "Q", np.float32: "f",
                  np.float64: "d", np.bool_: "?", np.int16: "h", np.uint16: "H", np.int8: "b", np.uint8: "B",
                  bool: "?", int: "q", float: "d"})
    return _CODE


def _packed_params(args):
    """(Struct, buffer, kernelParams array, lock, values) for one argument tuple: a struct
    packing into a buffer cached per argument signature, about 6 us instead of 26 for a fresh
    kbitcupy._launch.ParamBlock (16 arguments).  Native struct alignment places every
    argument at its own alignment, as cuLaunchKernel expects (tests/test_pdl.py checks the
    layout against ParamBlock).  The caller packs the values and launches holding the lock
    (the driver copies the parameters at launch)."""
    table = _CODE or _codes()
    codes, vals = [], []
    for a in args:
        c = table.get(type(a))  # by exact type: dtype.name costs ~5 us per argument
        if c is not None:
            codes.append(c)
            vals.append(a.item() if hasattr(a, "item") else a)  # NumPy scalar / TensorMap, or Python bool/int/float
        else:  # CuPy array or kbitcupy._launch.DevPtr: an 8-byte pointer
            codes.append("Q")
            vals.append(int(a) if not hasattr(a, "data") else int(a.data.ptr))
    fmt = "@" + "".join(codes)
    p = _PACKERS.get(fmt)
    if p is None:
        import struct

        st = struct.Struct(fmt)
        buf = (ctypes.c_uint64 * max(1, -(-st.size // 8)))()
        base, off, offs = ctypes.addressof(buf), 0, []
        for c in codes:
            size = struct.calcsize("@" + c)
            off = -(-off // size) * size
            offs.append(off)
            off += size
        argv = (ctypes.c_void_p * max(1, len(codes)))(*[base + o for o in offs])
        p = _PACKERS[fmt] = (st, buf, argv, threading.Lock())
    st, buf, argv, lock = p
    return st, buf, argv, lock, vals


# The grouped kernels' pdl argument (cuda_src: kbit_gemv_grouped, kbit_wgmma_grouped,
# kbit_grouped): 0 plain launch, 1 wait before reading expert ids / offsets, 2 the ids
# are not written by the kernel right before (read them, request weights, then wait),
# 3 (safe PDL, the grouped GEMV and wgmma kernels: KBIT_GROUPED_SAFE_EARLY) the same guarantee in safe
# mode: read the ids and L2-prefetch the first weights before the wait (a hint: the loads
# after it return what they would without), load nothing else before it.
GROUPED_OFF, GROUPED_WAIT, GROUPED_EARLY, GROUPED_SAFE_EARLY = 0, 1, 2, 3


def grouped_mode(device_id: int, ids_stable: bool, safe_early: bool = False, chained: bool = False) -> int:
    """The pdl argument of a grouped kernel launched now on this device.  Safe mode:
    GROUPED_WAIT, or GROUPED_SAFE_EARLY where the ids are stable and the kernel
    (safe_early: the grouped GEMV, the grouped wgmma) implements it.  chained (the caller
    knows the kernel right before is one of this package's, which writes none of this
    call's weights, ids or offsets and lets its dependents launch only after its own wait:
    kbitcupy.grouped.grouped_matmul's chained): GROUPED_EARLY in safe mode too, as with full
    PDL -- no kernel before that one can still be running when this one starts."""
    if active(device_id) or (chained and safe_active(device_id)):
        return GROUPED_EARLY if (ids_stable or chained) else GROUPED_WAIT
    if safe_active(device_id):
        return GROUPED_SAFE_EARLY if ids_stable and safe_early else GROUPED_WAIT
    return GROUPED_OFF


def launch(fn, grid, block, args, smem: int, pdl=True, cluster: int = 1) -> None:
    """Launch CuPy kernel ``fn`` (a RawKernel of the current device) with ``args`` on the
    current stream: as a programmatic dependent where ``pdl`` is true and / or in thread
    block clusters of ``cluster`` CTAs along x, else the plain CuPy launch.  The Launcher of
    a (kernel, grid, block, smem, pdl, cluster) and the parameter buffer of an argument
    signature are cached (the driver copies the parameters at launch)."""
    if not pdl and cluster <= 1 and not (args and type(args[0]) is TensorMap):
        fn(grid, block, args, shared_mem=smem)  # (CuPy's launch cannot pass a tensor map)
        return
    import cupy as cp

    grid = (grid,) if isinstance(grid, int) else tuple(grid)
    block = (block,) if isinstance(block, int) else tuple(block)
    ptr = int(fn.kernel.ptr)
    key = (ptr, grid, block, int(smem), bool(pdl), int(cluster))
    lau = _LAUNCHERS.get(key)
    if lau is None:
        if len(_LAUNCHERS) > 4096:
            _LAUNCHERS.clear()
        lau = _LAUNCHERS[key] = Launcher(ptr, grid, block, smem, bool(pdl), int(cluster))
    st, buf, argv, lock, vals = _packed_params(args)
    with lock:
        st.pack_into(buf, 0, *vals)
        lau(cp.cuda.get_current_stream().ptr, argv)
