"""GPU tests of matmul's fast launch path (kbitcupy._launch): bit-exact with the general
path, plans never stale, the caller's stream, CUDA graphs, errors kept."""
import dataclasses
import gc
import threading

import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy import _launch as L

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _fresh_plans():
    old = L.set_enabled(True)
    L.clear_plans()
    yield
    L.clear_plans()
    L.set_enabled(old)


def _quant(cp, shape, k, layout, rng):
    W = cp.asarray(rng.standard_normal(shape, dtype=np.float32) * 0.02)
    if layout == "flat_f32":
        return kb.quantize(W, k, layout="flat", absmax_format="float32")
    return kb.quantize(W, k, layout=layout)


def _act(cp, shape, dt, rng):
    return cp.asarray(rng.standard_normal(shape, dtype=np.float32)).astype(dt)


def _slow(A, q, out=None):
    with L.disabled():
        return kb.matmul(A, q, out=out)


def _warm(A, q, out):
    """Two general-path calls: the second builds the plan."""
    for _ in range(2):
        kb.matmul(A, q, out=out)
    assert L.lookup(A, q) is not None


@pytest.mark.parametrize("layout", ["tiled", "flat_f32"])
@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_fast_equals_general_path(k, layout, rng):
    import cupy as cp

    for shape in ((512, 2048), (200, 160)):
        q = _quant(cp, shape, k, layout, rng)
        N, K = shape
        for dt in (np.float16, kb.bfloat16):
            for M in (1, 2, 3, 4):
                A = _act(cp, (M, K), dt, rng)
                ref = _slow(A, q, cp.empty((M, N), dt))
                out = cp.full((M, N), np.nan, dt)
                _warm(A, q, out)
                out.fill(np.nan)
                assert L.matmul_fast(A, q, out) is out  # really the fast path
                cp.testing.assert_array_equal(out, ref)
                # through matmul, and without out=
                out.fill(np.nan)
                assert kb.matmul(A, q, out=out) is out
                cp.testing.assert_array_equal(out, ref)
                C = L.matmul_fast(A, q, None)
                assert C is not L.MISS and C.dtype == A.dtype and C.shape == (M, N)
                cp.testing.assert_array_equal(C, ref)


def test_repeated_calls_new_arrays(rng):
    import cupy as cp

    q = _quant(cp, (1024, 2048), 4, "tiled", rng)
    A0 = _act(cp, (1, 2048), cp.float16, rng)
    _warm(A0, q, cp.empty((1, 1024), cp.float16))
    outs = []
    for i in range(20):
        A = _act(cp, (1, 2048), cp.float16, rng)
        out = cp.full((1, 1024), np.nan, cp.float16)
        assert kb.matmul(A, q, out=out) is out
        C = kb.matmul(A, q)
        assert L.lookup(A, q) is not None
        outs.append((A, out, C))
    for A, out, C in outs:
        ref = _slow(A, q)
        cp.testing.assert_array_equal(out, ref)
        cp.testing.assert_array_equal(C, ref)
    # rows of a batch (views at offsets that keep 16-byte alignment) and 3-D activations
    X = _act(cp, (6, 2048), cp.float16, rng)
    for i in range(6):
        cp.testing.assert_array_equal(kb.matmul(X[i:i + 1], q), _slow(X[i:i + 1], q))
    A3 = _act(cp, (2, 1, 2048), cp.float16, rng)
    out3 = cp.empty((2, 1, 1024), cp.float16)
    _warm(A3, q, out3)
    assert L.matmul_fast(A3, q, out3) is out3
    cp.testing.assert_array_equal(out3, _slow(A3, q))
    # contiguous but with a non-canonical stride on the size-1 dimension: still served
    Aw = cp.zeros((1, 4096), cp.float16)[:, :2048]
    Aw[...] = A0
    assert Aw.flags.c_contiguous and Aw.strides != (4096, 2)
    assert L.matmul_fast(Aw, q, None) is not L.MISS
    cp.testing.assert_array_equal(kb.matmul(Aw, q), _slow(A0, q))


def test_new_weight_after_old_deleted(rng):
    """A plan is never used for another weight, even one that reuses the old one's id."""
    import cupy as cp

    q1 = _quant(cp, (512, 2048), 4, "tiled", rng)
    q2 = _quant(cp, (512, 2048), 4, "tiled", rng)
    A = _act(cp, (1, 2048), cp.float16, rng)
    out = cp.empty((1, 512), cp.float16)
    _warm(A, q1, out)
    old_id = id(q1)
    n_plans = L.plan_count()
    del q1
    gc.collect()
    assert L.plan_count() == n_plans - 1  # dropped with its weight
    ref2 = _slow(A, q2)
    keep, reused = [], None
    for _ in range(2000):  # a fresh object of the same size usually lands on the freed slot
        c = dataclasses.replace(q2)
        if id(c) == old_id:
            reused = c
            break
        keep.append(c)
    q3 = reused if reused is not None else dataclasses.replace(q2)
    out.fill(np.nan)
    assert L.matmul_fast(A, q3, out) is L.MISS
    assert kb.matmul(A, q3, out=out) is out
    cp.testing.assert_array_equal(out, ref2)
    _warm(A, q3, out)
    cp.testing.assert_array_equal(kb.matmul(A, q3), ref2)


def test_non_default_stream_and_capture(rng):
    """The launch goes to the caller's current stream: captured on it, not run elsewhere."""
    import cupy as cp

    q = _quant(cp, (2048, 2048), 4, "tiled", rng)
    A = _act(cp, (1, 2048), cp.float16, rng)
    ref = _slow(A, q)
    s = cp.cuda.Stream(non_blocking=True)
    out = cp.empty((1, 2048), cp.float16)
    cp.cuda.Device().synchronize()  # s does not wait for the legacy stream
    with s:
        _warm(A, q, out)
        out.fill(np.nan)
        assert kb.matmul(A, q, out=out) is out
    s.synchronize()
    cp.testing.assert_array_equal(out, ref)
    with s:
        out.fill(np.nan)
        s.synchronize()
        s.begin_capture()
        r = L.matmul_fast(A, q, out)
        g = s.end_capture()
    assert r is out
    cp.cuda.Device().synchronize()
    assert bool(cp.isnan(out).all())  # captured, not executed on some other stream
    with s:
        g.launch(s)
    s.synchronize()
    cp.testing.assert_array_equal(out, ref)


def test_graph_capture_replay(rng):
    import cupy as cp

    q = _quant(cp, (1024, 2048), 3, "tiled", rng)
    A = _act(cp, (4, 2048), kb.bfloat16, rng)
    out = cp.empty((4, 1024), kb.bfloat16)
    _warm(A, q, out)
    s = cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()  # s does not wait for the legacy stream
    with s:
        s.begin_capture()
        kb.matmul(A, q, out=out)
        kb.matmul(A, q, out=out)
        g = s.end_capture()
        out.fill(np.nan)
        g.launch(s)
    s.synchronize()
    cp.testing.assert_array_equal(out, _slow(A, q))
    # the graph reads A's memory: new contents, same pointer
    A[...] = _act(cp, (4, 2048), kb.bfloat16, rng)
    cp.cuda.Device().synchronize()
    with s:
        g.launch(s)
    s.synchronize()
    cp.testing.assert_array_equal(out, _slow(A, q))


def test_errors_on_cached_key(rng):
    import cupy as cp

    q = _quant(cp, (512, 2048), 4, "tiled", rng)
    for M in (1, 4):
        A = _act(cp, (M, 2048), cp.float16, rng)
        out = cp.empty((M, 512), cp.float16)
        _warm(A, q, out)
        with pytest.raises(ValueError, match="float16 or bfloat16"):
            kb.matmul(A.astype(cp.float32), q)
        with pytest.raises(ValueError, match="C-contiguous"):
            kb.matmul(cp.zeros((2048, M + 1), cp.float16)[:, :M].T, q, out=out)
        with pytest.raises(ValueError, match="C-contiguous"):
            kb.matmul(cp.zeros((M, 4096), cp.float16)[:, ::2], q, out=out)
        with pytest.raises(ValueError, match="last dimension"):
            kb.matmul(cp.zeros((M, 1024), cp.float16), q, out=out)
        with pytest.raises(ValueError, match="out must be"):
            kb.matmul(A, q, out=cp.empty((M, 256), cp.float16))
        with pytest.raises(ValueError, match="out must be"):
            kb.matmul(A, q, out=cp.empty((M, 512), cp.float32))
        with pytest.raises(ValueError, match="out must be"):
            kb.matmul(A, q, out=cp.empty((M, 1024), cp.float16)[:, ::2])
        with pytest.raises(ValueError, match="16-byte aligned"):
            kb.matmul(cp.zeros(M * 2048 + 1, cp.float16)[1:].reshape(M, 2048), q, out=out)
        with pytest.raises(ValueError, match="CPU"):
            kb.matmul(A.get(), q)
        with pytest.raises(TypeError, match="KbitWeight"):
            kb.matmul(A, object())
        # the plan still serves good calls afterwards
        assert L.matmul_fast(A, q, out) is out
        cp.testing.assert_array_equal(out, _slow(A, q))


def test_set_table_clears_plans(rng):
    import cupy as cp

    from kbitcupy import dispatch

    q = _quant(cp, (512, 2048), 4, "tiled", rng)
    A = _act(cp, (1, 2048), cp.float16, rng)
    _warm(A, q, cp.empty((1, 512), cp.float16))
    fam = dispatch.gpu_family()
    dispatch.set_table(fam, dict(dispatch.entry(fam)))
    assert L.plan_count() == 0 and L.lookup(A, q) is None


def test_threads_share_a_plan(rng):
    import cupy as cp

    q = _quant(cp, (1024, 2048), 4, "tiled", rng)
    A0 = _act(cp, (1, 2048), cp.float16, rng)
    _warm(A0, q, cp.empty((1, 1024), cp.float16))
    work = [[(_act(cp, (1, 2048), cp.float16, rng), cp.full((1, 1024), np.nan, cp.float16)) for _ in range(30)]
            for _ in range(4)]
    errors = []
    cp.cuda.Device().synchronize()  # the threads' streams do not wait for the legacy stream

    def run(items):
        try:
            s = cp.cuda.Stream(non_blocking=True)
            with s:
                for A, out in items:
                    kb.matmul(A, q, out=out)
            s.synchronize()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=run, args=(w,)) for w in work]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    for items in work:
        for A, out in items:
            cp.testing.assert_array_equal(out, _slow(A, q))


def test_torch_fast_path(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    import cupy as cp

    q = _quant(cp, (512, 2048), 4, "tiled", rng)
    for tdt in (torch.float16, torch.bfloat16):
        for M in (1, 3):
            A = torch.randn(M, 2048, device="cuda", dtype=tdt)
            ref = _slow(A, q)
            assert isinstance(ref, torch.Tensor) and ref.dtype == tdt
            out = torch.empty(M, 512, device="cuda", dtype=tdt)
            _warm(A, q, out)
            out.fill_(float("nan"))
            assert L.matmul_fast(A, q, out) is out
            torch.cuda.synchronize()
            assert torch.equal(out, ref)
            C = kb.matmul(A, q)
            assert isinstance(C, torch.Tensor) and C.dtype == tdt and C.shape == (M, 512)
            assert torch.equal(C, ref)
            # on a side stream
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                out.fill_(float("nan"))
                assert kb.matmul(A, q, out=out) is out
            s.synchronize()
            assert torch.equal(out, ref)
    # errors on a cached key
    A = torch.randn(1, 2048, device="cuda", dtype=torch.float16)
    out = torch.empty(1, 512, device="cuda", dtype=torch.float16)
    _warm(A, q, out)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        kb.matmul(A.float(), q)
    with pytest.raises(ValueError, match="contiguous"):
        kb.matmul(torch.zeros(1, 4096, device="cuda", dtype=torch.float16)[:, ::2], q, out=out)
    with pytest.raises(ValueError, match="out must be"):
        kb.matmul(A, q, out=torch.empty(1, 256, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="out must be"):
        kb.matmul(A, q, out=torch.empty(1, 512, device="cuda", dtype=torch.bfloat16))


def test_torch_cuda_graph(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    import cupy as cp

    q = _quant(cp, (512, 2048), 4, "tiled", rng)
    A = torch.randn(1, 2048, device="cuda", dtype=torch.float16)
    out = torch.empty(1, 512, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        _warm(A, q, out)
    torch.cuda.current_stream().wait_stream(s)
    expect = _slow(A, q)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        kb.matmul(A, q, out=out)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, expect)


def test_stream_kernel_plans_are_per_stream(rng, dispatch_table):
    """Where dispatch picks the streaming GEMV (a table with a stream band for this GPU's family
    here), repeated calls launch through a plan bound to the stream it was built on: bit-exact
    with the general path on that stream, and calls on another stream (another split-K
    workspace) take the general path and stay right, also graph-captured."""
    import cupy as cp

    from kbitcupy.gemv_stream import supported

    if not supported(cp.cuda.Device().id):
        pytest.skip("the streaming GEMV needs compute capability 9.0")
    q = _quant(cp, (2048, 5120), 4, "tiled", rng)
    dispatch_table({"gemv_max_m": 8, "gemm_max_m": 64, "shapes": {(4, 2048, 5120): (8, 64, 1, 0, 9, 32)}})
    A = _act(cp, (24, 5120), np.float16, rng)
    ref = _slow(A, q, cp.empty((24, 2048), cp.float16))

    def captured(stream, out):  # one matmul captured on stream and replayed
        out.fill(np.nan)
        stream.begin_capture()
        kb.matmul(A, q, out=out)
        stream.end_capture().launch(stream)
        stream.synchronize()
        cp.testing.assert_array_equal(out, ref)

    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with s1:
        out = cp.full((24, 2048), np.nan, cp.float16)
        _warm(A, q, out)
        assert L.lookup(A, q).ws_stream == s1.ptr
        out.fill(np.nan)
        assert kb.matmul(A, q, out=out) is out
        s1.synchronize()
        cp.testing.assert_array_equal(out, ref)
    with s2:  # another stream: the plan misses, the general path uses s2's workspace
        out2 = cp.full((24, 2048), np.nan, cp.float16)
        kb.matmul(A, q, out=out2)
        captured(s2, out2)
    with s1:  # the plan itself under capture
        captured(s1, out)
