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

// The share in units of ub bytes; mode 0: each thread arrives (cp.async.mbarrier.arrive.noinc)
// on unit u's mbarrier after its copies of unit u (the streaming GEMV's producers); mode 1: one
// commit group per unit and a wait_all at the end (no mbarrier); mode 2: like 0, but warp w
// copies only units u = w (mod warps) (a unit per warp).
extern "C" __global__ void cpasync_units(const uint4* __restrict__ p, long n16, int per_cta16, int ub, int mode,
                                         unsigned* sink) {
    extern __shared__ __align__(128) uint4 sm[];
    __shared__ __align__(8) unsigned long long bars[64];
    const long base = (long)blockIdx.x * per_cta16;
    const int cnt = (int)min((long)per_cta16, n16 - base), u16 = ub / 16;
    const int units = (cnt + u16 - 1) / u16, warps = blockDim.x / 32, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const unsigned s0 = (unsigned)__cvta_generic_to_shared(sm), b0 = (unsigned)__cvta_generic_to_shared(bars);
    if (threadIdx.x < units)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(b0 + 8 * threadIdx.x),
                     "r"(mode == 2 ? 32 : (int)blockDim.x) : "memory");
    __syncthreads();
    for (int u = 0; u < units; u++) {
        if (mode == 2 && u % warps != w) continue;
        const int lo = u * u16, hi = min(cnt, lo + u16);
        const int t0 = mode == 2 ? lane : threadIdx.x, st = mode == 2 ? 32 : blockDim.x;
        for (int i = lo + t0; i < hi; i += st)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s0 + 16 * i), "l"(p + base + i));
        if (mode == 1) asm volatile("cp.async.commit_group;\n" ::: "memory");
        else asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(b0 + 8 * u) : "memory");
    }
    if (mode == 1) {
        asm volatile("cp.async.wait_all;\n" ::: "memory");
    } else {
        for (int u = 0; u < units; u++) {
            unsigned done = 0;
            while (!done)
                asm volatile("{\n.reg .pred q;\nmbarrier.try_wait.parity.shared::cta.b64 q, [%1], 0;\nselp.u32 %0, 1, 0, q;\n}\n"
                             : "=r"(done) : "r"(b0 + 8 * u) : "memory");
        }
    }
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

        def share(B):
            """(grid, 16-byte chunks per CTA, shared bytes per CTA, fits in 200 KB per SM) for B CTAs per SM."""
            G = sms * B
            per = -(-n16 // G)
            return G, per, per * 16, per * 16 <= 200 * 1024 // B

        row("SOL", "bench_foundation.sol_time", sol)
        for B in (1, 2, 4, 8):
            G, per, _, _ = share(B)
            fn = mod.get_function("ldg")
            row("ldg", f"{B} CTA/SM x 256, 4 in flight", time_rotated(
                [lambda b=b: fn((G,), (256,), (b, np.int64(n16), np.int32(per), sink)) for b in bufs]))
        for B, T in ((1, 128), (1, 256), (1, 512), (1, 1024), (2, 256)):
            G, per, smem, fits = share(B)
            if not fits:
                continue
            fn = mod.get_function("cpasync")
            fn.max_dynamic_shared_size_bytes = smem
            row("cpasync", f"{B} CTA/SM x {T}", time_rotated(
                [lambda b=b: fn((G,), (T,), (b, np.int64(n16), np.int32(per), sink), shared_mem=smem) for b in bufs]))
        G, per, smem, fits = share(1)
        if fits:
            fn = mod.get_function("cpasync_units")
            fn.max_dynamic_shared_size_bytes = smem
            for mode, T, what in ((0, 128, "arrive.noinc per unit, all threads"), (1, 128, "commit group per unit"),
                                  (2, 128, "arrive.noinc, a unit per warp (4 warps)"),
                                  (2, 256, "arrive.noinc, a unit per warp (8 warps)")):
                row("cpasync_units", f"1 CTA/SM x {T}, 8 KB units, {what}", time_rotated(
                    [lambda b=b: fn((G,), (T,), (b, np.int64(n16), np.int32(per), np.int32(8192), np.int32(mode), sink),
                                    shared_mem=smem) for b in bufs]))
        for B in (1, 2):
            G, per, smem, fits = share(B)
            if not fits:
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
