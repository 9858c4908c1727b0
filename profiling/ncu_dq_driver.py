"""ncu target: 5 launches of the dequant + cuBLAS path's dequantize (kbit_dequant_lut) on one
shape (env SHAPE="N,K", KBITS).  profiling/ncu_gemm.sh-style use:
  ncu -k regex:kbit_dequant_lut --launch-skip 2 --launch-count 1 python3 profiling/ncu_dq_driver.py"""
import os

import cupy as cp
import numpy as np

import kbitcupy as kb
from kbitcupy.dequant_matmul import dequant_lut

N, K = (int(x) for x in os.environ.get("SHAPE", "5120,2048").split(","))
W = cp.asarray(np.random.default_rng().standard_normal((N, K), dtype=np.float32) * 0.02).astype(cp.float16)
q = kb.quantize(W, int(os.environ.get("KBITS", "4")))
out = cp.empty((N, K), cp.float16)
for _ in range(5):
    dequant_lut(q, "float16", out)
cp.cuda.runtime.deviceSynchronize()
