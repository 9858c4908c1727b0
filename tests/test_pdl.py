"""CPU tests of kbitcupy._pdl: the switch, and the cuLaunchKernelEx structures' layout
(they must match cuda.h's CUlaunchAttribute / CUlaunchConfig byte for byte)."""
import ctypes

import kbitcupy as kb
from kbitcupy import _launch as L
from kbitcupy import _pdl as P


def test_switch_and_context_manager(monkeypatch):
    cleared = []
    monkeypatch.setattr(L, "clear_plans", lambda: cleared.append(1))
    old = kb.set_pdl(False)
    try:
        assert kb.set_pdl(True) is False and P.enabled()
        assert cleared  # plans hold the kernel's pdl argument: a change drops them
        n = len(cleared)
        assert kb.set_pdl(True) is True and len(cleared) == n  # no change, no clearing
        with kb.pdl(False):
            assert not P.enabled() and not P.active(0)  # off: no device query at all
        assert P.enabled()
    finally:
        kb.set_pdl(old)


def test_launch_structures_match_cuda_h():
    assert ctypes.sizeof(P._AttrValue) == 64
    assert ctypes.sizeof(P._Attr) == 72 and P._Attr.value.offset == 8
    assert P._Config.smem.offset == 24 and P._Config.stream.offset == 32
    assert P._Config.attrs.offset == 40 and P._Config.nattrs.offset == 48 and ctypes.sizeof(P._Config) == 56
    assert P._PROGRAMMATIC_STREAM_SERIALIZATION == 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def test_packed_params_match_param_block():
    """The PDL launcher's cached struct packing gives the bytes and offsets of
    kbitcupy._launch.ParamBlock (the layout cuLaunchKernel reads)."""
    import numpy as np

    from kbitcupy._launch import DevPtr, ParamBlock

    from kbitcupy.weight import levels_param

    rng = np.random.default_rng()
    lv = levels_param(rng.standard_normal(16).astype(np.float32))  # a struct by value (the GEMV's levels)
    for args in [(DevPtr(0x1000), np.int32(7), DevPtr(0x2000), np.float32(1.5), np.int64(-3), np.int32(2)),
                 (np.int32(1), DevPtr(0x30), np.int32(2), np.int32(3), np.float32(0.25), DevPtr(0x40), 5, 2.5, True),
                 # the decode GEMV's tail: ..., tensor_scale, levels, pdl; and a struct after a 1-byte argument
                 (DevPtr(0x50), np.uint64(0), np.int32(3), np.float32(0.5), lv, np.int32(1)),
                 (np.bool_(True), lv, DevPtr(0x60))]:
        pb = ParamBlock(args)
        st, buf, argv, lock, vals = P._packed_params(args)
        st.pack_into(buf, 0, *vals)
        base = ctypes.addressof(buf)
        assert [argv[i] - base for i in range(len(args))] == list(pb.offsets)
        assert ctypes.string_at(base, pb.nbytes) == pb.tobytes()
        assert P._packed_params(args)[1] is buf  # cached per signature


def test_packed_params_reject_array():
    """A NumPy array that is not a one-element struct is not a kernel argument."""
    import numpy as np
    import pytest

    with pytest.raises(TypeError, match="one-element"):
        P._packed_params((np.zeros(4, np.float32),))
