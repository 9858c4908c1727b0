"""GPU tests of the Hopper wgmma fused GEMM (kbitcupy.wgmma) against the float64 product
with the dequantized weight (same helpers and tolerances as test_gemm_gpu.py).  Every
output buffer is NaN-poisoned first.  Skipped on GPUs other than compute capability 9.0."""
import numpy as np
import pytest

import kbitcupy as kb

from test_gemm_gpu import DENSE, DTYPES, TOL, _A, _capture, _dn, _rel, _weight, other_codebook, sweep

pytestmark = pytest.mark.gpu

M_LIST = (1, 5, 16, 17, 31, 32, 33, 48, 64, 100, 128, 129, 192, 256, 300)


@pytest.fixture(autouse=True)
def _sm90():
    import cupy as cp

    if cp.cuda.Device().compute_capability != "90":
        pytest.skip("wgmma needs compute capability 9.0")


def _err(q, Wd, M, dt, rng, **kw):
    import cupy as cp

    from kbitcupy.wgmma import wgmma_gemm

    N, K = q.shape
    A = _A(M, K, dt, rng)
    out = cp.full((M, N), np.nan, dtype=dt)
    wgmma_gemm(A, q, out, **kw)
    return _rel(out, A.astype(cp.float64) @ Wd.T)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_wgmma_all_k_gateup(k, rng):
    q, Wd = _weight(5120, 2048, k, rng)
    sweep(_err, q, Wd, M_LIST, rng, k)


@pytest.mark.parametrize("KN", DENSE)
def test_wgmma_dense_shapes_k4(KN, rng):
    K, N = KN
    q, Wd = _weight(N, K, 4, rng)
    sweep(_err, q, Wd, M_LIST, rng, KN)


EDGE = [(200, 96), (200, 160), (72, 224), (201, 160), (128, 32), (40, 96), (1000, 288)]


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_wgmma_edge_shapes_every_tok(k, rng):
    """K % 64 == 32, N not a multiple of 128 / 8 / odd, K = 32; every TOK variant."""
    from kbitcupy.wgmma import TOK_CHOICES

    for (N, K) in EDGE:
        q, Wd = _weight(N, K, k, rng)
        for dt in DTYPES:
            for M in (3, 17, 100):
                for tok in TOK_CHOICES:
                    err = _err(q, Wd, M, dt, rng, tok=tok)
                    assert err < TOL[_dn(dt)], ((N, K), k, _dn(dt), M, tok, err)


@pytest.mark.parametrize("scale", [500.0, 1e-5])
def test_wgmma_tensor_scale(scale, rng):
    for k in (3, 4):
        q, Wd = _weight(384, 352, k, rng, scale=scale)
        assert q.tensor_scale != 1.0
        for dt in DTYPES:
            for M in (12, 150):
                err = _err(q, Wd, M, dt, rng)
                assert err < TOL[_dn(dt)], (scale, k, _dn(dt), M, err)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_wgmma_permutation_rows(k, rng):
    """Row m of A is the unit vector e_{p(m)}, so C[m] must be column p(m) of W: a wrong
    K order between the register fragments and the shared-memory descriptor, or a wrong
    token / column mapping, gives wrong columns, not a small error."""
    import cupy as cp

    from kbitcupy.wgmma import TOK_CHOICES, wgmma_gemm

    N, K = 136, 352
    q, Wd = _weight(N, K, k, rng)
    for dt in DTYPES:
        for M in (7, 33, 100, 200):
            perm = rng.permutation(K)[:M] if M <= K else rng.integers(0, K, M)
            A32 = cp.zeros((M, K), dtype=cp.float32)
            A32[cp.arange(M), cp.asarray(perm)] = 1
            A = A32.astype(dt)
            ref = Wd.T[cp.asarray(perm)]
            tol = (2.0 ** -10 if _dn(dt) == "float16" else 2.0 ** -7) * 2
            for tok in TOK_CHOICES:
                out = cp.full((M, N), np.nan, dtype=dt)
                wgmma_gemm(A, q, out, tok=tok)
                bad = cp.abs(out.astype(cp.float64) - ref) > tol * cp.maximum(cp.abs(ref), 1e-3)
                assert not bool(bad.any()), (k, _dn(dt), M, tok, int(bad.sum()))


def test_wgmma_forced_splits_and_stages(rng):
    import cupy as cp

    from kbitcupy.gemm import device_info
    from kbitcupy.wgmma import choose_tok, smem_bytes, wgmma_gemm

    for (N, K) in ((512, 2048), (200, 160), (5120, 2048)):
        q, Wd = _weight(N, K, 4, rng)
        KT = -(-K // 64)
        for dt in DTYPES:
            for M in (16, 33, 130):
                A = _A(M, K, dt, rng)
                ref = A.astype(cp.float64) @ Wd.T
                for ks in sorted({1, 2, 3, KT} & set(range(1, KT + 1))):
                    for st in (4, 5, 8):
                        if smem_bytes(4, choose_tok(M), st) > device_info(cp.cuda.Device().id)["smem_block"]:
                            continue
                        out = cp.full((M, N), np.nan, dtype=dt)
                        wgmma_gemm(A, q, out, k_splits=ks, stages=st)
                        err = _rel(out, ref)
                        assert err < TOL[_dn(dt)], ((N, K), _dn(dt), M, ks, st, err)
                        out2 = cp.full((M, N), np.nan, dtype=dt)
                        wgmma_gemm(A, q, out2, k_splits=ks, stages=st)
                        assert bool((out2.view(cp.uint16) == out.view(cp.uint16)).all()), ((N, K), M, ks, st)


def test_wgmma_cluster_sum_matches_workspace_sum(rng):
    """The split-K sum over a thread block cluster (DSMEM) adds the splits in the order the
    workspace path does, so both give the same bits, and the reference's error; token tails,
    N not a multiple of 128 / 8 (the scalar stores) and K % 64 == 32, every cluster size."""
    import cupy as cp

    from kbitcupy.wgmma import MAX_CLUSTER, plan, wgmma_gemm

    for (N, K, k) in ((5120, 2048, 4), (201, 160, 3), (136, 544, 5), (2048, 512, 2)):
        q, Wd = _weight(N, K, k, rng)
        KT = -(-K // 64)
        for dt in DTYPES:
            for M in (5, 33, 130):
                A = _A(M, K, dt, rng)
                ref = A.astype(cp.float64) @ Wd.T
                for ks in sorted({2, 3, 5, MAX_CLUSTER} & set(range(2, KT + 1))):
                    p = plan(M, N, K, k, _dn(dt), cp.cuda.Device().id, ks, cluster=True)
                    assert p.cluster and p.ws_floats == 0
                    outs = []
                    for cl in (True, False):
                        out = cp.full((M, N), np.nan, dtype=dt)
                        wgmma_gemm(A, q, out, k_splits=ks, cluster=cl)
                        outs.append(out)
                    err = _rel(outs[0], ref)
                    assert err < TOL[_dn(dt)], ((N, K, k), _dn(dt), M, ks, err)
                    assert bool((outs[0].view(cp.uint16) == outs[1].view(cp.uint16)).all()), ((N, K, k), M, ks)
    with pytest.raises(ValueError, match="cluster"):
        plan(64, 4096, 4096, 4, "float16", cp.cuda.Device().id, MAX_CLUSTER + 1, cluster=True)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_wgmma_default_codebook_kernel(k, rng):
    """A weight with the default codebook runs the kernels with its levels compiled in (CBD; in safe
    PDL their tables are built before the wait): bit for bit the result of the same weight flagged
    not default (the codebook loaded), dense (every TOK, split-K through the workspace and a
    cluster) and grouped (ids stable or not), plain / safe / full PDL, both dtypes; the flag forced onto another
    codebook gives the default levels' result (the CBD kernel really ran); another codebook,
    not flagged, matches its own reference."""
    import cupy as cp
    from dataclasses import replace

    from kbitcupy.grouped import _err_buffer, quantize_experts, read_errors
    from kbitcupy.wgmma import TOK_CHOICES, grouped_wgmma, wgmma_gemm

    N, K = 200, 544
    q, Wd = _weight(N, K, k, rng)
    assert q.default_codebook
    loaded = replace(q)
    object.__setattr__(loaded, "default_codebook", False)
    bank = quantize_experts(cp.asarray(rng.standard_normal((3, 256, K), dtype=np.float32) * 0.02), k)
    assert bank.default_codebook
    bank_l = replace(bank)
    object.__setattr__(bank_l, "default_codebook", False)
    ids = cp.asarray(np.array([2, 0, 1], np.int32))
    offs = cp.asarray(np.array([0, 5, 5, 40], np.int32))  # an expert with no rows
    old = kb.set_pdl(False)
    try:
        for mode in (False, "safe", True):
            kb.set_pdl(mode)
            for dt in DTYPES:
                A = _A(70, K, dt, rng)
                for tok in TOK_CHOICES:
                    for ks, cl in ((1, None), (3, False), (2, True)):
                        outs = []
                        for w in (q, loaded):
                            out = cp.full((70, N), np.nan, dtype=dt)
                            wgmma_gemm(A, w, out, k_splits=ks, tok=tok, cluster=cl)
                            outs.append(out)
                        assert _rel(outs[0], A.astype(cp.float64) @ Wd.T) < TOL[_dn(dt)], (mode, _dn(dt), tok, ks)
                        same = bool((outs[0].view(cp.uint16) == outs[1].view(cp.uint16)).all())
                        assert same, (k, mode, _dn(dt), tok, ks, cl)
                Ag = _A(40, K, dt, rng)
                for tok in (16, 64):
                    for stable in ((False, True) if mode is True else (False,)):
                        outs = []
                        for b in (bank, bank_l):
                            out = cp.full((40, 256), np.nan, dtype=dt)
                            grouped_wgmma(Ag, b, ids, offs, out, 35, _err_buffer(), tok=tok, ids_stable=stable)
                            outs.append(out)
                        same = bool((outs[0].view(cp.uint16) == outs[1].view(cp.uint16)).all())
                        assert same and not bool(cp.isnan(outs[0]).any()), (k, mode, _dn(dt), tok, stable)
    finally:
        kb.set_pdl(old)
    read_errors(reset=True)
    ob, forced = other_codebook(q, k)
    A = _A(33, K, np.float16, rng)
    for w, ref_w in ((ob, ob), (forced, q)):
        out = cp.full((33, N), np.nan, dtype=np.float16)
        wgmma_gemm(A, w, out)
        Wr = kb.dequantize(ref_w, np.float32).astype(cp.float64)
        assert _rel(out, A.astype(cp.float64) @ Wr.T) < TOL["float16"], (k, w is forced)


def test_wgmma_no_writes_outside_out(rng):
    import cupy as cp

    from kbitcupy.wgmma import wgmma_gemm

    for (N, K) in ((201, 160), (200, 96), (136, 288)):
        q, Wd = _weight(N, K, 4, rng)
        for M in (17, 64, 150):
            A = _A(M, K, np.float16, rng)
            big = cp.full((M + 2, N), np.nan, dtype=np.float16)
            out = big[1:M + 1]
            wgmma_gemm(A, q, out, k_splits=2)
            assert bool(cp.isnan(big[0]).all()) and bool(cp.isnan(big[M + 1]).all())
            assert _rel(out, A.astype(cp.float64) @ Wd.T) < TOL["float16"]


def test_wgmma_two_streams_and_repeats(rng):
    import cupy as cp

    from kbitcupy.wgmma import wgmma_gemm

    q, Wd = _weight(2048, 2048, 4, rng)
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    As = [_A(33 + 100 * s, 2048, np.float16, rng) for s in range(2)]
    refs = [A.astype(cp.float64) @ Wd.T for A in As]
    cp.cuda.get_current_stream().synchronize()
    outs = [[], []]
    for it in range(10):
        for s in range(2):
            with streams[s]:
                o = cp.full((As[s].shape[0], 2048), np.nan, dtype=np.float16)
                wgmma_gemm(As[s], q, o, k_splits=(4, 3, 16)[(it + s) % 3])
                outs[s].append(o)
    for s in range(2):
        streams[s].synchronize()
        for o in outs[s]:
            assert _rel(o, refs[s]) < TOL["float16"], s


@pytest.mark.parametrize("k_splits", [1, 3])
def test_wgmma_cuda_graph(k_splits, rng):
    import cupy as cp

    from kbitcupy.wgmma import wgmma_gemm

    q, Wd = _weight(4096, 2048, 4, rng)
    cp.cuda.Stream.null.synchronize()
    for dt in DTYPES:
        M = 40
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            A = _A(M, 2048, dt, rng)
            out = cp.full((M, 4096), np.nan, dtype=dt)
            wgmma_gemm(A, q, cp.empty_like(out), k_splits=k_splits)
        s.synchronize()
        graph = _capture(s, lambda: wgmma_gemm(A, q, out, k_splits=k_splits))
        with s:
            A[...] = _A(M, 2048, dt, rng)
            ref = A.astype(cp.float64) @ Wd.T
            eager = cp.full((M, 4096), np.nan, dtype=dt)
            wgmma_gemm(A, q, eager, k_splits=k_splits)
            out.fill(np.nan)
            graph.launch(s)
            graph.launch(s)
        s.synchronize()
        assert _rel(out, ref) < TOL[_dn(dt)]
        assert bool((out.view(cp.uint16) == eager.view(cp.uint16)).all())


def test_matmul_dispatches_to_wgmma(rng):
    """A dispatch entry whose wgmma band covers M routes kb.matmul to the wgmma kernel
    (and the result is right); stages that cannot fit raise DoesNotFit naming the config."""
    import cupy as cp

    from kbitcupy import dispatch as D
    from kbitcupy.matmul import _dispatch_gpu
    from kbitcupy.wgmma import DoesNotFit, wgmma_gemm

    q, Wd = _weight(2048, 4096, 4, rng)
    saved = {k: dict(v) for k, v in D.TABLES.items()}
    try:
        e = dict(D.entry(D.gpu_family()))
        e["shapes"] = dict(e.get("shapes", {}))
        e["shapes"][(4, 2048, 4096)] = (8, 64, 16, 64)
        D.set_table(D.gpu_family(), e)
        for M, kind in ((40, "wgmma"), (12, "gemm"), (100, "dq")):
            A = _A(M, 4096, np.float16, rng)
            out = cp.full((M, 2048), np.nan, dtype=np.float16)
            assert _dispatch_gpu(A, q, out) == kind
            assert _rel(out, A.astype(cp.float64) @ Wd.T) < TOL["float16"]
            out2 = kb.matmul(A, q)
            assert _rel(out2, A.astype(cp.float64) @ Wd.T) < TOL["float16"]
    finally:
        D.TABLES.clear()
        D.TABLES.update(saved)
        D._CHOICES.clear()
    with pytest.raises(DoesNotFit, match="TOK=192"):
        wgmma_gemm(_A(160, 4096, np.float16, rng), q, cp.empty((160, 2048), np.float16), stages=8)


def _exact_cases(k, rng, Ms):
    """The bit-exactness tests' cases: (N, K, K tiles, weight, default codebook?, dtype, M, A, float64
    reference) over a Qwen3-Coder-Next shape (k = 4) and tail shapes (N tails, K % 64 == 32), the default
    and another codebook, fp16 / bf16 and the token counts Ms."""
    import cupy as cp

    cases = [(5120, 2048), (201, 160), (136, 544)] if k == 4 else [(201, 160), (1000, 288)]
    for (N, K) in cases:
        q, _ = _weight(N, K, k, rng)
        for w in (q, other_codebook(q, k)[0]):
            Wd = kb.dequantize(w, np.float32).astype(cp.float64)
            for dt in DTYPES:
                for M in Ms:
                    A = _A(M, K, dt, rng)
                    yield N, K, -(-K // 64), w, w is q, dt, M, A, A.astype(cp.float64) @ Wd.T


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_wgmma_tma_tokens_bit_exact(k, rng):
    """kbit_wgmma_tma (the stages by TMA, the default) lands the same
    bytes in the same swizzled layout as the cp.async copies, so at the same plan (TOK, splits,
    stages, cluster or workspace sum) it gives the same bits: every TOK, token tails (rows past M
    zero-filled by the tensor map), K % 64 == 32 (the upper half zero-filled), N tails, the default
    codebook kernel and another codebook, split-K both ways, plain / safe / full PDL launches."""
    import cupy as cp

    from kbitcupy.wgmma import TOK_CHOICES, wgmma_gemm

    for N, K, KT, w, dflt, dt, M, A, ref in _exact_cases(k, rng, (3, 33, 100, 130)):
        modes = (False, "safe", True) if (M == 33 and _dn(dt) == "float16") else ("safe",)
        for mode, tok in ((mode, tok) for mode in modes for tok in TOK_CHOICES):
            for ks, cl in ((1, None), (min(3, KT), True), (min(3, KT), False)):
                outs = []
                with kb.pdl(mode):
                    for tma in (False, True):
                        out = cp.full((M, N), np.nan, dtype=dt)
                        wgmma_gemm(A, w, out, k_splits=ks, tok=tok, stages=4, cluster=cl, tma=tma)
                        outs.append(out)
                what = ((N, K), k, dflt, _dn(dt), M, tok, ks, cl, mode)
                assert _rel(outs[1], ref) < TOL[_dn(dt)], what
                assert bool((outs[0].view(cp.uint16) == outs[1].view(cp.uint16)).all()), what


def test_wgmma_tma_cuda_graph_and_new_buffers(rng):
    """The tensor map is a launch parameter (captured by value): a graph replays on the A it was
    captured with (checked against the cp.async kernel); a new A buffer gets its own map (the cache is
    keyed by the pointer)."""
    import cupy as cp

    from kbitcupy.wgmma import wgmma_gemm

    q, Wd = _weight(4096, 2048, 4, rng)
    M = 72
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        A = _A(M, 2048, np.float16, rng)
        out = cp.full((M, 4096), np.nan, dtype=np.float16)
        wgmma_gemm(A, q, cp.empty_like(out), tma=True)
    s.synchronize()
    graph = _capture(s, lambda: wgmma_gemm(A, q, out, tma=True))
    with s:
        A[...] = _A(M, 2048, np.float16, rng)
        eager = cp.full((M, 4096), np.nan, dtype=np.float16)
        wgmma_gemm(A, q, eager, tma=False)
        graph.launch(s)
    s.synchronize()
    assert bool((out.view(cp.uint16) == eager.view(cp.uint16)).all())
    assert _rel(out, A.astype(cp.float64) @ Wd.T) < TOL["float16"]
    for _ in range(3):  # fresh buffers (some reuse a freed pointer with another shape)
        M2 = int(rng.integers(5, 200))
        A2 = _A(M2, 2048, np.float16, rng)
        o2 = cp.full((M2, 4096), np.nan, dtype=np.float16)
        wgmma_gemm(A2, q, o2, tma=True)
        assert _rel(o2, A2.astype(cp.float64) @ Wd.T) < TOL["float16"]
