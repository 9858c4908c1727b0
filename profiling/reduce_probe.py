"""The split-K sum's exchange alone: S CTAs of a thread block cluster (one an SM) each hold a 64 KB fp32 partial
(the wgmma kernel's TOK = 128 x 128-column tile) in shared memory; CTA r sums share r of the tile over the S
partials in split order and stores it.  Ways to move the partials:
  dsmem  -- pull over DSMEM after a cluster barrier (the kernel's cluster_sum_store), J chunks' loads in flight;
  l2     -- each CTA writes its partial to a global workspace (16-byte coalesced), the cluster barrier (release /
            acquire orders the global stores too), then the share read from L2 (ld.global.cg), J chunks in flight.
  dsm+l  -- dsmem with the own share read locally;  push -- st.shared::cluster into the owners' receive slots, the
            barrier, local sums;  tmapu -- the push by TMA bulk copies (mbarrier completion);  l2tma -- l2 with the
            partial written by one TMA bulk store;  hybr -- of each peer's share half pushed over DSMEM, half through L2.
Per CTA (globaltimer, p50 / p90 over CTAs): t_x = the write + first barrier, t_s = the share's loads, sum and store
(+ dsmem's second barrier); and the kernel's time over a launch loop (CUDA events).  Why: the dense wgmma kernel at
M = 128 spends ~13.7 of its 58.7 us TOTAL in the split-K sums (profiling/run56.sh parts, H200).
Env MODES (default 0,2,3,4,1,5,6: all).  usage (GPU machine): python3 profiling/reduce_probe.py"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from kbitcupy import _pdl  # noqa: E402
from wgmma_rate_probe import build  # noqa: E402

SRC = r"""
typedef unsigned int u32;
__device__ __forceinline__ void cl_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ u32 cl_rank() { u32 r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ u32 mapa(u32 a, u32 r) {
    u32 o; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(o) : "r"(a), "r"(r)); return o;
}
__device__ __forceinline__ float4 ld_cl(u32 a) {
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ void st_cl(u32 a, float4 v) {
    asm volatile("st.shared::cluster.v4.f32 [%0], {%1,%2,%3,%4};" :: "r"(a), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}
__device__ __forceinline__ float4 ld_sh(u32 a) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ void mbar_init(u32 bar, u32 n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(n) : "memory"); }
__device__ __forceinline__ void mbar_expect(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try(u32 bar, u32 ph) {
    u32 d;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n" : "=r"(d) : "r"(bar), "r"(ph) : "memory");
    return d != 0;
}
// TMA: a bulk copy of this CTA's shared memory into a peer's (dst, its mbarrier: shared::cluster addresses)
__device__ __forceinline__ void bulk_s2c(u32 dst, u32 src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "r"(src), "r"(bytes), "r"(bar) : "memory");
}
// TMA: a bulk store of this CTA's shared memory to global, waited for (writes performed)
__device__ __forceinline__ void bulk_s2g(void* dst, u32 src, u32 bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\ncp.async.bulk.commit_group;\n"
                 "cp.async.bulk.wait_group 0;" :: "l"(dst), "r"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}
// MODE 0: DSMEM pull; 1: L2 exchange; 2: DSMEM pull, the own partial's share read locally; 3: DSMEM push (each CTA
// writes share q of its partial into CTA q's receive slot [rank], the barrier, then every CTA sums its S slots locally);
// 4: the push by TMA (thread 0: S - 1 bulk copies into the peers' slots on their mbarriers; the own share read locally);
// 5: the L2 exchange with the partial written by one TMA bulk store; 6: hybrid -- of each peer's share, the first half
// pushed over DSMEM (as 3), the second half through L2 (as 1); the own share read locally.  J: chunks (float4) a thread loads at once, each from all S partials.
template <int S, int MODE, int J>
__global__ void __launch_bounds__(256, 1) red_probe(float4* __restrict__ ws, float4* __restrict__ out,
                                                    unsigned long long* __restrict__ tm) {
    extern __shared__ float4 sm[];  // 4096 float4 = 64 KB (+ MODE 3: the receive slots, S x the largest share)
    const int tid = threadIdx.x;
    const u32 rank = cl_rank();
    const int tile = blockIdx.x / S;
    for (int i = tid; i < 4096; i += 256) sm[i] = make_float4((float)(rank + i), 1.f, 2.f, 3.f);
    const u32 bar = (u32)__cvta_generic_to_shared(sm) + 16u * (4096u + 6u * 684u + 8u);  // past the slots
    if (MODE == 4) {  // the receive mbarrier, initialized before any peer can copy into us
        if (tid == 0) {
            mbar_init(bar, 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
    }
    __syncthreads();
    if (MODE == 4) cl_sync();
    const unsigned long long t0 = gtime();
    const int c0 = 4096 * (int)rank / S, c1 = 4096 * ((int)rank + 1) / S;
    const u32 base = (u32)__cvta_generic_to_shared(sm);
    constexpr int SH = (4096 + S - 1) / S + 1;  // receive slot (float4)
    const u32 rbase = base + 16u * 4096u;
    if (MODE == 1) {
        float4* my = ws + ((long)tile * S + rank) * 4096;
        for (int i = tid; i < 4096; i += 256) __stcg(my + i, sm[i]);
    }
    if (MODE == 3) {
#pragma unroll 1
        for (int q = 0; q < S; q++) {
            const int q0 = 4096 * q / S, q1 = 4096 * (q + 1) / S;
            const u32 dst = mapa(rbase + 16u * (u32)(rank * SH), q);
            for (int i = q0 + tid; i < q1; i += 256) st_cl(dst + 16u * (u32)(i - q0), sm[i]);
        }
    }
    if (MODE == 6) {
#pragma unroll 1
        for (int q = 0; q < S; q++) {
            if (q == (int)rank) continue;
            const int q0 = 4096 * q / S, q1 = 4096 * (q + 1) / S, qm = (q0 + q1) / 2;
            const u32 dst = mapa(rbase + 16u * (u32)(rank * SH), q);
            for (int i = q0 + tid; i < qm; i += 256) st_cl(dst + 16u * (u32)(i - q0), sm[i]);
            float4* my = ws + ((long)tile * S + rank) * 4096;
            for (int i = qm + tid; i < q1; i += 256) __stcg(my + i, sm[i]);
        }
    }
    if (MODE == 5 && tid == 0) bulk_s2g(ws + ((long)tile * S + rank) * 4096, base, 65536u);
    if (MODE == 4) {
        if (tid == 0) {
            mbar_expect(bar, 16u * (u32)((c1 - c0) * (S - 1)));
            for (int q = 0; q < S; q++) {
                if (q == (int)rank) continue;
                const int q0 = 4096 * q / S, q1 = 4096 * (q + 1) / S;
                bulk_s2c(mapa(rbase + 16u * (u32)(rank * SH), q), base + 16u * q0, 16u * (u32)(q1 - q0), mapa(bar, q));
            }
        }
        while (!mbar_try(bar, 0)) {
        }
    } else {
        cl_sync();
    }
    const unsigned long long t1 = gtime();
#pragma unroll 1
    for (int i0 = c0 + tid; i0 < c1; i0 += 256 * J) {
        float4 v[J][S];
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int i = i0 + 256 * j;
#pragma unroll
            for (int sp = 0; sp < S; sp++) {
                if (i >= c1) v[j][sp] = make_float4(0.f, 0.f, 0.f, 0.f);
                else if (MODE == 1 || MODE == 5) v[j][sp] = __ldcg(ws + ((long)tile * S + sp) * 4096 + i);
                else if (MODE == 6 && sp == (int)rank) v[j][sp] = ld_sh(base + 16u * i);
                else if (MODE == 6 && i < (c0 + c1) / 2) v[j][sp] = ld_sh(rbase + 16u * (u32)(sp * SH + i - c0));
                else if (MODE == 6) v[j][sp] = __ldcg(ws + ((long)tile * S + sp) * 4096 + i);
                else if (MODE == 4 && sp == (int)rank) v[j][sp] = ld_sh(base + 16u * i);
                else if (MODE == 3 || MODE == 4) v[j][sp] = ld_sh(rbase + 16u * (u32)(sp * SH + i - c0));
                else if (MODE == 2 && sp == (int)rank) v[j][sp] = ld_sh(base + 16u * i);
                else v[j][sp] = ld_cl(mapa(base + 16u * i, sp));
            }
        }
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int i = i0 + 256 * j;
            float4 s = v[j][0];
#pragma unroll
            for (int sp = 1; sp < S; sp++) { s.x += v[j][sp].x; s.y += v[j][sp].y; s.z += v[j][sp].z; s.w += v[j][sp].w; }
            if (i < c1) out[(long)tile * 4096 + i] = s;
        }
    }
    if (MODE == 0 || MODE == 2 || MODE == 4) cl_sync();  // (4: the copies out of us have read their source)  // the partials stay until every peer has read them
    const unsigned long long t2 = gtime();
    if (tid == 0) { tm[3 * blockIdx.x] = t0; tm[3 * blockIdx.x + 1] = t1; tm[3 * blockIdx.x + 2] = t2; }
}
"""


def main():
    modes = [int(x) for x in os.environ.get("MODES", "0,2,3,4,1,5,6").split(",")]
    cases = [(s, m, j) for s in (2, 3, 6) for m in modes for j in ((1, 2) if m in (0, 1, 5, 6) else (1,))]
    names = [f"red_probe<{s}, {m}, {j}>" for s, m, j in cases]
    mod, lowered, _ = build(SRC, "red_probe.cu", names)
    dev = cp.cuda.Device()
    print(f"# {cp.cuda.runtime.getDeviceProperties(dev.id)['name'].decode()}, {dev.attributes['MultiProcessorCount']} SMs;"
          " ns; t_x = write + barrier, t_s = share sum + store (p50 / p90 over CTAs); kern = us a launch (events)")
    smem = 140 * 1024  # one CTA an SM
    for grid_tiles in (16, 32):
        for (s, m, j), nm in zip(cases, names):
            grid = grid_tiles * s
            if grid > 132:
                continue
            fn = mod.get_function(lowered[nm])
            fn.max_dynamic_shared_size_bytes = smem
            ws = cp.zeros((grid * 4096 * 4,), cp.float32)
            out = cp.zeros((grid_tiles * 4096 * 4,), cp.float32)
            tm = cp.zeros((3 * grid,), cp.uint64)
            args = (ws, out, tm)
            launch = lambda: _pdl.launch(fn, (grid,), (256,), args, smem, pdl=False, cluster=s)  # noqa: E731
            for _ in range(3):
                launch()
            cp.cuda.Device().synchronize()
            t = tm.get().reshape(-1, 3).astype(np.int64)
            tx, tsum = t[:, 1] - t[:, 0], t[:, 2] - t[:, 1]
            ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
            ev0.record()
            for _ in range(50):
                launch()
            ev1.record()
            ev1.synchronize()
            kern = cp.cuda.get_elapsed_time(ev0, ev1) * 1e3 / 50
            # the sums: share r of tile b = sum over splits of (split + i, 1, 2, 3)
            o = out.get().reshape(grid_tiles, 4096, 4)
            ii = np.arange(4096)
            ok = np.allclose(o[:, :, 0], (s * ii + s * (s - 1) / 2)[None, :]) and np.allclose(o[:, :, 1], s)
            print(f"S={s} {('dsmem', 'l2   ', 'dsm+l', 'push ', 'tmapu', 'l2tma', 'hybr ')[m]} J={j} CTAs={grid:3d}: t_x {np.percentile(tx, 50):6.0f} / "
                  f"{np.percentile(tx, 90):6.0f}  t_s {np.percentile(tsum, 50):6.0f} / {np.percentile(tsum, 90):6.0f}  "
                  f"kern {kern:6.2f} us  {'ok' if ok else 'WRONG'}", flush=True)


if __name__ == "__main__":
    main()
