"""CPU-only tests of the kernel choice (kbitcupy.dispatch) and of the GEMM launch plan helpers."""
import json

import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy import dispatch as D


@pytest.fixture
def tables():
    saved = {k: dict(v) for k, v in D.TABLES.items()}
    D._CHOICES.clear()
    yield D.TABLES
    D.TABLES.clear()
    D.TABLES.update(saved)
    D._CHOICES.clear()


@pytest.mark.parametrize("name, fam", [
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100 PCIe", "H100"), ("NVIDIA H100 NVL", "H100"),
    ("NVIDIA H200", "H200"), ("NVIDIA H200 NVL", "H200"), ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA H800", "H100"), ("NVIDIA H20", "H20"), ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA GeForce RTX 4090", "RTX4090"), ("Tesla T4", "default"), ("", "default"),
])
def test_family_of_name(name, fam):
    assert D.family_of_name(name) == fam


def test_default_thresholds():
    for fam in ("default", "no-such-gpu"):
        got = [D.choose(M, 4096, 2048, 4, np.float16, family=fam) for M in range(1, 300)]
        assert got == ["gemv"] * 8 + ["gemm"] * 56 + ["dq"] * (299 - 64)


def test_every_family_entry_is_valid():
    for fam, e in D.TABLES.items():
        for k in (2, 3, 4, 5):
            for dt in (np.float16, kb.bfloat16):
                for N, K in ((512, 2048), (5120, 2048), (2048, 5120)):
                    kinds = [D.choose(M, N, K, k, dt, family=fam) for M in range(1, 513)]
                    assert set(kinds) <= {"gemv", "stream", "gemm", "wgmma", "dq"}
                    # monotone in M: gemv, then a fused kernel (streaming GEMV / gemm / wgmma), then dq
                    order = {"gemv": 0, "stream": 1, "gemm": 1, "wgmma": 1, "dq": 2}
                    assert [order[x] for x in kinds] == sorted(order[x] for x in kinds), (fam, k, N, K)
                    assert kinds[0] == "gemv" or e["gemv_max_m"] == 0


def test_gemv_clamped_to_its_max(tables):
    mx = D.GEMV_MAX_M  # the GEMV's own limit (kbitcupy.gemv.MAX_M)
    D.set_table("T", {"gemv_max_m": 2 * mx, "gemm_max_m": mx + 8})
    assert D.choose(mx, 2048, 1024, 4, family="T") == "gemv"
    assert D.choose(mx + 1, 2048, 1024, 4, family="T") == "gemm"
    assert D.choose(mx + 8, 2048, 1024, 4, family="T") == "gemm"
    assert D.choose(mx + 9, 2048, 1024, 4, family="T") == "dq"
    # k = 5: 16 rows; a shape of at most 64 16-column groups (the GEMV's token split): GEMV_TS_MAX_M
    assert D.gemv_max_rows(5, 2048) == 16 and D.gemv_max_rows(4, 2048) == mx and D.gemv_max_rows(4) == mx
    ts = D.gemv_max_rows(5, 1024)
    assert ts == D.GEMV_TS_MAX_M > mx and D.gemv_max_rows(4, 1040) == mx and D.gemv_max_rows(4, 512, tiled=False) == mx
    D.set_table("T", {"gemv_max_m": 2 * ts, "gemm_max_m": 2 * ts + 8})
    assert D.choose(ts, 1024, 1024, 5, family="T") == "gemv" and D.choose(ts + 1, 1024, 1024, 5, family="T") == "gemm"
    assert D.choose(mx + 1, 2048, 1024, 4, family="T") == "gemm"


def test_per_k_dtype_and_size_bands(tables):
    D.set_table("T", {"gemv_max_m": 4, "gemm_max_m": {
        (4, "bfloat16"): 100,
        4: [(1 << 20, 32), (None, 128)],
        "*": 48}})
    assert D.choose(4, 1024, 1024, 4, family="T") == "gemv"
    assert D.choose(5, 1024, 1024, 4, family="T") == "gemm"
    assert D.choose(32, 1024, 1024, 4, np.float16, family="T") == "gemm"   # 1M elems: first band
    assert D.choose(33, 1024, 1024, 4, np.float16, family="T") == "dq"
    assert D.choose(33, 2048, 1024, 4, np.float16, family="T") == "gemm"   # second band
    assert D.choose(129, 2048, 1024, 4, np.float16, family="T") == "dq"
    assert D.choose(100, 1024, 1024, 4, kb.bfloat16, family="T") == "gemm"  # (k, dtype) wins
    assert D.choose(101, 1024, 1024, 4, "bf16", family="T") == "dq"
    assert D.choose(48, 1024, 1024, 3, family="T") == "gemm"               # '*'
    assert D.choose(49, 1024, 1024, 3, family="T") == "dq"


@pytest.mark.parametrize("bad", [
    {"gemv_max_m": 8},
    {"gemv_max_m": 8, "gemm_max_m": "64"},
    {"gemv_max_m": 8, "gemm_max_m": {4: 64}},              # no entry for k = 2, 3, 5 and no '*'
    {"gemv_max_m": 8, "gemm_max_m": [(1024, 64)]},          # no final None band
    {"gemv_max_m": 8, "gemm_max_m": True},
])
def test_malformed_entries(bad, tables):
    with pytest.raises(ValueError):
        D.set_table("T", bad)
    assert "T" not in D.TABLES


def test_json_tables_and_env(tmp_path, tables, monkeypatch):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"H100": {"gemv_max_m": 6, "gemm_max_m": {"4": [[1048576, 24], [None, 80]],
                                                                          "5,bfloat16": 12, "*": 40}}}))
    monkeypatch.setenv("KBITCUPY_DISPATCH_TABLE", str(path))
    monkeypatch.setattr(D, "_ENV_LOADED", [False])
    assert D.choose(6, 1024, 1024, 4, family="H100") == "gemv"
    assert D.choose(7, 1024, 1024, 4, family="H100") == "gemm"
    assert D.choose(25, 1024, 1024, 4, family="H100") == "dq"
    assert D.choose(80, 4096, 1024, 4, family="H100") == "gemm"
    assert D.choose(13, 4096, 1024, 5, kb.bfloat16, family="H100") == "dq"
    assert D.choose(40, 4096, 1024, 2, family="H100") == "gemm"


def test_entry_from_timings(tables):
    t = {}
    for M in (9, 16, 32, 64, 128):
        # small shape: dq wins from M = 64; large shape: gemm wins up to 128
        t[(4, "float16", 512, 2048, M)] = {"gemm": 5.0, "dq": 4.0 if M >= 64 else 9.0}
        t[(4, "float16", 5120, 2048, M)] = {"gemm": 5.0, "dq": 20.0}
        t[(3, "float16", 512, 2048, M)] = {"gemm": 5.0, "dq": 4.0}  # dq always faster
    e = D.entry_from_timings(t, gemv_max_m=8)  # these timings compare gemm and dq only
    assert e["gemm_max_m"][(4, "float16")] == [(512 * 2048, 32), (None, 128)]
    assert e["gemm_max_m"][(3, "float16")] == [(None, 0)]
    assert e["gemm_max_m"]["*"] == 0
    D.set_table("T", e)
    assert D.choose(32, 512, 2048, 4, family="T") == "gemm"
    assert D.choose(33, 512, 2048, 4, family="T") == "dq"
    assert D.choose(128, 5120, 2048, 4, family="T") == "gemm"
    assert D.choose(9, 512, 2048, 3, family="T") == "dq"


def test_shapes_from_timings_wgmma_band(tables):
    """Inside the fused band, the measured M range where the wgmma kernel is fastest runs it;
    a shape it never wins keeps the 2-tuple (kbit_gemm only); an unmeasured shape takes the
    bands of the nearest measured one (log scale)."""
    t = {}
    for M, us in ((1, dict(gemv=3.0, gemm=9.0, wgmma=9.5, dq=20.0)),
                  (16, dict(gemv=11.0, gemm=10.0, wgmma=9.0, dq=20.0)),
                  (32, dict(gemm=15.0, wgmma=14.0, dq=16.0)),
                  (64, dict(gemm=25.0, wgmma=20.0, dq=21.0)),
                  (128, dict(gemm=30.0, wgmma=28.0, dq=17.0))):
        t[(4, "float16", 2048, 5120, M)] = us
        t[(4, "float16", 512, 2048, M)] = {n: (x if n != "wgmma" else x + 100) for n, x in us.items()}
    sh = D.shapes_from_timings(t)
    assert sh[(4, 2048, 5120)] == (1, 64, 16, 64)
    assert sh[(4, 512, 2048)] == (1, 32)  # without wgmma, dq wins from M = 64
    e = D.entry_from_timings(t, gemv_max_m=8)
    e["shapes"] = sh
    D.set_table("T", e)
    c = lambda M, N, K: D.choose(M, N, K, 4, family="T")  # noqa: E731
    assert [c(M, 2048, 5120) for M in (1, 8, 16, 40, 64, 65, 128)] == \
        ["gemv", "gemm", "wgmma", "wgmma", "wgmma", "dq", "dq"]
    assert [c(M, 512, 2048) for M in (1, 16, 32, 64)] == ["gemv", "gemm", "gemm", "dq"]
    # unmeasured: 3000 x 3000 is nearer 2048 x 5120 (|log| sum 0.91) than 512 x 2048 (2.15): its bands
    assert [c(M, 3000, 3000) for M in (1, 8, 16, 40, 64, 65)] == ["gemv", "gemm", "wgmma", "wgmma", "wgmma", "dq"]
    assert [c(M, 600, 1800) for M in (1, 16, 32, 64)] == ["gemv", "gemm", "gemm", "dq"]  # near 512 x 2048
    assert D.choose(40, 3000, 3000, 3, family="T") in ("gemm", "dq")  # no measured k = 3 shape: size bands


def test_shapes_from_timings_stream_band(tables):
    """The measured M range (<= 32) where the streaming GEMV beats every other kernel runs it,
    over whatever the gemv / fused / wgmma bands say; a shape it never wins keeps its tuple."""
    t = {}
    for M, us in ((1, dict(gemv=3.0, stream=5.0, gemm=9.0, wgmma=9.5, dq=20.0)),
                  (8, dict(gemv=6.0, stream=7.0, gemm=9.0, wgmma=9.5, dq=20.0)),
                  (16, dict(gemv=11.0, stream=8.5, gemm=10.0, wgmma=9.0, dq=20.0)),
                  (32, dict(stream=12.0, gemm=15.0, wgmma=14.0, dq=16.0)),
                  (64, dict(gemm=25.0, wgmma=20.0, dq=21.0))):
        t[(4, "float16", 2048, 5120, M)] = us
        t[(4, "float16", 512, 2048, M)] = {n: (x if n != "stream" else x + 100) for n, x in us.items()}
        t[(3, "float16", 512, 2048, M)] = {n: x for n, x in us.items() if n != "wgmma"}
    sh = D.shapes_from_timings(t)
    # the GEMV's band ends at 8 rows and the stream / wgmma kernel wins the next measured M (16):
    # their bands start at 9 (M = 9..15 costs every kernel the tiles of M = 16)
    assert sh[(4, 2048, 5120)] == (8, 64, 9, 64, 9, 32)
    assert sh[(4, 512, 2048)] == (8, 64, 9, 64)
    assert sh[(3, 512, 2048)] == (8, 32, 1, 0, 9, 32)  # no wgmma band: (1, 0)
    e = D.entry_from_timings(t, gemv_max_m=8)
    e["shapes"] = sh
    D.set_table("T", e)
    c = lambda M, N, K, k=4: D.choose(M, N, K, k, family="T")  # noqa: E731
    assert [c(M, 2048, 5120) for M in (1, 8, 9, 16, 24, 32, 33, 64, 65)] == \
        ["gemv", "gemv", "stream", "stream", "stream", "stream", "wgmma", "wgmma", "dq"]
    assert [c(M, 512, 2048, 3) for M in (8, 12, 16, 32, 33)] == ["gemv", "stream", "stream", "stream", "dq"]
    assert [c(M, 512, 2048) for M in (8, 9, 15, 16, 32)] == ["gemv", "wgmma", "wgmma", "wgmma", "wgmma"]
    assert c(16, 3000, 3000) == "stream"  # unmeasured: the bands of 2048 x 5120, the nearest
    assert c(16, 600, 2000, 3) == "stream"  # k = 3: 512 x 2048's


def test_shapes_from_timings_gemv_fit_edge(tables):
    """The GEMV measured as not fitting (None: the bench's '-') at the next measured M: its band reaches up to that M
    (matmul runs the streaming GEMV where its plan does not fit), the next kernel's bands start there; a GEMV merely
    not measured there (older sweeps) ends its band at its last measured M as before."""
    t = {}
    for M, us in ((16, dict(gemv=7.0, stream=8.0, wgmma=9.0, gemm=10.0, dq=16.0)),
                  (17, dict(gemv=7.4, stream=9.6, wgmma=10.6, gemm=12.8, dq=16.3)),
                  (24, dict(gemv=None, stream=9.6, wgmma=10.6, gemm=12.9, dq=16.2)),
                  (32, dict(gemv=None, stream=10.1, wgmma=10.7, gemm=13.1, dq=16.2)),
                  (64, dict(stream=14.0, wgmma=11.7, gemm=14.0, dq=16.7))):
        t[(4, "float16", 2048, 5120, M)] = us
        t[(4, "float16", 2048, 4096, M)] = {n: x for n, x in us.items() if n != "gemv" or M <= 17}
    sh = D.shapes_from_timings(t)
    assert sh[(4, 2048, 5120)] == (23, 64, 24, 64, 24, 32)
    assert sh[(4, 2048, 4096)] == (17, 64, 24, 64, 24, 32)  # (GEMV not measured at 24: its band ends at 17, as before)


def test_gpu_family_without_gpu_is_a_string():
    assert isinstance(D.gpu_family(), str)


# ----------------------------------------------------------------------------- gemm plan helpers
H100 = {"sms": 132, "smem_sm": 228 * 1024, "smem_block": 227 * 1024, "smem_reserved": 1024,
        "regs_sm": 65536, "threads_sm": 2048, "blocks_sm": 32}
SM89 = dict(H100, sms=128, smem_sm=100 * 1024, smem_block=99 * 1024)


def test_m_blocking():
    from kbitcupy.gemm import m_blocking

    for M in range(1, 600):
        mb, mt = m_blocking(M)
        assert 1 <= mb <= 4 and mt * mb * 16 >= M
        assert (mt - 1) * 64 < M <= mt * 64          # fewest tiles of at most 64 rows
        assert mt * (mb - 1) * 16 < M                # fewest m16 blocks per tile
    assert m_blocking(9) == (1, 1) and m_blocking(17) == (2, 1) and m_blocking(80) == (3, 2)
    assert m_blocking(256) == (4, 4) and m_blocking(100) == (4, 2)


def test_stage_choice_fits():
    from kbitcupy.gemm import DoesNotFit, choose_stages, occupancy, smem_bytes

    for info in (H100, SM89):
        for k in (2, 3, 4, 5):
            for mb in (1, 2, 3, 4):
                for tn in (64, 128):
                    if smem_bytes(k, mb, tn, 2) > info["smem_block"]:
                        assert info is SM89 and k == 5  # the 64 KB k = 5 table on a 99 KB GPU
                        with pytest.raises(DoesNotFit):
                            choose_stages(info, k, mb, tn, regs=168)
                        continue
                    st, occ = choose_stages(info, k, mb, tn, regs=168)
                    assert 2 <= st <= 4 and occ >= 1
                    assert smem_bytes(k, mb, tn, st) <= info["smem_block"]
                    assert occupancy(info, smem_bytes(k, mb, tn, st), 168) >= occ
    # Hopper: 2 CTAs per SM even for the largest k = 4 configuration
    assert choose_stages(H100, 4, 4, 128, regs=168) == (3, 2)
    # the layout of the shared memory matches the kernel's constants (see kbit_gemm.cu)
    stage = 16384 + 2 * (1024 + 16) * 4 + 2 * 272          # A + B (2 tiles + 16-word pad) + absmax
    assert smem_bytes(4, 4, 128, 3) == 32768 + 1280 + 3 * (-(-stage // 128) * 128)


def test_small_m_plan_and_cluster_fits():
    """The sm_90 M <= 16 rule (kbitcupy.gemm.small_m_plan, measured in profiling/run44.sh): at most 8
    splits, a cluster sum where the grid is >= 1.9 or <= 0.5 CTAs an SM, the workspace near one."""
    from kbitcupy.gemm import MAX_CLUSTER, cluster_fits, small_m_plan

    # (tiles of 128 columns, K steps of 128) of the dense shapes -> (k_splits, cluster)
    assert small_m_plan(H100, 40, 16) == (8, True)    # gate/up: 320 CTAs
    assert small_m_plan(H100, 16, 40) == (8, False)   # down: 128 CTAs
    assert small_m_plan(H100, 32, 16) == (8, True)    # Q / linear value: 256 CTAs
    assert small_m_plan(H100, 16, 32) == (8, False)   # O
    assert small_m_plan(H100, 4, 16) == (8, True)     # KV: 32 CTAs
    assert small_m_plan(H100, 3, 1) == (1, False)     # one K step: no split
    for tiles in range(1, 200):
        for KS in (1, 2, 5, 8, 40):
            ks, cl = small_m_plan(H100, tiles, KS)
            assert 1 <= ks <= min(KS, MAX_CLUSTER) and (not cl or ks >= 2)
    # a cluster needs one m tile, 2..8 splits and the partial in the stage buffers
    assert cluster_fits(1, 8, 1, 128, 2, 4) and not cluster_fits(2, 8, 1, 128, 2, 4)
    assert not cluster_fits(1, 1, 1, 128, 2, 4) and not cluster_fits(1, MAX_CLUSTER + 1, 1, 128, 2, 4)
    assert cluster_fits(1, 2, 4, 128, 2, 4)           # M = 64: 64 rows x 136 floats in two stages


def test_k_steps():
    from kbitcupy.gemm import k_steps

    assert [k_steps(K) for K in (32, 64, 96, 128, 160, 2048, 5120)] == [1, 1, 1, 1, 2, 16, 40]


def test_h100_table_is_measured():
    """H100 has its own crossovers (nvidia-h100-80gb-hbm3_2026-11-22_allm3 + _m16-64 + _m8-128 + _m32-128,
    the 2026-11-25 stream-tune run at M = 8..48, the eighth session's dq-tune / stream-tune2 / stream64
    overlays, the ninth session's stream-tune3 / stream-tune3b / lowm-tune, the tenth session's k5-gpb and the
    eleventh session's wg-tune11 / final18 after the wgmma kernel got faster, the fourteenth session's final20
    after the GEMV's absmax decode moved to its use, the fifteenth session's wg-tune15 after the wgmma split-K
    changes and gap15 at M = 9..15, the twenty-first session's wg-tune24 / final38 after the wgmma kernel
    compiled the default codebook in, the twenty-second session's wg-tune25 / final40 after the dense split
    rule, the twenty-seventh session's wg-tune30 after the TMA stages), not the default's."""
    assert D.TABLES["H100"] != D.TABLES["default"]
    c = lambda M, N, K, k: D.choose(M, N, K, k, "float16", family="H100")  # noqa: E731
    # gate/up M = 8 (final20, H100): GEMV 7.65 vs stream 7.88 us; M = 9..15 the stream (8.4 us at 16); M = 64
    # since the dense split rule (final40): wgmma 11.45 vs stream 12.61 us
    # M = 9..16 since the two-tile GEMV's column groups side by side (sweep42b): GEMV 5.88 / 6.50 vs stream 7.7 at 9 / 16
    assert [c(M, 5120, 2048, 4) for M in (1, 4, 8, 9, 12, 16, 17, 32, 64)] == \
        ["gemv", "gemv", "gemv", "gemv", "gemv", "gemv", "stream", "stream", "wgmma"]
    # k = 4 at M = 9..16 since the staged-A swizzle at two token tiles (sweep41): down GEMV 6.59 vs stream 7.64 us at
    # 12, 7.59 vs 7.64 at 16; Q GEMV 6.03 vs 6.48 at 14, 6.38 vs 6.46 at 16; O 6.58 vs 7.09 at 16
    assert [c(M, 2048, 5120, 4) for M in (9, 11, 12, 15, 16, 17)] == ["gemv"] * 5 + ["stream"]
    assert [c(M, 4096, 2048, 4) for M in (9, 12, 14, 15, 16, 17)] == ["gemv"] * 5 + ["stream"]
    assert [c(M, 2048, 4096, 4) for M in (9, 16, 17)] == ["gemv", "gemv", "stream"]
    # k = 2 down M = 8 (final20): GEMV 6.22 vs stream 6.96 us; M = 16 since the full A swizzle at two token tiles
    # (sweep42): GEMV 6.88 vs stream 7.00; k = 3 O / Q at 16 (sweep42): GEMV 6.63 / 6.31 vs stream 6.79 / 6.36
    assert [c(M, 2048, 5120, 2) for M in (8, 16, 17, 24)] == ["gemv", "gemv", "stream", "stream"]
    assert c(16, 2048, 4096, 3) == "gemv" and c(16, 4096, 2048, 3) == "gemv"
    # down M = 128 (final18, H100): wgmma 17.79 vs dq 22.17 us; M = 64 since the wgmma split-K changes
    # (wg-tune15): wgmma 13.47 vs stream 14.70 (final18)
    assert [c(M, 2048, 5120, 4) for M in (8, 16, 32, 64, 128)] == ["gemv", "gemv", "stream", "wgmma", "wgmma"]
    # k = 5, N = 2048, K = 4096 since the TMA stages (wg-tune30): the stream 10.50 vs wgmma 10.85 us at 24, wgmma 10.86
    # vs 10.93 at 32 and 13.04 vs dq 19.08 at 128; M = 9..16 since the two-tile GEMV's row staging (sweep43): GEMV 6.79
    # vs wgmma 8.42 at 9, the stream 7.66 vs GEMV 8.32 / wgmma 8.42 at 16
    assert [c(M, 2048, 4096, 5) for M in (9, 16, 24, 32, 128)] == ["gemv", "stream", "stream", "wgmma", "wgmma"]
    # Q k = 5 (wg-tune30): wgmma 9.91 vs stream 9.95 us at 32, 10.61 vs 12.51 at 48; at 16 the stream since sweep43
    # (7.02 vs wgmma 7.95; wg-tune30 had 8.08 vs 7.90), the GEMV 6.56 at 9
    assert [c(M, 4096, 2048, 5) for M in (4, 8, 9, 16, 32, 48, 128)] == ["gemv", "gemv", "gemv", "stream", "wgmma", "wgmma",
                                                                        "wgmma"]
    # KV and linear key k = 4 at M = 64 (final38, one run): wgmma 6.81 / 9.24 us vs dq + cuBLAS 7.61 / 10.18 (final36:
    # the previous table's dq + cuBLAS was 10.6 / 8.5 % over the wgmma kernel there)
    assert c(64, 512, 2048, 4) == "wgmma" and c(64, 2048, 2048, 4) == "wgmma"
    # KV at M = 128 since fill_tok halved its token tile (final42): wgmma 6.92 vs dq + cuBLAS 7.71 us; M = 256
    # since the TMA stages (wg-tune30): wgmma 7.62 vs dq 7.88; above the last measured M, dq + cuBLAS
    assert c(128, 512, 2048, 4) == "wgmma" and c(256, 512, 2048, 4) == "wgmma" and c(257, 512, 2048, 4) == "dq"
    # k = 5 gate/up: the GEMV to M = 8 since its groups share one table per SM (tenth session, k5-gpb); M = 9..16 the
    # stream (sweep43: 8.18 vs wgmma 9.13 us at 16, 8.29 vs GEMV 10.81 at 9; wg-tune30 had wgmma 9.14 vs 9.38 at 16)
    assert [c(M, 5120, 2048, 5) for M in (4, 8, 9, 16)] == ["gemv", "gemv", "stream", "stream"]
    # unmeasured shapes: the bands of the nearest measured one (3000 x 3000: Q / O at equal distance,
    # the smaller key, N = 2048 x K = 4096, first), not the size bands' kbit_gemm / dq + cuBLAS
    assert [c(M, 3000, 3000, 4) for M in (4, 16, 24, 32, 500)] == ["gemv", "gemv", "stream", "stream", "dq"]
    assert D.nearest_shape(D.TABLES["H100"]["shapes"], 4, 3000, 3000) == D.TABLES["H100"]["shapes"][(4, 2048, 4096)]
    assert D.nearest_shape(D.TABLES["H100"]["shapes"], 7, 3000, 3000) is None  # no such k
    # much larger than every measured shape (4096 x 14336, 5.6x gate/up): no stream / dq bands; the GEMV to
    # M = 4, kbit_gemm to 16, wgmma to 256 (shapes17 / big17: the nearest bands' stream / dq 17-125 % slower)
    for N, K in ((4096, 14336), (14336, 4096)):
        assert [c(M, N, K, 4) for M in (1, 4, 5, 16, 17, 128, 256, 257)] == \
            ["gemv", "gemv", "gemm", "gemm", "wgmma", "wgmma", "wgmma", "dq"], (N, K)
    # up to BIG_SHAPE_FACTOR x the largest measured shape the nearest shape's bands stay
    assert c(24, 4096, 5120, 4) == c(24, 2048, 5120, 4) == "stream"
    big = D._big_shape_bands(D.TABLES["H100"]["shapes"], 4, 4096 * 14336, (16, 64, 12, 300, 9, 64))
    assert big == (4, 256, 17, 300)  # widened to the nearest's wgmma band; its stream band dropped


def test_h200_table_follows_measurements():
    """H200 (allm4 + m16-64 + m8-128 + m32-128 runs, the 2026-11-25 stream-tune run at M = 8..48, the
    eighth session's dq-tune / stream-tune2 / stream64 overlays and the ninth session's stream-tune3 /
    stream-tune3b after the streaming GEMV got 6-14 % faster, lowm-tune, and the tenth session's k5-gpb
    after the k = 5 GEMV's groups came to share a table, and the eleventh session's wg-tune11 / final18 after
    the wgmma kernel got 5-30 % faster): the streaming GEMV where it was the fastest kernel (M = 16..32 on
    every big shape, up to 64 on down, from 8 on k = 2/4 gate/up), the wgmma kernel where it now wins
    (k = 5 gate/up and down at 64, down at 128; since the TMA stages, wg-tune30, most shapes to M = 256),
    dq + cuBLAS above."""
    c = lambda M, N, K, k: D.choose(M, N, K, k, "float16", family="H200")  # noqa: E731
    # twenty-first session (final38, k = 2 / 4, and final38b, k = 3 / 5, every kernel in one H200 run, after the
    # wgmma kernel compiled the default codebook in): gate/up k = 2 M = 64 wgmma 12.08 vs stream 12.49 us; since
    # the TMA stages (wg-tune30) M = 32 wgmma 9.16 vs stream 9.30 (M = 24 the stream, 8.81 vs 9.13)
    # M = 8..16 since the full A swizzle / token split (sweep42h) and the two-tile GEMV's column groups side by side
    # (sweep42hb): gate/up on the GEMV to 16 (k = 2 5.84 vs stream 6.52 us at 8), the stream from 17; down / Q / O
    # k = 2..4 on the GEMV to 15 / 16 (k = 4 down M = 16 7.37 vs stream 7.84 in dclose42)
    # M = 17..32 since the GEMV's four token tiles (sweep52h / disp52h, forty-fifth session): the GEMV wherever its
    # staged A fits (k = 4 M = 32 gate/up 9.02 vs wgmma 9.68 / stream 9.73 us, KV 3.13 vs 5.42; down at 17 7.44 vs stream
    # 9.61), its band up to the first measured M where it does not fit (down k = 4: 20), matmul running the streaming
    # GEMV past its fit (18, 19: matmul._run_kind), the stream's band from there
    assert [c(M, 5120, 2048, 2) for M in (8, 16, 17, 24, 32, 64)] == ["gemv", "gemv", "gemv", "gemv", "gemv", "wgmma"]
    assert [c(M, 2048, 5120, 4) for M in (8, 9, 16, 17, 19, 20)] == ["gemv", "gemv", "gemv", "gemv", "gemv", "stream"]
    assert [c(M, 2048, 4096, 4) for M in (17, 20, 23, 24, 32)] == ["gemv", "gemv", "gemv", "stream", "stream"]  # O
    assert [c(M, 5120, 2048, 4) for M in (8, 9, 16, 17)] == ["gemv", "gemv", "gemv", "gemv"]
    # k = 5 down, final18: M = 64 wgmma 15.33 vs stream 15.90 us, M = 128 wgmma 19.14 vs dq 20.99; M = 256 since
    # the TMA stages (wg-tune30): wgmma 21.18 vs dq 22.11
    assert [c(M, 2048, 5120, 5) for M in (8, 16, 32, 64, 128, 256, 257)] == ["gemv", "stream", "stream", "wgmma", "wgmma",
                                                                            "wgmma", "dq"]
    # k = 5 gate/up: the GEMV to M = 8 since its groups share one table per SM (tenth session, k5-gpb); M = 128
    # (final38b) wgmma 15.80 vs dq 15.86 us
    assert [c(M, 5120, 2048, 5) for M in (2, 4, 8, 16, 32, 64, 128)] == ["gemv", "gemv", "gemv", "stream", "stream", "wgmma",
                                                                         "wgmma"]
    assert [c(M, 4096, 2048, 5) for M in (4, 8, 16)] == ["gemv", "gemv", "stream"]
    # k = 4 gate/up: M = 48 since the dense split rule (final40, H200): wgmma 11.39 vs stream 12.36 us; M = 64 (final38)
    # wgmma 12.71, stream 13.03, dq 14.01; M = 32 since the TMA stages (wg-tune30) wgmma 9.63 vs stream 9.70 (M = 24
    # the stream, 9.19 vs 9.61)
    # (M = 8 on the GEMV since sweep42h: 5.56 vs stream 7.03 us in dclose42; to 16 since sweep42hb)
    assert [c(M, 5120, 2048, 4) for M in (4, 8, 16, 24, 32, 48, 64)] == ["gemv", "gemv", "gemv", "gemv", "gemv",
                                                                        "wgmma", "wgmma"]
    # down (final38): wgmma 12.49 vs stream 13.41 us at 48, 12.63 vs 14.28 at 64; the stream at 32 (10.08 vs 10.78)
    assert [c(M, 2048, 5120, 4) for M in (48, 64, 128)] == ["wgmma", "wgmma", "wgmma"]
    assert [c(M, 2048, 5120, 4) for M in (8, 16, 17, 32, 33)] == ["gemv", "gemv", "gemv", "stream", "wgmma"]
    # KV: the GEMV's token split, 8 warps a CTA past 32 rows (kvts53b: M = 32 / 64 / 96 3.13 / 4.10 / 5.34 us against the
    # wgmma kernel's 5.40 / 5.73 / 6.36; 8.61 vs 6.41 at 128)
    assert [c(M, 512, 2048, 4) for M in (32, 33, 64, 96, 97, 128)] == ["gemv"] * 4 + ["wgmma"] * 2
    assert c(32, 3000, 3000, 4) == "stream"  # unmeasured shape: the nearest measured shape's bands
    h100 = lambda M, N, K, k: D.choose(M, N, K, k, "float16", family="H100")  # noqa: E731
    assert [h100(M, 5120, 2048, 4) for M in (4, 8, 16, 32, 64)] == ["gemv", "gemv", "gemv", "stream", "wgmma"]  # H100


def test_pdl_table_used_only_with_pdl(tables):
    """With PDL on (argument or kbitcupy.set_pdl) a family's "+PDL" table decides; off, or
    without such a table, the family's own."""
    D.set_table("T", {"gemv_max_m": 4, "gemm_max_m": 16})
    assert D.choose(8, 1024, 1024, 4, family="T", pdl=True) == "gemm"  # no T+PDL table yet
    D.set_table("T" + D.PDL_SUFFIX, {"gemv_max_m": 8, "gemm_max_m": 64, "shapes": {(4, 1024, 1024): (8, 64, 16, 64)}})
    assert D.choose(8, 1024, 1024, 4, family="T", pdl=True) == "gemv"
    assert D.choose(32, 1024, 1024, 4, family="T", pdl=True) == "wgmma"
    assert D.choose(8, 1024, 1024, 4, family="T", pdl=False) == "gemm"
    assert D.choose(32, 1024, 1024, 4, family="T", pdl=False) == "dq"
    with kb.pdl():
        assert D.choose(32, 1024, 1024, 4, family="T") == "wgmma"
    with kb.pdl(False):
        assert D.choose(32, 1024, 1024, 4, family="T") == "dq"


def test_measured_tables_rebuild_from_their_sweeps():
    """Every measured table in kbitcupy.dispatch is what profiling/tune_dispatch.py's rules make of the
    sweeps listed in profiling/retune_tables.py (all in profiling/results/)."""
    import importlib.util
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1] / "profiling"
    spec = importlib.util.spec_from_file_location("retune_tables", root / "retune_tables.py")
    R = importlib.util.module_from_spec(spec)
    import sys
    sys.path.insert(0, str(root))
    try:
        spec.loader.exec_module(R)
        assert R.main(["--check"]) == 0
    finally:
        sys.path.remove(str(root))
