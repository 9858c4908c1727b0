"""GPU half of tests/test_checks.py: the low-level entry points reject CuPy arguments that
would make a kernel read past the weight, a CPU weight and a misaligned A, and still run
valid calls (compared with kbitcupy.matmul on a poisoned output)."""
import numpy as np
import pytest

import kbitcupy as kb

from test_checks import FNS

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("fn,name,max_m", FNS)
def test_low_level_checks_gpu(fn, name, max_m, rng):
    import cupy as cp

    if name == "wgmma_gemm" and cp.cuda.Device().compute_capability != "90":
        pytest.skip("wgmma needs compute capability 9.0")
    N, K = 256, 128
    q = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), 4)
    A = cp.asarray(rng.standard_normal((3, K), dtype=np.float32)).astype(cp.float16)
    out = cp.full((3, N), np.nan, cp.float16)
    with pytest.raises(ValueError, match=r"A must be \[M, K = 128\]"):
        fn(cp.zeros((3, 2 * K), cp.float16), q, out)
    with pytest.raises(ValueError, match="the weight is on the CPU"):
        fn(A, q.cpu(), out)
    flat = cp.zeros(3 * K + 1, cp.float16)
    with pytest.raises(ValueError, match="16-byte aligned"):
        fn(flat[1:].reshape(3, K), q, out)
    fn(A, q, out)
    ref = kb.matmul(A, q)
    cp.testing.assert_allclose(out.astype(cp.float32), ref.astype(cp.float32), rtol=2e-2, atol=2e-3)


def test_out_overlapping_an_input_refused_gpu(rng):
    """The CPU test's aliasing cases on CuPy arrays, plus matmul's cached-plan path (the plan's pointer check falls
    back to the general path, which names the overlap), the low-level entry points and torch tensors."""
    import cupy as cp

    from test_api import check_out_aliasing

    check_out_aliasing(cp, rng)
    N = K = 256
    q = kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), 4)
    buf = cp.asarray(rng.standard_normal((2, K), dtype=np.float32)).astype(cp.float16)
    A, o = buf[:1], cp.full((1, N), np.nan, cp.float16)
    for _ in range(3):  # the second call builds the GEMV's plan
        kb.matmul(A, q, out=o)
    from kbitcupy import _launch

    assert _launch.lookup(A, q) is not None
    exp = o.copy()
    with pytest.raises(ValueError, match="out overlaps A in memory"):
        kb.matmul(A, q, out=A)
    cp.testing.assert_array_equal(buf[:1], A)
    np.testing.assert_array_equal(kb.matmul(A, q).get(), exp.get())
    for fn, name, max_m in FNS:
        if name == "wgmma_gemm" and cp.cuda.Device().compute_capability != "90":
            continue
        with pytest.raises(ValueError, match=f"{name}: out overlaps A in memory"):
            fn(A, q, A)
    from kbitcupy.grouped import grouped_gemv_fused, quantize_experts

    bank = quantize_experts(cp.asarray(rng.standard_normal((2, N, K), dtype=np.float32) * 0.02), 4)
    Ab = cp.asarray(rng.standard_normal((4, K), dtype=np.float32)).astype(cp.float16)
    ids, offs = cp.asarray([0, 1], cp.int32), cp.asarray([0, 1, 2], cp.int32)
    with pytest.raises(ValueError, match="out overlaps A in memory"):
        grouped_gemv_fused(Ab[:2], bank, ids, offs, 2, 1, out=Ab[1:3])
    torch = pytest.importorskip("torch")
    At = torch.randn(2, K, dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError, match="out overlaps A in memory"):
        kb.matmul(At[:1], q, out=At[:1])
