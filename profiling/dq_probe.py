#!/usr/bin/env python
"""What bounds the dequant + cuBLAS path at M >= 128 (issue 4): the dequantize kernel against the speed of light of
its own traffic, and cuBLAS reading the buffer the dequantize just wrote (run on the GPU machine).

    python profiling/dq_probe.py [--shapes gateup,down,Q,O,KV] [--M 256,512] [--k 4]

Per dense shape, k-bit fp16 weights, us per launch (cold-L2 rotation over R weight copies, CUDA-graph replay, as
bench.py; the fp16 buffer is one reused array, as dequant_matmul's):
  dq        kbit_dequant_tile (dequant_matmul's dequantize) into the buffer
  rd_sol    a streaming 16-byte read of the packed + absmax bytes (bench.py's SOL column)
  wr_sol    a 16-byte store of the buffer's N x K x 2 bytes, nothing read (the write alone)
  rw_sol    both: the packed bytes read and the buffer written by the same threads (the dequantize's traffic, no
            arithmetic) -- dq / rw_sol is the dequantize's distance from its own bytes' speed of light
  per M:
  gemm_hot  cuBLAS (dequant_matmul's cublasGemmEx) on the buffer alone, launch after launch (the buffer L2-resident)
  gemm_cold cuBLAS on R rotated fp16 copies of the weight (the fp16 column of bench.py)
  dq_gemm   dequantize + cuBLAS, as dequant_matmul (the dq+cuBLAS column)
so dq_gemm - dq is cuBLAS right after the dequantize, to read against gemm_hot / gemm_cold.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from bench_foundation import SHAPES, copies_for, rand_f16, sol_time, time_rotated, weight_copies  # noqa: E402
from kbitcupy.dequant_matmul import cublas_gemm_nt, dequant_lut  # noqa: E402

SRC = r"""
extern "C" __global__ void wr_only(uint4* __restrict__ out, long n16) {
    const uint4 z = make_uint4(threadIdx.x, 0u, 0u, 0u);
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n16; i += (long)gridDim.x * blockDim.x) out[i] = z;
}
// thread i reads 16 bytes of the weight and writes r = out16 / in16 (4 at k = 4) 16-byte chunks, each store
// instruction coalesced (chunk j * in16 + i): the dequantize's traffic without its arithmetic
extern "C" __global__ void rd_wr(const uint4* __restrict__ in, long in16, uint4* __restrict__ out, long out16) {
    const long r = out16 / in16;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < in16; i += (long)gridDim.x * blockDim.x) {
        uint4 v = __ldcs(in + i);
        for (long j = 0; j < r; j++) out[j * in16 + i] = v;
    }
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="gateup,down,Q,O,KV")
    ap.add_argument("--M", default="256,512")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    mod = cp.RawModule(code=SRC)
    wr_only, rd_wr = mod.get_function("wr_only"), mod.get_function("rd_wr")
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    grid = (sms * 8,)
    rng = np.random.default_rng()
    Ms = [int(m) for m in args.M.split(",")]
    print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, k = {args.k}, fp16, us per launch")
    print("| shape | dq | rd_sol | wr_sol | rw_sol | dq / rw_sol | " + " | ".join(
        f"M={M} gemm_hot | gemm_cold | dq_gemm | dq_gemm - dq" for M in Ms) + " |")
    print("|---|" + "---:|" * (5 + 4 * len(Ms)))
    for name in args.shapes.split(","):
        N, K = SHAPES[name]
        W = rand_f16(rng, (N, K), 0.02)
        q = kb.quantize(W, args.k)
        nb, cps = weight_copies(q)
        buf = cp.empty((N, K), cp.float16)
        dq = time_rotated([lambda c=c: dequant_lut(c, "float16", buf) for c in cps], args.reps)
        ref = kb.dequantize(q, cp.float16)  # correctness of the probed kernel (W / tensor_scale in the buffer)
        dequant_lut(q, "float16", buf)
        err = float(cp.abs(buf.astype(cp.float32) * float(q.tensor_scale) - ref.astype(cp.float32)).max())
        rd = sol_time(nb)
        out16 = N * K * 2 // 16
        wr = time_rotated([lambda: wr_only(grid, (256,), (buf, np.int64(out16)))] * 32, args.reps)
        in16 = q.packed.nbytes // 16
        rw = time_rotated([lambda c=c: rd_wr(grid, (256,), (c.packed, np.int64(in16), buf, np.int64(out16)))
                           for c in cps], args.reps)
        cells = [f"{dq:.2f}", f"{rd:.2f}", f"{wr:.2f}", f"{rw:.2f}", f"{dq / rw:.2f}"]
        Wf = [W.copy() for _ in range(copies_for(W.nbytes))]
        for M in Ms:
            A = rand_f16(rng, (M, K))
            out = cp.empty((M, N), cp.float16)
            hot = time_rotated([lambda: cublas_gemm_nt(A, buf, out)] * 32, args.reps)
            cold = time_rotated([lambda w=w: cublas_gemm_nt(A, w, out) for w in Wf], args.reps)
            both = time_rotated([lambda c=c: (dequant_lut(c, "float16", buf),
                                              cublas_gemm_nt(A, buf, out, alpha=float(c.tensor_scale))) for c in cps],
                                args.reps)
            cells += [f"{hot:.2f}", f"{cold:.2f}", f"{both:.2f}", f"{both - dq:.2f}"]
        print(f"| {name} | " + " | ".join(cells) + f" |   (dequantize max err {err:.2e})", flush=True)
        del cps, Wf


if __name__ == "__main__":
    main()
