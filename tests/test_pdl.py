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
