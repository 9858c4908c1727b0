"""GPU tests of the fused dequant + MMA GEMM (kbitcupy.gemm) and the dequant + cuBLAS path
(kbitcupy.dequant_matmul) against the float64 product with the dequantized weight.

The reference dequantizes on the GPU (kb.dequantize, checked bit-exact against the NumPy
reference in test_dequant_anchor) and multiplies in float64.  Every output buffer is
poisoned with NaN before the call, so an unwritten element fails the test.
"""
import numpy as np
import pytest

import kbitcupy as kb

pytestmark = pytest.mark.gpu

# (K, N) of the dense layers; W is [N, K]
DENSE = [(2048, 5120), (5120, 2048), (2048, 4096), (4096, 2048), (2048, 512), (2048, 2048)]
M_LIST = (5, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 100, 256)
TOL = {"float16": 2e-3, "bfloat16": 8e-3}
DTYPES = (np.float16, kb.bfloat16)
_WCACHE = {}


def _dn(dt):
    return np.dtype(dt).name if np.dtype(dt) != kb.bfloat16 else "bfloat16"


def _weight(N, K, k, rng, scale=0.02, layout="tiled"):
    """(qw, Wd float64 on the GPU) for a Gaussian W[N, K]; cached per shape/k/scale."""
    import cupy as cp

    key = (N, K, k, scale, layout)
    if key not in _WCACHE:
        if len(_WCACHE) > 6:
            _WCACHE.clear()
        W = cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * np.float32(scale))
        q = kb.quantize(W, k, layout=layout)
        _WCACHE[key] = (q, kb.dequantize(q, np.float32).astype(cp.float64))
    return _WCACHE[key]


def other_codebook(w, k):
    """(w with another codebook, which is not flagged default; the same with the flag forced on, so
    that a kernel that compiles the default levels in gives the default levels' result): w is a
    KbitWeight or an expert bank."""
    import cupy as cp
    from dataclasses import replace

    other = cp.asarray(np.linspace(-1, 1, 1 << k, dtype=np.float32) ** 3)
    ob = replace(w, codebook=other)
    assert not ob.default_codebook
    forced = replace(w, codebook=other)
    object.__setattr__(forced, "default_codebook", True)
    return ob, forced


def _A(M, K, dt, rng):
    import cupy as cp

    return cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(dt)


def _rel(C, ref):
    import cupy as cp

    C = C.astype(cp.float64)
    assert not bool(cp.isnan(C).any()), "unwritten (NaN) outputs"
    return float(cp.linalg.norm(C - ref) / cp.linalg.norm(ref))


def _gemm_err(q, Wd, M, dt, rng, **kw):
    import cupy as cp

    from kbitcupy.gemm import gemm

    N, K = q.shape
    A = _A(M, K, dt, rng)
    out = cp.full((M, N), np.nan, dtype=dt)
    gemm(A, q, out, **kw)
    return _rel(out, A.astype(cp.float64) @ Wd.T)


def sweep(err_fn, q, Wd, Ms, rng, label, **kw):
    """err_fn(q, Wd, M, dtype, rng, **kw) below the dtype's tolerance for both dtypes and every M."""
    for dt in DTYPES:
        for M in Ms:
            err = err_fn(q, Wd, M, dt, rng, **kw)
            assert err < TOL[_dn(dt)], (label, _dn(dt), M, err)


# ----------------------------------------------------------------------------- anchor
@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_dequant_anchor(k, rng):
    """The GPU dequantization the references use equals the NumPy reference bit for bit."""
    import cupy as cp

    q, Wd = _weight(200, 160, k, rng)
    ref = kb.dequantize(q.cpu(), np.float32)
    assert np.array_equal(cp.asnumpy(Wd).astype(np.float32), ref)


# ----------------------------------------------------------------------------- accuracy
@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_gemm_all_k_gateup(k, rng):
    """Every M of M_LIST, both dtypes, every k, on the gate/up shape (K=2048, N=5120)."""
    q, Wd = _weight(5120, 2048, k, rng)
    sweep(_gemm_err, q, Wd, M_LIST, rng, k)


@pytest.mark.parametrize("KN", DENSE)
def test_gemm_dense_shapes_k4(KN, rng):
    K, N = KN
    q, Wd = _weight(N, K, 4, rng)
    sweep(_gemm_err, q, Wd, M_LIST, rng, KN)


# (N, K): K % 64 == 32, N not a multiple of 128 (or of 64, or odd), K = 32, N < 64
EDGE = [(200, 96), (200, 160), (72, 224), (201, 160), (128, 32), (40, 96), (1000, 288)]


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_gemm_edge_shapes(k, rng):
    for (N, K) in EDGE:
        q, Wd = _weight(N, K, k, rng)
        for dt in DTYPES:
            for M in (9, 17, 40, 100):
                for tile_n in (None, 64, 128):
                    err = _gemm_err(q, Wd, M, dt, rng, tile_n=tile_n)
                    assert err < TOL[_dn(dt)], ((N, K), k, _dn(dt), M, tile_n, err)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_gemm_every_instantiation(k, rng):
    """Each (k, dtype, M_BLOCKS, TILE_N) kernel launches and is correct (also checks the
    shared-memory plan fits the device: k = 5 with M_BLOCKS = 4 needs > 100 KB)."""
    from kbitcupy.gemm import m_blocking, plan

    import cupy as cp

    q, Wd = _weight(256, 416, k, rng)
    for dt in DTYPES:
        for M in (16, 32, 48, 64):
            assert m_blocking(M) == (M // 16, 1)
            for tile_n in (64, 128):
                p = plan(M, 256, 416, k, _dn(dt), cp.cuda.Device().id, None, tile_n)
                assert 2 <= p.stages <= 4 and p.m_blocks == M // 16 and p.tile_n == tile_n
                err = _gemm_err(q, Wd, M, dt, rng, tile_n=tile_n)
                assert err < TOL[_dn(dt)], (k, _dn(dt), M, tile_n, err)


@pytest.mark.parametrize("scale", [500.0, 1e-5])
def test_gemm_tensor_scale(scale, rng):
    """Weights whose block absmax leaves E4M4's range: tensor_scale != 1."""
    for k in (3, 4):
        q, Wd = _weight(384, 352, k, rng, scale=scale)
        assert q.tensor_scale != 1.0
        for dt in DTYPES:
            for M in (12, 50):
                err = _gemm_err(q, Wd, M, dt, rng)
                assert err < TOL[_dn(dt)], (scale, k, _dn(dt), M, err)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_gemm_permutation_rows(k, rng):
    """Row m of A is the unit vector e_{p(m)}: C[m] must be column p(m) of W (up to the
    rounding of the dequantized weight to the activation dtype).  Any mismatch between
    the K order of the A and B fragments (e.g. the a1/a2 register-order bug) or a wrong
    row / column mapping shows up as a wrong column, not as a small error."""
    import cupy as cp

    from kbitcupy.gemm import gemm

    N, K = 136, 352
    q, Wd = _weight(N, K, k, rng)
    for dt in DTYPES:
        for M in (33, 64, 100):
            perm = rng.permutation(K)[:M] if M <= K else rng.integers(0, K, M)
            A32 = cp.zeros((M, K), dtype=cp.float32)
            A32[cp.arange(M), cp.asarray(perm)] = 1
            A = A32.astype(dt)
            out = cp.full((M, N), np.nan, dtype=dt)
            gemm(A, q, out)
            ref = Wd.T[cp.asarray(perm)]  # [M, N]
            got = out.astype(cp.float64)
            tol = (2.0 ** -10 if _dn(dt) == "float16" else 2.0 ** -7) * 2
            bad = cp.abs(got - ref) > tol * cp.maximum(cp.abs(ref), 1e-3)
            assert not bool(bad.any()), (k, _dn(dt), M, int(bad.sum()))


# ----------------------------------------------------------------------------- split-K
@pytest.mark.parametrize("tile_n", [64, 128])
def test_gemm_forced_splits(tile_n, rng):
    import cupy as cp

    from kbitcupy.gemm import gemm, k_steps

    for (N, K) in ((512, 2048), (200, 160), (5120, 2048)):
        q, Wd = _weight(N, K, 4, rng)
        KS = k_steps(K)
        for dt in DTYPES:
            for M in (16, 33, 64):
                A = _A(M, K, dt, rng)
                ref = A.astype(cp.float64) @ Wd.T
                for ks in sorted({1, 2, 3, KS} & set(range(1, KS + 1))):
                    out = cp.full((M, N), np.nan, dtype=dt)
                    gemm(A, q, out, k_splits=ks, tile_n=tile_n)
                    err = _rel(out, ref)
                    assert err < TOL[_dn(dt)], ((N, K), _dn(dt), M, ks, err)
                    out2 = cp.full((M, N), np.nan, dtype=dt)
                    gemm(A, q, out2, k_splits=ks, tile_n=tile_n)
                    # deterministic: partials are summed in split order
                    assert bool((out2.view(cp.uint16) == out.view(cp.uint16)).all()), ((N, K), M, ks)


@pytest.mark.parametrize("k", [2, 4, 5])
def test_gemm_cluster_and_half_slots(k, rng):
    """The splits' sum over a thread block cluster (sm_90) and through the workspace give the same
    bits (both add the partials in split order); M <= 8 takes the workspace's 8-byte half slots,
    M = 9..16 the full ones; 2..8 splits, both dtypes, N with a partial tile."""
    import cupy as cp

    from kbitcupy.gemm import MAX_CLUSTER, device_info, gemm, k_steps

    clusters = (False, True) if device_info(cp.cuda.Device().id)["cc"] >= 90 else (False,)
    for (N, K) in ((5120, 2048), (200, 1024)):
        q, Wd = _weight(N, K, k, rng)
        for dt in DTYPES:
            for M in (1, 5, 8, 9, 16, 40):
                A = _A(M, K, dt, rng)
                ref = A.astype(cp.float64) @ Wd.T
                for ks in sorted({2, 3, 5, MAX_CLUSTER} & set(range(2, k_steps(K) + 1))):
                    outs = []
                    for cl in clusters:
                        out = cp.full((M, N), np.nan, dtype=dt)
                        gemm(A, q, out, k_splits=ks, tile_n=128, cluster=cl)
                        err = _rel(out, ref)
                        assert err < TOL[_dn(dt)], ((N, K), k, _dn(dt), M, ks, cl, err)
                        outs.append(out)
                    assert all(bool((o.view(cp.uint16) == outs[0].view(cp.uint16)).all()) for o in outs), (M, ks)


def test_gemm_cluster_refused(rng):
    """cluster=True where it cannot run: a ValueError naming the limits, not a launch."""
    import cupy as cp

    from kbitcupy.gemm import MAX_CLUSTER, gemm

    q, _ = _weight(512, 2048, 4, rng)
    for M, ks in ((8, 1), (8, MAX_CLUSTER + 1), (80, 2)):
        with pytest.raises(ValueError, match="cluster"):
            gemm(_A(M, 2048, np.float16, rng), q, cp.empty((M, 512), np.float16), k_splits=ks, cluster=True)


def test_gemm_default_codebook_flag(rng):
    """The kernel builds its pair table from the compiled-in default levels only for weights flagged
    default_codebook: another codebook gives its own product, and the same weight forced to the flag
    gives the default levels' product (so the flag, not the data, chose the levels)."""
    import cupy as cp

    from kbitcupy.gemm import gemm

    q, Wd = _weight(512, 2048, 4, rng)
    assert q.default_codebook
    ob, forced = other_codebook(q, 4)
    Wd_other = kb.dequantize(ob, np.float32).astype(cp.float64)
    for M in (8, 16, 40):
        A = _A(M, 2048, np.float16, rng)
        for w, W in ((ob, Wd_other), (forced, Wd)):
            out = cp.full((M, 512), np.nan, dtype=np.float16)
            gemm(A, w, out)
            assert _rel(out, A.astype(cp.float64) @ W.T) < TOL["float16"], (M, w.default_codebook)


def test_gemm_repeated_calls_stale_counters(rng):
    """Many back-to-back split-K launches on one stream (no sync), with varying tile
    counts sharing one workspace: every call must leave the counters at zero."""
    import cupy as cp

    from kbitcupy.gemm import gemm

    q1, Wd1 = _weight(512, 2048, 4, rng)
    q2, Wd2 = _weight(200, 160, 3, rng)
    A1 = _A(40, 2048, np.float16, rng)
    A2 = _A(17, 160, np.float16, rng)
    ref1 = A1.astype(cp.float64) @ Wd1.T
    ref2 = A2.astype(cp.float64) @ Wd2.T
    outs = []
    for i in range(24):
        if i % 3 == 2:
            o = cp.full((17, 200), np.nan, dtype=np.float16)
            gemm(A2, q2, o, k_splits=2, tile_n=64)
            outs.append((o, ref2))
        else:
            o = cp.full((40, 512), np.nan, dtype=np.float16)
            gemm(A1, q1, o, k_splits=(3, 16)[i % 2], tile_n=(64, 128)[i % 2])
            outs.append((o, ref1))
    cp.cuda.get_current_stream().synchronize()
    for o, ref in outs:
        assert _rel(o, ref) < TOL["float16"]


def test_gemm_two_streams(rng):
    """Two streams run split-K GEMMs concurrently (separate workspaces)."""
    import cupy as cp

    from kbitcupy.gemm import gemm

    q, Wd = _weight(2048, 2048, 4, rng)
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    As = [_A(33, 2048, np.float16, rng) for _ in range(2)]
    refs = [A.astype(cp.float64) @ Wd.T for A in As]
    cp.cuda.get_current_stream().synchronize()
    outs = [[], []]
    for it in range(10):
        for s in range(2):
            with streams[s]:
                o = cp.full((33, 2048), np.nan, dtype=np.float16)
                gemm(As[s], q, o, k_splits=4 + s, tile_n=64)
                outs[s].append(o)
    for s in range(2):
        streams[s].synchronize()
        for o in outs[s]:
            assert _rel(o, refs[s]) < TOL["float16"], s


# ----------------------------------------------------------------------------- out buffer
def test_gemm_no_writes_outside_out(rng):
    """out is a row range of a larger NaN buffer (and, with N odd, not 4-byte aligned):
    rows outside stay NaN, rows inside are all written."""
    import cupy as cp

    from kbitcupy.gemm import gemm, k_steps

    for (N, K) in ((201, 160), (200, 96), (136, 288)):
        q, Wd = _weight(N, K, 4, rng)
        for M in (17, 64):
            A = _A(M, K, np.float16, rng)
            big = cp.full((M + 2, N), np.nan, dtype=np.float16)
            out = big[1:M + 1]
            assert out.flags.c_contiguous
            gemm(A, q, out, k_splits=min(2, k_steps(K)))
            assert bool(cp.isnan(big[0]).all()) and bool(cp.isnan(big[M + 1]).all())
            assert _rel(out, A.astype(cp.float64) @ Wd.T) < TOL["float16"]


# ----------------------------------------------------------------------------- graphs
def _capture(stream, fn):
    with stream:
        stream.begin_capture()
        try:
            fn()
        finally:
            graph = stream.end_capture()
    return graph


@pytest.mark.parametrize("k_splits", [1, 3])
def test_gemm_cuda_graph(k_splits, rng):
    """A captured gemm replays with the buffers' current contents and matches eager."""
    import cupy as cp

    from kbitcupy.gemm import gemm

    q, Wd = _weight(4096, 2048, 4, rng)
    cp.cuda.Stream.null.synchronize()
    for dt in DTYPES:
        M = 24
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            A = _A(M, 2048, dt, rng)
            out = cp.full((M, 4096), np.nan, dtype=dt)
            gemm(A, q, cp.empty_like(out), k_splits=k_splits)  # warm-up: compile, workspace
        s.synchronize()
        graph = _capture(s, lambda: gemm(A, q, out, k_splits=k_splits))
        with s:
            A[...] = _A(M, 2048, dt, rng)  # new contents after the capture
            ref = A.astype(cp.float64) @ Wd.T
            eager = cp.full((M, 4096), np.nan, dtype=dt)
            gemm(A, q, eager, k_splits=k_splits)
            out.fill(np.nan)
            graph.launch(s)
            graph.launch(s)  # twice: the counters must be back at zero after each replay
        s.synchronize()
        assert _rel(out, ref) < TOL[_dn(dt)]
        assert bool((out.view(cp.uint16) == eager.view(cp.uint16)).all())


# ----------------------------------------------------------------------------- dequant + cuBLAS
@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_dequant_lut(k, rng):
    """The matmul path's pair-table dequantize (kbit_dequant_tile: W / tensor_scale) against the
    exact one: equal up to one rounding of the activation dtype, every element written
    (NaN-poisoned buffer), nothing written past [N, K] (a poisoned guard after it), K % 64 == 32
    and N not a multiple of 128 included; repeated calls bit-identical."""
    import cupy as cp

    from kbitcupy.dequant_matmul import dequant_lut

    for (N, K), scale in (((200, 160), 0.02), ((5120, 2048), 0.02), ((72, 224), 500.0), ((130, 4096), 0.02)):
        q, Wd = _weight(N, K, k, rng, scale=scale)
        for dt in DTYPES:
            big = cp.full(N * K + 4096, np.nan, dtype=dt)
            out = big[: N * K].reshape(N, K)
            dequant_lut(q, _dn(dt), out)
            assert bool(cp.isnan(big[N * K:]).all()), "wrote past the output"
            got = out.astype(cp.float64) * q.tensor_scale
            ulp = 2.0 ** -10 if _dn(dt) == "float16" else 2.0 ** -7
            assert not bool(cp.isnan(got).any())
            bad = cp.abs(got - Wd) > 2 * ulp * cp.abs(Wd) + 1e-30
            assert not bool(bad.any()), ((N, K), k, _dn(dt), int(bad.sum()))
            again = cp.full((N, K), np.nan, dtype=dt)
            dequant_lut(q, _dn(dt), again)
            assert bool((out.view(cp.uint16) == again.view(cp.uint16)).all())


@pytest.mark.parametrize("layout", ["tiled", "flat"])
def test_dequant_matmul(layout, rng):
    import cupy as cp

    from kbitcupy.dequant_matmul import dequant_matmul

    for (K, N) in ((2048, 5120), (5120, 2048), (160, 200)):
        for k in (2, 4, 5):
            q, Wd = _weight(N, K, k, rng, layout=layout)
            for dt in DTYPES:
                for M in (1, 64, 300):
                    A = _A(M, K, dt, rng)
                    out = cp.full((M, N), np.nan, dtype=dt)
                    dequant_matmul(A, q, out)
                    err = _rel(out, A.astype(cp.float64) @ Wd.T)
                    assert err < TOL[_dn(dt)], ((K, N), k, layout, _dn(dt), M, err)


def test_dequant_matmul_cuda_graph(rng):
    import cupy as cp

    from kbitcupy.dequant_matmul import dequant_matmul

    q, Wd = _weight(2048, 2048, 4, rng)
    cp.cuda.Stream.null.synchronize()
    for dt in DTYPES:
        M = 128
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            A = _A(M, 2048, dt, rng)
            out = cp.full((M, 2048), np.nan, dtype=dt)
            dequant_matmul(A, q, cp.empty_like(out))  # warm-up: buffer, kernels, cuBLAS
        s.synchronize()
        graph = _capture(s, lambda: dequant_matmul(A, q, out))
        with s:
            A[...] = _A(M, 2048, dt, rng)
            ref = A.astype(cp.float64) @ Wd.T
            out.fill(np.nan)
            graph.launch(s)
        s.synchronize()
        assert _rel(out, ref) < TOL[_dn(dt)]


def test_dequant_matmul_two_streams(rng):
    import cupy as cp

    from kbitcupy.dequant_matmul import dequant_matmul

    qs = [_weight(512, 2048, 4, rng)[0], _weight(2048, 512, 3, rng)[0]]
    Wds = [kb.dequantize(q, np.float32).astype(cp.float64) for q in qs]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    As = [_A(96, q.shape[1], np.float16, rng) for q in qs]
    cp.cuda.get_current_stream().synchronize()
    outs = [[], []]
    for it in range(6):
        for s in range(2):
            with streams[s]:
                o = cp.full((96, qs[s].shape[0]), np.nan, dtype=np.float16)
                dequant_matmul(As[s], qs[s], o)
                outs[s].append(o)
    for s in range(2):
        streams[s].synchronize()
        for o in outs[s]:
            assert _rel(o, As[s].astype(cp.float64) @ Wds[s].T) < TOL["float16"]


# ----------------------------------------------------------------------------- dispatch
def test_dispatch_kinds_run(rng):
    """Whatever dispatch.choose picks on this GPU computes the right product."""
    import cupy as cp

    from kbitcupy import dispatch
    from kbitcupy.dequant_matmul import dequant_matmul
    from kbitcupy.gemm import gemm
    from kbitcupy.gemv import gemv

    from kbitcupy.gemv_stream import gemv_stream
    from kbitcupy.wgmma import wgmma_gemm

    fns = {"gemv": gemv, "gemm": gemm, "dq": dequant_matmul, "wgmma": wgmma_gemm, "stream": gemv_stream}
    q, Wd = _weight(2048, 2048, 4, rng)
    seen = set()
    for M in (1, 8, 9, 16, 24, 64, 65, 300):
        kind = dispatch.choose(M, 2048, 2048, 4, np.float16)
        seen.add(kind)
        A = _A(M, 2048, np.float16, rng)
        out = cp.full((M, 2048), np.nan, dtype=np.float16)
        fns[kind](A, q, out)
        assert _rel(out, A.astype(cp.float64) @ Wd.T) < TOL["float16"], (M, kind)
    assert seen <= set(fns)
