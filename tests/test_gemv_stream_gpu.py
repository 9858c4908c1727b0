"""GPU streaming decode GEMV (kbitcupy.gemv_stream, sm_90, M = 1..64) against the float64
reference of the dequantized weight."""
import numpy as np
import pytest

import kbitcupy as kb

pytestmark = pytest.mark.gpu

DENSE = {"gateup": (5120, 2048), "down": (2048, 5120), "Q": (4096, 2048), "O": (2048, 4096),
         "KV": (512, 2048), "lin_key": (2048, 2048), "lin_value": (4096, 2048)}
TOL = {"float16": 2e-3, "bfloat16": 8e-3}


@pytest.fixture(autouse=True)
def _hopper():
    import cupy as cp

    from kbitcupy.gemv_stream import supported

    if not supported(cp.cuda.Device().id):
        pytest.skip("the streaming GEMV needs compute capability 9.0")


def _weight(cp, shape, k, rng):
    W = cp.asarray(rng.standard_normal(shape, dtype=np.float32) * 0.02)
    q = kb.quantize(W, k)
    return q, kb.dequantize(q, np.float32).astype(cp.float64)


def _rel_err(C, ref, mag=None, K=None):
    import cupy as cp

    C = C.astype(cp.float64)
    den = float(cp.linalg.norm(ref))
    if mag is not None:
        den = max(den, 2.0 * float(cp.linalg.norm(mag)) / np.sqrt(K))
    return float(cp.linalg.norm(C - ref)) / den


def _check(cp, q, Wd, M, dt, rng, plan_override=None):
    from kbitcupy.gemv_stream import gemv_stream

    N, K = q.shape
    A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(dt)
    out = cp.full((M, N), np.nan, dtype=dt)  # poisoned: every element must be written
    gemv_stream(A, q, out, plan_override)
    A64 = A.astype(cp.float64)
    ref = A64 @ Wd.T
    assert not bool(cp.isnan(out).any())
    err = _rel_err(out, ref, cp.abs(A64) @ cp.abs(Wd).T, K)
    assert err < TOL[np.dtype(dt).name], (q.shape, q.k, M, np.dtype(dt).name, plan_override, err)
    return A, out


@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("name", list(DENSE))
def test_stream_dense_shapes(name, k, rng):
    import cupy as cp

    q, Wd = _weight(cp, DENSE[name], k, rng)
    for dt in (np.float16, kb.bfloat16):
        for M in (1, 2, 3, 4, 8, 9, 16, 17, 32, 33, 64):
            _check(cp, q, Wd, M, dt, rng)


@pytest.mark.parametrize("shape", [(1, 32), (5, 96), (200, 160), (130, 64), (8, 4128), (1000, 224), (300, 8256)])
@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_stream_edge_shapes(shape, k, rng):
    """Partial strips (N % 128), K % 128 == 64 and K % 64 == 32 (the last unit's second K
    tile absent or half padding), a single unit, more CTAs than a strip has units."""
    import cupy as cp

    q, Wd = _weight(cp, shape, k, rng)
    for dt in (np.float16, kb.bfloat16):
        for M in (1, 7, 13, 25, 57):
            _check(cp, q, Wd, M, dt, rng)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_stream_plans_agree(k, rng):
    """Few stages (the ring refills while units are in flight) and other CTA counts (strips
    split over 1..many CTAs, a CTA spanning several strips); repeated calls are
    bit-identical (the split-K sum runs in CTA order, counters return to zero)."""
    import cupy as cp

    from kbitcupy.gemv_stream import gemv_stream

    for N, K in ((1040, 2080), (272, 4160), (2048, 5120)):
        q, Wd = _weight(cp, (N, K), k, rng)
        for M in (1, 5, 12, 30, 47):
            for ov in ((("stages", 1),), (("stages", 2),), (("ctas", 7), ("stages", 3)), (("ctas", 50),),
                       (("ctas", 1), ("stages", 4)), (("ctas", 1000),)):
                A, out = _check(cp, q, Wd, M, np.float16, rng, ov)
                again = cp.full_like(out, np.nan)
                gemv_stream(A, q, again, ov)
                cp.testing.assert_array_equal(out, again)


@pytest.mark.parametrize("k", [2, 4, 5])
def test_stream_first_strip_summed_by_its_publisher(k, rng):
    """A CTA's first strip is published mid-stream by a producer thread; normally an earlier CTA
    finishes that strip and sums it.  Built with a late publish (-DKBIT_STREAM_PUBLISH_DELAY_US),
    the publishing CTA is the last contributor and its consumers sum the strip at the end: the
    result must be bit-identical to the default kernel's (the sum runs in slot order)."""
    import cupy as cp

    from kbitcupy import gemv_stream as S
    from kbitcupy._compile import load_arch_module

    for (N, K), M in (((2048, 5120), 3), ((1040, 2080), 16), ((512, 2048), 32), ((2048, 4096), 64)):
        q, Wd = _weight(cp, (N, K), k, rng)
        A, out = _check(cp, q, Wd, M, np.float16, rng)
        key = (k, "float16", S.tiles_for(M))
        expr = S.STREAM.instances[key]
        mod, low = load_arch_module(S.STREAM.source, [expr], S.STREAM.arch,
                                    tuple(S.STREAM.options) + ("-DKBIT_STREAM_PUBLISH_DELAY_US=20",))
        fn = mod.get_function(low[expr])
        _, grid, block, smem, args = S.launch_args(A, q, out)
        fn.max_dynamic_shared_size_bytes = smem
        late = cp.full_like(out, np.nan)
        fn(grid, block, args[:4] + (late,) + args[5:], shared_mem=smem)
        cp.testing.assert_array_equal(out, late)
        again = cp.full_like(out, np.nan)  # counters back at zero after the late-publish launch
        S.gemv_stream(A, q, again)
        cp.testing.assert_array_equal(out, again)


def test_stream_tensor_scale_and_codebook(rng):
    import cupy as cp

    cb = np.array([-1.0, -0.3, 0.05, 0.9], np.float32)
    W = cp.asarray(rng.standard_normal((640, 1024), dtype=np.float32)) * 100  # beyond E4M4: tensor_scale != 1
    q = kb.quantize(W, 2, codebook=cb)
    assert q.tensor_scale != 1.0
    Wd = kb.dequantize(q, np.float32).astype(cp.float64)
    for dt in (np.float16, kb.bfloat16):
        _check(cp, q, Wd, 3, dt, rng)


def test_stream_graph_capture_and_two_streams(rng):
    import cupy as cp

    from kbitcupy.gemv_stream import gemv_stream

    q, Wd = _weight(cp, (2048, 5120), 4, rng)
    A = cp.asarray(rng.standard_normal((2, 5120), dtype=np.float32)).astype(cp.float16)
    out = cp.empty((2, 2048), cp.float16)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        gemv_stream(A, q, out)  # sizes this stream's workspace outside the capture
        expect = out.copy()
        out.fill(np.nan)
        s.begin_capture()
        gemv_stream(A, q, out)
        g = s.end_capture()
        out.fill(np.nan)
        g.launch(s)
    s.synchronize()
    cp.testing.assert_array_equal(out, expect)
    # two streams at once: each has its own workspace and counters
    s2 = cp.cuda.Stream(non_blocking=True)
    outs = [cp.full((2, 2048), np.nan, cp.float16) for _ in range(2)]
    for _ in range(20):
        for st, o in zip((s, s2), outs):
            with st:
                gemv_stream(A, q, o)
    s.synchronize()
    s2.synchronize()
    for o in outs:
        cp.testing.assert_array_equal(o, expect)


def test_stream_pdl_chain(rng):
    """Three matmuls, each reading the previous one's output, launched as programmatic
    dependents: bit-identical to plain launches (A is read only after the wait)."""
    import cupy as cp

    from kbitcupy.gemv_stream import gemv_stream

    qs = [_weight(cp, (2048, 2048), k, rng)[0] for k in (4, 3, 5)]
    A = cp.asarray(rng.standard_normal((4, 2048), dtype=np.float32)).astype(cp.float16)

    def chain():
        x = A
        for q in qs:
            y = cp.empty((4, 2048), cp.float16)
            gemv_stream(x, q, y)
            x = y
        return x

    plain = chain()
    with kb.pdl():
        got = chain()
    cp.testing.assert_array_equal(got, plain)


def test_stream_bad_inputs(rng):
    import cupy as cp

    from kbitcupy.gemv_stream import gemv_stream

    q, _ = _weight(cp, (512, 2048), 4, rng)
    with pytest.raises(ValueError, match="M = 1..64"):
        gemv_stream(cp.zeros((65, 2048), cp.float16), q, cp.zeros((65, 512), cp.float16))
    qf = kb.quantize(cp.ones((512, 2048), cp.float32), 4, layout="flat")
    with pytest.raises(ValueError, match="tiled"):
        gemv_stream(cp.zeros((1, 2048), cp.float16), qf, cp.zeros((1, 512), cp.float16))
    with pytest.raises(ValueError, match="stages"):
        gemv_stream(cp.zeros((1, 2048), cp.float16), q, cp.zeros((1, 512), cp.float16), (("stages", 0),))


def test_matmul_dispatches_to_stream(rng, dispatch_table):
    """kbitcupy.matmul runs the streaming GEMV inside a shape's measured stream band (a table with
    one installed for this GPU's family here), the usual kernels outside it; results agree."""
    import cupy as cp

    from kbitcupy.matmul import _dispatch_gpu

    q, Wd = _weight(cp, (2048, 5120), 4, rng)
    dispatch_table({"gemv_max_m": 8, "gemm_max_m": 64, "shapes": {(4, 2048, 5120): (8, 64, 1, 0, 12, 32)}})
    for M, kind in ((8, "gemv"), (12, "stream"), (32, "stream"), (33, "gemm")):
        A = cp.asarray(rng.standard_normal((M, 5120), dtype=np.float32)).astype(cp.float16)
        out = cp.full((M, 2048), np.nan, cp.float16)
        assert _dispatch_gpu(A, q, out) == kind
        ref = A.astype(cp.float64) @ Wd.T
        assert _rel_err(out, ref) < TOL["float16"]
        cp.testing.assert_array_equal(kb.matmul(A, q), out)
