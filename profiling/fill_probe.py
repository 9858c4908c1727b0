"""How fast can one SM pull its share of a weight from DRAM into shared memory? (GPU machine)

The streaming GEMV and the wgmma GEMM (profiling/NOTES.md, seventh session) fill their
shared-memory stages at ~13 GB/s per SM with one CTA per SM, a third of what the speed-of-
light read reaches with 64 warps per SM and plain loads.  This probe reads the same bytes
(cold L2, rotated copies, graph replay) with:
  ldg     - B CTAs per SM x 256 threads, 16-byte loads, U in flight per thread (registers)
  cpasync - B CTAs per SM x T threads, the CTA's contiguous share copied into shared
            memory with 16-byte cp.async.cg, all issued before one wait
  bulk    - one thread per CTA issues cp.async.bulk copies of SZ bytes into shared memory
            (one mbarrier, expect_tx of the whole share)
Each CTA's share is contiguous (as the streaming GEMV's), at most 200 KB.

    NBYTES=5242880,20971520 python3 profiling/fill_probe.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from bench_foundation import copies_for, sol_time, time_rotated  # noqa: E402

SRC = r"""
extern "C" __global__ void ldg(const uint4* __restrict__ p, long n16, int per_cta16, unsigned* sink) {
    const long base = (long)blockIdx.x * per_cta16;
    const long end = min(base + per_cta16, n16);
    unsigned acc = 0;
    for (long i = base + threadIdx.x; i < end; i += 4 * blockDim.x) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            long j = i + u * blockDim.x;
            v[u] = j < end ? __ldcs(p + j) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < 4; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x9e3779b9u) *sink = acc;
}

extern "C" __global__ void cpasync(const uint4* __restrict__ p, long n16, int per_cta16, unsigned* sink) {
    extern __shared__ __align__(128) uint4 sm[];
    const long base = (long)blockIdx.x * per_cta16;
    const int cnt = (int)min((long)per_cta16, n16 - base);
    const unsigned s0 = (unsigned)__cvta_generic_to_shared(sm);
    for (int i = threadIdx.x; i < cnt; i += blockDim.x)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s0 + 16 * i), "l"(p + base + i));
    asm volatile("cp.async.commit_group;\ncp.async.wait_all;\n" ::: "memory");
    __syncthreads();
    if (sm[threadIdx.x].x == 0x9e3779b9u) *sink = 1;
}

extern "C" __global__ void bulk(const uint4* __restrict__ p, long n16, int per_cta16, int sz, unsigned* sink) {
    extern __shared__ __align__(128) uint4 sm[];
    __shared__ __align__(8) unsigned long long bar;
    const long base = (long)blockIdx.x * per_cta16;
    const int bytes = 16 * (int)min((long)per_cta16, n16 - base);
    const unsigned b = (unsigned)__cvta_generic_to_shared(&bar), s0 = (unsigned)__cvta_generic_to_shared(sm);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\nfence.mbarrier_init.release.cluster;\n" ::"r"(b) : "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes) : "memory");
        for (int o = 0; o < bytes; o += sz) {
            int c = min(sz, bytes - o);
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                         ::"r"(s0 + o), "l"((const char*)(p + base) + o), "r"(c), "r"(b) : "memory");
        }
    }
    __syncthreads();
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred q;\nmbarrier.try_wait.parity.shared::cta.b64 q, [%1], 0;\nselp.u32 %0, 1, 0, q;\n}\n"
                     : "=r"(done) : "r"(b) : "memory");
    if (sm[threadIdx.x].x == 0x9e3779b9u) *sink = 1;
}
"""


def main():
    mod = cp.RawModule(code=SRC, options=("-std=c++17",))
    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    sink = cp.zeros(1, cp.uint32)
    print(f"# fill probe: {cp.cuda.runtime.getDeviceProperties(0)['name']}, {sms} SMs\n")
    print("| bytes | kernel | config | us | GB/s per SM | vs SOL |")
    print("|---|---|---|---:|---:|---:|")
    for nbytes in [int(x) for x in os.environ.get("NBYTES", "5242880,20971520").split(",")]:
        n16 = nbytes // 16
        bufs = [cp.empty(nbytes, cp.uint8) for _ in range(copies_for(nbytes))]
        for b in bufs:
            b.fill(1)
        sol = sol_time(nbytes)

        def row(kind, cfg, us):
            print(f"| {nbytes} | {kind} | {cfg} | {us:.2f} | {nbytes / sms / us / 1e3:.1f} | {sol / us:.2f} |",
                  flush=True)

        row("SOL", "bench_foundation.sol_time", sol)
        for B in (1, 2, 4, 8):
            G = sms * B
            per = -(-n16 // G)
            fn = mod.get_function("ldg")
            row("ldg", f"{B} CTA/SM x 256, 4 in flight", time_rotated(
                [lambda b=b: fn((G,), (256,), (b, np.int64(n16), np.int32(per), sink)) for b in bufs]))
        for B, T in ((1, 128), (1, 256), (1, 512), (1, 1024), (2, 256)):
            G = sms * B
            per = -(-n16 // G)
            smem = per * 16
            if smem > 200 * 1024 // B:
                continue
            fn = mod.get_function("cpasync")
            fn.max_dynamic_shared_size_bytes = smem
            row("cpasync", f"{B} CTA/SM x {T}", time_rotated(
                [lambda b=b: fn((G,), (T,), (b, np.int64(n16), np.int32(per), sink), shared_mem=smem) for b in bufs]))
        for B in (1, 2):
            G = sms * B
            per = -(-n16 // G)
            smem = per * 16
            if smem > 200 * 1024 // B:
                continue
            fn = mod.get_function("bulk")
            fn.max_dynamic_shared_size_bytes = smem
            for sz in (1024, 4096, 16384):
                row("bulk", f"{B} CTA/SM, {sz} B copies", time_rotated(
                    [lambda b=b: fn((G,), (128,), (b, np.int64(n16), np.int32(per), np.int32(sz), sink),
                                    shared_mem=smem) for b in bufs]))
        del bufs


if __name__ == "__main__":
    main()
