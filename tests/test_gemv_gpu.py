"""GPU decode GEMV (M = 1..32; the token split to 128) against the float64 reference of the dequantized weight."""
import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy.gemv import gemv

pytestmark = pytest.mark.gpu

DENSE = {"gateup": (5120, 2048), "down": (2048, 5120), "Q": (4096, 2048), "O": (2048, 4096),
         "KV": (512, 2048), "lin_key": (2048, 2048), "lin_value": (4096, 2048)}
TOL = {"float16": 2e-3, "bfloat16": 8e-3}
_CACHE = {}


def _weight(cp, shape, k, layout, rng):
    key = (shape, k, layout)
    if key not in _CACHE:
        W = cp.asarray((rng.standard_normal(shape, dtype=np.float32) * 0.02))
        if layout == "flat_f32":
            q = kb.quantize(W, k, layout="flat", absmax_format="float32")
        else:
            q = kb.quantize(W, k, layout=layout)
        Wd = kb.dequantize(q, np.float32).astype(cp.float64)  # bit-exact with the reference (other tests)
        _CACHE.clear()
        _CACHE[key] = (q, Wd)
    return _CACHE[key]


def _rel_err(C, ref, mag=None, K=None):
    """||C - ref|| / ||ref||.  With mag = |A| @ |W|^T the denominator is at least
    2 ||mag|| / sqrt(K) (what ||ref|| is for random signs), so a short dot product
    that cancels to a tiny value is judged against the size of its terms."""
    import cupy as cp

    C = C.astype(cp.float64)
    den = float(cp.linalg.norm(ref))
    if mag is not None:
        den = max(den, 2.0 * float(cp.linalg.norm(mag)) / np.sqrt(K))
    return float(cp.linalg.norm(C - ref)) / den


def _run(cp, q, Wd, M, dt, rng):
    N, K = q.shape
    A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(dt)
    out = cp.full((M, N), np.nan, dtype=dt)  # poisoned: every element must be written
    kb.matmul(A, q, out=out)
    A64 = A.astype(cp.float64)
    ref = A64 @ Wd.T
    assert not bool(cp.isnan(out).any())
    return _rel_err(out, ref, cp.abs(A64) @ cp.abs(Wd).T, K)


def _check_plans(cp, q, Wd, Ms, plans, rng, tag=None):
    """gemv with every plan override of `plans` at every M of Ms, fp16 and bf16, fresh A, outputs poisoned, against
    the float64 reference of the dequantized weight Wd."""
    N, K = q.shape
    for M in Ms:
        for dt in (np.float16, kb.bfloat16):
            A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(dt)
            A64 = A.astype(cp.float64)
            ref, mag = A64 @ Wd.T, cp.abs(A64) @ cp.abs(Wd).T
            for ov in plans:
                out = cp.full((M, N), np.nan, dtype=dt)
                gemv(A, q, out, plan_override=ov)
                assert not bool(cp.isnan(out).any()), (tag, N, K, M, ov)
                err = _rel_err(out, ref, mag, K)
                assert err < TOL[np.dtype(dt).name], (tag, N, K, M, np.dtype(dt).name, ov, err)


def _check_graph(cp, q, Wd, M, rng):
    """gemv of M rows captured in a CUDA graph (compiled and planned outside the capture), the output poisoned before
    the replay, against the float64 reference."""
    N, K = q.shape
    A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
    out = cp.full((M, N), np.nan, dtype=cp.float16)
    gemv(A, q, out)
    out[...] = np.nan
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        gemv(A, q, out)
        g = s.end_capture()
        g.launch(s)
        s.synchronize()
    assert _rel_err(out, A.astype(cp.float64) @ Wd.T) < 2e-3, (N, K, M)


@pytest.mark.parametrize("layout", ["tiled", "flat_f32"])
@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("name", list(DENSE))
def test_gemv_dense_shapes(name, k, layout, rng):
    import cupy as cp

    q, Wd = _weight(cp, DENSE[name], k, layout, rng)
    for dt in (np.float16, kb.bfloat16):
        for M in (1, 2, 3, 4, 8, 9, 16, 17, 32):
            err = _run(cp, q, Wd, M, dt, rng)
            assert err < TOL[np.dtype(dt).name], (name, k, layout, np.dtype(dt).name, M, err)


@pytest.mark.parametrize("shape", [(1, 32), (5, 96), (200, 160), (130, 64), (8, 4128), (1000, 224)])
@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_gemv_edge_shapes(shape, k, rng):
    import cupy as cp

    for layout in ("tiled", "flat_f32", "flat"):
        q, Wd = _weight(cp, shape, k, layout, rng)
        for dt in (np.float16, kb.bfloat16):
            for M in (1, 3, 7, 13):
                assert _run(cp, q, Wd, M, dt, rng) < TOL[np.dtype(dt).name]


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_gemv_plans_agree(k, rng):
    """Every plan (warps per block, one or two accumulator chains, when the ring fills)
    computes the same function; K % 128 == 64
    and K % 64 == 32 leave a half or quarter of the last step empty."""
    import cupy as cp

    for N, K in ((1040, 2080), (272, 2112), (144, 4160)):
        q, Wd = _weight(cp, (N, K), k, "tiled", rng)
        for M in (1, 5, 12):
            A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
            ref = A.astype(cp.float64) @ Wd.T
            plans = [(("warps", w), ("dual", d), ("late", lt)) for w in (1, 3, 8, 16) for d in (False, True)
                     for lt in (False, True)]
            for ov in plans:
                out = cp.full((M, N), np.nan, dtype=cp.float16)
                gemv(A, q, out, plan_override=ov)
                assert _rel_err(out, ref) < 2e-3, (N, K, M, ov)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_gemv_c8(k, rng):
    """8-column groups (plan c8: MMA rows g / g + 8 = one column's two K halves, token columns
    0..3 / 4..7 their A rows), forced on every dense shape and the edge shapes (N not a multiple
    of 8, K % 256 == 128, K % 64 == 32, K = 32), M = 1..4, fp16 / bf16; then every block plan
    (warps, chains, ring fill) on two shapes."""
    import cupy as cp

    shapes = list(DENSE.values()) + [(1, 32), (5, 96), (200, 160), (130, 64), (8, 4128), (1000, 224), (1040, 2080)]
    for N, K in shapes:
        q, Wd = _weight(cp, (N, K), k, "tiled", rng)
        for M in (1, 2, 3, 4):
            for dt in (np.float16, kb.bfloat16):
                A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(dt)
                A64 = A.astype(cp.float64)
                out = cp.full((M, N), np.nan, dtype=dt)
                gemv(A, q, out, plan_override=(("c8", True),))
                assert not bool(cp.isnan(out).any()), (N, K, M)
                err = _rel_err(out, A64 @ Wd.T, cp.abs(A64) @ cp.abs(Wd).T, K)
                assert err < TOL[np.dtype(dt).name], (N, K, M, np.dtype(dt).name, err)
    for N, K in ((1040, 2080), (272, 4160)):
        q, Wd = _weight(cp, (N, K), k, "tiled", rng)
        for M in (1, 4):
            A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
            ref = A.astype(cp.float64) @ Wd.T
            for ov in [(("c8", True), ("warps", w), ("dual", d), ("late", lt)) for w in (1, 4, 8, 16)
                       for d in ((False, True) if k != 5 else (False,)) for lt in (False, True)]:
                out = cp.full((M, N), np.nan, dtype=cp.float16)
                gemv(A, q, out, plan_override=ov)
                assert _rel_err(out, ref) < 2e-3, (N, K, M, ov)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_gemv_token_split(k, rng):
    """Each column group's rows on several CTAs (plan ts: grid.y CTAs of 8 rows, or of 4 with c8), the last one
    partial: K tails (K % 128 == 64, K % 64 == 32, K = 32), N not a multiple of 16, 4..16 warps, fp16 / bf16, the
    default codebook compiled in and a loaded one; every output written (poisoned); then a CUDA graph of it."""
    import cupy as cp

    cb = cp.asarray(np.linspace(-1, 1, 1 << k, dtype=np.float32) ** 3)
    plans = [(("ts", 1),), (("ts", 1), ("warps", 8)), (("ts", 1), ("c8", 1)), (("ts", 1), ("c8", 1), ("warps", 4)),
             (("ts", 1), ("c8", 1), ("warps", 16))]
    for N, K in ((512, 2048), (200, 2080), (1040, 2112), (24, 32)):
        qc = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k, codebook=cb)
        assert not qc.default_codebook
        Ms = (2, 5, 8, 9, 13, 16)
        _check_plans(cp, *_weight(cp, (N, K), k, "tiled", rng), Ms, plans, rng, "default codebook")
        _check_plans(cp, qc, kb.dequantize(qc, np.float32).astype(cp.float64), Ms, plans, rng, "loaded codebook")
    q, Wd = _weight(cp, (512, 2048), k, "tiled", rng)
    A = cp.asarray(rng.standard_normal((13, 2048), dtype=np.float32)).astype(cp.float16)
    out = cp.full((13, 512), np.nan, dtype=cp.float16)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        gemv(A, q, out, plan_override=(("ts", 1),))
        g = s.end_capture()
        g.launch(s)
        s.synchronize()
    assert _rel_err(out, A.astype(cp.float64) @ Wd.T) < 2e-3


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_gemv_token_split_many_rows(k, rng):
    """Past 32 rows (to gemv.max_rows: 128) on the shapes whose default plan is the token split (the tiled layout, at
    most 64 16-column groups): ceil(M / 8) CTAs a group, the last one partial; K tails, N not a multiple of 16, the
    default plan and 8 warps, fp16 / bf16, poisoned; a CUDA graph; and the refusals: one row more, the flat layout,
    65 groups."""
    import cupy as cp

    mr = kb.gemv.max_rows(k, 512)
    assert mr == 128 and kb.gemv.max_rows(k, 1040) == (16 if k == 5 else 32) and kb.gemv.max_rows(k, 512, False) < mr
    for N, K in ((512, 2048), (1000, 2112), (200, 2080), (24, 32)):
        assert kb.gemv.fits(N, K, mr, k, 0) and not kb.gemv.fits(N, K, mr + 1, k, 0)
        _check_plans(cp, *_weight(cp, (N, K), k, "tiled", rng), (33, 64, 100, mr), [None, (("ts", 1), ("warps", 16))], rng, "ts")
    q, Wd = _weight(cp, (512, 2048), k, "tiled", rng)
    _check_graph(cp, q, Wd, 100, rng)
    for M in (40, 64, 96):  # through matmul (the H200 table: the GEMV's token split to 96 rows on KV)
        assert _run(cp, q, Wd, M, np.float16, rng) < TOL["float16"], M
    with pytest.raises(ValueError, match=f"M = 1..{mr} rows"):
        gemv(cp.zeros((mr + 1, 2048), cp.float16), q, cp.zeros((mr + 1, 512), cp.float16))
    qf, _ = _weight(cp, (512, 2048), k, "flat", rng)
    with pytest.raises(ValueError, match="M = 1..(16|32) rows"):
        gemv(cp.zeros((33, 2048), cp.float16), qf, cp.zeros((33, 512), cp.float16))
    qw, _ = _weight(cp, (1040, 2048), k, "tiled", rng)
    with pytest.raises(ValueError, match="M = 1..(16|32) rows"):
        gemv(cp.zeros((33, 2048), cp.float16), qw, cp.zeros((33, 1040), cp.float16))


@pytest.mark.parametrize("k", [2, 3, 4])
def test_gemv_slices_two_tiles(k, rng):
    """Column groups side by side at two token tiles (plan gpb at M = 9..16, k <= 4: gate/up's and Q's default
    plans): a last block the groups do not fill, N not a multiple of 16 (flat), K tails, 2..5 groups of 3..8 warps,
    every layout, fp16 / bf16; then the default plans of gate/up and Q through matmul."""
    import cupy as cp

    plans = [(("gpb", 2), ("warps", 8)), (("gpb", 3), ("warps", 4)), (("gpb", 5), ("warps", 3)), (("gpb", 4), ("warps", 4))]
    for layout in ("tiled", "flat", "flat_f32"):
        for N, K in ((1040, 2080), (1000, 2112), (200, 416)):
            _check_plans(cp, *_weight(cp, (N, K), k, layout, rng), (9, 13, 16), plans, rng, layout)
    for name in ("gateup", "Q"):
        q, Wd = _weight(cp, DENSE[name], k, "tiled", rng)
        N, K = DENSE[name]
        assert kb.gemv.plan(N, K, 16, k)[7] > 1
        for M in (9, 16):
            A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
            out = cp.full((M, N), np.nan, dtype=cp.float16)
            gemv(A, q, out)
            assert _rel_err(out, A.astype(cp.float64) @ Wd.T) < 2e-3, (name, M)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_gemv_four_tiles(k, rng):
    """Four token tiles (M = 17..32, k <= 4): the default plans of the dense shapes whose staged A fits (K = 2048:
    gate/up and Q / linear value as slices, linear key one group a block, KV the token split), fp16 / bf16, poisoned;
    plan overrides (slices, 3..8 warps) with K tails (K % 128 == 64, K % 64 == 32) and N not a multiple of 16 in every
    layout; a CUDA graph of one call; and the refusals: k = 5 past 16 rows, a staged A too large (down at M = 32)."""
    import cupy as cp

    for name in ("gateup", "Q", "KV", "lin_key", "lin_value"):
        N, K = DENSE[name]
        assert kb.gemv.fits(N, K, 32, k, 0)
        _check_plans(cp, *_weight(cp, DENSE[name], k, "tiled", rng), (17, 24, 32), [None], rng, name)
    plans = [(("warps", 8),), (("warps", 3),), (("gpb", 2), ("warps", 8)), (("gpb", 3), ("warps", 4))]
    for layout in ("tiled", "flat", "flat_f32"):
        for N, K in ((1040, 2080), (200, 2112)):
            ps = plans if layout == "tiled" else plans[:2]  # (slices at four tiles: the tiled layout only)
            _check_plans(cp, *_weight(cp, (N, K), k, layout, rng), (17, 25, 32), ps, rng, layout)
    _check_graph(cp, *_weight(cp, DENSE["gateup"], k, "tiled", rng), 32, rng)
    q5, _ = _weight(cp, (2048, 2048), 5, "tiled", rng)
    with pytest.raises(ValueError, match="k = 5"):
        gemv(cp.zeros((17, 2048), cp.float16), q5, cp.zeros((17, 2048), cp.float16))
    assert not kb.gemv.fits(2048, 2048, 17, 5, 0) and kb.gemv.fits(2048, 2048, 16, 5, 0)
    assert kb.gemv.fits(512, 2048, 17, 5, 0)  # (KV: the token split's CTAs take 8 rows each)
    qd, _ = _weight(cp, DENSE["down"], k, "tiled", rng)
    assert not kb.gemv.fits(2048, 5120, 32, k, 0)
    with pytest.raises(ValueError, match="shared memory"):
        gemv(cp.zeros((32, 5120), cp.float16), qd, cp.zeros((32, 2048), cp.float16))


@pytest.mark.parametrize("layout", ["tiled", "flat", "flat_f32"])
def test_gemv_slices(layout, rng):
    """Several column groups side by side in one block (plan gpb > 1, instantiated for k = 5):
    a last block the groups do not fill, N not a multiple of 16 (flat), K tails, odd warp
    counts; then the default plan of the k = 5 wide shapes (gate/up 3 x 4 warps, Q 2 x 8),
    called directly (matmul may dispatch those cells elsewhere)."""
    import cupy as cp

    plans = [(("gpb", 2), ("warps", 8)), (("gpb", 3), ("warps", 4)), (("gpb", 4), ("warps", 4)),
             (("gpb", 2), ("warps", 3), ("late", False)), (("gpb", 3), ("warps", 5), ("late", True))]
    for N, K in ((1040, 2080), (1000, 2112), (200, 4160)):
        _check_plans(cp, *_weight(cp, (N, K), 5, layout, rng), (1, 5, 8), plans, rng)
    for name in ("gateup", "Q"):
        q, Wd = _weight(cp, DENSE[name], 5, layout, rng)
        N, K = DENSE[name]
        assert kb.gemv.plan(N, K, 1, 5)[7] > 1
        for M in (1, 2, 4, 8):
            for dt in (np.float16, kb.bfloat16):
                A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(dt)
                A64 = A.astype(cp.float64)
                for pdl in (False, True):  # with PDL, M <= 2 plans one group per block
                    out = cp.full((M, N), np.nan, dtype=dt)
                    with kb.pdl(pdl):
                        gemv(A, q, out)
                    assert not bool(cp.isnan(out).any())
                    err = _rel_err(out, A64 @ Wd.T, cp.abs(A64) @ cp.abs(Wd).T, K)
                    assert err < TOL[np.dtype(dt).name], (name, M, pdl)


def test_codebook_nondefault(rng):
    import cupy as cp

    cb = np.array([-1.0, -0.3, 0.05, 0.9], np.float32)
    W = cp.asarray(rng.standard_normal((512, 1024), dtype=np.float32))
    q = kb.quantize(W, 2, codebook=cb)
    Wd = kb.dequantize(q, np.float32).astype(cp.float64)
    for dt in (np.float16, kb.bfloat16):
        assert _run(cp, q, Wd, 2, dt, rng) < TOL[np.dtype(dt).name]


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_default_codebook_levels(k, rng):
    """A weight with the default codebook takes its levels from the kernel's immediates: the
    flag is set for quantize's default, for a GPU copy of the default levels given by the
    caller, and the result matches the reference.  Forcing the flag onto a weight with another
    codebook gives the default-codebook result, not its own: the fast path is really taken."""
    import cupy as cp
    from dataclasses import replace

    from kbitcupy import reference as R

    W = cp.asarray(rng.standard_normal((1024, 2048), dtype=np.float32) * 0.02)
    q = kb.quantize(W, k)
    assert q.default_codebook
    q2 = kb.from_packed(q.packed, q.absmax, cp.asarray(R.create_codebook(k)), q.shape, k)  # read back once
    assert q2.default_codebook
    Wd = kb.dequantize(q, np.float32).astype(cp.float64)
    for dt in (np.float16, kb.bfloat16):
        assert _run(cp, q2, Wd, 1, dt, rng) < TOL[np.dtype(dt).name]
    other = cp.asarray(np.linspace(-1, 1, 1 << k, dtype=np.float32) ** 3)  # not the default levels
    qo = replace(q, codebook=other)
    assert not qo.default_codebook
    Wo = kb.dequantize(qo, np.float32).astype(cp.float64)
    assert _run(cp, qo, Wo, 2, np.float16, rng) < TOL["float16"]  # its own codebook, loaded
    forced = replace(q, codebook=other)
    object.__setattr__(forced, "default_codebook", True)
    A = cp.asarray(rng.standard_normal((1, 2048), dtype=np.float32)).astype(cp.float16)
    out = cp.full((1, 1024), np.nan, cp.float16)
    gemv(A, forced, out)
    A64 = A.astype(cp.float64)
    assert _rel_err(out, A64 @ Wd.T) < TOL["float16"] < _rel_err(out, A64 @ Wo.T)


def test_codebook_not_read_during_capture(rng):
    """A weight made while a CUDA graph is captured does not read its codebook back (that would
    break the capture): it is not flagged default, its kernels load the codebook, and the
    replayed result equals the one outside the capture."""
    import cupy as cp

    q, Wd = _weight(cp, (2048, 2048), 4, "tiled", rng)
    A = cp.asarray(rng.standard_normal((1, 2048), dtype=np.float32)).astype(cp.float16)
    out = cp.empty((1, 2048), cp.float16)
    kb.matmul(A, q, out=out)
    expect = out.copy()
    cb = q.codebook.copy()  # a codebook array no weight has looked at yet
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.synchronize()
        s.begin_capture()
        q2 = kb.from_packed(q.packed, q.absmax, cb, q.shape, q.k, "tiled", q.tensor_scale)
        kb.matmul(A, q2, out=out)
        g = s.end_capture()
        assert not q2.default_codebook
        out.fill(np.nan)
        g.launch(s)
    s.synchronize()
    cp.testing.assert_array_equal(out, expect)
    assert kb.from_packed(q.packed, q.absmax, cb, q.shape, q.k, "tiled", q.tensor_scale).default_codebook


def test_large_activations_no_overflow(rng):
    """fp32 accumulation: activations near fp16's limit must not overflow."""
    import cupy as cp

    q, Wd = _weight(cp, (512, 2048), 4, "tiled", rng)
    A = cp.asarray(rng.uniform(3000, 6000, (1, 2048)).astype(np.float32)).astype(cp.float16)
    out = kb.matmul(A, q)
    ref = A.astype(cp.float64) @ Wd.T
    assert bool(cp.isfinite(out).all())
    assert _rel_err(out, ref) < 2e-3


def test_graph_capture(rng):
    import cupy as cp

    q, Wd = _weight(cp, (2048, 2048), 4, "tiled", rng)
    A = cp.asarray(rng.standard_normal((1, 2048), dtype=np.float32)).astype(cp.float16)
    out = cp.empty((1, 2048), cp.float16)
    kb.matmul(A, q, out=out)  # compile outside capture
    expect = out.copy()
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        out.fill(np.nan)
        s.begin_capture()
        kb.matmul(A, q, out=out)
        g = s.end_capture()
        out.fill(np.nan)
        g.launch(s)
    s.synchronize()
    cp.testing.assert_array_equal(out, expect)


def test_torch_interop(rng):
    torch = pytest.importorskip("torch")
    import cupy as cp

    q, Wd = _weight(cp, (512, 2048), 4, "tiled", rng)
    A = torch.randn(3, 2048, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        C = kb.matmul(A, q)
    s.synchronize()
    assert isinstance(C, torch.Tensor) and C.dtype == torch.bfloat16 and C.shape == (3, 512)
    ref = cp.asarray(A.float().cpu().numpy()).astype(cp.float64) @ Wd.T
    assert _rel_err(cp.asarray(C.float().cpu().numpy()), ref) < 8e-3
    # out= with a torch tensor
    out = torch.empty(3, 512, device="cuda", dtype=torch.bfloat16)
    assert kb.matmul(A, q, out=out) is out
    torch.testing.assert_close(out, C)


def test_bad_inputs(rng):
    import cupy as cp

    q, _ = _weight(cp, (512, 2048), 4, "tiled", rng)
    A = cp.zeros((1, 2048), cp.float16)
    with pytest.raises(ValueError, match="M = 1..128"):  # (KV: the token split's rows)
        gemv(cp.zeros((129, 2048), cp.float16), q, cp.zeros((129, 512), cp.float16))
    with pytest.raises(ValueError, match="last dimension"):
        kb.matmul(cp.zeros((1, 1024), cp.float16), q)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        kb.matmul(cp.zeros((1, 2048), cp.float32), q)
    with pytest.raises(ValueError, match="CPU"):
        kb.matmul(np.zeros((1, 2048), np.float16), q)
    with pytest.raises(ValueError, match="weight is on the CPU"):
        kb.matmul(A, q.cpu())
    with pytest.raises(ValueError, match="out must be"):
        kb.matmul(A, q, out=cp.zeros((1, 512), cp.float32))
    with pytest.raises(ValueError, match="contiguous"):
        kb.matmul(cp.zeros((2048, 2), cp.float16).T, q)


@pytest.mark.parametrize("M", [1, 4, 8])
def test_resident_cap_even_share(M, rng):
    # Q's 256 blocks of 8 warps: at most ceil(256 / SMs) = 2 share an SM (gemv.resident_cap_smem), also when the
    # kernel's shared memory attribute is still below the plan's (first use at M > 4: the occupancy query then read 0)
    import cupy as cp
    from kbitcupy import gemv as G
    from kbitcupy.gemm import device_info

    q, Wd = _weight(cp, DENSE["Q"], 4, "tiled", rng)
    A = cp.asarray(rng.standard_normal((M, q.shape[1]), dtype=np.float32)).astype(np.float16)
    out = cp.full((M, q.shape[0]), np.nan, dtype=np.float16)
    fn = G.launch_args(A, q, out)[0]
    fn.max_dynamic_shared_size_bytes = 0
    G._LAUNCH.clear()
    fn, grid, block, smem, _ = G.launch_args(A, q, out)
    blocks, threads = int(np.prod(grid)), block[0] * block[1]
    sms = device_info(0)["sms"]
    assert fn.max_dynamic_shared_size_bytes >= smem
    cap = -(-blocks // sms)
    if cap >= 2:  # (GPUs with 256 SMs or more: one block an SM, no cap)
        assert 0 < G.occupancy(fn, threads, smem) <= cap
    gemv(A, q, out)
    ref = A.astype(cp.float64) @ Wd.T
    assert _rel_err(out, ref) < TOL["float16"]
