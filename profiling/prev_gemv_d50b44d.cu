// kbit_gemv.cu at d50b44d (headers inlined): the A/B baseline of profiling/gemv_ab.py
// Decode GEMV (M = 1..8): C[M, N] = A[M, K] * W^T, W k-bit quantized.
//
// Why this shape (see profiling/NOTES.md for the instruction budget): at Hopper
// bandwidth a k = 4 weight arrives every ~0.1 ns, leaving ~4-6 issued instructions
// per weight for the whole GPU.  Per-element bit extraction plus a shuffle and an FMA
// per M row costs several times that.  So:
//  * pair lookup table: word-wide LOP3s turn the k bit planes of a block into 16
//    byte-sized keys, each naming two neighbouring elements; one conflict-free
//    shared-memory load (the table is replicated per lane) returns both codebook
//    levels as a packed half2/bf162;
//  * the block scale multiplies the pair once (HMUL2; E4M4 scales are exact in
//    fp16/bf16), so the packed pair is directly an mma.sync B-fragment register;
//  * the tensor core does every multiply-add for all M <= 8 rows at once with fp32
//    accumulation, so the cost per weight does not grow with M.
// Any permutation of the K dimension applied to both A and B leaves the dot product
// unchanged, so each lane feeds the MMA the elements its own block holds: lane
// (g = lane/4, t = lane%4) owns column n0 + g and quantization block 4*s + t of step
// s; it supplies A row g of the same block (rows >= M are zeros).
// Pair lookup table machinery shared by the GEMV-style kernels (dense and grouped).
// A pair key interleaves the index bits of two neighbouring elements (see
// pair_keys in kbit_common.cuh); one shared-memory load returns both levels as a
// packed half2/bf162, which after the block scale is an mma.sync B-fragment register.
#pragma once
// Shared device helpers for every kbit kernel family.
// Format: see kbitcupy/reference.py (the oracle). Included textually by the Python
// module loader, so a change here changes every kernel's cache key.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef unsigned int u32;
typedef unsigned char u8;

#define KBIT_BLOCKSIZE 32
#define KBIT_TILE_K 64
#define KBIT_TILE_N 128
#define KBIT_KB_PER_TILE 2

// Error flag bits of the grouped (MoE) kernels (kbitcupy/grouped.py decodes them).
#define KBIT_ERR_EXPERT_ID 1
#define KBIT_ERR_OFFSETS 2
#define KBIT_ERR_MAX_TOKENS 4

// ---------------------------------------------------------------- dtype traits
template <typename T> struct KbitType;
template <> struct KbitType<__half> {
    typedef __half2 T2;
    static __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
    static __device__ __forceinline__ T2 pack2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
};
template <> struct KbitType<__nv_bfloat16> {
    typedef __nv_bfloat162 T2;
    static __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
    static __device__ __forceinline__ T2 pack2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
};
template <> struct KbitType<float> {
    static __device__ __forceinline__ float to_float(float x) { return x; }
    static __device__ __forceinline__ float from_float(float x) { return x; }
};

// SwiGLU's silu(g) * u in fp32 (the MoE activation).  One definition for the silu_mul
// kernel and the grouped GEMV's fused A staging, so both round the same value.
__device__ __forceinline__ float silu_mul_f(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

// ---------------------------------------------------------------- E4M4 absmax
// Branch-free decode: treat e = 0 as e = 1 (2^-10 * (1 + m/16)) and subtract the
// implicit one (2^-10) for subnormals, which leaves exactly m * 2^-14.
__device__ __forceinline__ float e4m4_decode(u32 code) {
    u32 e = code >> 4, m = code & 15u;
    u32 ee = e ? e : 1u;
    float v = __uint_as_float(((ee + 127u - 11u) << 23) | (m << 19));
    return v - (e ? 0.0f : 0.0009765625f);
}

// Round-to-nearest-even encode (identical integer recipe to reference.e4m4_encode).
__device__ __forceinline__ u32 e4m4_encode(float a) {
    if (a >= 0.0009765625f) {
        u32 bits = __float_as_uint(a);
        int ex = (int)(bits >> 23) - 127;
        u32 mant = bits & 0x7FFFFFu;
        u32 code = ((u32)(ex + 11) << 4) | (mant >> 19);
        u32 rem = mant & 0x7FFFFu;
        code += (rem > 0x40000u) || (rem == 0x40000u && (code & 1u));
        return code > 255u ? 255u : code;  // host guarantees a <= 31 via the tensor scale
    }
    return (u32)__float2int_rn(a * 16384.0f);
}

// absmax in its storage formats -> float scale
__device__ __forceinline__ float load_scale(const u8* p, long i) { return e4m4_decode(p[i]); }
__device__ __forceinline__ float load_scale(const float* p, long i) { return p[i]; }
__device__ __forceinline__ float load_scale(const __half* p, long i) { return __half2float(p[i]); }

// ---------------------------------------------------------------- bit planes
// Index of element j from k bit-plane words.
template <int K>
__device__ __forceinline__ u32 plane_index(const u32 (&w)[K], int j) {
    u32 idx = 0;
#pragma unroll
    for (int b = 0; b < K; b++) idx |= ((w[b] >> j) & 1u) << b;
    return idx;
}

// Codebook lookup through a warp shuffle: lane l holds codebook[l] (2^k <= 32).
__device__ __forceinline__ float codebook_shfl(float cb_lane, u32 idx) {
    return __shfl_sync(0xffffffffu, cb_lane, (int)idx);
}

// Tiled-layout addressing (seed 000 section 5): word offset of block (n, kblock).
template <int K>
__device__ __forceinline__ long tiled_word_offset(int n, int kblock, int n_tiles) {
    int kt = kblock >> 1, kb = kblock & 1;
    long tile = (long)kt * n_tiles + (n >> 7);
    return tile * (KBIT_TILE_N * KBIT_KB_PER_TILE * K) + ((n & 127) * KBIT_KB_PER_TILE + kb) * K;
}
__device__ __forceinline__ long tiled_absmax_offset(int n, int kblock, int n_tiles) {
    int kt = kblock >> 1, kb = kblock & 1;
    long tile = (long)kt * n_tiles + (n >> 7);
    return tile * (KBIT_TILE_N * KBIT_KB_PER_TILE) + (n & 127) * KBIT_KB_PER_TILE + kb;
}

// ---------------------------------------------------------------- default codebook
// The default codebook's levels (kbitcupy.reference.create_codebook(k), float32 bit patterns;
// tests/test_compile.py checks them) as immediates in a select chain: for a weight with that
// codebook the decode GEMV needs no memory access before its pair table.  Every memory access
// there (a global load, cp.async, a by-value parameter's constant-cache fill, issued first or
// from a per-block copy) cost the same ~0.15 us per launch (H100, 2026-11-25, profiling/NOTES.md).
template <int K>
__device__ __forceinline__ float kbit_default_level(unsigned t) {
    u32 v = 0u;
    if constexpr (K == 2) {
        v = t == 0u ? 0xbf800000u : v;
        v = t == 1u ? 0xbe8dd21au : v;
        v = t == 2u ? 0x3e8dd21au : v;
        v = t == 3u ? 0x3f800000u : v;
    }
    if constexpr (K == 3) {
        v = t == 0u ? 0xbf800000u : v;
        v = t == 1u ? 0xbf1409f5u : v;
        v = t == 2u ? 0xbea32005u : v;
        v = t == 3u ? 0xbdd20129u : v;
        v = t == 4u ? 0x3dd20129u : v;
        v = t == 5u ? 0x3ea32005u : v;
        v = t == 6u ? 0x3f1409f5u : v;
        v = t == 7u ? 0x3f800000u : v;
    }
    if constexpr (K == 4) {
        v = t == 0u ? 0xbf800000u : v;
        v = t == 1u ? 0xbf35233bu : v;
        v = t == 2u ? 0xbf0ace38u : v;
        v = t == 3u ? 0xbed56949u : v;
        v = t == 4u ? 0xbe9f2ee8u : v;
        v = t == 5u ? 0xbe5d2107u : v;
        v = t == 6u ? 0xbe0265adu : v;
        v = t == 7u ? 0xbd2c6c36u : v;
        v = t == 8u ? 0x3d2c6c36u : v;
        v = t == 9u ? 0x3e0265adu : v;
        v = t == 10u ? 0x3e5d2107u : v;
        v = t == 11u ? 0x3e9f2ee8u : v;
        v = t == 12u ? 0x3ed56949u : v;
        v = t == 13u ? 0x3f0ace38u : v;
        v = t == 14u ? 0x3f35233bu : v;
        v = t == 15u ? 0x3f800000u : v;
    }
    if constexpr (K == 5) {
        v = t == 0u ? 0xbf800000u : v;
        v = t == 1u ? 0xbf4731dcu : v;
        v = t == 2u ? 0xbf288359u : v;
        v = t == 3u ? 0xbf122cf2u : v;
        v = t == 4u ? 0xbf001198u : v;
        v = t == 5u ? 0xbee10f82u : v;
        v = t == 6u ? 0xbec56bf3u : v;
        v = t == 7u ? 0xbeac39a3u : v;
        v = t == 8u ? 0xbe94d4a9u : v;
        v = t == 9u ? 0xbe7d9849u : v;
        v = t == 10u ? 0xbe539bdbu : v;
        v = t == 11u ? 0xbe2b36bau : v;
        v = t == 12u ? 0xbe04052du : v;
        v = t == 13u ? 0xbdbb691du : v;
        v = t == 14u ? 0xbd5ff631u : v;
        v = t == 15u ? 0xbc950060u : v;
        v = t == 16u ? 0x3c950060u : v;
        v = t == 17u ? 0x3d5ff631u : v;
        v = t == 18u ? 0x3dbb691du : v;
        v = t == 19u ? 0x3e04052du : v;
        v = t == 20u ? 0x3e2b36bau : v;
        v = t == 21u ? 0x3e539bdbu : v;
        v = t == 22u ? 0x3e7d9849u : v;
        v = t == 23u ? 0x3e94d4a9u : v;
        v = t == 24u ? 0x3eac39a3u : v;
        v = t == 25u ? 0x3ec56bf3u : v;
        v = t == 26u ? 0x3ee10f82u : v;
        v = t == 27u ? 0x3f001198u : v;
        v = t == 28u ? 0x3f122cf2u : v;
        v = t == 29u ? 0x3f288359u : v;
        v = t == 30u ? 0x3f4731dcu : v;
        v = t == 31u ? 0x3f800000u : v;
    }
    return __uint_as_float(v);
}

// ---------------------------------------------------------------- pair lookup table
// A pair key interleaves the index bits of two neighbouring elements e0 (even) and
// e1 (odd): key bit 2b = bit b of idx(e0), key bit 2b+1 = bit b of idx(e1).  This is
// what a few word-wide LOP3s make from the bit planes (see pair_keys), and one
// shared-memory load per key returns both dequantized levels as a packed half2/bf162.
__device__ __forceinline__ u32 deinterleave_even(u32 key) {
    u32 x = key & 0x55555555u;  // bits 0,2,4,... -> 0,1,2,...
    x = (x | (x >> 1)) & 0x33333333u;
    x = (x | (x >> 2)) & 0x0F0F0F0Fu;
    x = (x | (x >> 4)) & 0x00FF00FFu;
    return x;
}

// From k planes of one 32-element block build 4 words of byte-sized pair keys
// (k <= 4) such that byte r of out[q] is the key of elements (8r + 2q, 8r + 2q + 1).
// k = 5 uses the planes 0..3 here plus plane4_field() for the top bit pair.
template <int K>
__device__ __forceinline__ void pair_keys(const u32 (&p)[K], u32 (&out)[4]) {
    const u32 E2 = 0x33333333u;  // even 2-bit fields
    u32 p0 = p[0], p1 = K > 1 ? p[1] : 0u;
    // nibble q of wa: [p1 field 2q | p0 field 2q]; wb: fields 2q+1
    u32 wa = (p0 & E2) | ((p1 & E2) << 2);
    u32 wb = ((p0 >> 2) & E2) | (p1 & ~E2);
    if (K == 2) {
        out[0] = wa & 0x0F0F0F0Fu;         // pairs 4r   -> elements 8r,   8r+1
        out[1] = wb & 0x0F0F0F0Fu;         // pairs 4r+1 -> elements 8r+2, 8r+3
        out[2] = (wa >> 4) & 0x0F0F0F0Fu;  // pairs 4r+2
        out[3] = (wb >> 4) & 0x0F0F0F0Fu;  // pairs 4r+3
    } else if (K == 3) {
        u32 p2 = p[K > 2 ? 2 : 0];
        out[0] = (wa & 0x0F0F0F0Fu) | ((p2 & 0x03030303u) << 4);
        out[1] = (wb & 0x0F0F0F0Fu) | ((p2 & 0x0C0C0C0Cu) << 2);
        out[2] = ((wa >> 4) & 0x0F0F0F0Fu) | (p2 & 0x30303030u);
        out[3] = ((wb >> 4) & 0x0F0F0F0Fu) | ((p2 >> 2) & 0x30303030u);
    } else {
        u32 p2 = p[K > 2 ? 2 : 0], p3 = p[K > 3 ? 3 : 0];
        u32 xa = (p2 & E2) | ((p3 & E2) << 2);
        u32 xb = ((p2 >> 2) & E2) | (p3 & ~E2);
        out[0] = (wa & 0x0F0F0F0Fu) | ((xa & 0x0F0F0F0Fu) << 4);
        out[1] = (wb & 0x0F0F0F0Fu) | ((xb & 0x0F0F0F0Fu) << 4);
        out[2] = ((wa >> 4) & 0x0F0F0F0Fu) | (xa & 0xF0F0F0F0u);
        out[3] = ((wb >> 4) & 0x0F0F0F0Fu) | (xb & 0xF0F0F0F0u);
    }
}

// k = 5: the 2-bit field of plane 4 for the pair of out[q] byte r, placed at bits 8..9
// of that key (so the full key is byte | field << 8).  Returned as 4 words whose byte r
// holds the field in its low 2 bits, matching pair_keys' byte order.
__device__ __forceinline__ void plane4_fields(u32 p4, u32 (&f)[4]) {
    f[0] = p4 & 0x03030303u;
    f[1] = (p4 >> 2) & 0x03030303u;
    f[2] = (p4 >> 4) & 0x03030303u;
    f[3] = (p4 >> 6) & 0x03030303u;
}

// One 32-bit shared-memory load by shared-window address (a generic pointer costs two
// extra adds per address).
__device__ __forceinline__ u32 lds_u32(u32 addr) {
    u32 v;
    asm("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
    return v;
}

// PTX prmt (unlike __byte_perm it honours the sign-replicate bit of a selector nibble,
// which the k = 5 keys use to zero their upper bytes).
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// ---------------------------------------------------------------- MMA / loads
__device__ __forceinline__ void mma_16816(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3,
                                          u32 b0, u32 b1, __half) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_16816(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3,
                                          u32 b0, u32 b1, __nv_bfloat16) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Streaming loads of weights: read once, keep out of L1.
__device__ __forceinline__ uint4 ldg_stream_v4(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ uint2 ldg_stream_v2(const void* p) {
    uint2 r;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}
// Single-word loads (k = 3, 5: a block is 3 or 5 words, so the warp's k loads each
// touch the same sectors) allocate in L1 with evict-first priority, so planes 1..k-1
// hit the lines plane 0 brought in.  H200, 2026-11-22: k = 5 GEMV 10-23 % faster than
// with L1::no_allocate (every plane a separate L2 request); 2 x 8-byte + 1 word loads
// instead were 3-25 % slower (profiling/NOTES.md).
#ifndef KBIT_WORD_L1  // experiment hook
#define KBIT_WORD_L1 "L1::evict_first"
#endif
__device__ __forceinline__ u32 ldg_stream(const void* p) {
    u32 r;
    asm volatile("ld.global.nc." KBIT_WORD_L1 ".u32 %0, [%1];\n" : "=r"(r) : "l"(p));
    return r;
}

// Programmatic dependent launch (sm_90): wait for the previous grid in the stream (its
// memory visible), and let the next one launch.  Both are no-ops for a kernel launched
// without the programmatic-serialization attribute.
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Set an error bit of a grouped kernel's flag.  A programmatic dependent that has not
// waited yet (wait_first) waits first: the previous kernel may be the one that resets
// the flag (kbitcupy.grouped.read_errors), and a bit set before that reset would be lost.
__device__ __forceinline__ void report_err(int* err, int bit, bool wait_first) {
    if (wait_first) griddep_wait();
    atomicOr(err, bit);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    u32 s = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
// 16-byte cp.async whose source size is 0 when !valid: the destination is zero-filled
// and nothing is read (rows past M, K past the end).  s: shared-window address.
__device__ __forceinline__ void cp_async16_zfill(u32 s, const void* gmem, bool valid) {
    int sz = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(sz));
}
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
    cp_async16_zfill((u32)__cvta_generic_to_shared(smem), gmem, valid);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// ---------------------------------------------------------------- timeline probes
// For the kernels' trace builds (-DKBIT_TRACE, -DKBIT_WG_TRACE): SM clock, the same once x
// is available (the asm input makes the read wait for it), global timer (aligns CTAs), SM id.
__device__ __forceinline__ unsigned long long probe_clock() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned long long probe_clock_after(u32 x) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t) : "r"(x));
    return t;
}
__device__ __forceinline__ unsigned long long probe_gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ u32 probe_smid() {
    u32 s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

// ---------------------------------------------------------------- split-K fixup
// For the fused GEMMs (kbit_wgmma; kbit_gemm.cu keeps an inline copy in its own
// warp-major slot layout: moving it onto this helper changed the register allocation of
// 38 of its instantiations and made two spill, not done without a GPU measurement).
// Every CTA of an output tile stores its fp32 partial (NV
// float4 per thread, of which the first nv_live are real: rows past M are skipped) into
// its own slot ws[split][tile][i][thread] (coalesced 16-byte stores), then thread 0
// fences and does one atomicAdd on the tile's counter.  The CTA that sees count == k_splits - 1
// sums the k_splits slots in split order (deterministic: the result does not depend on
// which CTA arrives last), leaves the sum in v, resets the counter to 0 (so counters are
// all zero again after every launch, no host memset) and returns true; the others
// return false.  (A "first CTA stores, later CTAs atomicAdd" scheme would need the later
// CTAs to wait for the first one's store; per-split slots avoid the wait and the atomics.)
// The sums are latency-bound: for NV <= 4 the loads of SB slots x all NV float4s go out
// together (8 in flight, one L2 round trip per SB slots; H200: 3-9 % of the whole GEMM at
// M = 16 / 32).  Larger NV goes slot by slot with up to 8 float4 loads in flight, the
// CTA's own slot re-read from L2 so that v itself holds the running sum (no extra
// registers for it: the row-by-row loop it replaced cost one L2 round trip per float4
// row, 16 round trips = 9.7 us of the last CTA at TOK = 128, profiling/wgmma_trace.py).
// Both add in split order from 0, as the plain loop does: identical results.  CH: float4
// loads in flight per thread for NV > 4 (the caller's register budget decides: 4 kept the
// grouped TOK = 64 kernel at two CTAs per SM; one-CTA-per-SM callers pass more).
#ifdef KBIT_SERIAL_FIXUP  // experiment hook: the plain row-by-row loop for every NV (A/B)
#define KBIT_SERIAL_FIXUP_ON true
#else
#define KBIT_SERIAL_FIXUP_ON false
#endif
#ifdef KBIT_FIXUP_ROWWISE  // experiment hook: the plain loop for NV > 4 (the previous code, A/B)
#define KBIT_FIXUP_ROWWISE_ON true
#else
#define KBIT_FIXUP_ROWWISE_ON false
#endif
template <int NV, int NT, int CHUNK = 4>
__device__ __forceinline__ bool splitk_fixup(float4 (&v)[NV], int nv_live, float* __restrict__ ws,
                                             int* __restrict__ counters, int* flag, int tile, int tiles, int split,
                                             int k_splits) {
    const int tid = threadIdx.x;
    constexpr long TILE_FLOATS = (long)NV * 4 * NT;
    const long split_stride = (long)tiles * TILE_FLOATS;
    const float* base = ws + (long)tile * TILE_FLOATS + tid * 4;
#pragma unroll
    for (int i = 0; i < NV; i++)
        if (i < nv_live) __stcg(reinterpret_cast<float4*>(ws + (long)tile * TILE_FLOATS + tid * 4 + split * split_stride + i * 4 * NT), v[i]);
    // Release: the barrier orders every thread's partial stores before thread 0's
    // gpu-scope fence (cumulative) and atomic; acquire: thread 0 fences after the atomic,
    // the barrier orders it before everyone's loads (the grid-barrier pattern): one fence
    // per CTA instead of one per warp.  -DKBIT_FIXUP_FENCE_ALL: every thread fences (the
    // previous scheme, an A/B hook).
#ifdef KBIT_FIXUP_FENCE_ALL
    __threadfence();
#endif
    __syncthreads();
    if (tid == 0) {
#ifndef KBIT_FIXUP_FENCE_ALL
        __threadfence();
#endif
        const bool last = atomicAdd(counters + tile, 1) == k_splits - 1;
#ifndef KBIT_FIXUP_FENCE_ALL
        if (last) __threadfence();
#endif
        *flag = last;
    }
    __syncthreads();
    if (!*flag) return false;
#ifdef KBIT_FIXUP_FENCE_ALL
    __threadfence();
#endif
    if (NV > 4 && !KBIT_SERIAL_FIXUP_ON && !KBIT_FIXUP_ROWWISE_ON) {
        constexpr int CH = NV < CHUNK ? NV : CHUNK;
        static_assert(NV % CH == 0, "CHUNK must divide NV");
#pragma unroll
        for (int i0 = 0; i0 < NV; i0 += CH) {
#pragma unroll
            for (int i = 0; i < CH; i++) v[i0 + i] = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int sp = 0; sp < k_splits; sp++) {
                float4 x[CH];
#pragma unroll
                for (int i = 0; i < CH; i++)
                    x[i] = i0 + i < nv_live ? __ldcg(reinterpret_cast<const float4*>(base + sp * split_stride + (i0 + i) * 4 * NT))
                                            : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
                for (int i = 0; i < CH; i++) {
                    v[i0 + i].x += x[i].x; v[i0 + i].y += x[i].y; v[i0 + i].z += x[i].z; v[i0 + i].w += x[i].w;
                }
            }
        }
    } else if (NV > 4 || KBIT_SERIAL_FIXUP_ON) {
#pragma unroll
        for (int i = 0; i < NV; i++) {
            if (i >= nv_live) continue;
            float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int sp = 0; sp < k_splits; sp++) {
                const float4 x = sp == split ? v[i] : __ldcg(reinterpret_cast<const float4*>(base + sp * split_stride + i * 4 * NT));
                s.x += x.x; s.y += x.y; s.z += x.z; s.w += x.w;
            }
            v[i] = s;
        }
    } else {
        constexpr int SB = NV <= 2 ? 4 : 2;
        float4 sum[NV];
#pragma unroll
        for (int i = 0; i < NV; i++) sum[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int sp0 = 0; sp0 < k_splits; sp0 += SB) {
            float4 x[SB][NV];
#pragma unroll
            for (int u = 0; u < SB; u++) {
                const int sp = sp0 + u;
#pragma unroll
                for (int i = 0; i < NV; i++) {
                    x[u][i] = make_float4(0.f, 0.f, 0.f, 0.f);
                    if (i >= nv_live) continue;
                    if (sp == split) x[u][i] = v[i];
                    else if (sp < k_splits) x[u][i] = __ldcg(reinterpret_cast<const float4*>(base + sp * split_stride + i * 4 * NT));
                }
            }
#pragma unroll
            for (int u = 0; u < SB; u++) {
                if (sp0 + u < k_splits) {
#pragma unroll
                    for (int i = 0; i < NV; i++) {
                        sum[i].x += x[u][i].x; sum[i].y += x[u][i].y; sum[i].z += x[u][i].z; sum[i].w += x[u][i].w;
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < NV; i++)
            if (i < nv_live) v[i] = sum[i];
    }
    if (tid == 0) counters[tile] = 0;
    return true;
}

// k = 5 table copies (log2): an experiment hook, set for every family through the
// environment KBIT_K5_LOG2_COPIES (kbitcupy/_compile.py; kbitcupy.gemv.lut_bytes agrees).
#ifndef KBIT_K5_LOG2_COPIES
#define KBIT_K5_LOG2_COPIES 4
#endif
template <int K> struct PairLut {
    static constexpr int ENTRIES = 1 << (2 * K);
    static constexpr int LOG2_COPIES = K <= 4 ? 5 : KBIT_K5_LOG2_COPIES;  // k = 5: 16 copies (64 KB), ~1.5-way conflicts
    static constexpr int COPIES = 1 << LOG2_COPIES;
    static constexpr int WORDS = ENTRIES * COPIES;
};

// Build the replicated pair table: entry(key) = (cb[even bits], cb[odd bits]), stored
// [key][copy] so lane l always reads bank l (copy l % COPIES).
// nthreads: the threads that call it (tid < nthreads), default the whole block; tid: the
// caller's linear thread index (default threadIdx.x: 1-D blocks).
template <int K, typename T>
__device__ __forceinline__ void build_pair_lut(u32* lut, const float* cb_s, int nthreads = 0, int tid = -1) {
    typedef typename KbitType<T>::T2 T2;
    // One thread per distinct entry (computed once) writes its COPIES/4 16-byte chunks,
    // starting at chunk (thread % CH) and rotating: the 8 threads of each quarter-warp
    // then hit 8 different chunk positions = all 32 banks, so every store instruction
    // runs at the minimum 4 wavefronts (the same chunk for all threads was 32-way).
    constexpr int CH = PairLut<K>::COPIES / 4;
    for (int e = tid < 0 ? (int)threadIdx.x : tid; e < PairLut<K>::ENTRIES; e += nthreads ? nthreads : blockDim.x) {
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
template <int K>
__device__ __forceinline__ u32 lut_lookup(u32 lut_lane, u32 keys, u32 f, int r) {
    u32 key = __byte_perm(keys, 0u, 0x4440u + r);
    if (K == 5) key |= __byte_perm(f, 0u, 0x4440u + r) << 8;
    u32 v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(lut_lane + (key << (PairLut<K>::LOG2_COPIES + 2))));
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
        va[q] = hmul2_u32(lut_lookup<K>(lut_lane, kA[q], fA[q], r), sA, T());
        vb[q] = hmul2_u32(lut_lookup<K>(lut_lane, kB[q], fB[q], r), sB, T());
    }
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
template <int K, typename T, int MT, typename GetA>
__device__ __forceinline__ void block_pair_mma(float (&acc0)[MT][4], float (&acc1)[MT][4], const u32 (&wA)[K], u32 sA,
                                               const u32 (&wB)[K], u32 sB, GetA get_a, u32 lut_lane) {
    u32 kA[4], kB[4], fA[4], fB[4];
    block_keys<K>(wA, kA, fA);
    block_keys<K>(wB, kB, fB);
#pragma unroll
    for (int r = 0; r < 4; r++) {
        u32 va[4], vb[4];
        chunk_pairs<K, T>(va, vb, kA, fA, sA, kB, fB, sB, r, lut_lane);
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
template <int K, typename T, int MT>
__device__ __forceinline__ void block_pair_mma(float (&acc0)[MT][4], float (&acc1)[MT][4], const u32 (&wA)[K], u32 sA,
                                               const u32 (&wB)[K], u32 sB, const uint4 (&a)[MT][4], u32 lut_lane) {
    block_pair_mma<K, T, MT>(acc0, acc1, wA, sA, wB, sB, [&](int mt, int r) { return a[mt][r]; }, lut_lane);
}

// profiling/gemv_trace.py builds with -DKBIT_TRACE: per-block timeline in a global
// buffer (clock64 per SM; globaltimer at entry and exit to align blocks).
#ifdef KBIT_TRACE
#define KBIT_TRACE_STRIDE 64
__device__ unsigned long long kbit_trace[4096 * KBIT_TRACE_STRIDE];
#define KTR(i, v) kbit_trace[(long)blockIdx.x * KBIT_TRACE_STRIDE + (i)] = (v)
#endif

// One block computes 16-column groups grp0, grp0 + grp_stride, ... < ngroups of
// C[M, N] (row stride N) = A[M, K] * W^T, or (SLICES: kbit_gemv, kbit_gemv_grouped_sl)
// blockDim.y groups side by side: slice y = threadIdx.y computes group blockIdx.x *
// blockDim.y + y, and the slices share one pair table and one staged A (built once per
// block instead of once per group).  Each group's W = blockDim.x/32 warps split K in steps
// of 128 (4 quantization blocks per column), warp w taking steps w, w+W, ...; lane
// (g, t) owns columns n0+g and n0+g+8 and block 4*s+t of step s.  D steps of weights
// stay in flight per lane (register ring), and the next group's first steps are
// requested before the current group's reduction.  A is staged in shared memory and
// the pair table built once per block.
// ABS: unsigned char (E4M4) or float.  TILED: repacked layout, else flat.
// MT: token tiles of 8 (M <= 8 * MT); the weights are dequantized once for all of them.
// AMODE (the grouped kernel's fused MoE steps, see kbit_gemv_grouped): 0 = A rows as they
// are, 1 = row gather through a_rows, 2 = SwiGLU of [gate | up] rows.  A template
// parameter: the runtime form cost the plain grouped GEMV 4-9 % at 4-8 tokens (H200,
// 2026-11-24, moe-final10 vs moe-final11).
template <int K, typename T, typename ABS, bool TILED, int D, int MT, bool MULTI, bool DUAL, bool LATE, int AMODE = 0,
          bool SLICES = false, bool CBD = false>
__device__ __forceinline__ void gemv_block(const T* __restrict__ A, const u32* __restrict__ packed,
                                           const ABS* __restrict__ absmax, const float* __restrict__ codebook,
                                           T* __restrict__ C, int M, int N, int Kdim, float tensor_scale, int grp0,
                                           int grp_stride, int ngroups, bool pdl = false,
                                           const int* __restrict__ a_rows = nullptr, int a_nrows = 0) {
    extern __shared__ __align__(16) unsigned char smem[];
#ifdef KBIT_TRACE
    if (threadIdx.x == 0) {
        KTR(0, probe_gtime()); KTR(1, probe_clock()); KTR(2, probe_smid());
    }
#endif
    u32* lut = reinterpret_cast<u32*>(smem);
    const int KS = (Kdim + 127) >> 7;  // steps of 128
    T* a_s = reinterpret_cast<T*>(smem + PairLut<K>::WORDS * 4);
    float* red = reinterpret_cast<float*>(a_s + (long)M * KS * 128);
    // 1-D blocks unless SLICES (the constants keep the other instantiations' code as it was)
    const int ny = SLICES ? (int)blockDim.y : 1, ty = SLICES ? (int)threadIdx.y : 0;
    const unsigned nthr = SLICES ? blockDim.x * blockDim.y : blockDim.x;
    const unsigned tid = SLICES ? threadIdx.y * blockDim.x + threadIdx.x : threadIdx.x;
    float* cb_s = red + (nthr >> 5) * 128 * MT;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int KB = Kdim >> 5;
    const int n_tiles = (N + KBIT_TILE_N - 1) / KBIT_TILE_N;
    const int S = warp < KS ? (KS - warp + W - 1) / W : 0;
    // In both layouts a block's absmax index is its word offset / K, so only the word
    // offsets are kept (registers are at the cap).
    const long wstep = TILED ? 2L * W * n_tiles * (KBIT_TILE_N * KBIT_KB_PER_TILE * K) : 4L * W * K;

    // Per column (c = 0: n0+g, c = 1: n0+g+8): word offset of local step 0.
    long woff[2];
    bool col_ok[2];
    u32 wr[D][2][K];
    float sc[D][2];
    auto load_step = [&](int j, int sl) {
        const int kblock = 4 * (warp + sl * W) + t;
#pragma unroll
        for (int c = 0; c < 2; c++) {
            if (col_ok[c] && kblock < KB) {
                const long w = woff[c] + sl * wstep;
                load_planes<K>(wr[j][c], packed + w);
                sc[j][c] = load_scale(absmax, w / K);
            } else {
#pragma unroll
                for (int b = 0; b < K; b++) wr[j][c][b] = 0u;
                sc[j][c] = 0.0f;
            }
        }
    };
    auto start_group = [&](int grp) {
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int n = grp * 16 + g + 8 * c;
            // tiled buffers are padded to 128 columns; a slice past the last group loads nothing
            col_ok[c] = (!SLICES || grp < ngroups) && (TILED || n < N);
            woff[c] = TILED ? tiled_word_offset<K>(n, 4 * warp + t, n_tiles) : ((long)n * KB + 4 * warp + t) * K;
        }
#pragma unroll
        for (int j = 0; j < D; j++)
            if (j < S && (MULTI || j == 0)) load_step(j, j);
    };
    auto fill_ring = [&]() {  // single-group blocks: ring steps 1 .. D-1 of their group
#pragma unroll
        for (int j = 1; j < D; j++)
            if (j < S) load_step(j, j);
    };
    // Request the weights of step 0 (single-group blocks; MULTI: the whole ring), then
    // stage A and the codebook and build the pair table.  Single-group blocks request
    // their other ring steps after the prologue barrier (LATE: once step 0 has landed):
    // the SM's load queue paces the issue of loads to DRAM bandwidth, and a barrier
    // behind every warp's whole ring held all compute until the last load was issued
    // (profiling/gemv_trace.py; H200, 2026-11-22: 4-6 % faster at k = 4, 5 and M = 1..8,
    // LATE another 3-5 % where its registers cost no occupancy; profiling/NOTES.md).
    // Single-group blocks re-read blockIdx instead of keeping the group in a register.
    int grp = grp0;  // the launchers keep grid.x <= ngroups
    start_group(MULTI ? grp : (int)blockIdx.x * ny + ty);
#ifndef KBIT_EXPERIMENT_CB_CONST
    // CBD: the weight's codebook is the default one, whose levels are immediates: no load.  A
    // compile-time choice: the same select chain behind a runtime flag, beside the load, measured
    // no gain (H100, 2026-11-25, profiling/NOTES.md thirteenth session).
    const float cb_v = tid < (1u << K) ? (CBD ? kbit_default_level<K>(tid) : __ldg(codebook + tid)) : 0.0f;
#else  // experiment: no codebook load (wrong levels; times the load's share of the prologue)
    const float cb_v = tid < (1u << K) ? (float)(2 * (int)tid + 1 - (1 << K)) / (float)(1 << K) : 0.0f;
#endif
    // A row m: A + m * Kdim; AMODE 1 (the MoE row gather fused in): A + a_rows[m] * Kdim, a
    // row outside [0, a_nrows) reading as zeros; AMODE 2 (SwiGLU fused in): the row holds
    // [gate | up] of Kdim each (stride 2 Kdim) and the staged value is silu(gate) * up,
    // rounded once (as kbit_silu_mul).
    auto stage_A = [&]() {
        const int kpad = KS * 128;
        const int chunks = M * (kpad / 8);
        for (int c = tid; c < chunks; c += nthr) {
            const int m = c / (kpad / 8), kk = (c % (kpad / 8)) * 8;
            uint4* dst = reinterpret_cast<uint4*>(a_s + (long)m * kpad + kk);
            if constexpr (AMODE == 0) {
                if (kk < Kdim) cp_async16(dst, A + (long)m * Kdim + kk);
                else *dst = make_uint4(0u, 0u, 0u, 0u);
            } else if constexpr (AMODE == 1) {
                const int row = a_rows[m];
                if (kk < Kdim && row >= 0 && row < a_nrows) cp_async16(dst, A + (long)row * Kdim + kk);
                else *dst = make_uint4(0u, 0u, 0u, 0u);
            } else {
                if (kk < Kdim) {
                    const T* src = A + (long)m * (2 * Kdim) + kk;
                    const uint4 gw = *reinterpret_cast<const uint4*>(src);
                    const uint4 uw = *reinterpret_cast<const uint4*>(src + Kdim);
                    const T* g8 = reinterpret_cast<const T*>(&gw);
                    const T* u8v = reinterpret_cast<const T*>(&uw);
                    uint4 r;
                    T* r8 = reinterpret_cast<T*>(&r);
#pragma unroll
                    for (int e = 0; e < 8; e++)
                        r8[e] = KbitType<T>::from_float(silu_mul_f(KbitType<T>::to_float(g8[e]), KbitType<T>::to_float(u8v[e])));
                    *dst = r;
                } else {
                    *dst = make_uint4(0u, 0u, 0u, 0u);
                }
            }
        }
        cp_async_commit();
    };
    // pdl (launched as a programmatic dependent of the previous grid, which may write
    // A): weights, codebook and pair table first, A only after griddepcontrol.wait.
    // Otherwise A is requested first, so it lands while the table is built (pdl's
    // order costs ~6 % without the overlap; H200, 2026-11-22, profiling/pdl_ab.py).
    if (!pdl) stage_A();
    // Codebook to shared memory, then the pair table; A lands meanwhile.
    {
        if (tid < 32) cb_s[tid] = cb_v;
        __syncthreads();
#ifdef KBIT_TRACE
        if (threadIdx.x == 0) KTR(46, probe_clock());
#endif
#ifndef KBIT_EXPERIMENT_NO_LUT  // profiling/gemv_stages.py: time without this stage
        if (SLICES) build_pair_lut<K, T>(lut, cb_s, nthr, tid);
        else build_pair_lut<K, T>(lut, cb_s);
#endif
        if (pdl) {  // A may come from the previous grid: wait for it only now
            griddep_wait();
            stage_A();
        }
        cp_async_wait<0>();
        __syncthreads();
        // A next grid launched as our programmatic dependent may start its prologue now.
        // Only after our own wait: so no grid two back can still be running when it reads
        // its weights (it reads A only after its own wait, i.e. after we completed).
        if (!MULTI || pdl) griddep_launch_dependents();
    }
#ifdef KBIT_TRACE
    if (threadIdx.x == 0) KTR(3, probe_clock());
#endif
    if (!MULTI && !LATE) fill_ring();

    const u32 lut_lane = (u32)__cvta_generic_to_shared(lut) + 4 * (lane & (PairLut<K>::COPIES - 1));
    const T* a_row = a_s + (long)g * KS * 128 + t * 32;
    constexpr int TOK = 8 * MT;
    do {
        const int n0 = (MULTI ? grp : (int)blockIdx.x * ny + ty) * 16;
        float acc[MT][4];
        // DUAL: a second accumulator set halves the mma dependency chain (its registers
        // cost occupancy only where a block has the SM to itself)
        float acc2_[MT][4];
        float (&acc2)[MT][4] = DUAL ? acc2_ : acc;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.f;
            acc2[mt][0] = acc2[mt][1] = acc2[mt][2] = acc2[mt][3] = 0.f;
        }
        for (int s0 = 0; s0 < S; s0 += D) {
#pragma unroll
            for (int j = 0; j < D; j++) {
                const int sl = s0 + j;
                if (sl < S) {
                    uint4 a[MT][4];
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        const uint4* ap =
                            reinterpret_cast<const uint4*>(a_row + ((long)8 * mt * KS + warp + sl * W) * 128);
                        const bool row_ok = g + 8 * mt < M;
#pragma unroll
                        for (int r = 0; r < 4; r++) a[mt][r] = row_ok ? ap[r] : make_uint4(0u, 0u, 0u, 0u);
                    }
                    const u32 sA = scale_pair<T>(sc[j][0]), sB = scale_pair<T>(sc[j][1]);
                    u32 wA[K], wB[K];
#pragma unroll
                    for (int b = 0; b < K; b++) { wA[b] = wr[j][0][b]; wB[b] = wr[j][1][b]; }
#ifdef KBIT_TRACE
                    if (lane == 0 && warp < 8 && sl < 2) KTR(4 + 4 * warp + 2 * sl, probe_clock_after(wA[0] ^ wB[0]));
#endif
                    if (sl + D < S) load_step(j, sl + D);
                    if (LATE && !MULTI && sl == 0) fill_ring();  // once step 0 has landed
#ifndef KBIT_EXPERIMENT_NO_COMPUTE
                    block_pair_mma<K, T, MT>(acc, acc2, wA, sA, wB, sB, a, lut_lane);
#else  // keep the loads alive
                    acc[0][0] += __uint_as_float((wA[0] ^ wB[K - 1] ^ sA ^ sB ^ a[0][0].x) & 0x3fffffu);
#endif
#ifdef KBIT_TRACE
                    if (lane == 0 && warp < 8 && sl < 2) KTR(5 + 4 * warp + 2 * sl, probe_clock_after(__float_as_uint(acc[0][0])));
#endif
                }
            }
        }

        if (DUAL) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int i = 0; i < 4; i++) acc[mt][i] += acc2[mt][i];
        }
        // Reduce the W warps' partial sums: red[slice][warp][col 0..15][token 0..TOK-1].
        float* red_y = red + ty * W * 16 * TOK;
        float* rw = red_y + warp * 16 * TOK;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            rw[g * TOK + 8 * mt + 2 * t] = acc[mt][0];
            rw[g * TOK + 8 * mt + 2 * t + 1] = acc[mt][1];
            rw[(g + 8) * TOK + 8 * mt + 2 * t] = acc[mt][2];
            rw[(g + 8) * TOK + 8 * mt + 2 * t + 1] = acc[mt][3];
        }
#ifdef KBIT_TRACE
        if (lane == 0 && warp < 8) KTR(36 + warp, probe_clock());
#endif
        grp = MULTI ? grp + grp_stride : ngroups;  // MULTI: several groups per block
        if (MULTI && grp < ngroups) start_group(grp);  // next group's loads fly during the reduction
        __syncthreads();
        for (int i = threadIdx.x; i < M * 16; i += blockDim.x) {
            const int m = i >> 4, c = i & 15, nn = n0 + c;
            float s = 0.f;
            for (int w = 0; w < W; w++) s += red_y[w * 16 * TOK + c * TOK + m];
            if (nn < N) C[(long)m * N + nn] = KbitType<T>::from_float(s * tensor_scale);
        }
#ifdef KBIT_TRACE
        if (threadIdx.x == 0) { KTR(44, probe_clock()); KTR(45, probe_gtime()); }
#endif
        if (MULTI) __syncthreads();  // red is rewritten by the next group
    } while (MULTI && grp < ngroups);
}

// No register cap below the hardware's: k = 4 takes 80 registers (three 256-thread
// blocks per SM), DUAL ~96 (one 512-thread block per SM, which is how the plan uses it).
// H200, 2026-11-22 (profiling/NOTES.md): the 64-register cap of earlier versions cost
// 2-7 % at k = 4.
#ifndef KBIT_GEMV_BOUNDS  // experiment hooks (profiling/gemv_ab.py, moe_ab.py variants)
#define KBIT_GEMV_BOUNDS 512, 1
#endif
#ifndef KBIT_GROUPED_BOUNDS
#define KBIT_GROUPED_BOUNDS 512, 1
#endif
// SLICES: blockDim.y column groups per block (kbitcupy.gemv.plan's gpb > 1).
// CBD: the default codebook (kbit_default_level; codebook is not read).  H100, 2026-11-25: k = 4
// M = 1 dense TOTAL -2.8 %, k = 5 -2.6 % (profiling/NOTES.md, thirteenth session).
template <int K, typename T, typename ABS, bool TILED, int D, int MT, bool DUAL, bool LATE, bool SLICES = false,
          bool CBD = false>
__global__ void __launch_bounds__(KBIT_GEMV_BOUNDS)
    kbit_gemv(const T* __restrict__ A, const u32* __restrict__ packed, const ABS* __restrict__ absmax,
              const float* __restrict__ codebook, T* __restrict__ C, int M, int N, int Kdim, float tensor_scale,
              int pdl) {
    gemv_block<K, T, ABS, TILED, D, MT, false, DUAL, LATE, 0, SLICES, CBD>(A, packed, absmax, codebook, C, M, N, Kdim,
                                        tensor_scale, blockIdx.x, gridDim.x, (N + 15) / 16, pdl != 0);
}

// MoE: grid.y = expert slot; slot s multiplies rows offsets[s]..offsets[s+1] of A (tokens
// sorted by expert) by expert expert_ids[s] of a bank of E tiled experts (wpe words and
// ape absmax bytes apart, per-expert tensor scale), in chunks of 8 * MT rows.  A bad id
// or offset writes nothing and sets err (bit 1: id, bit 2: offsets, bit 4: more rows
// than max_tokens, which is still computed correctly).
// SL: the dense kernel's block shape instead of the loop over groups: blockDim.y column
// groups side by side (slices over one pair table), one step requested before the prologue
// barrier (kbitcupy.gemv.grouped_plan's gpb).
// Experiment hook: the slices kernel's register ring depth (4: 5-9 % slower on the MoE shapes,
// H200 2026-11-25, profiling/results/nvidia-h200_2026-11-25_moe_d4.log).
#ifndef KBIT_GROUPED_SL_DEPTH
#define KBIT_GROUPED_SL_DEPTH 2
#endif
template <int K, typename T, int MT, int AMODE, bool SL>
__device__ __forceinline__ void grouped_gemv_body(const T* __restrict__ A, const u32* __restrict__ packed,
                                                  const u8* __restrict__ absmax, const float* __restrict__ codebook,
                                                  const float* __restrict__ tscale, const int* __restrict__ expert_ids,
                                                  const int* __restrict__ offsets, T* __restrict__ C, int N, int Kdim,
                                                  int E, int rows, long long wpe, long long ape, int max_tokens,
                                                  int* __restrict__ err, int pdl, const int* __restrict__ a_rows,
                                                  int a_nrows) {
    // pdl (launched as a programmatic dependent): 1 = ids and offsets may come from the
    // previous grid (device routing), so wait for it before anything (only the launch
    // overlaps); 2 = the caller guarantees they do not (kbitcupy.grouped ids_stable): the
    // first pass requests its weights and builds the pair table before the wait.
    if (pdl == 1) {
        griddep_wait();
        griddep_launch_dependents();
    }
    const int slot = blockIdx.y;
    const int e = expert_ids[slot], r0 = offsets[slot], r1 = offsets[slot + 1];
    if (e < 0 || e >= E || r0 < 0 || r1 < r0 || r1 > rows) {
        if (threadIdx.x == 0 && (!SL || threadIdx.y == 0) && blockIdx.x == 0)
            report_err(err, (e < 0 || e >= E) ? KBIT_ERR_EXPERT_ID : KBIT_ERR_OFFSETS, pdl == 2);
        return;
    }
    if (r1 - r0 > max_tokens && threadIdx.x == 0 && (!SL || threadIdx.y == 0) && blockIdx.x == 0)
        report_err(err, KBIT_ERR_MAX_TOKENS, pdl == 2);
    // AMODE 1 (the row gather fused in): sorted row r is A's row a_rows[r]; AMODE 2: A's rows
    // are [gate | up] (2 Kdim) and the kernel multiplies silu(gate) * up (kbitcupy/moe.py)
    for (int c0 = r0; c0 < r1; c0 += 8 * MT) {
        // (MULTI = !SL; SL: groups from blockIdx.x and threadIdx.y as in kbit_gemv)
        gemv_block<K, T, u8, true, SL ? KBIT_GROUPED_SL_DEPTH : 2, MT, !SL, false, false, AMODE, SL>(
            AMODE == 1 ? A : A + (long)c0 * (AMODE == 2 ? 2 * Kdim : Kdim), packed + e * wpe, absmax + e * ape,
            codebook, C + (long)c0 * N, min(8 * MT, r1 - c0), N, Kdim, tscale[e], blockIdx.x, gridDim.x,
            (N + 15) / 16, pdl == 2 && c0 == r0, AMODE == 1 ? a_rows + c0 : nullptr, a_nrows);
        __syncthreads();
    }
}

#define KBIT_GROUPED_ARGS                                                                                           \
    const T *__restrict__ A, const u32 *__restrict__ packed, const u8 *__restrict__ absmax,                         \
        const float *__restrict__ codebook, const float *__restrict__ tscale, const int *__restrict__ expert_ids,  \
        const int *__restrict__ offsets, T *__restrict__ C, int N, int Kdim, int E, int rows, long long wpe,       \
        long long ape, int max_tokens, int *__restrict__ err, int pdl, const int *__restrict__ a_rows, int a_nrows
#define KBIT_GROUPED_PASS A, packed, absmax, codebook, tscale, expert_ids, offsets, C, N, Kdim, E, rows, wpe, ape, \
                          max_tokens, err, pdl, a_rows, a_nrows
template <int K, typename T, int MT, int AMODE>
__global__ void __launch_bounds__(KBIT_GROUPED_BOUNDS) kbit_gemv_grouped(KBIT_GROUPED_ARGS) {
    grouped_gemv_body<K, T, MT, AMODE, false>(KBIT_GROUPED_PASS);
}
// The slices form (grouped_plan's gpb).  At most 128 registers, so its 16-warp blocks launch
// (uncapped it would take more).  KBIT_GROUPED_SL_MAXNREG=80 (an experiment: three 256-thread
// blocks per SM, as the dense kernel) spills 16-104 bytes and was not faster (moe_sl10.sh).
#ifndef KBIT_GROUPED_SL_MAXNREG
#define KBIT_GROUPED_SL_MAXNREG 128
#endif
template <int K, typename T, int MT, int AMODE>
__global__ void __maxnreg__(KBIT_GROUPED_SL_MAXNREG) kbit_gemv_grouped_sl(KBIT_GROUPED_ARGS) {
    grouped_gemv_body<K, T, MT, AMODE, true>(KBIT_GROUPED_PASS);
}
