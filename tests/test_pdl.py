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


def test_safe_mode(monkeypatch):
    """set_pdl("safe"): the dense kernels get the pdl argument PDL_SAFE (wait before anything),
    the grouped ones GROUPED_WAIT; full PDL's tables and early orders stay off."""
    import pytest

    cleared = []
    monkeypatch.setattr(L, "clear_plans", lambda: cleared.append(1))
    monkeypatch.setattr(P, "_CC", {0: True, 1: False})  # device 0: sm_90, device 1: older
    old = kb.set_pdl(False)
    try:
        assert kb.set_pdl("safe") is False and cleared
        assert not P.enabled() and not P.active(0) and P.safe_active(0) and not P.safe_active(1)
        assert (P.dense_arg(0), P.dense_arg(1)) == (P.PDL_SAFE, 0)
        assert P.grouped_mode(0, True) == P.GROUPED_WAIT and P.grouped_mode(1, True) == P.GROUPED_OFF
        # the grouped GEMV: stable ids read before the wait, weights only L2-prefetched
        assert P.grouped_mode(0, True, safe_early=True) == P.GROUPED_SAFE_EARLY
        assert P.grouped_mode(0, False, safe_early=True) == P.GROUPED_WAIT
        assert P.grouped_mode(1, True, safe_early=True) == P.GROUPED_OFF
        # chained (the kernel right before is the package's own): the full PDL order in safe mode too
        assert P.grouped_mode(0, False, chained=True) == P.GROUPED_EARLY
        assert P.grouped_mode(0, True, safe_early=True, chained=True) == P.GROUPED_EARLY
        assert P.grouped_mode(1, True, safe_early=True, chained=True) == P.GROUPED_OFF
        assert kb.set_pdl(True) == "safe"  # the previous setting
        assert P.enabled() and not P.safe_active(0) and P.dense_arg(0) == 1
        assert P.grouped_mode(0, True) == P.GROUPED_EARLY and P.grouped_mode(0, False) == P.GROUPED_WAIT
        assert P.grouped_mode(0, True, safe_early=True) == P.GROUPED_EARLY
        with kb.pdl("safe"):
            assert P.dense_arg(0) == P.PDL_SAFE
        assert P.dense_arg(0) == 1  # restored: full
        kb.set_pdl(False)
        assert P.dense_arg(0) == 0 and P.grouped_mode(0, True) == P.GROUPED_OFF
        assert P.grouped_mode(0, True, chained=True) == P.GROUPED_OFF
        with pytest.raises(ValueError, match="safe"):
            kb.set_pdl("fast")
    finally:
        kb.set_pdl(old)
    # the kernels' constant (cuda_src/kbit_common.cuh) is the one the launchers pass
    import os
    import re

    from kbitcupy._compile import CUDA_SRC

    src = open(os.path.join(CUDA_SRC, "kbit_common.cuh")).read()
    assert int(re.search(r"#define KBIT_PDL_SAFE (\d+)", src).group(1)) == P.PDL_SAFE
    assert int(re.search(r"#define KBIT_GROUPED_SAFE_EARLY (\d+)", src).group(1)) == P.GROUPED_SAFE_EARLY
    assert int(re.search(r"#define KBIT_PDL_SAFE_PF1 (\d+)", src).group(1)) == P.PDL_SAFE_PF1


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


def test_packed_params_tensor_map_first():
    """A TensorMap (kbit_wgmma_tma's first, __grid_constant__ parameter) packs as its 128 bytes at
    offset 0, the arguments after it at their natural alignment after it; CuPy's plain launch cannot
    pass it, so a plain launch with one goes through cuLaunchKernelEx (checked by the GPU tests)."""
    import numpy as np
    import pytest

    from kbitcupy._launch import DevPtr

    raw = bytes(range(128))
    args = (P.TensorMap(raw), DevPtr(0x1000), np.int32(7), np.float32(1.5), DevPtr(0x2000), np.int32(2))
    st, buf, argv, lock, vals = P._packed_params(args)
    st.pack_into(buf, 0, *vals)
    base = ctypes.addressof(buf)
    assert [argv[i] - base for i in range(len(args))] == [0, 128, 136, 140, 144, 152]
    assert ctypes.string_at(base, 128) == raw
    assert ctypes.c_uint64.from_address(base + 128).value == 0x1000
    assert ctypes.c_int32.from_address(base + 136).value == 7
    assert ctypes.c_uint64.from_address(base + 144).value == 0x2000
    with pytest.raises(ValueError, match="128 bytes"):
        P.TensorMap(b"x" * 64)


def test_env_default_is_safe(monkeypatch):
    """KBITCUPY_PDL unset or "safe": safe mode (the default); 0 / off: plain launches; 1 / on:
    full PDL; anything else is refused at import, naming the variable."""
    import importlib

    import pytest

    saved = (P.ENABLED, P.SAFE)
    try:
        for env, want in (("", (False, True)), ("safe", (False, True)), ("0", (False, False)),
                          ("off", (False, False)), ("1", (True, False)), ("on", (True, False))):
            monkeypatch.setenv("KBITCUPY_PDL", env)
            importlib.reload(P)
            assert (P.ENABLED, P.SAFE) == want, env
        monkeypatch.setenv("KBITCUPY_PDL", "fast")
        with pytest.raises(ValueError, match="KBITCUPY_PDL"):
            importlib.reload(P)
    finally:
        monkeypatch.delenv("KBITCUPY_PDL", raising=False)
        importlib.reload(P)
        P.ENABLED, P.SAFE = saved
