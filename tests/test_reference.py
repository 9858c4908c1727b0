"""CPU tests of the NumPy reference: the oracle every kernel is checked against."""
import numpy as np
import pytest

from kbitcupy import reference as R


def test_codebook_definition():
    from scipy.stats import norm

    for k in (2, 3, 4, 5):
        cb = R.create_codebook(k)
        n = 1 << k
        expect = norm.ppf((np.arange(n) + 0.5) / n)
        expect = expect / np.abs(expect).max()
        assert cb.dtype == np.float32 and cb.shape == (n,)
        np.testing.assert_allclose(cb, expect, rtol=1e-6)
        assert cb.min() == -1.0 and cb.max() == 1.0 and np.all(np.diff(cb) > 0)


@pytest.mark.parametrize("bad", [1, 6, 0, 4.0, "4", True, None])
def test_check_k(bad):
    with pytest.raises(ValueError, match="k must be"):
        R.check_k(bad)


def test_e4m4_device_decode_identity():
    """The GPU's e4m4_decode (cuda_src/kbit_common.cuh) reads code << 19 as a float32 (exponent field e, mantissa
    m << 19; for e = 0 a denormal) and multiplies by 2^116: equal to the format's decode for all 256 codes, subnormals
    included, as long as the bias is 11 (a change of E4M4_BIAS must change the device constant too)."""
    codes = np.arange(256, dtype=np.uint32)
    device = (codes << np.uint32(19)).view(np.float32) * np.float32(2.0 ** (127 - R.E4M4_BIAS))
    assert R.E4M4_BIAS == 11  # the device's 0x1p116f = 2^(127 - 11)
    np.testing.assert_array_equal(device, R.e4m4_decode(codes))


def test_e4m4_exhaustive():
    codes = np.arange(256, dtype=np.uint8)
    vals = R.e4m4_decode(codes)
    e, m = codes >> 4, codes & 15
    expect = np.where(e > 0, 2.0 ** (e.astype(float) - 11) * (1 + m / 16.0), 2.0 ** -10 * (m / 16.0))
    np.testing.assert_array_equal(vals, expect.astype(np.float32))
    assert np.all(np.diff(vals) > 0)  # monotone, so encode(decode(c)) == c
    np.testing.assert_array_equal(R.e4m4_encode(vals), codes)
    np.testing.assert_array_equal(R.e4m4_encode(vals, "up"), codes)
    # midpoints round to even codes; values just above round up
    mid = (vals[:-1] + vals[1:]) / 2
    enc = R.e4m4_encode(mid.astype(np.float32))
    lo = codes[:-1]
    assert np.all((enc == lo) | (enc == lo + 1))
    assert np.all(enc % 2 == 0)


def test_e4m4_nearest_and_up(rng):
    a = np.exp(rng.uniform(np.log(1e-5), np.log(31.0), 100000)).astype(np.float32)
    grid = R.e4m4_decode(np.arange(256))
    near = R.e4m4_decode(R.e4m4_encode(a))
    best = grid[np.argmin(np.abs(a[:, None].astype(np.float64) - grid[None, :]), axis=1)]
    np.testing.assert_array_equal(np.abs(near - a) <= np.abs(best - a) + 0, True)
    up = R.e4m4_decode(R.e4m4_encode(a, "up"))
    assert np.all(up >= a)
    with pytest.raises(ValueError):
        R.e4m4_encode(np.array([32.0], np.float32))
    with pytest.raises(ValueError):
        R.e4m4_encode(np.array([np.nan], np.float32))


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_pack_unpack_inverse(k, rng):
    idx = rng.integers(0, 1 << k, size=(64, 32)).astype(np.uint8)
    words = R.pack_bitplanes(idx, k)
    assert words.dtype == np.uint32 and words.size == 64 * k
    np.testing.assert_array_equal(R.unpack_bitplanes(words, k), idx)
    # bit j of word b == bit b of idx[j]
    j, b, blk = 7, k - 1, 3
    assert ((int(words[blk * k + b]) >> j) & 1) == ((int(idx[blk, j]) >> b) & 1)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("shape", [(128, 64), (200, 96), (256, 160), (5, 32)])
def test_repack_unrepack_inverse(k, shape, rng):
    N, K = shape
    W = rng.standard_normal(shape).astype(np.float32)
    packed, absmax, ts = R.quantize_flat(W, k, R.create_codebook(k))
    pt, at, ts2 = R.repack(packed, absmax, k, shape, ts)
    assert ts2 == ts
    nw, na = R.tiled_sizes(N, K, k)
    assert pt.size == nw and at.size == na
    pw, pa = R.unrepack(pt, at, k, shape)
    np.testing.assert_array_equal(pw, packed)
    np.testing.assert_array_equal(pa, absmax)
    # padding is zero words and zero absmax (dequantizes to exactly 0)
    assert int(pt.astype(np.uint64).sum()) == int(packed.astype(np.uint64).sum())
    assert int(at.astype(np.int64).sum()) == int(absmax.astype(np.int64).sum())


def test_tiled_layout_positions():
    # element (n, kblock) lands at tile (kt, nt), [col][kb][bit] inside the tile
    k, N, K = 3, 256, 192
    idx = np.zeros((N * K // 32, 32), np.uint8)
    packed = R.pack_bitplanes(idx, k)
    packed[:] = np.arange(packed.size, dtype=np.uint32)
    absmax = (np.arange(N * K // 32) % 251).astype(np.uint8)
    pt, at, _ = R.repack(packed, absmax, k, (N, K))
    n_tiles = 2
    for n, kblock in [(0, 0), (1, 1), (130, 3), (255, 5)]:
        kt, kb, nt, col = kblock // 2, kblock % 2, n // 128, n % 128
        tile = kt * n_tiles + nt
        src = n * (K // 32) + kblock
        for bit in range(k):
            assert pt[tile * 128 * 2 * k + (col * 2 + kb) * k + bit] == packed[src * k + bit]
        assert at[tile * 256 + col * 2 + kb] == absmax[src]


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_quantize_properties(k, rng):
    W = (rng.standard_normal((64, 256)) * 0.05).astype(np.float32)
    cb = R.create_codebook(k)
    packed, absmax, ts = R.quantize_flat(W, k, cb)
    assert ts == 1.0
    Wd = R.dequantize_flat(packed, absmax, cb, k, W.shape, ts)
    # every element is a level times its block scale, and the level is the nearest one
    scale = R.e4m4_decode(absmax)
    idx = R.unpack_bitplanes(packed, k)
    xn = W.reshape(-1, 32) / scale[:, None]
    d = np.abs(xn[..., None] - cb)
    assert np.all(d[np.arange(d.shape[0])[:, None], np.arange(32)[None, :], idx] <= d.min(-1) + 0)
    np.testing.assert_array_equal(Wd.reshape(-1, 32), cb[idx] * scale[:, None])
    snr = R.sqnr_db(W, Wd)
    assert snr > {2: 6.5, 3: 14, 4: 20, 5: 25}[k]


def test_scale_rounding_choice_is_best():
    # the documented choice: E4M4 nearest, indices against the decoded scale
    for k in (2, 4):
        r = R.measure_scale_rounding(k, n=1 << 16)
        assert r["e4m4_nearest"] >= r["e4m4_up"]
        assert r["e4m4_nearest"] >= r["e4m4_nearest_idx_vs_exact"]


def test_tensor_scale_both_ends(rng):
    k = 4
    cb = R.create_codebook(k)
    for mag in (1e4, 1e-7):
        W = (rng.standard_normal((8, 64)) * mag).astype(np.float32)
        packed, absmax, ts = R.quantize_flat(W, k, cb)
        assert ts != 1.0 and np.log2(ts) == int(np.log2(ts))
        Wd = R.dequantize_flat(packed, absmax, cb, k, W.shape, ts)
        assert R.sqnr_db(W, Wd) > 19
    # in-range weights keep the plain seed format
    W = (rng.standard_normal((8, 64)) * 0.02).astype(np.float32)
    assert R.quantize_flat(W, k, cb)[2] == 1.0


def test_zero_blocks_and_asymmetric_codebook(rng):
    cb = np.array([-0.5, 0.0, 0.25, 1.0], np.float32)
    W = rng.standard_normal((4, 64)).astype(np.float32)
    W[1] = 0.0
    packed, absmax, ts = R.quantize_flat(W, 2, cb)
    Wd = R.dequantize_flat(packed, absmax, cb, 2, W.shape, ts)
    assert np.all(Wd[1] == 0)
    assert np.isfinite(Wd).all()


def test_choose_tensor_scale_ends():
    # a normal float32 power of two at both ends; bad scales refused by the caller's name
    assert R.choose_tensor_scale(np.array([1e-44, 1e-45], np.float32)) == 2.0 ** -126
    assert R.choose_tensor_scale(np.array([2.0 ** 127], np.float32)) == 2.0 ** 123
    below = np.nextafter(np.float32(R.ABSMAX_LIMIT), np.float32(0))
    ts = R.choose_tensor_scale(np.array([below], np.float32))
    assert np.isfinite(R.e4m4_decode(R.e4m4_encode(below / np.float32(ts))) * np.float32(ts))
    for bad, match in ((np.inf, "absmax: block scales must be finite"), (np.nan, "absmax: block scales must be finite"),
                       (-1.0, "absmax: block scales must be finite and non-negative"),
                       (R.ABSMAX_LIMIT, "absmax: largest magnitude")):
        with pytest.raises(ValueError, match=match):
            R.choose_tensor_scale(np.array([1.0, bad], np.float32), "absmax")
