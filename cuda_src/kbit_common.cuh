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
#define KBIT_ERR_ROWS 8  // a routing row index (sorted_token / pos) outside the rows it indexes

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
// Branch-free decode: code (0..255) << 19 is a float32 with exponent field e and mantissa m << 19, i.e.
// 2^(e - 127) (1 + m / 16), or for e = 0 the denormal m 2^-130; times 2^116 (exact: a power of two, no ftz in these
// builds) that is the E4M4 value of every code, subnormals included (two instructions; a select form took eight).
__device__ __forceinline__ float e4m4_decode(u32 code) {
    return __uint_as_float(code << 19) * 0x1p116f;
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

// absmax in its storage formats: the raw storage bits (0 decodes to 0.0 in every format), and
// the float scale from them.  Ring buffers keep the raw bits and decode where the scale is used
// (scale_from_raw): a ring slot's loads sit in a branch (past K or N: zeros), and a decode there
// made the warp wait for its absmax byte right after issuing the load, before the prologue or
// the step it overlaps (SASS: the decode next to the LDG.U8).  H100, 2026-11-25: decode GEMV
// dense TOTAL k = 4 M = 1 -3.6 % (-9.2 % with PDL), k = 2 -7.9 %; grouped GEMV -6..-8 %
// (profiling/NOTES.md, fourteenth session).
__device__ __forceinline__ u32 load_scale_raw(const u8* p, long i) { return p[i]; }
__device__ __forceinline__ u32 load_scale_raw(const float* p, long i) { return __float_as_uint(p[i]); }
__device__ __forceinline__ u32 load_scale_raw(const __half* p, long i) { return __half_as_ushort(p[i]); }
template <typename ABS> __device__ __forceinline__ float scale_from_raw(u32 r);
template <> __device__ __forceinline__ float scale_from_raw<u8>(u32 r) { return e4m4_decode(r); }
template <> __device__ __forceinline__ float scale_from_raw<float>(u32 r) { return __uint_as_float(r); }
template <> __device__ __forceinline__ float scale_from_raw<__half>(u32 r) {
    return __half2float(__ushort_as_half((unsigned short)r));
}
// Load and decode at once (where nothing else could overlap the load).
template <typename ABS>
__device__ __forceinline__ float load_scale(const ABS* p, long i) { return scale_from_raw<ABS>(load_scale_raw(p, i)); }

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
// (a & m) | (b & ~m) as one LOP3: ptxas made two of it from the C form (it does not pair a mask with its
// complement), about 8 of a k = 4 block's ~24 key instructions.
__device__ __forceinline__ u32 bitsel(u32 a, u32 b, u32 m) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0xE4;\n" : "=r"(d) : "r"(a), "r"(b), "r"(m));
    return d;
}
template <int K>
__device__ __forceinline__ void pair_keys(const u32 (&p)[K], u32 (&out)[4]) {
    const u32 E2 = 0x33333333u, N4 = 0x0F0F0F0Fu;  // even 2-bit fields, low nibbles
    u32 p0 = p[0], p1 = K > 1 ? p[1] : 0u;
    // nibble q of wa: [p1 field 2q | p0 field 2q]; wb: fields 2q+1
    u32 wa = bitsel(p0, p1 << 2, E2);
    u32 wb = bitsel(p0 >> 2, p1, E2);
    if (K == 2) {
        out[0] = wa & N4;         // pairs 4r   -> elements 8r,   8r+1
        out[1] = wb & N4;         // pairs 4r+1 -> elements 8r+2, 8r+3
        out[2] = (wa >> 4) & N4;  // pairs 4r+2
        out[3] = (wb >> 4) & N4;  // pairs 4r+3
    } else if (K == 3) {
        u32 p2 = p[K > 2 ? 2 : 0];
        out[0] = (wa & 0x0F0F0F0Fu) | ((p2 & 0x03030303u) << 4);
        out[1] = (wb & 0x0F0F0F0Fu) | ((p2 & 0x0C0C0C0Cu) << 2);
        out[2] = ((wa >> 4) & 0x0F0F0F0Fu) | (p2 & 0x30303030u);
        out[3] = ((wb >> 4) & 0x0F0F0F0Fu) | ((p2 >> 2) & 0x30303030u);
    } else {
        u32 p2 = p[K > 2 ? 2 : 0], p3 = p[K > 3 ? 3 : 0];
        u32 xa = bitsel(p2, p3 << 2, E2);
        u32 xb = bitsel(p2 >> 2, p3, E2);
        out[0] = bitsel(wa, xa << 4, N4);
        out[1] = bitsel(wb, xb << 4, N4);
        out[2] = bitsel(wa >> 4, xa, N4);
        out[3] = bitsel(wb >> 4, xb, N4);
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
// extra adds per address).  Not volatile and no memory clobber, so the compiler may move, merge or hoist it
// as a pure function of the address: only for tables that stay constant once built and behind a barrier
// (the pair and scale tables).  Data written while the kernel runs (stages filled by TMA / cp.async) needs
// an asm volatile load that stays after its wait (kbit_wgmma.cu lds_planes).
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
// Pair key r (0..3) of a key word: its byte r; k = 5 with the fifth plane's 2 bits (byte r of hi, see
// plane4_fields) as bits 8..9, one PRMT whose upper bytes are the sign of hi's byte (0).
template <int K>
__device__ __forceinline__ u32 pair_key(u32 keys, u32 hi, int r) {
    if (K <= 4) return __byte_perm(keys, 0u, 0x4440u + r);
    return prmt(keys, hi, (u32)(r | ((4 + r) << 4) | ((12 + r) << 8) | ((12 + r) << 12)));
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
// Wait for the previous grid, then let the next one launch (a dependent that loads nothing
// before its own wait may start: no grid two back can still be running then).
__device__ __forceinline__ void griddep_wait_release() {
    griddep_wait();
    griddep_launch_dependents();
}
// Loads of what the previous grid may have written (expert ids, offsets, row indices, the fused
// SwiGLU's rows) for a kernel that waits first.  A plain read through a const __restrict__
// pointer compiles to ld.global.nc, which the compiler may treat as invariant and hoist above the
// wait's asm: it did so with the grouped GEMV's ids and offsets, so a wait-first launch read them
// before the previous grid's writes were visible (profiling/sass_wait_check.py, eighteenth
// session).  A volatile asm stays after the wait's volatile asm; a coherent ld.global.
__device__ __forceinline__ int ld_after_wait(const int* p) {
    int v;
    asm volatile("ld.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ float ld_after_wait(const float* p) {
    float v;
    asm volatile("ld.global.f32 %0, [%1];\n" : "=f"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ uint4 ld_after_wait_v4(const void* p) {
    uint4 v;
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)
                 : "memory");
    return v;
}
// L2 prefetch of the line holding p.  PTX prefetches are hints with no effect on the memory
// model: a later load returns what it would have returned without one.  So a safe-PDL kernel
// may prefetch its weights before griddepcontrol.wait: if the previous grid writes them, the
// loads after the wait still see the writes (L2 is the point of coherence).
__device__ __forceinline__ void prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}
// Safe PDL (kbitcupy/_pdl.py): the dense kernels' pdl argument KBIT_PDL_SAFE = launched as a
// programmatic dependent that loads nothing before griddepcontrol.wait (safe whatever that
// grid wrote: weights included), so only the launch and the block start overlap its tail --
// and in the decode GEMV L2 prefetches of its first weights (prefetch_l2; H100 k = 4 M = 1
// TOTAL 22.26 -> 20.53 us; the same with cp.async.bulk.prefetch.L2 in the streaming GEMV and
// the wgmma kernel measured no gain, M = 16 +1.8 %, 64 -0.3 %, not kept: seventeenth session).
// Then it lets the next grid launch (which, launched so, waits the same way) and runs in its
// default order.  pdl == 1 is the early order (weights before the wait).
#define KBIT_PDL_SAFE 3
// The decode GEMV's safe mode with only one ring step prefetched (kbitcupy.gemv.safe_prefetch_steps:
// on most shapes the full ring's prefetch delays the previous grid's own loads more than it saves).
#define KBIT_PDL_SAFE_PF1 4
// The grouped kernels' pdl argument for safe PDL with ids the kernel right before did not write
// (kbitcupy/_pdl.py GROUPED_SAFE_EARLY; the grouped GEMV and wgmma kernels): ids read and weights L2-prefetched
// before the wait, nothing else.
#define KBIT_GROUPED_SAFE_EARLY 3
__device__ __forceinline__ void pdl_safe_entry(int pdl) {
    if (pdl == KBIT_PDL_SAFE) griddep_wait_release();
}

// Set an error bit of a grouped kernel's flag.  A programmatic dependent that has not
// waited yet (wait_first) waits first: the previous kernel may be the one that resets
// the flag (kbitcupy.grouped.read_errors), and a bit set before that reset would be lost.
__device__ __forceinline__ void report_err(int* err, int bit, bool wait_first) {
    if (wait_first) griddep_wait();
    atomicOr(err, bit);
}

// 16-byte cp.async to shared-window address s (or a generic pointer into shared memory).
__device__ __forceinline__ void cp_async16(u32 s, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    cp_async16((u32)__cvta_generic_to_shared(smem), gmem);
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
// at most `pending` (a runtime count, capped at 6) copy groups still in flight (kbit_gemm's
// pipeline: stages - 2, stages <= 8; splitk_fixup's staged slots)
__device__ __forceinline__ void cp_async_wait_dyn(int pending) {
    switch (pending < 6 ? pending : 6) {
        case 6: cp_async_wait<6>(); break;
        case 5: cp_async_wait<5>(); break;
        case 4: cp_async_wait<4>(); break;
        case 3: cp_async_wait<3>(); break;
        case 2: cp_async_wait<2>(); break;
        case 1: cp_async_wait<1>(); break;
        default: cp_async_wait<0>();
    }
}

// mbarrier (shared memory, CTA scope; arrive releases, try_wait acquires): the streaming GEMV's
// stage hand-off, and the wgmma TMA experiment's (transaction counts: expect_tx, complete_tx).
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_inval(u32 bar) {
    asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {  // no arrive
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
    u32 done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    return done != 0;
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    while (!mbar_try_wait(bar, parity)) {
    }
}
// 1-D bulk copy global -> shared (16-byte units), completing on an mbarrier's transaction count.
__device__ __forceinline__ void bulk_load(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
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

// 16 bytes of shared memory at shared-window address a: ld_shared_f4 this CTA's (splitk_fixup's staged slots),
// ld_cluster_f4 (sm_90, below) a cluster peer's at a cluster_map address.
#define KBIT_LD_F4(NAME, SPACE)                                                     \
    __device__ __forceinline__ float4 NAME(u32 a) {                                 \
        float4 v;                                                                   \
        asm volatile("ld." SPACE ".v4.f32 {%0,%1,%2,%3}, [%4];\n"                   \
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)                   \
                     : "r"(a)                                                       \
                     : "memory");                                                   \
        return v;                                                                   \
    }
KBIT_LD_F4(ld_shared_f4, "shared")

// ---------------------------------------------------------------- thread block clusters (sm_90)
// The split-K sums over DSMEM (kbit_wgmma's and kbit_gemm's cluster fixups).  Only sm_90 code calls them.
#define KBIT_MAX_CLUSTER 8  // portable cluster size limit; more splits use the workspace
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// The split form, arrive now and wait later; relaxed: the arrive orders none of our memory operations
// (a release arrive waits until they are performed, the C stores included).
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); }
__device__ __forceinline__ u32 cluster_map(u32 saddr, int rank) {
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(saddr), "r"(rank));
    return r;
}
KBIT_LD_F4(ld_cluster_f4, "shared::cluster")
#undef KBIT_LD_F4

// ---------------------------------------------------------------- split-K fixup
// For the fused GEMMs (kbit_wgmma; kbit_gemm.cu's gemm_epilogue keeps its own copy in a
// warp-major slot layout with 8-byte half slots at M <= 8: inlined, moving it onto this helper
// changed the register allocation of 38 instantiations and made two spill; out of line, as the
// epilogue now is, the move is open, not measured).
// Every CTA of an output tile stores its fp32 partial (NV
// float4 per thread, of which the first nv_live are real: rows past M are skipped) into
// its own slot ws[split][tile][i][thread] (coalesced 16-byte stores), then thread 0
// does one acquire-release atomicAdd on the tile's counter.  The CTA that sees count == k_splits - 1
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
// atomicAdd with acquire-release semantics at GPU scope (the split-K tile counters): one
// MEMBAR.ALL.GPU + the atomic, where __threadfence() before and after a relaxed atomicAdd
// is two fence.sc (MEMBAR.SC.GPU).
__device__ __forceinline__ int atomic_add_acq_rel(int* p, int v) {
    int old;
    asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}
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
// The last CTA's sum for NV > 4 with the slots copied into the caller's idle shared memory by cp.async (no
// registers held per load in flight; see splitk_fixup's buf).  H100, 2026-11-28 (run45.sh smem / smemoe, two
// alternations): dense k = 4 M = 64 (TOK = 64, two CTAs an SM) TOTAL 49.03 / 48.88 -> 48.13 / 48.15 us (down, 8 splits,
// 12.12 -> 11.67), grouped gate/up fused 10 experts x 64 tokens 15.65 -> 15.26; TOK = 128 (one CTA an SM) unchanged.
// -DKBIT_FIXUP_SMEM=0: the register loads for every caller (the A/B hook).
#ifndef KBIT_FIXUP_SMEM
#define KBIT_FIXUP_SMEM 1
#endif
// The smallest NV (float4 a thread) that takes the staged sum: TOK >= 64.  At TOK = 32 (NV = 4; H100 and H200,
// 2026-11-28, run45.sh nv2 / h200 / h200b, two alternations each) dense down / O at M = 32 (8 / 6 splits) were
// 0.47-0.53 us faster but gate/up and Q (3 / 4 splits, which the dispatch serves by the wgmma kernel on the H200)
// 0.07-0.12 slower whichever path their sum took; at TOK = 16 (NV = 2) four of the five shapes 0.2-0.3 slower.
// -DKBIT_FIXUP_SMEM_MIN_NV=n: the hook.
#ifndef KBIT_FIXUP_SMEM_MIN_NV
#define KBIT_FIXUP_SMEM_MIN_NV 8
#endif
template <int NV, int NT, int CHUNK = 4>
__device__ __forceinline__ bool splitk_fixup(float4 (&v)[NV], int nv_live, float* __restrict__ ws,
                                             int* __restrict__ counters, int* flag, int tile, int tiles, int split,
                                             int k_splits, u32 buf_s = 0u, int buf_bytes = 0) {
    const int tid = threadIdx.x;
    constexpr long TILE_FLOATS = (long)NV * 4 * NT;
    const long split_stride = (long)tiles * TILE_FLOATS;
    const float* base = ws + (long)tile * TILE_FLOATS + tid * 4;
#pragma unroll
    for (int i = 0; i < NV; i++)
        if (i < nv_live) __stcg(reinterpret_cast<float4*>(ws + (long)tile * TILE_FLOATS + tid * 4 + split * split_stride + i * 4 * NT), v[i]);
    // Release: the barrier orders every thread's partial stores before thread 0's
    // gpu-scope release (cumulative) on the counter; acquire: thread 0's atomic acquires,
    // the barrier orders it before everyone's loads (the grid-barrier pattern): one fence
    // per CTA instead of one per warp.  -DKBIT_FIXUP_FENCE_ALL: every thread fences (the
    // previous scheme, an A/B hook).
#ifdef KBIT_FIXUP_FENCE_ALL
    __threadfence();
#endif
    __syncthreads();
    if (tid == 0) {
#if defined(KBIT_FIXUP_FENCE_ALL)
        const bool last = atomicAdd(counters + tile, 1) == k_splits - 1;
#elif defined(KBIT_FIXUP_SC_FENCE)
        __threadfence();
        const bool last = atomicAdd(counters + tile, 1) == k_splits - 1;
        if (last) __threadfence();
#else
        // One acquire-release atomic instead of __threadfence (fence.sc: MEMBAR.SC.GPU) before
        // and after a relaxed one: release and acquire are all the pattern needs (release is
        // cumulative over the barrier-ordered stores of the CTA), and SASS drops to one
        // MEMBAR.ALL.GPU.  -DKBIT_FIXUP_SC_FENCE: the two sc fences (the previous code, A/B).
        const bool last = atomic_add_acq_rel(counters + tile, 1) == k_splits - 1;
#endif
        *flag = last;
    }
    __syncthreads();
    if (!*flag) return false;
#ifdef KBIT_FIXUP_FENCE_ALL
    __threadfence();
#endif
    // buf_s / buf_bytes: shared memory the caller no longer needs (the wgmma kernel's stage buffers), room for nb
    // whole slots of the tile: the slots come in by cp.async, nb in flight at once, each thread copying and then
    // reading back only its own 16-byte pieces (no barrier), summed in split order as below (the same bits).
    // Registers bound the loads in flight of the path below (CHUNK float4 a thread: one L2 round trip per
    // CHUNK x 4 KB of a slot at 256 threads).
    // (at most 7 buffers: cp_async_wait_dyn counts up to 6 copy groups still pending)
    const int nb =
        KBIT_FIXUP_SMEM && NV >= KBIT_FIXUP_SMEM_MIN_NV ? min(min(k_splits, 7), buf_bytes / (NV * NT * 16)) : 0;
    if (nb > 0) {
        const u32 me = buf_s + 16u * (u32)tid;
        auto issue = [&](int sp, int b) {
#pragma unroll
            for (int i = 0; i < NV; i++)
                if (i < nv_live) cp_async16(me + 16u * (u32)((b * NV + i) * NT), base + sp * split_stride + i * 4 * NT);
            cp_async_commit();
        };
        for (int sp = 0; sp < nb; sp++) issue(sp, sp);
#pragma unroll
        for (int i = 0; i < NV; i++) v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int sp = 0, b = 0; sp < k_splits; sp++) {
            cp_async_wait_dyn(min(k_splits, sp + nb) - sp - 1);  // slot sp landed
#pragma unroll
            for (int i = 0; i < NV; i++) {
                if (i < nv_live) {
                    const float4 x = ld_shared_f4(me + 16u * (u32)((b * NV + i) * NT));
                    v[i].x += x.x; v[i].y += x.y; v[i].z += x.z; v[i].w += x.w;
                }
            }
            if (sp + nb < k_splits) issue(sp + nb, b);  // (its reads above are done: their sums are)
            b = b + 1 == nb ? 0 : b + 1;
        }
    } else if (NV > 4 && !KBIT_SERIAL_FIXUP_ON && !KBIT_FIXUP_ROWWISE_ON) {
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
