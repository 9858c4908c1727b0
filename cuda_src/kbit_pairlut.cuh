// Pair lookup table machinery shared by the GEMV-style kernels (dense and grouped).
// A pair key interleaves the index bits of two neighbouring elements (see
// pair_keys in kbit_common.cuh); one shared-memory load returns both levels as a
// packed half2/bf162, which after the block scale is an mma.sync B-fragment register.
#pragma once
#include "kbit_common.cuh"

template <int K> struct PairLut {
    static constexpr int ENTRIES = 1 << (2 * K);
    static constexpr int LOG2_COPIES = K <= 4 ? 5 : 4;  // k = 5: 16 copies (64 KB), ~1.5-way conflicts
    static constexpr int COPIES = 1 << LOG2_COPIES;
    static constexpr int WORDS = ENTRIES * COPIES;
};

// Build the replicated pair table: entry(key) = (cb[even bits], cb[odd bits]), stored
// [key][copy] so lane l always reads bank l (copy l % COPIES).
template <int K, typename T>
__device__ __forceinline__ void build_pair_lut(u32* lut, const float* cb_s) {
    typedef typename KbitType<T>::T2 T2;
    for (int e = threadIdx.x; e < PairLut<K>::ENTRIES; e += blockDim.x) {
        T2 v = KbitType<T>::pack2(cb_s[deinterleave_even((u32)e)], cb_s[deinterleave_even((u32)e >> 1)]);
        u32 u = *reinterpret_cast<u32*>(&v);
        uint4 q = make_uint4(u, u, u, u);
        uint4* dst = reinterpret_cast<uint4*>(lut + e * PairLut<K>::COPIES);
#pragma unroll
        for (int c = 0; c < PairLut<K>::COPIES / 4; c++) dst[c] = q;
    }
}

template <typename T> __device__ __forceinline__ u32 scale_pair(float s);
template <> __device__ __forceinline__ u32 scale_pair<__half>(float s) {
    __half2 h = __float2half2_rn(s);
    return *reinterpret_cast<u32*>(&h);
}
template <> __device__ __forceinline__ u32 scale_pair<__nv_bfloat16>(float s) {
    __nv_bfloat162 h = __float2bfloat162_rn(s);
    return *reinterpret_cast<u32*>(&h);
}
__device__ __forceinline__ u32 hmul2_u32(u32 a, u32 b, __half) {
    __half2 r = __hmul2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
    return *reinterpret_cast<u32*>(&r);
}
__device__ __forceinline__ u32 hmul2_u32(u32 a, u32 b, __nv_bfloat16) {
    __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
    return *reinterpret_cast<u32*>(&r);
}

// Load the k plane words of one block (alignment: k=2 -> 8 B, k=4 -> 16 B, else 4 B).
template <int K>
__device__ __forceinline__ void load_planes(u32 (&w)[K], const u32* p) {
    if (K == 4) {
        uint4 v = ldg_stream_v4(p);
        w[0] = v.x; w[1 % K] = v.y; w[2 % K] = v.z; w[3 % K] = v.w;
    } else if (K == 2) {
        uint2 v = ldg_stream_v2(p);
        w[0] = v.x; w[1 % K] = v.y;
    } else {
#pragma unroll
        for (int b = 0; b < K; b++) w[b] = ldg_stream(p + b);
    }
}

// One quantization block (32 weights of one column) against 8 MMA rows:
// 8 mma.m16n8k16, each taking 4 of this lane's elements.
template <int K, typename T>
__device__ __forceinline__ void block_mma(float (&acc)[4], const u32 (&w)[K], u32 s2, const uint4 (&a)[4],
                                          const u32* lut_lane) {
    u32 keys[4];
    if (K <= 4) {
        pair_keys<K>(w, keys);
    } else {
        u32 w4[4] = {w[0], w[1 % K], w[2 % K], w[3 % K]};
        pair_keys<4>(w4, keys);
    }
    u32 f[4] = {0u, 0u, 0u, 0u};
    if (K == 5) plane4_fields(w[K - 1], f);
    constexpr int SH = PairLut<K>::LOG2_COPIES;
#pragma unroll
    for (int r = 0; r < 4; r++) {
        u32 b[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            u32 key = (keys[q] >> (8 * r)) & 0xFFu;
            if (K == 5) key |= ((f[q] >> (8 * r)) & 3u) << 8;
            b[q] = hmul2_u32(lut_lane[key << SH], s2, T());
        }
        // a[r] = A elements 8r..8r+7 as four pairs; pair q matches key q.
        mma_16816(acc, a[r].x, 0u, a[r].y, 0u, b[0], b[1], T());
        mma_16816(acc, a[r].z, 0u, a[r].w, 0u, b[2], b[3], T());
    }
}

