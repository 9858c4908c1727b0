"""CPU tests of the wgmma kernels' plan rules (kbitcupy.wgmma; no GPU)."""
import pytest

from kbitcupy.wgmma import MAX_SPLITS, TILE_US, WS_SPLIT_US, default_splits, dense_splits, grouped_splits


def test_dense_splits_fill_one_cta_per_sm():
    """Without a cluster anywhere the split count fills one CTA per SM (not SMs x occupancy), at
    most MAX_SPLITS and at least two K tiles per split."""
    never = lambda ks: False  # noqa: E731
    assert dense_splits(32, 132, 32, 64, never) == 4      # Q, M = 64: 128 CTAs (the old rule: 8 on 256)
    assert dense_splits(32, 132, 40, 64, never) == 3      # gate/up
    assert dense_splits(80, 132, 16, 128, never) == 8     # down, capped
    assert dense_splits(4, 132, 4, 32, never) == 2        # two K tiles per split at least
    assert dense_splits(32, 132, 200, 128, never) == 1    # more tiles than SMs
    for kt, tiles in ((32, 1), (80, 16), (2, 3)):
        assert dense_splits(kt, 132, tiles, 64, never) == default_splits(kt, 132, tiles) <= MAX_SPLITS


def test_dense_splits_cluster_alternative_priced():
    """A smaller split count whose launch sums over a cluster wins where the model prices it lower:
    always at TOK = 128 (the workspace sum of 8 splits costs ~8 x 0.58 us), not where it would add
    more K tiles than the workspace sum costs (Q at TOK = 64: 4 through the workspace beats 3 on a
    cluster, 10.3 vs 12.7 us measured)."""
    six = lambda ks: ks in (2, 3, 4, 5, 6)  # noqa: E731  (8 splits: the cluster does not keep the grid resident)
    assert dense_splits(80, 132, 16, 128, six) == 6       # down M = 128: 15.9 vs 17.4 us measured
    assert dense_splits(32, 132, 16, 64, six) == 6        # linear key M = 64
    assert dense_splits(80, 132, 16, 32, six) == 8        # down M = 32: more K tiles would cost more
    only3 = lambda ks: ks == 3  # noqa: E731
    assert dense_splits(32, 132, 32, 64, only3) == 4      # Q M = 64
    assert dense_splits(32, 132, 32, 128, only3) == 3     # Q M = 128
    assert dense_splits(80, 132, 4, 64, lambda ks: True) == 8  # the fill clusters: kept
    assert set(TILE_US) == set(WS_SPLIT_US)


@pytest.mark.parametrize("tok", sorted(TILE_US))
def test_dense_splits_in_range(tok):
    for kt in (1, 2, 3, 8, 32, 80, 200):
        for tiles in (1, 4, 16, 40, 132, 500):
            for cl in (lambda ks: False, lambda ks: True, lambda ks: ks % 2 == 0):
                ks = dense_splits(kt, 132, tiles, tok, cl)
                assert 1 <= ks <= max(1, min(MAX_SPLITS, kt // 2))


def test_fill_tok_narrow_weights_only():
    """The token tile halves only where the covering one leaves half the SMs idle at MAX_SPLITS:
    KV (4 strips of 128 columns) at M = 33..192, never the 16+-strip shapes or the smallest TOK."""
    from kbitcupy.wgmma import choose_tok, fill_tok

    def tok(M, N):
        n = -(-N // 128)
        return fill_tok(choose_tok(M, n_tiles=n, sms=132, k_tiles=32), M, n, 132)

    assert [tok(M, 512) for M in (1, 16, 32, 48, 64, 96, 128)] == [16, 16, 16, 32, 32, 64, 64]
    assert [tok(M, 2048) for M in (16, 32, 64, 128)] == [16, 32, 64, 128]
    assert [tok(M, 5120) for M in (16, 64, 128, 256)] == [16, 64, 128, 128]
    assert fill_tok(64, 64, 4, 0) == 64  # no SM count: unchanged


def test_tensor_map_arguments_and_cache(monkeypatch):
    """kbit_wgmma_tma's tensor map of A [M, K]: K elements inner, M rows 2K bytes apart, boxes of 64 x TOK
    in the 128-byte swizzle, fp16 / bf16 data types; one encode per (pointer, shape, dtype, TOK); K % 8
    (the row stride's 16 bytes) and the base's alignment are refused before the driver sees them."""
    import numpy as np

    from kbitcupy import _pdl, wgmma as WG
    from kbitcupy.reference import bfloat16

    calls = []

    def fake(ptr, dtype, dim0, dim1, stride1, box0, box1, swizzle, l2):
        calls.append((ptr, dtype, dim0, dim1, stride1, box0, box1, swizzle, l2))
        return _pdl.TensorMap(bytes(128))

    monkeypatch.setattr(_pdl, "encode_tensor_map_2d", fake)
    monkeypatch.setattr(WG, "_TMAPS", {})

    class _A:
        def __init__(self, ptr, M, K, dt):
            self.shape, self.dtype = (M, K), np.dtype(dt)
            self.data = type("D", (), {"ptr": ptr})()

    m1 = WG.tensor_map(_A(0x10000, 100, 2048, np.float16), 128)
    m2 = WG.tensor_map(_A(0x10000, 100, 2048, np.float16), 128)
    assert m1 is m2 and len(calls) == 1
    assert calls[0] == (0x10000, 6, 2048, 100, 4096, 64, 128, 3, 2)
    WG.tensor_map(_A(0x10000, 100, 2048, bfloat16), 64)
    assert calls[1] == (0x10000, 9, 2048, 100, 4096, 64, 64, 3, 2)
    WG.tensor_map(_A(0x20000, 7, 160, np.float16), 16)
    assert calls[2] == (0x20000, 6, 160, 7, 320, 64, 16, 3, 2)
    with pytest.raises(ValueError, match="K % 8"):
        WG.tensor_map(_A(0x30000, 4, 36, np.float16), 16)
    with pytest.raises(ValueError, match="16-byte aligned"):
        WG.tensor_map(_A(0x30008, 4, 64, np.float16), 16)
    assert len(calls) == 3


def test_grouped_splits_one_cta_per_sm_where_measured_faster():
    """The grouped plan's split count (H100, run39.sh wg / confirm / close): the fill of two CTAs per SM,
    except at k <= 4 and TOK >= 32 where TOK >= 64 or the fill leaves splits under 8 K tiles: then one CTA on
    90-100 % of the SMs, if that leaves a CTA at most 16 K tiles.  (k_tiles, SMs, CTAs per SM, work tiles, TOK)."""
    # down (8 K tiles, 16 strips a slot): 8 experts 2 -> 1 split (128 CTAs), 4 experts 4 -> 2
    assert [grouped_splits(8, 132, 2, 128, t) for t in (16, 32, 64)] == [2, 1, 1]
    assert [grouped_splits(8, 132, 2, 64, t) for t in (16, 32, 64)] == [4, 2, 2]
    assert grouped_splits(8, 132, 2, 160, 64) == 1  # 10 experts: the fill's 1
    # gate/up fused (32 K tiles, 8 strips): 8 experts at 64 tokens 4 -> 2; at 32 tokens (8 K tiles a split) the fill
    assert grouped_splits(32, 132, 2, 64, 64) == 2 and grouped_splits(32, 132, 2, 64, 32) == 4
    assert grouped_splits(32, 132, 2, 80, 64) == 3  # 10 experts: no count fills 90 % of the SMs one CTA each
    assert grouped_splits(32, 132, 2, 128, 64) == 2  # 16 experts: 1 split would give a CTA all 32 K tiles
    # gate/up (32 K tiles, 4 strips): 8 experts 8 -> 4 at 32 tokens; k = 5 keeps the fill
    assert grouped_splits(32, 132, 2, 32, 32) == 4 and grouped_splits(32, 132, 2, 32, 32, k=5) == 8
    for args in ((8, 132, 2, 128, 16), (32, 132, 1, 40, 128), (2048, 132, 2, 1, 64)):
        got = grouped_splits(*args)
        assert 1 <= got <= default_splits(args[0], args[1] * args[2], args[3])
