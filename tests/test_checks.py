"""CPU tests of the low-level kernel entry points' argument checks (kbitcupy._checks): every
rule raises, naming the function and the argument, before anything reaches the GPU."""
import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy.dequant_matmul import dequant_matmul
from kbitcupy.gemm import gemm
from kbitcupy.gemv import gemv
from kbitcupy.gemv_stream import gemv_stream
from kbitcupy.wgmma import wgmma_gemm

FNS = [(gemv, "gemv", kb.gemv.max_rows(4, 96)), (gemv_stream, "gemv_stream", 64), (gemm, "gemm", None), (wgmma_gemm, "wgmma_gemm", None),
       (dequant_matmul, "dequant_matmul", None)]


@pytest.mark.parametrize("fn,name,max_m", FNS)
def test_low_level_bad_arguments(fn, name, max_m, rng):
    N, K = 96, 64
    q = kb.quantize(rng.standard_normal((N, K)).astype(np.float32), 4)
    A = rng.standard_normal((3, K)).astype(np.float16)
    out = np.empty((3, N), np.float16)
    cases = [
        ((A, A, out), TypeError, "qw must be a KbitWeight"),
        ((A.tolist(), q, out), TypeError, "A must be a CuPy array, got list"),
        ((A, q, None), TypeError, "out must be a CuPy array, got NoneType"),
        ((np.zeros((3, 2 * K), np.float16), q, out), ValueError, r"A must be \[M, K = 64\]"),  # would read past W
        ((A[0], q, out), ValueError, r"A must be \[M, K = 64\]"),
        ((A.astype(np.float32), q, out.astype(np.float32)), ValueError, "A must be float16 or bfloat16"),
        ((A, q, np.empty((3, N + 1), np.float16)), ValueError, r"out must be a float16 array of shape \(3, 96\)"),
        ((A, q, np.empty((3, N), np.float32)), ValueError, "out must be a float16 array"),
        ((np.asfortranarray(A), q, out), ValueError, "C-contiguous"),
        ((A, q, out), TypeError, "A must be a CuPy array \\(the kernels run on the GPU\\), got a NumPy array"),
    ]
    if max_m is not None:
        big = max_m + 1
        cases.append(((np.zeros((big, K), np.float16), q, np.empty((big, N), np.float16)), ValueError,
                      f"{name} handles M = 1..{max_m} rows of A( at k = 4 \\(N = 96, tiled layout\\))?, got M = {big}"))
        cases.append(((A[:0], q, out[:0]), ValueError, f"handles M = 1..{max_m}"))
    for args, exc, match in cases:
        with pytest.raises(exc, match=match) as e:
            fn(*args)
        assert str(e.value).startswith(name), str(e.value)
