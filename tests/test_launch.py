"""CPU tests of the fast launch path's parameter block (kbitcupy._launch) and its switches."""
import ctypes
import sys

import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy import _launch as L
from kbitcupy.matmul import matmul


def _le(x, n):
    return int(x).to_bytes(n, sys.byteorder)


def test_param_block_bytes_and_offsets():
    # the GEMV's argument tuple: 5 pointers, 3 int32, 1 float32
    args = (L.DevPtr(0x7F0000001000), L.DevPtr(0x7F0000002000), L.DevPtr(0x10), L.DevPtr(0xFFFFFFFFFFFFFFF0),
            L.DevPtr(0x7F0000003000), np.int32(1), np.int32(5120), np.int32(-2048), np.float32(0.5))
    pb = L.ParamBlock(args)
    assert len(pb) == 9
    assert pb.offsets == (0, 8, 16, 24, 32, 40, 44, 48, 52)
    assert pb.sizes == (8,) * 5 + (4,) * 4
    assert pb.pointer_args == (0, 1, 2, 3, 4)
    expect = (b"".join(_le(a, 8) for a in args[:5]) + np.int32(1).tobytes() + np.int32(5120).tobytes()
              + np.int32(-2048).tobytes() + np.float32(0.5).tobytes())
    assert pb.tobytes() == expect
    # kernelParams[i] points at argument i's bytes
    base = pb.arg_address(0)
    for i, off in enumerate(pb.offsets):
        assert pb.arg_address(i) == base + off
        assert pb.arg_bytes(i) == expect[off:off + pb.sizes[i]]
    argv = (ctypes.c_void_p * 9).from_address(pb.address)
    assert [int(v) for v in argv] == [base + o for o in pb.offsets]


def test_param_block_alignment_and_mixed_sizes():
    args = (np.int8(-3), L.DevPtr(0x1234), np.int16(7), np.int64(-1), np.float16(1.5), np.float64(2.25),
            np.uint8(255), np.int32(9))
    pb = L.ParamBlock(args)
    # each argument at a multiple of its own alignment (pointers 8)
    assert pb.offsets == (0, 8, 16, 24, 32, 40, 48, 52)
    assert pb.arg_address(0) % 8 == 0
    for i, a in enumerate(args):
        size = 8 if isinstance(a, L.DevPtr) else a.itemsize
        assert pb.offsets[i] % min(size, 8) == 0
        raw = _le(a, 8) if isinstance(a, L.DevPtr) else a.tobytes()
        assert pb.arg_bytes(i) == raw
    assert pb.nbytes == 56


def test_param_block_python_scalars_like_cupy():
    pb = L.ParamBlock((True, 3, -1.5))
    assert pb.arg_bytes(0) == np.bool_(True).tobytes()
    assert pb.arg_bytes(1) == np.int64(3).tobytes()
    assert pb.arg_bytes(2) == np.float64(-1.5).tobytes()
    assert pb.pointer_args == ()


def test_param_block_pointer_slot_rewrite():
    pb = L.ParamBlock((L.DevPtr(0x1000), np.int32(4), L.DevPtr(0x2000), np.float32(1.0)))
    a, o = pb.slot(0), pb.slot(2)
    before = pb.tobytes()
    a.value = 0x7FFF00000010
    o.value = 0xFFFFFFFFFFFFFF00
    assert pb.arg_bytes(0) == _le(0x7FFF00000010, 8)
    assert pb.arg_bytes(2) == _le(0xFFFFFFFFFFFFFF00, 8)
    assert pb.arg_bytes(1) == before[8:12] and pb.arg_bytes(3) == before[24:28]  # scalars untouched
    with pytest.raises(ValueError, match="not a pointer"):
        pb.slot(1)


def test_param_block_empty_and_unsupported():
    pb = L.ParamBlock(())
    assert len(pb) == 0 and pb.tobytes() == b"" and pb.address
    with pytest.raises(TypeError, match="not supported"):
        L.ParamBlock((np.zeros(3),))
    with pytest.raises(TypeError, match="not supported"):
        L.ParamBlock(("x",))


def test_enable_switches():
    old = L.ENABLED
    try:
        assert L.set_enabled(True) == old
        with L.disabled():
            assert L.ENABLED is False
        assert L.ENABLED is True
    finally:
        L.set_enabled(old)


def test_env_switch_off(monkeypatch):
    import importlib

    monkeypatch.setenv("KBITCUPY_NO_FASTPATH", "1")
    mod = importlib.reload(L)
    try:
        assert mod.ENABLED is False
    finally:
        monkeypatch.delenv("KBITCUPY_NO_FASTPATH")
        importlib.reload(L)
    assert L.ENABLED is True


def test_fast_path_misses_on_cpu_inputs():
    """NumPy inputs (and anything without a plan) go to the general path."""
    rng = np.random.default_rng(0)
    W = rng.standard_normal((64, 128), dtype=np.float32)
    q = kb.quantize(W, 4)
    A = rng.standard_normal((1, 128)).astype(np.float16)
    assert L.matmul_fast(A, q, None) is L.MISS
    C = matmul(A, q)
    C2 = matmul(A, q)
    np.testing.assert_array_equal(C, C2)
    assert L.plan_count() == 0 and L.lookup(A, q) is None
    with pytest.raises(ValueError, match="last dimension"):
        matmul(np.zeros((1, 64), np.float16), q)


def test_forget_drops_only_its_own_entry():
    class W:  # stands in for a KbitWeight (weakref-able)
        pass

    w1 = W()
    table = {}
    key = ("k",)
    table[key] = L._weak(w1, table, key)
    del w1
    assert key not in table
    w2, w3 = W(), W()
    r2 = L._weak(w2, table, key)
    table[key] = L._weak(w3, table, key)  # replaced before w2 dies
    del w2
    assert key in table
    assert r2() is None


class _Mem:
    def __init__(self, ptr, dev=0):
        self.ptr, self.device_id = ptr, dev


class _Flags:
    def __init__(self, c):
        self.c_contiguous = c


class _FakeArray:
    """Just what matmul_fast reads of a CuPy array."""

    def __init__(self, shape, ptr, dtype=np.float16, strides=None, dev=0, contiguous=True):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.strides = strides
        self.data, self.flags, self._c_contiguous = _Mem(ptr, dev), _Flags(contiguous), contiguous


class _Stream:
    ptr = 0xABC0


def test_hot_path_with_fakes(monkeypatch):
    """matmul_fast's checks, pointer rewrite and launch arguments, with stand-ins for CuPy."""
    import threading
    import weakref

    calls = []

    class W:
        pass

    q = W()
    monkeypatch.setattr(L, "_ND", _FakeArray)
    monkeypatch.setattr(L, "_launch_kernel", lambda *a: calls.append(a))
    monkeypatch.setattr(L, "_get_device", lambda: 0)
    monkeypatch.setattr(L, "_cur_stream", lambda dev: _Stream)
    monkeypatch.setattr(L, "_cp_empty", lambda shape, dtype: _FakeArray(shape, 0x9000, dtype))
    monkeypatch.setattr(L, "_DRIVER_ERROR", (RuntimeError,))
    monkeypatch.setattr(L, "_c_contig", lambda a: a._c_contiguous)
    pb = L.ParamBlock((L.DevPtr(0), L.DevPtr(0x5550), L.DevPtr(0), np.int32(1), np.float32(2.0)))
    p = L._Plan()
    p.dev, p.func, p.gx, p.gy, p.gz, p.bx, p.by, p.bz, p.smem = 0, 0xF00, 320, 1, 1, 256, 1, 1, 70000
    p.block, p.params, p.argv, p.a_slot, p.o_slot = pb, pb.address, pb._argv, pb.slot(0), pb.slot(2)
    p.out_shape = (1, 512)
    p.dtype, p.tdevice, p.lock, p.pdl = np.dtype(np.float16), None, threading.Lock(), None
    p.ws_stream = p.keep = None
    p.a_bytes, p.o_bytes = 4096, 1024
    p.ref = weakref.ref(q)
    monkeypatch.setitem(L._PLANS, ((1, 2048), np.dtype(np.float16), id(q)), p)

    A = _FakeArray((1, 2048), 0x1000)
    out = _FakeArray((1, 512), 0x2000)
    assert L.matmul_fast(A, q, out) is out  # (out right after A: adjacent, served)
    assert calls[-1] == (0xF00, 320, 1, 1, 256, 1, 1, 70000, 0xABC0, pb.address, 0)
    assert pb.arg_bytes(0) == _le(0x1000, 8) and pb.arg_bytes(2) == _le(0x2000, 8)
    assert pb.arg_bytes(1) == _le(0x5550, 8)  # the weight's pointers stay
    r = L.matmul_fast(_FakeArray((1, 2048), 0x3000), q, None)  # out allocated
    assert r.data.ptr == 0x9000 and pb.arg_bytes(0) == _le(0x3000, 8) and pb.arg_bytes(2) == _le(0x9000, 8)
    # contiguous with a non-canonical stride on the size-1 dimension: still served
    assert L.matmul_fast(_FakeArray((1, 2048), 0x1000, strides=(8192, 2)), q, out) is out
    n = len(calls)
    misses = [
        (_FakeArray((1, 2048), 0x1000, strides=(8192, 4), contiguous=False), q, out),  # non-contiguous A
        (_FakeArray((1, 2048), 0x1008), q, out),                                       # misaligned A
        (_FakeArray((1, 2048), 0x1000, dev=1), q, out),                                # A on another device
        (_FakeArray((1, 2048), 0x1000, dtype=np.float32), q, out),                     # other dtype: other key
        (_FakeArray((1, 1024), 0x1000), q, out),                                       # other shape: other key
        (A, W(), out),                                                                 # other weight
        (A, q, _FakeArray((1, 256), 0x2000)),                                          # out shape
        (A, q, _FakeArray((1, 512), 0x2000, dtype=np.float32)),                        # out dtype
        (A, q, _FakeArray((1, 512), 0x2000, strides=(2048, 4), contiguous=False)),     # out non-contiguous
        (A, q, _FakeArray((1, 512), 0x2000, dev=1)),                                   # out on another device
        (A, q, np.zeros((1, 512), np.float16)),                                        # out of another type
        (np.zeros((1, 2048), np.float16), q, out),                                     # NumPy A
        (A, q, _FakeArray((1, 512), 0x1ff0)),                                          # out overlapping A's end
        (_FakeArray((1, 2048), 0x2300), q, out),                                       # A overlapping out's end
    ]
    for a, w, o in misses:
        assert L.matmul_fast(a, w, o) is L.MISS
    assert len(calls) == n

    # called with another device current: the plan's made current around the launch, the caller's back after (also
    # when the launch fails)
    cur = [1]
    switches = []
    monkeypatch.setattr(L, "_get_device", lambda: cur[0])
    monkeypatch.setattr(L, "_set_device", lambda d: (switches.append(d), cur.__setitem__(0, d)))
    monkeypatch.setattr(L, "_cur_stream", lambda dev: _Stream if dev == cur[0] == 0 else None)
    assert L.matmul_fast(A, q, out) is out and switches == [0, 1] and cur[0] == 1 and len(calls) == n + 1
    r = L.matmul_fast(_FakeArray((1, 2048), 0x3000), q, None)  # out allocated while device 0 is current
    assert r.data.ptr == 0x9000 and switches == [0, 1, 0, 1] and len(calls) == n + 2

    def fail(*a):
        raise RuntimeError("launch failed")

    monkeypatch.setattr(L, "_launch_kernel", fail)
    assert L.matmul_fast(A, q, out) is L.MISS and cur[0] == 1 and switches[-2:] == [0, 1]
    monkeypatch.setattr(L, "_launch_kernel", lambda *a: calls.append(a))
    monkeypatch.setattr(L, "_get_device", lambda: 0)
    monkeypatch.setattr(L, "_cur_stream", lambda dev: _Stream)
    n = len(calls)

    # a streaming-GEMV plan (its workspace is one stream's) serves that stream only
    p.ws_stream = 0xABC1
    assert L.matmul_fast(A, q, out) is L.MISS
    p.ws_stream = 0xABC0
    assert L.matmul_fast(A, q, out) is out and calls[-1][8] == 0xABC0
    p.ws_stream = None
    n = len(calls)

    # a plan made with PDL on launches through its cuLaunchKernelEx launcher instead
    p.pdl = lambda stream, params: calls.append(("pdl", stream, params))
    assert L.matmul_fast(_FakeArray((1, 2048), 0x4000), q, out) is out
    assert calls[-1] == ("pdl", 0xABC0, pb._argv) and pb.arg_bytes(0) == _le(0x4000, 8)
    p.pdl = None
    n = len(calls)

    def fail(*a):
        raise RuntimeError("no context")

    monkeypatch.setattr(L, "_launch_kernel", fail)  # a driver error: fall back to the general path
    assert L.matmul_fast(A, q, out) is L.MISS
    assert not p.lock.locked()
    # a dead weight never matches (ref() is None), even if its id is reused
    del q, misses, a, w, o
    assert p.ref() is None


def test_remember_lifecycle(monkeypatch):
    """Plans are built on the second sighting of (shape, dtype, weight), once; failures are
    not retried; everything goes when the weight dies.  (torch CPU tensors stand in for A:
    remember() only reads type, shape and dtype; the build itself needs a GPU.)"""
    torch = pytest.importorskip("torch")
    built = []

    def fake_build(A, qw, A2, o2, tag, kind="gemv"):
        built.append(tag)
        if getattr(qw, "fail", False):
            raise RuntimeError("cannot")
        return L._Plan()

    class W:
        fail = False

    monkeypatch.setattr(L, "_build", fake_build)
    monkeypatch.setattr(L, "_on_current_device", lambda A2: True)
    monkeypatch.setattr(L, "_TT", torch.Tensor)
    L.clear_plans()
    try:
        q = W()
        A = torch.zeros(1, 64, dtype=torch.float16)
        L.remember(A, q, None, None, None)
        assert built == [] and len(L._SEEN) == 1 and L.plan_count() == 0
        L.remember(A, q, None, None, None)
        assert built == ["torch"] and len(L._SEEN) == 0 and L.plan_count() == 1
        assert L.lookup(A, q) is not None and L.lookup(A, W()) is None
        L.remember(A, q, None, None, None)
        assert built == ["torch"]  # not rebuilt
        L.remember(A, q, torch.zeros(1, 8, dtype=torch.float16), None, None)
        assert built == ["torch"]
        L.remember(A, q, np.zeros((1, 8), np.float16), None, None)  # out of another type: never planned
        L.remember(np.zeros((1, 64), np.float16), q, None, None, None)  # NumPy A: never planned
        assert len(L._SEEN) == 0
        monkeypatch.setattr(L, "_on_current_device", lambda A2: False)  # another device current: not now
        q2 = W()
        L.remember(A, q2, None, None, None)
        L.remember(A, q2, None, None, None)
        assert len(L._SEEN) == 0 and len(L._FAILED) == 0 and L.lookup(A, q2) is None
        monkeypatch.setattr(L, "_on_current_device", lambda A2: True)
        del q2
        # a fresh weight object every call (torch_ops.kbit_matmul): only ever "seen"
        for _ in range(5):
            L.remember(A, W(), None, None, None)
        assert built == ["torch"] and len(L._SEEN) == 0  # the dead weights' marks are gone
        # a failing build warns once and is not retried
        bad = W()
        bad.fail = True
        L.remember(A, bad, None, None, None)
        with pytest.warns(RuntimeWarning, match="no fast launch plan"):
            L.remember(A, bad, None, None, None)
        L.remember(A, bad, None, None, None)
        assert built == ["torch", "torch"] and len(L._FAILED) == 1
        del bad
        assert len(L._FAILED) == 0
        del q
        assert L.plan_count() == 0
    finally:
        L.clear_plans()


def test_torch_cpu_tensor_misses(monkeypatch):
    torch = pytest.importorskip("torch")

    class W:
        pass

    q = W()
    p = L._Plan()
    p.dev = 0
    p.ref = L._weak(q, {}, None)
    A = torch.zeros(1, 64, dtype=torch.float16)
    monkeypatch.setattr(L, "_TT", torch.Tensor)
    monkeypatch.setitem(L._TPLANS, (A.shape, A.dtype, id(q)), p)
    assert L.lookup(A, q) is p
    assert L.matmul_fast(A, q, None) is L.MISS  # a CPU tensor never takes a GPU plan
    assert L.matmul_fast(A.to("meta"), q, None) is L.MISS
