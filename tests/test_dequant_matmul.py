"""CPU checks of kbitcupy.dequant_matmul's pair-table dequantize: the arguments it refuses
(before any GPU work), and that the H200 dispatch table sends the large-M cells of the
dense shapes to dequant + cuBLAS as measured (profiling/results/nvidia-h200_2026-11-22_allm3)."""
import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy import dispatch as D
from kbitcupy.dequant_matmul import dequant_lut


def _w(layout, fmt="e4m4"):
    W = np.random.default_rng().standard_normal((64, 96)).astype(np.float32)
    return kb.quantize(W, 4, layout=layout, absmax_format=fmt)


@pytest.mark.parametrize("layout,fmt", [("flat", "e4m4"), ("flat", "float32")])
def test_dequant_lut_needs_tiled_e4m4(layout, fmt):
    with pytest.raises(ValueError, match="tiled weight with E4M4"):
        dequant_lut(_w(layout, fmt), "float16", np.empty((64, 96), np.float16))


def test_dequant_lut_checks_out():
    q = _w("tiled")
    with pytest.raises(ValueError, match="out must be"):
        dequant_lut(q, "float16", np.empty((64, 95), np.float16))


def test_h200_table_large_m_goes_to_dq():
    # since the wgmma stages by TMA (twenty-seventh session, wg-tune30 overlaid): M = 128 the wgmma kernel on
    # every shape (gate/up 14.43 vs dq 14.59 us); M = 256 the wgmma kernel on Q (14.53 vs 14.89) and KV (7.62 vs
    # 7.86), dq + cuBLAS on gate/up (17.95 vs 21.73); M = 512 dq + cuBLAS (the last measured M of the wgmma sweeps
    # is 256).  Fiftieth session (allm57: every kernel at M = 1..512 in one run; disp57-1 / -2: M = 192 / 256 twice):
    # M = 256 down on the wgmma kernel (19.49 / 19.51 vs dq 20.43 / 19.91), O on it to 512 (M = 512 22.81 vs 23.45)
    wg_256, wg_512 = {(4, 2048, 5120), (4, 4096, 2048), (4, 2048, 4096), (4, 512, 2048)}, {(4, 2048, 4096)}  # (k, N, K)
    for (k, N, K) in [(4, 5120, 2048), (4, 2048, 5120), (4, 4096, 2048), (4, 2048, 4096), (4, 512, 2048)]:
        for M in (128, 256, 512):
            wg = M == 128 or (M == 256 and (k, N, K) in wg_256) or (M == 512 and (k, N, K) in wg_512)
            assert D.choose(M, N, K, k, family="H200") == ("wgmma" if wg else "dq"), (k, N, K, M)
    # measured (allm4, m16-64, 2026-11-25 stream-tune / stream-tune2 / stream64 / stream-tune3 / stream-tune3b,
    # final18, the twenty-first session's final38 and the twenty-seventh's wg-tune30): at M = 32 the streaming
    # GEMV beats dq and the wgmma kernel on down (10.07 vs 10.60 us), the wgmma kernel on gate/up (9.63 vs stream
    # 9.70); at M = 64 the wgmma kernel on down (12.63 vs stream 14.28 us), gate/up (12.71 vs 13.03) and KV (6.18
    # vs dq 7.62); since the GEMV's four token tiles (forty-fifth session, sweep52h) the GEMV at M = 32 on gate/up (9.02
    # vs wgmma 9.68 us)
    assert D.choose(32, 2048, 5120, 4, family="H200") == "stream"
    assert D.choose(32, 5120, 2048, 4, family="H200") == "gemv"
    assert D.choose(64, 2048, 5120, 4, family="H200") == "wgmma" and D.choose(64, 5120, 2048, 4, family="H200") == "wgmma"
    assert D.choose(64, 512, 2048, 4, family="H200") == "gemv"  # KV: the GEMV's token split (kvts53b: 4.10 vs 5.73 us)
    assert D.choose(97, 512, 2048, 4, family="H200") == "wgmma"
