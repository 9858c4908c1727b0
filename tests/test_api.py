"""CPU tests of the public API: reference backend and input validation."""
import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy import reference as R


def test_quantize_dequantize_numpy(rng):
    W = (rng.standard_normal((300, 96)) * 0.02).astype(np.float16)
    for k in (2, 3, 4, 5):
        q = kb.quantize(W, k)
        assert q.layout == "tiled" and q.absmax.dtype == np.uint8 and q.shape == (300, 96)
        qf = kb.quantize(W, k, layout="flat")
        d1, d2 = kb.dequantize(q), kb.dequantize(qf)
        assert d1.dtype == np.float16
        np.testing.assert_array_equal(d1, d2)
        np.testing.assert_array_equal(kb.dequantize(kb.repack(qf), np.float32), kb.dequantize(qf, np.float32))


def test_bf16_numpy(rng):
    W = rng.standard_normal((128, 64)).astype(kb.bfloat16)
    q = kb.quantize(W, 4)
    assert kb.dequantize(q).dtype == kb.bfloat16


def test_float32_absmax_flat(rng):
    W = rng.standard_normal((64, 64)).astype(np.float32)
    q = kb.quantize(W, 4, layout="flat", absmax_format="float32")
    assert q.absmax.dtype == np.float32
    assert R.sqnr_db(W, kb.dequantize(q, np.float32)) > 20
    qt = kb.repack(q)  # float32 absmax is E4M4-encoded on repack
    assert qt.absmax.dtype == np.uint8
    assert R.sqnr_db(W, kb.dequantize(qt, np.float32)) > 19


def test_from_packed_roundtrip(rng):
    W = rng.standard_normal((128, 128)).astype(np.float32)
    q = kb.quantize(W, 3, layout="flat")
    q2 = kb.from_packed(q.packed.view(np.int32), q.absmax, q.codebook, q.shape, 3, layout="flat")
    assert np.shares_memory(q2.packed, q.packed)
    np.testing.assert_array_equal(kb.dequantize(q2, np.float32), kb.dequantize(q, np.float32))
    qt = kb.repack(q)
    q3 = kb.from_packed(qt.packed, qt.absmax, qt.codebook, qt.shape, 3, layout="tiled")
    np.testing.assert_array_equal(kb.dequantize(q3, np.float32), kb.dequantize(q, np.float32))


def test_matmul_reference(rng):
    W = rng.standard_normal((200, 96)).astype(np.float32)
    q = kb.quantize(W, 4)
    A = rng.standard_normal((2, 3, 96)).astype(np.float16)
    C = kb.matmul(A, q)
    assert C.shape == (2, 3, 200) and C.dtype == np.float16
    ref = kb.reference_matmul(A.reshape(6, 96), q).reshape(2, 3, 200)
    np.testing.assert_allclose(C.astype(np.float64), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("kwargs,match", [
    (dict(k=6), "k must be"),
    (dict(k=1), "k must be"),
    (dict(layout="rows"), "layout"),
    (dict(absmax_format="fp8"), "absmax_format"),
    (dict(layout="tiled", absmax_format="float32"), "E4M4"),
    (dict(codebook=np.zeros(8, np.float32)), "codebook"),
    (dict(codebook=np.full(16, 2.0, np.float32)), "codebook"),
])
def test_quantize_bad_args(kwargs, match, rng):
    W = rng.standard_normal((8, 64)).astype(np.float32)
    with pytest.raises(ValueError, match=match):
        kb.quantize(W, **kwargs)


def test_quantize_bad_weights(rng):
    with pytest.raises(ValueError, match="multiple of 32"):
        kb.quantize(np.ones((4, 48), np.float32))
    with pytest.raises(ValueError, match="2-D"):
        kb.quantize(np.ones(64, np.float32))
    with pytest.raises(ValueError, match="empty"):
        kb.quantize(np.ones((0, 64), np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        kb.quantize(np.ones((64, 128), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="float16"):
        kb.quantize(np.ones((4, 64), np.int32))
    for bad in (np.nan, np.inf):
        W = np.ones((4, 64), np.float32)
        W[2, 5] = bad
        with pytest.raises(ValueError, match="NaN or Inf"):
            kb.quantize(W)
    with pytest.raises(TypeError, match="W must be"):
        kb.quantize([[1.0] * 32])


def test_matmul_bad_args(rng):
    q = kb.quantize(rng.standard_normal((64, 64)).astype(np.float32), 4)
    with pytest.raises(ValueError, match="last dimension"):
        kb.matmul(np.ones((1, 32), np.float16), q)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        kb.matmul(np.ones((1, 64), np.float32), q)
    with pytest.raises(TypeError, match="KbitWeight"):
        kb.matmul(np.ones((1, 64), np.float16), np.ones((64, 64)))


def test_from_packed_bad(rng):
    q = kb.quantize(rng.standard_normal((128, 64)).astype(np.float32), 4)
    with pytest.raises(ValueError, match="packed must be 1-D"):
        kb.from_packed(q.packed[:-1], q.absmax, q.codebook, q.shape, 4)
    with pytest.raises(ValueError, match="codebook"):
        kb.from_packed(q.packed, q.absmax, q.codebook[:8], q.shape, 4)
    with pytest.raises(ValueError, match="k must be"):
        kb.from_packed(q.packed, q.absmax, q.codebook, q.shape, 7)
    with pytest.raises(ValueError, match="shape"):
        kb.from_packed(q.packed, q.absmax, q.codebook, (128, 60), 4)
    with pytest.raises(ValueError, match="tensor_scale"):
        kb.from_packed(q.packed, q.absmax, q.codebook, q.shape, 4, tensor_scale=3.0)


def test_from_packed_checks_dtype_scale_k_shape(rng):
    """Nothing passes as garbage: dtype an output dtype, tensor_scale a normal float32 power of two,
    k and shape integers (not truncated floats)."""
    q = kb.quantize(rng.standard_normal((128, 64)).astype(np.float32), 4)
    a = (q.packed, q.absmax, q.codebook)
    for dt in (np.int32, np.float64, np.uint8, None):
        with pytest.raises(ValueError, match="dtype must be float16, bfloat16 or float32"):
            kb.from_packed(*a, q.shape, 4, dtype=dt)
    for dt, want in ((np.float16, np.float16), (np.float32, np.float32), ("bf16", kb.bfloat16)):
        assert kb.dequantize(kb.from_packed(*a, q.shape, 4, dtype=dt)).dtype == want
    for ts in (2.0 ** -200, 2.0 ** 200, 2.0 ** -127, 2.0 ** 128, np.inf, np.nan, 0.0, -2.0, 0.75):
        with pytest.raises(ValueError, match="tensor_scale must be a power of two"):
            kb.from_packed(*a, q.shape, 4, tensor_scale=ts)
    for ts in (2.0 ** -126, 2.0 ** 127):
        assert kb.from_packed(*a, q.shape, 4, tensor_scale=ts).tensor_scale == ts
    for k in (4.9, 4.0, "4", True):
        with pytest.raises(ValueError, match="k must be an integer"):
            kb.from_packed(*a, q.shape, k)
    for shape in ((128.0, 64), (128, 64.5), ("128", 64), (True, 64), 128, "ab"):
        with pytest.raises(TypeError, match="shape must be a sequence of integers"):
            kb.from_packed(*a, shape, 4)
    q2 = kb.from_packed(*a, (np.int64(128), np.int32(64)), np.int8(4))  # numpy integers are fine
    assert q2.shape == (128, 64) and q2.k == 4 and type(q2.k) is int and all(type(s) is int for s in q2.shape)


def test_repack_nonfinite_float32_absmax(rng):
    q = kb.quantize(rng.standard_normal((64, 64)).astype(np.float32), 4, layout="flat", absmax_format="float32")
    for bad in (np.inf, np.nan, -1.0):
        am = q.absmax.copy()
        am[3] = bad
        w = kb.from_packed(q.packed, am, q.codebook, q.shape, 4, layout="flat")
        with pytest.raises(ValueError, match="absmax"):
            kb.repack(w)


def test_quantize_magnitude_ends(rng):
    """Up to ABSMAX_LIMIT (about 3.35e38) E4M4 scales stay finite; from it up the error names W.
    Tiny weights keep a normal float32 tensor scale (2^-126) instead of one that rounds to 0."""
    lim = np.float32(R.ABSMAX_LIMIT)
    W = rng.standard_normal((8, 64)).astype(np.float32)
    W[0, 0], W[5, 9] = np.nextafter(lim, np.float32(0)), -np.nextafter(lim, np.float32(0))
    for layout in ("flat", "tiled"):
        d = kb.dequantize(kb.quantize(W, 4, layout=layout), np.float32)
        assert np.isfinite(d).all() and abs(d[0, 0] / W[0, 0] - 1) < 1 / 32
    for big in (lim, 3.4e38, np.finfo(np.float32).max):
        W[0, 0] = big
        with pytest.raises(ValueError, match="W: largest magnitude .* below 3.34965e"):
            kb.quantize(W, 4)
    # float32 absmax has no such limit
    assert np.isfinite(kb.dequantize(kb.quantize(W, 4, layout="flat", absmax_format="float32"), np.float32)).all()
    for mag in (1e-44, 2.0 ** -136, 2.0 ** -130, 1e-38, 2.0 ** -122):
        W = np.full((4, 32), mag, np.float32)
        W[1] *= -0.5
        q = kb.quantize(W, 4)
        assert 2.0 ** -126 <= q.tensor_scale < 2.0 ** -117
        np.testing.assert_allclose(kb.dequantize(q, np.float32), W, rtol=1 / 16, atol=2.0 ** -141)


def test_out_argument_cpu(rng):
    """out= on the NumPy backend: written, returned as given, checked like the GPU path's out=."""
    W = rng.standard_normal((160, 64)).astype(np.float32)
    q = kb.quantize(W, 3)
    A = rng.standard_normal((2, 64)).astype(np.float16)
    out = np.full((2, 160), np.nan, np.float16)  # poisoned
    assert kb.matmul(A, q, out=out) is out
    np.testing.assert_array_equal(out, kb.matmul(A, q))
    d = np.full((160, 64), np.nan, np.float32)
    assert kb.dequantize(q, np.float32, out=d) is d
    np.testing.assert_array_equal(d, kb.dequantize(q, np.float32))
    for bad in (np.empty((2, 159), np.float16), np.empty((2, 160), np.float32),
                np.empty((160, 2), np.float16).T):
        with pytest.raises(ValueError, match="out must be a contiguous float16 array of shape"):
            kb.matmul(A, q, out=bad)
    with pytest.raises(ValueError, match="out must be a contiguous float16 array"):
        kb.dequantize(q, np.float16, out=d)
    with pytest.raises(TypeError, match="out must be a NumPy array"):
        kb.matmul(A, q, out=[0.0] * 320)
    from kbitcupy.moe import silu_mul

    g, u = rng.standard_normal((2, 3, 8)).astype(np.float16)
    o = np.empty((3, 8), np.float16)
    assert silu_mul(g, u, out=o) is o
    np.testing.assert_array_equal(o, silu_mul(g, u))
    with pytest.raises(ValueError, match="out must be"):
        silu_mul(g, u, out=np.empty((3, 8), np.float32))


def check_out_aliasing(xp, rng):
    """out= overlapping an input the call reads is refused by name on backend xp (numpy / cupy), since a kernel
    would read what other blocks already wrote; silu_mul may write over gate or up element for element (each element
    is read before it is written).  Shared by the GPU test (tests/test_checks_gpu.py)."""
    from kbitcupy.grouped import grouped_matmul, quantize_experts
    from kbitcupy.moe import gather_rows, moe_combine, moe_route, silu_mul

    def dev(a):
        return xp.asarray(a)

    def host(a):
        return np.asarray(a.get() if hasattr(a, "get") else a)

    W = (rng.standard_normal((64, 64)) * 0.05).astype(np.float32)
    q = kb.quantize(dev(W), 4)
    buf = dev(rng.standard_normal((4, 64)).astype(np.float16))
    A = buf[:2]
    with pytest.raises(ValueError, match="out overlaps A in memory"):
        kb.matmul(A, q, out=buf[1:3])  # N = K: the shapes fit
    with pytest.raises(ValueError, match="out overlaps A in memory"):
        kb.matmul(A, q, out=A)
    o = kb.matmul(A, q, out=buf[2:])  # adjacent, not overlapping: runs
    ref = kb.matmul(dev(host(buf[:2])), q)
    np.testing.assert_array_equal(host(o), host(ref))
    bank = quantize_experts(dev((rng.standard_normal((3, 64, 64)) * 0.05).astype(np.float32)), 4)
    ids, offs = np.array([0, 2], np.int32), np.array([0, 1, 2], np.int32)
    with pytest.raises(ValueError, match="out overlaps A_sorted in memory"):
        grouped_matmul(A, bank, ids, offs, 1, out=buf[1:3])
    T, topk, E = 2, 2, 3
    r = moe_route(dev(np.array([[0, 1], [2, 0]], np.int32)), E)
    xb = dev(rng.standard_normal((6, 64)).astype(np.float16))
    with pytest.raises(ValueError, match="out overlaps x in memory"):
        gather_rows(xb[:2], r, out=xb[1:5])
    g = dev(rng.standard_normal((3, 16)).astype(np.float16))
    u = dev(rng.standard_normal((3, 16)).astype(np.float16))
    exp = silu_mul(g, u)
    assert silu_mul(g, u, out=g) is g  # in place, element for element
    np.testing.assert_array_equal(host(g), host(exp))
    with pytest.raises(ValueError, match="out overlaps gate in memory"):
        silu_mul(g[:2], u[:2], out=g[1:])
    C = dev(rng.standard_normal((T * topk, 64)).astype(np.float16))
    w = dev(rng.random((T, topk)).astype(np.float32))
    with pytest.raises(ValueError, match="out overlaps C_sorted in memory"):
        moe_combine(C, r, w, out=C[1:3])


def test_out_overlapping_an_input_refused_cpu(rng):
    check_out_aliasing(np, rng)


def test_check_no_overlap_spans():
    """The byte ranges behind check_no_overlap: strided and reversed NumPy views, and the contiguous fast path of a
    CuPy-like array (data.ptr, _c_contiguous, nbytes)."""
    from types import SimpleNamespace

    from kbitcupy._arrays import _span, check_no_overlap

    buf = np.zeros((8, 8), np.float16)
    base = buf.ctypes.data
    assert _span(buf) == (base, base + 128)
    assert _span(buf[::-1, ::2]) == (base, base + 128 - 2)  # reversed rows, every other column
    assert _span(buf[2:3]) == (base + 32, base + 48) and _span(buf[:0]) is None
    check_no_overlap(buf[4:], "out", {"A": buf[:4], "B": buf[:0], "C": None})  # adjacent / empty / absent: fine
    with pytest.raises(ValueError, match="out overlaps A in memory"):
        check_no_overlap(buf[3:], "out", {"A": buf[::-1][4:]})  # rows 3..0 reversed: row 3 shared
    with pytest.raises(ValueError, match="out overlaps B in memory"):
        check_no_overlap(buf[:, 1::2], "out", {"B": buf[:, ::2]})  # interleaved columns: bounds overlap (refused)
    fake = SimpleNamespace(size=64, data=SimpleNamespace(ptr=0x1000), _c_contiguous=True, nbytes=128)
    assert _span(fake) == (0x1000, 0x1080)
    check_no_overlap(buf, "out", {"g": buf}, same_ok=("g",))  # the same elements: allowed where named
    with pytest.raises(ValueError, match="out overlaps g in memory"):
        check_no_overlap(buf, "out", {"g": buf})


def test_default_codebook_flag_cpu(rng):
    """KbitWeight.default_codebook is true exactly for create_codebook(k)'s levels, bit for bit,
    and follows the codebook through replace / from_packed."""
    from dataclasses import replace

    W = rng.standard_normal((64, 128)).astype(np.float32)
    for k in (2, 3, 4, 5):
        q = kb.quantize(W, k)
        assert q.default_codebook
        cb = R.create_codebook(k).astype(np.float32)
        assert kb.from_packed(q.packed, q.absmax, cb.copy(), q.shape, k).default_codebook  # same levels, new array
        near = cb.copy()
        near[3] = np.nextafter(near[3], np.float32(0))  # one ulp off
        assert not replace(q, codebook=near).default_codebook
        assert not kb.quantize(W, k, codebook=near).default_codebook
    assert not replace(q, k=4).default_codebook  # a 32-level codebook is not k = 4's


def test_no_codebook_reads_skips_the_read_back(monkeypatch):
    """Within weight.no_codebook_reads() (kbitcupy.torch_ops' per-call wrappers) an unseen GPU
    codebook is not read back, which would be a host sync per call: default_codebook is False."""
    from kbitcupy import weight as Wt

    class FakeGpuCodebook:  # what the check sees of a CuPy array, and a read that must not happen
        dtype, shape = np.dtype(np.float32), (16,)

        def get(self):
            raise AssertionError("read back within no_codebook_reads()")

    monkeypatch.setattr(Wt, "kind", lambda a: "cupy")
    monkeypatch.setattr(Wt, "is_cupy", lambda a: True)
    with Wt.no_codebook_reads():
        assert Wt.is_default_codebook(FakeGpuCodebook(), 4) is False
