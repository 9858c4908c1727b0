import numpy as np, cupy as cp, kbitcupy as kb
from kbitcupy import dispatch as D
from kbitcupy.matmul import _dispatch_gpu
print(D.gpu_family(), cp.cuda.runtime.getDeviceProperties(0)["name"])
W = cp.asarray(np.random.default_rng(0).standard_normal((2048, 4096), dtype=np.float32) * 0.02)
for k in (2, 3, 4):
    q = kb.quantize(W, k)
    for M in (16, 32):
        A = cp.asarray(np.random.default_rng(1).standard_normal((M, 4096), dtype=np.float32)).astype(cp.float16)
        out = cp.empty((M, 2048), cp.float16)
        print(k, M, D.choose(M, 2048, 4096, k, A.dtype), _dispatch_gpu(A, q, out), q.shape, q.layout)
