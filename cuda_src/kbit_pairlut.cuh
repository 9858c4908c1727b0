// Pair lookup table machinery shared by the GEMV-style kernels (dense and grouped).
// A pair key interleaves the index bits of two neighbouring elements (see
// pair_keys in kbit_common.cuh); one shared-memory load returns both levels as a
// packed half2/bf162, which after the block scale is an mma.sync B-fragment register.
#pragma once
#include "kbit_common.cuh"

// k = 5 table copies (log2): an experiment hook, set for every family through the
// environment KBIT_K5_LOG2_COPIES (kbitcupy/_compile.py; kbitcupy.gemv.lut_bytes agrees).
#ifndef KBIT_K5_LOG2_COPIES
#define KBIT_K5_LOG2_COPIES 4
#endif
// k = 4 table copies (log2): an experiment hook (profiling/gemv_ab.py variants only; the package plans 32)
#ifndef KBIT_K4_LOG2_COPIES
#define KBIT_K4_LOG2_COPIES 5
#endif
// LC >= 0: a kernel's own copies (log2; the grouped wgmma kernel's k = 5 instantiation with 8 copies,
// whose 32 KB fit two CTAs per SM at 64 tokens a tile), else the defaults below.
template <int K, int LC = -1> struct PairLut {
    static constexpr int ENTRIES = 1 << (2 * K);
    // k = 5: 16 copies (64 KB), ~1.5-way conflicts
    static constexpr int LOG2_COPIES = LC >= 0 ? LC : K <= 3 ? 5 : K == 4 ? KBIT_K4_LOG2_COPIES : KBIT_K5_LOG2_COPIES;
    static constexpr int COPIES = 1 << LOG2_COPIES;
    static constexpr int WORDS = ENTRIES * COPIES;
};

// Build the replicated pair table: entry(key) = (cb[even bits], cb[odd bits]), stored
// [key][copy] so lane l always reads bank l (copy l % COPIES).
// nthreads: the threads that call it (tid < nthreads), default the whole block; tid: the
// caller's linear thread index (default threadIdx.x: 1-D blocks).
template <int K, typename T, int LC = -1>
__device__ __forceinline__ void build_pair_lut(u32* lut, const float* cb_s, int nthreads = 0, int tid = -1) {
    typedef typename KbitType<T>::T2 T2;
    // One thread per distinct entry (computed once) writes its COPIES/4 16-byte chunks,
    // starting at chunk (thread % CH) and rotating: the 8 threads of each quarter-warp
    // then hit 8 different chunk positions = all 32 banks, so every store instruction
    // runs at the minimum 4 wavefronts (the same chunk for all threads was 32-way).
    constexpr int CH = PairLut<K, LC>::COPIES / 4;
    for (int e = tid < 0 ? (int)threadIdx.x : tid; e < PairLut<K, LC>::ENTRIES; e += nthreads ? nthreads : blockDim.x) {
        T2 v = KbitType<T>::pack2(cb_s[deinterleave_even((u32)e)], cb_s[deinterleave_even((u32)e >> 1)]);
        const u32 u = *reinterpret_cast<u32*>(&v);
        const uint4 q = make_uint4(u, u, u, u);
        uint4* dst = reinterpret_cast<uint4*>(lut) + e * CH;
#pragma unroll
        for (int c = 0; c < CH; c++) dst[(c + e) & (CH - 1)] = q;
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
// The E4M4 scale table: tab[code] = scale_pair(e4m4_decode(code)) for the 256 codes (one LDS
// per block scale instead of the decode + convert), threads tid = 0..nthreads-1 of the caller.
template <typename T>
__device__ __forceinline__ void build_scale_table(u32* tab, int tid, int nthreads) {
    for (int c = tid; c < 256; c += nthreads) tab[c] = scale_pair<T>(e4m4_decode((u32)c));
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

// Byte r of a key word -> its table entry for this lane (PRMT + LEA + LDS).
// lut_lane = shared-window address of the table + 4 * (lane % COPIES).  An explicit
// ld.shared keeps the address one LEA (a generic pointer costs two extra adds).
// Diagnostic hooks (off; wrong results, timing only): KBIT_EXP_NO_LUT returns the key itself (no address, no LDS),
// KBIT_EXP_NO_SCALE leaves out the block scale's HMUL2 -- which part of a GEMV step's compute holds it;
// KBIT_EXP_LDS_FREE=1 / 2 replaces the LDS of chunks r = 1, 3 / of every chunk by one LOP3 on its address (the same
// issued instructions, no shared-memory wavefront).  H200, 2026-11-29 (fifty-sixth session, run63.sh lds): k = 4 M = 1
// TOTAL 17.31 -> 17.24 / 17.23 us, where NO_LUT (fewer instructions as well) gives 16.16: the step's instructions
// hold it, not its wavefronts.
template <int K>
__device__ __forceinline__ u32 lut_lookup(u32 lut_lane, u32 keys, u32 f, int r) {
    const u32 key = pair_key<K>(keys, f, r);
#ifdef KBIT_EXP_NO_LUT
    return key;
#endif
    const u32 addr = lut_lane + (key << (PairLut<K>::LOG2_COPIES + 2));
    u32 v;
#ifdef KBIT_EXP_LDS_FREE
    if (KBIT_EXP_LDS_FREE == 2 || (r & 1)) {
        asm volatile("xor.b32 %0, %1, 0x3c003c00;\n" : "=r"(v) : "r"(addr));
        return v;
    }
#endif
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
    return v;
}

// Keys of one block (see pair_keys) plus, for k = 5, the plane-4 fields.
template <int K>
__device__ __forceinline__ void block_keys(const u32 (&w)[K], u32 (&keys)[4], u32 (&f)[4]) {
    if (K <= 4) {
        pair_keys<K>(w, keys);
    } else {
        u32 w4[4] = {w[0], w[1 % K], w[2 % K], w[3 % K]};
        pair_keys<4>(w4, keys);
    }
    f[0] = f[1] = f[2] = f[3] = 0u;
    if (K == 5) plane4_fields(w[K - 1], f);
}

// Chunk r (elements 8r..8r+7) of one block as scaled pairs: v[q] = the levels of elements
// (8r + 2q, 8r + 2q + 1) times the block scale s (four pair lookups + HMUL2).
template <int K, typename T>
__device__ __forceinline__ void chunk_pairs(u32 (&v)[4], const u32 (&keys)[4], const u32 (&f)[4], u32 s, int r,
                                            u32 lut_lane) {
#pragma unroll
    for (int q = 0; q < 4; q++) v[q] = hmul2_u32(lut_lookup<K>(lut_lane, keys[q], f[q], r), s, T());
}
// The same for two blocks A and B, their lookups interleaved (the MMA operand pairs of
// block_pair_mma).
template <int K, typename T>
__device__ __forceinline__ void chunk_pairs(u32 (&va)[4], u32 (&vb)[4], const u32 (&kA)[4], const u32 (&fA)[4], u32 sA,
                                            const u32 (&kB)[4], const u32 (&fB)[4], u32 sB, int r, u32 lut_lane) {
#pragma unroll
    for (int q = 0; q < 4; q++) {
#ifndef KBIT_EXP_NO_SCALE
        va[q] = hmul2_u32(lut_lookup<K>(lut_lane, kA[q], fA[q], r), sA, T());
        vb[q] = hmul2_u32(lut_lookup<K>(lut_lane, kB[q], fB[q], r), sB, T());
#else
        va[q] = lut_lookup<K>(lut_lane, kA[q], fA[q], r) ^ (sA & 1u);
        vb[q] = lut_lookup<K>(lut_lane, kB[q], fB[q], r) ^ (sB & 1u);
#endif
    }
}

// ---------------------------------------------------------------- quad table (k = 2)
// k = 2: the keys of two neighbouring pairs side by side (nibbles) name four elements; their four levels
// are two packed pairs, 8 bytes, one LDS.64 instead of two LDS.  16 copies (lane % 16): an LDS.64 is two
// half-warp wavefronts, so 16 copies are conflict-free.  256 entries x 16 copies x 8 bytes = 32 KB.
struct QuadLut {
    static constexpr int ENTRIES = 256, LOG2_COPIES = 4, COPIES = 16, WORDS = ENTRIES * COPIES * 2;
};
// entry(e) = (pair(e & 15), pair(e >> 4)), stored [e][copy]; the rotated 16-byte chunks as build_pair_lut's.
template <typename T>
__device__ __forceinline__ void build_quad_lut(u32* lut, const float* cb_s, int nthreads, int tid) {
    typedef typename KbitType<T>::T2 T2;
    for (int e = tid; e < QuadLut::ENTRIES; e += nthreads) {
        T2 lo = KbitType<T>::pack2(cb_s[deinterleave_even((u32)e & 15u)], cb_s[deinterleave_even(((u32)e & 15u) >> 1)]);
        T2 hi = KbitType<T>::pack2(cb_s[deinterleave_even((u32)e >> 4)], cb_s[deinterleave_even((u32)e >> 5)]);
        const u32 l = *reinterpret_cast<u32*>(&lo), h = *reinterpret_cast<u32*>(&hi);
        const uint4 q = make_uint4(l, h, l, h);
        uint4* dst = reinterpret_cast<uint4*>(lut) + e * (QuadLut::COPIES / 2);
#pragma unroll
        for (int c = 0; c < QuadLut::COPIES / 2; c++) dst[(c + e) & (QuadLut::COPIES / 2 - 1)] = q;
    }
}
// k = 2 planes -> 2 words of quad keys: byte r of q[h] names elements 8r + 4h .. 8r + 4h + 3 (low nibble the
// pair key of the first two: pair_keys<2>'s out[2h] | out[2h + 1] << 4).
__device__ __forceinline__ void quad_keys(const u32 (&p)[2], u32 (&q)[2]) {
    const u32 E2 = 0x33333333u, N4 = 0x0F0F0F0Fu;
    const u32 wa = bitsel(p[0], p[1] << 2, E2);
    const u32 wb = bitsel(p[0] >> 2, p[1], E2);
    q[0] = bitsel(wa, wb << 4, N4);
    q[1] = bitsel(wa >> 4, wb, N4);
}
// The table a GEMV-style kernel builds (kbit_gemv.cu, kbit_gemv_stream.cu): the pair table, or (Q at k = 2) the
// quad table; WORDS its size, lane_offset the byte offset of a lane's copy within an entry's row.
template <int K, bool Q> struct LutLayout {
    static constexpr bool QUAD = K == 2 && Q;
    static constexpr int WORDS = QUAD ? QuadLut::WORDS : PairLut<K>::WORDS;
    static __device__ __forceinline__ u32 lane_offset(int lane) {
        return QUAD ? 8u * (u32)(lane & (QuadLut::COPIES - 1)) : 4u * (u32)(lane & (PairLut<K>::COPIES - 1));
    }
};
// 16 bytes of shared memory at addr + OFF if p, else zeros (a predicated LDS.128: lanes without p take no part).
template <int OFF = 0>
__device__ __forceinline__ uint4 lds_u128_if(u32 addr, bool p) {
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %4, 0;\n @q ld.shared.v4.u32 {%0,%1,%2,%3}, [%5+%6];\n}\n"
                 : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
                 : "r"((u32)p), "r"(addr), "n"(OFF));
    return v;
}
__device__ __forceinline__ uint2 lds_u64(u32 addr) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
    return v;
}
// The keys of one block for block_pair_mma: QUAD (k = 2) the two quad-key words in keys[0..1], else block_keys.
template <int K, bool QUAD>
__device__ __forceinline__ void block_mma_keys(const u32 (&w)[K], u32 (&keys)[4], u32 (&f)[4]) {
    if constexpr (QUAD) {
        u32 q[2];
        quad_keys(reinterpret_cast<const u32 (&)[2]>(w), q);
        keys[0] = q[0]; keys[1] = q[1]; keys[2] = keys[3] = 0u;
        f[0] = f[1] = f[2] = f[3] = 0u;
    } else {
        block_keys<K>(w, keys, f);
    }
}
// Chunk r of one block from the quad table, unscaled: v[q] = the levels of elements (8r + 2q, 8r + 2q + 1)
// (keys: block_mma_keys' quad-key words; lut_lane: the table + LutLayout's lane_offset).
__device__ __forceinline__ void quad_chunk_levels(u32 (&v)[4], const u32 (&keys)[4], int r, u32 lut_lane) {
#ifdef KBIT_EXP_NO_LUT
    v[0] = __byte_perm(keys[0], 0u, 0x4440u + r); v[1] = v[0] >> 1;
    v[2] = __byte_perm(keys[1], 0u, 0x4440u + r); v[3] = v[2] >> 1;
    return;
#endif
    const uint2 x = lds_u64(lut_lane + (__byte_perm(keys[0], 0u, 0x4440u + r) << (QuadLut::LOG2_COPIES + 3)));
    const uint2 y = lds_u64(lut_lane + (__byte_perm(keys[1], 0u, 0x4440u + r) << (QuadLut::LOG2_COPIES + 3)));
    v[0] = x.x; v[1] = x.y; v[2] = y.x; v[3] = y.y;
}

// Two quantization blocks (columns g and g+8 of a 16-column group, 32 weights each)
// against up to 8 token rows.  The weights are the MMA's A operand (16 rows = 16
// columns, every fragment register holds data) and the activations the B operand
// (8 columns = 8 tokens): acc[mt] = C^T[col g, g+8][tokens 8mt + 2t, 8mt + 2t + 1].
// get_a(mt, r) = the lane's token row 8mt + g, elements 8r..8r+7 of its block, as four
// pairs (a uint4: from registers, or read from shared memory inside the loop where
// holding all MT x 4 of them would cost too many registers).  MT token tiles reuse every
// dequantized fragment.  Elements 0..15 of the blocks accumulate into acc0, 16..31 into
// acc1 (two shorter mma chains; pass the same array twice for one chain).
// QUAD (k = 2): the lookups in the quad table (lut_lane: see quad_chunk_levels).
template <int K, typename T, int MT, bool QUAD = false, typename GetA>
__device__ __forceinline__ void block_pair_mma(float (&acc0)[MT][4], float (&acc1)[MT][4], const u32 (&wA)[K], u32 sA,
                                               const u32 (&wB)[K], u32 sB, GetA get_a, u32 lut_lane) {
    u32 kA[4], kB[4], fA[4], fB[4];
    block_mma_keys<K, QUAD>(wA, kA, fA);
    block_mma_keys<K, QUAD>(wB, kB, fB);
#pragma unroll
    for (int r = 0; r < 4; r++) {
        u32 va[4], vb[4];
        if constexpr (QUAD) {
            quad_chunk_levels(va, kA, r, lut_lane);
            quad_chunk_levels(vb, kB, r, lut_lane);
#pragma unroll
#ifndef KBIT_EXP_NO_SCALE
            for (int q = 0; q < 4; q++) { va[q] = hmul2_u32(va[q], sA, T()); vb[q] = hmul2_u32(vb[q], sB, T()); }
#else
            va[0] ^= sA & 1u; vb[0] ^= sB & 1u;
#endif
        } else {
            chunk_pairs<K, T>(va, vb, kA, fA, sA, kB, fB, sB, r, lut_lane);
        }
        // k-slots (2t, 2t+1) <- pair q=0 (elements 8r, 8r+1); (2t+8, 2t+9) <- q=1
        float (&acc)[MT][4] = r < 2 ? acc0 : acc1;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const uint4 a = get_a(mt, r);
            mma_16816(acc[mt], va[0], vb[0], va[1], vb[1], a.x, a.y, T());
            mma_16816(acc[mt], va[2], vb[2], va[3], vb[3], a.z, a.w, T());
        }
    }
}
// The A fragments already in registers: a[mt][r].
template <int K, typename T, int MT, bool QUAD = false>
__device__ __forceinline__ void block_pair_mma(float (&acc0)[MT][4], float (&acc1)[MT][4], const u32 (&wA)[K], u32 sA,
                                               const u32 (&wB)[K], u32 sB, const uint4 (&a)[MT][4], u32 lut_lane) {
    block_pair_mma<K, T, MT, QUAD>(acc0, acc1, wA, sA, wB, sB, [&](int mt, int r) { return a[mt][r]; }, lut_lane);
}
