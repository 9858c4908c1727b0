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
