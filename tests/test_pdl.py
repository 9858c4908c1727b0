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

    for args in [(DevPtr(0x1000), np.int32(7), DevPtr(0x2000), np.float32(1.5), np.int64(-3), np.int32(2)),
                 (np.int32(1), DevPtr(0x30), np.int32(2), np.int32(3), np.float32(0.25), DevPtr(0x40), 5, 2.5, True)]:
        pb = ParamBlock(args)
        st, buf, argv, lock, vals = P._packed_params(args)
        st.pack_into(buf, 0, *vals)
        base = ctypes.addressof(buf)
        assert [argv[i] - base for i in range(len(args))] == list(pb.offsets)
        assert ctypes.string_at(base, pb.nbytes) == pb.tobytes()
        assert P._packed_params(args)[1] is buf  # cached per signature
