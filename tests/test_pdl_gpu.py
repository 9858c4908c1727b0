"""GPU tests of programmatic dependent launch (kbitcupy.set_pdl): bit-exact with the
default launch, a chain of matmuls each reading the previous one's output right away
(eager, both launch paths, and in a CUDA graph), torch tensors."""
import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy import _launch as L

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _pdl_off_after():
    old = kb.set_pdl(False)
    L.clear_plans()
    yield
    kb.set_pdl(old)
    L.clear_plans()


def _cp_hopper():
    cp = pytest.importorskip("cupy")
    if int(cp.cuda.Device().compute_capability) < 90:
        pytest.skip("programmatic dependent launch needs compute capability 9.0")
    return cp


def _q(cp, rng, N, K, k):
    return kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k)


def _bits(x):
    return x.view(np.uint16).get()


@pytest.mark.parametrize("k", [2, 4, 5])
@pytest.mark.parametrize("M", [1, 3, 8, 16])
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_pdl_bit_exact(rng, k, M, dt):
    cp = _cp_hopper()
    q = _q(cp, rng, 1536, 2048, k)
    A = cp.asarray(rng.standard_normal((M, 2048), dtype=np.float32)).astype(dt)
    ref = _bits(kb.matmul(A, q))
    with kb.pdl():
        for _ in range(3):  # general path, then the fast path's plan
            out = cp.full((M, 1536), np.nan, dt)
            kb.matmul(A, q, out=out)
            np.testing.assert_array_equal(_bits(out), ref)


@pytest.mark.parametrize("M", [1, 4])
def test_pdl_chain_reads_previous_output(rng, M):
    """y1 = x W1^T, y2 = y1 W2^T, y3 = y2 W1'^T back to back, no sync between steps: a
    launch that read A before its predecessor finished would see the previous step's
    buffer contents.  20 steps with fresh x, eager and graph-replayed, against PDL off."""
    cp = _cp_hopper()
    H, I = 2048, 4096
    q1, q2, q3 = _q(cp, rng, I, H, 4), _q(cp, rng, H, I, 3), _q(cp, rng, I, H, 5)
    xs = [cp.asarray(rng.standard_normal((M, H), dtype=np.float32)).astype(cp.float16) for _ in range(20)]
    b1, b2, b3 = cp.empty((M, I), cp.float16), cp.empty((M, H), cp.float16), cp.empty((M, I), cp.float16)

    def step(x):
        kb.matmul(x, q1, out=b1)
        kb.matmul(b1, q2, out=b2)
        kb.matmul(b2, q3, out=b3)

    def run_all():
        res = []
        for x in xs:
            step(x)
            res.append(b3.copy())  # a CuPy kernel between the chains
        return [_bits(r) for r in res]

    ref = run_all()
    for r in ref:
        assert np.isfinite(r.view(np.float16).astype(np.float32)).all()
    with kb.pdl():
        for _ in range(2):  # general path, then the fast path
            got = run_all()
            for g, r in zip(got, ref):
                np.testing.assert_array_equal(g, r)
        # the same chain captured in a graph (programmatic edges), replayed per input
        xin = cp.empty((M, H), cp.float16)
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            step(xin)  # warm: plans built on this stream's device
            s.synchronize()
            s.begin_capture()
            step(xin)
            g = s.end_capture()
            for x, r in zip(xs, ref):
                xin[...] = x
                b3.fill(np.nan)
                g.launch(s)
                np.testing.assert_array_equal(_bits(b3), r)


def test_pdl_torch_tensors(rng):
    cp = _cp_hopper()
    torch = pytest.importorskip("torch")
    q = _q(cp, rng, 1024, 2048, 4)
    A = torch.randn(2, 2048, device="cuda", dtype=torch.float16)
    ref = kb.matmul(A, q).clone()
    with kb.pdl():
        for _ in range(3):
            out = torch.full((2, 1024), float("nan"), device="cuda", dtype=torch.float16)
            kb.matmul(A, q, out=out)
            assert torch.equal(out.view(torch.int16), ref.view(torch.int16))
