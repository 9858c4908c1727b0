"""GPU quantize / dequantize / repack: bit-exact with the NumPy reference."""
import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy import reference as R

pytestmark = pytest.mark.gpu

QWEN_SHAPES = {  # name: (N, K) of W[N, K]
    "gateup": (5120, 2048), "down": (2048, 5120), "Q": (4096, 2048), "O": (2048, 4096),
    "KV": (512, 2048), "lin_key": (2048, 2048), "lin_value": (4096, 2048),
    "moe_gu": (512, 2048), "moe_dn": (2048, 512),
}
ODD_SHAPES = [(1, 32), (5, 96), (200, 160), (130, 64), (3, 4128)]


def _w(cp, rng, shape, dtype, scale=0.02):
    W = (rng.standard_normal(shape, dtype=np.float32) * scale)
    return cp.asarray(W.astype(dtype))


def _check_bitexact(cp, W, k, dtype, absmax_format="e4m4"):
    q = kb.quantize(W, k, layout="flat", absmax_format=absmax_format)
    packed, absmax, ts = R.quantize_flat(W.get().astype(np.float32), k, R.create_codebook(k), absmax_format)
    assert q.tensor_scale == ts
    np.testing.assert_array_equal(q.packed.get(), packed)
    np.testing.assert_array_equal(q.absmax.get(), absmax)
    return q


@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("dtype", [np.float16, "bfloat16", np.float32])
def test_quantize_bitexact_all_k(k, dtype, rng):
    import cupy as cp

    dt = kb.bfloat16 if dtype == "bfloat16" else dtype
    for shape in [QWEN_SHAPES["KV"]] + ODD_SHAPES:
        _check_bitexact(cp, _w(cp, rng, shape, dt), k, dt)


@pytest.mark.parametrize("name", list(QWEN_SHAPES))
def test_quantize_repack_dequant_qwen_shapes(name, rng):
    import cupy as cp

    k = [2, 3, 4, 5][hash(name) % 4]
    for dt in (np.float16, kb.bfloat16):
        W = _w(cp, rng, QWEN_SHAPES[name], dt)
        q = _check_bitexact(cp, W, k if dt == np.float16 else 4, dt)
        qt = kb.repack(q)
        pt, at, _ = R.repack(q.packed.get(), q.absmax.get(), q.k, q.shape, q.tensor_scale)
        np.testing.assert_array_equal(qt.packed.get(), pt)
        np.testing.assert_array_equal(qt.absmax.get(), at)
        ref = R.dequantize_flat(q.packed.get(), q.absmax.get(), q.codebook.get(), q.k, q.shape, q.tensor_scale,
                                np.float32)
        for out_dt in (np.float16, kb.bfloat16, np.float32):
            for qq in (q, qt):
                out = cp.full(q.shape, np.nan, dtype=out_dt)  # poisoned
                kb.dequantize(qq, out_dt, out=out)
                np.testing.assert_array_equal(out.get(), ref.astype(out_dt))


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_float32_and_fp16_absmax_paths(k, rng):
    import cupy as cp

    W = _w(cp, rng, (256, 320), np.float16, 1.0)
    q = _check_bitexact(cp, W, k, np.float16, "float32")
    ref = R.dequantize_flat(q.packed.get(), q.absmax.get(), q.codebook.get(), k, q.shape, 1.0, np.float32)
    np.testing.assert_array_equal(kb.dequantize(q, np.float32).get(), ref)
    # float16 absmax (an interop format) dequantizes like the reference
    q16 = kb.from_packed(q.packed, q.absmax.astype(cp.float16), q.codebook, q.shape, k, layout="flat")
    ref16 = R.dequantize_flat(q.packed.get(), q.absmax.get().astype(np.float16), q.codebook.get(), k, q.shape)
    np.testing.assert_array_equal(kb.dequantize(q16, np.float32).get(), ref16)
    # repack of float32 absmax encodes E4M4 on the GPU exactly like the reference
    qt = kb.repack(q)
    pt, at, ts = R.repack(q.packed.get(), q.absmax.get(), k, q.shape)
    assert qt.tensor_scale == ts
    np.testing.assert_array_equal(qt.packed.get(), pt)
    np.testing.assert_array_equal(qt.absmax.get(), at)


def test_tensor_scale_ends_gpu(rng):
    import cupy as cp

    for mag in (3e3, 1e-6):
        W = _w(cp, rng, (128, 256), np.float32, mag)
        q = _check_bitexact(cp, W, 4, np.float32)
        assert q.tensor_scale != 1.0
        assert R.sqnr_db(W.get(), kb.dequantize(q, np.float32).get()) > 19


def test_magnitude_ends_and_aligned_out_gpu(rng):
    """The CPU path's top end on the GPU (tests/test_api.py): weights from ABSMAX_LIMIT up are refused by name; just
    below it they quantize to finite values; dequantize into an out= whose pointer is not 16-byte aligned (the
    kernel's vector stores would fault the context) raises a ValueError naming out."""
    import cupy as cp

    W = _w(cp, rng, (8, 64), np.float32, 1.0)
    W[0, 0] = np.float32(R.ABSMAX_LIMIT)
    with pytest.raises(ValueError, match="W: largest magnitude"):
        kb.quantize(W, 4)
    W[0, 0] = np.nextafter(np.float32(R.ABSMAX_LIMIT), np.float32(0))
    assert cp.isfinite(kb.dequantize(kb.quantize(W, 4), np.float32)).all()
    q = kb.quantize(_w(cp, rng, (64, 128), np.float32), 4)
    for dt, off in ((cp.float16, 2), (cp.float32, 8), (kb.bfloat16, 4)):
        n = 64 * 128 * np.dtype(dt).itemsize
        o = cp.empty(n + 32, cp.uint8)[off:off + n].view(dt).reshape(64, 128)
        with pytest.raises(ValueError, match="out's data pointer must be 16-byte aligned"):
            kb.dequantize(q, dt, out=o)


def test_nan_inf_rejected_gpu():
    import cupy as cp

    W = cp.ones((4, 64), cp.float16)
    W[1, 3] = cp.inf
    with pytest.raises(ValueError, match="NaN or Inf"):
        kb.quantize(W)


def test_nonstandard_codebook_gpu(rng):
    import cupy as cp

    cb = np.sort(rng.uniform(-1, 1, 16)).astype(np.float32)[::-1].copy()  # descending, asymmetric
    W = _w(cp, rng, (128, 128), np.float32, 1.0)
    q = kb.quantize(W, 4, codebook=cb, layout="flat")
    packed, absmax, _ = R.quantize_flat(W.get(), 4, cb)
    np.testing.assert_array_equal(q.packed.get(), packed)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_sqnr_recorded(k, rng):
    import cupy as cp

    W = cp.asarray(rng.standard_normal((2048, 2048), dtype=np.float32))
    q = kb.quantize(W, k)
    s = R.sqnr_db(W.get(), kb.dequantize(q, np.float32).get())
    print(f"SQNR k={k}: {s:.2f} dB")
    assert s > {2: 7.0, 3: 14.5, 4: 20.8, 5: 25.9}[k]


def test_torch_roundtrip(rng):
    torch = pytest.importorskip("torch")
    W = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    q = kb.quantize(W, 4)
    d = kb.dequantize_kbit(*[torch.from_dlpack(a) for a in (q.packed, q.absmax, q.codebook)], 4, q.shape,
                           dtype=torch.bfloat16, layout="tiled", tensor_scale=q.tensor_scale)
    assert isinstance(d, torch.Tensor) and d.dtype == torch.bfloat16 and d.is_cuda
    ref = R.dequantize_tiled(q.packed.get(), q.absmax.get(), q.codebook.get(), 4, q.shape, q.tensor_scale,
                             np.float32)
    np.testing.assert_array_equal(d.float().cpu().numpy(), ref.astype(kb.bfloat16).astype(np.float32))


def test_out_argument_gpu(rng):
    """out= comes back as given (CuPy and torch), on the GPU, and a CPU out= is rejected by name."""
    import cupy as cp

    q = kb.quantize(_w(cp, rng, (256, 128), np.float16), 4)
    ref = kb.dequantize(q, np.float32).get()
    o = cp.full((256, 128), np.nan, cp.float32)
    assert kb.dequantize(q, np.float32, out=o) is o
    np.testing.assert_array_equal(o.get(), ref)
    with pytest.raises(ValueError, match="out must be on the GPU"):
        kb.dequantize(q, np.float32, out=np.empty((256, 128), np.float32))
    A = cp.asarray(rng.standard_normal((1, 128), dtype=np.float32)).astype(cp.float16)
    with pytest.raises(ValueError, match="out must be on the GPU"):
        kb.matmul(A, q, out=np.empty((1, 256), np.float16))
    torch = pytest.importorskip("torch")
    t = torch.full((256, 128), float("nan"), device="cuda", dtype=torch.float32)
    assert kb.dequantize(q, torch.float32, out=t) is t
    np.testing.assert_array_equal(t.cpu().numpy(), ref)
