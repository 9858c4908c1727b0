// quantize, dequantize (flat and tiled), repack (flat -> tiled).
// Bit-exact with kbitcupy/reference.py (kbit_dequant_tile: see its comment).
#include "kbit_pairlut.cuh"

// One warp per 32-element block: warp absmax, E4M4 (or float32) scale, nearest
// level against the decoded scale, __ballot_sync packs the k bit planes.
// ABS = u8 (E4M4 bytes, scales divided by the power-of-two tensor scale) or float.
template <typename T, int K, typename ABS>
__global__ void __launch_bounds__(256) kbit_quantize(const T* __restrict__ W, const float* __restrict__ codebook,
                                                     u32* __restrict__ packed, ABS* __restrict__ absmax,
                                                     long nblocks, float tensor_scale) {
    const int lane = threadIdx.x & 31;
    const float cb = lane < (1 << K) ? codebook[lane] : 0.0f;
    const long warps = (long)gridDim.x * (blockDim.x >> 5);
    for (long blk = (long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); blk < nblocks; blk += warps) {
        float x = KbitType<T>::to_float(W[blk * 32 + lane]);
        float a = fabsf(x);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        float scale;
        if (sizeof(ABS) == 1) {
            u32 code = e4m4_encode(a / tensor_scale);
            scale = e4m4_decode(code) * tensor_scale;
            if (lane == 0) absmax[blk] = (ABS)code;
        } else {
            scale = a;
            if (lane == 0) absmax[blk] = (ABS)a;
        }
        float xn = scale > 0.0f ? __fdiv_rn(x, scale) : 0.0f;
        float best = fabsf(xn - __shfl_sync(0xffffffffu, cb, 0));
        u32 idx = 0;
#pragma unroll
        for (int i = 1; i < (1 << K); i++) {
            float d = fabsf(xn - __shfl_sync(0xffffffffu, cb, i));
            if (d < best) { best = d; idx = i; }
        }
        u32 word = 0;
#pragma unroll
        for (int b = 0; b < K; b++) {
            u32 w = __ballot_sync(0xffffffffu, (idx >> b) & 1u);
            if (lane == b) word = w;
        }
        if (lane < K) packed[blk * K + lane] = word;
    }
}

// Eight consecutive outputs per thread (one 16-byte store for fp16/bf16).
template <typename TOUT>
__device__ __forceinline__ void store8(TOUT* out, const float (&v)[8]);
template <>
__device__ __forceinline__ void store8<float>(float* out, const float (&v)[8]) {
    reinterpret_cast<float4*>(out)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(out)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
template <typename TOUT>
__device__ __forceinline__ void store8(TOUT* out, const float (&v)[8]) {
    typedef typename KbitType<TOUT>::T2 T2;
    union { uint4 u; T2 h[4]; } r;
#pragma unroll
    for (int i = 0; i < 4; i++) r.h[i] = KbitType<TOUT>::pack2(v[2 * i], v[2 * i + 1]);
    *reinterpret_cast<uint4*>(out) = r.u;
}

// Dequantize: thread t handles elements 8*(t%4)..+7 of block t/4 of W[N, K]
// (row-major output).  TILED reads the repacked layout, else the flat one.
template <int K, typename TOUT, typename ABS, bool TILED>
__global__ void __launch_bounds__(256) kbit_dequantize(const u32* __restrict__ packed, const ABS* __restrict__ absmax,
                                                       const float* __restrict__ codebook, TOUT* __restrict__ out,
                                                       int N, int Kdim, float tensor_scale) {
    __shared__ float cb_s[32];
    if (threadIdx.x < 32) cb_s[threadIdx.x] = threadIdx.x < (1 << K) ? codebook[threadIdx.x] : 0.0f;
    __syncthreads();
    const int kblocks = Kdim >> 5;
    const long nblocks = (long)N * kblocks;
    const int n_tiles = (N + KBIT_TILE_N - 1) / KBIT_TILE_N;
    const long stride = (long)gridDim.x * blockDim.x;
    for (long t = (long)blockIdx.x * blockDim.x + threadIdx.x; t < nblocks * 4; t += stride) {
        const long blk = t >> 2;
        const int part = (int)(t & 3);
        long woff, aoff;
        if (TILED) {
            int n = (int)(blk / kblocks), kb = (int)(blk % kblocks);
            woff = tiled_word_offset<K>(n, kb, n_tiles);
            aoff = tiled_absmax_offset(n, kb, n_tiles);
        } else {
            woff = blk * K;
            aoff = blk;
        }
        u32 w[K];
#pragma unroll
        for (int b = 0; b < K; b++) w[b] = __ldg(packed + woff + b) >> (8 * part);
        const float s = load_scale(absmax, aoff) * tensor_scale;
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = cb_s[plane_index<K>(w, j)] * s;
        store8<TOUT>(out + blk * 32 + part * 8, v);
    }
}

// Dequantize for the dequant + cuBLAS matmul path (tiled layout, E4M4 absmax): W[N, K] /
// tensor_scale in T (the GEMM applies the power-of-two tensor scale as its alpha), computed
// like the fused kernels' MMA operands: pair-table lookup (two fp16/bf16 levels per shared-
// memory load) times the E4M4 scale (exact in fp16/bf16) with one HMUL2, instead of
// kbit_dequantize's bit-by-bit index extraction and fp32 multiply.  One 128-column x 64-K
// layout tile at a time (the weight's own memory order): thread t of 256 owns block slot t of
// the tile (column t / 2, K block t % 2), whose k plane words are contiguous (a warp reads
// 32 x 4k contiguous bytes, the absmax one byte per thread), computes its 32 elements into a
// shared-memory copy of the tile's 128 output rows, and after one barrier the CTA writes those
// rows as whole 128-byte lines (8 lanes per row).  Persistent CTAs stride over the tiles, the
// next tile's words requested before this tile's work; two row buffers, so one barrier per
// tile.  H200 (profiling/NOTES.md, eighth session): gate/up k = 4 7.6 us, against 10.3 us for
// the earlier kernel (four threads per block, each computing the whole block's keys, a warp
// reading blocks across four tiles; removed after commit 63cf4a4) and 12.7 us for the bit-exact
// kbit_dequantize; the fp16 writes (21 MB) bound it (4 tiles in flight per CTA: no change).
template <int K, typename T>
__global__ void __launch_bounds__(256) kbit_dequant_tile(const u32* __restrict__ packed, const u8* __restrict__ absmax,
                                                         const float* __restrict__ codebook, T* __restrict__ out, int N,
                                                         int Kdim) {
    constexpr int ROW = 144;  // 128 bytes of a row's 64 elements + 16 B pad: conflict-free stores and loads
    extern __shared__ __align__(16) unsigned char smem[];
    u32* lut = reinterpret_cast<u32*>(smem);
    float* cb_s = reinterpret_cast<float*>(smem + PairLut<K>::WORDS * 4);
    unsigned char* rows = smem + PairLut<K>::WORDS * 4 + 128;  // 2 x 128 rows x ROW bytes
    const int tid = threadIdx.x;
    const int n_tiles = (N + KBIT_TILE_N - 1) / KBIT_TILE_N;
    const int k_tiles = (Kdim + KBIT_TILE_K - 1) / KBIT_TILE_K;
    const int tiles = n_tiles * k_tiles;
    constexpr int TW = KBIT_TILE_N * KBIT_KB_PER_TILE * K;  // words per tile
    int t = blockIdx.x;
    u32 w[K];
    u32 code = 0;
    if (t < tiles) {  // first tile's words before the table build
        load_planes<K>(w, packed + (long)t * TW + tid * K);
        code = absmax[(long)t * 256 + tid];
    }
    if (tid < 32) cb_s[tid] = tid < (1 << K) ? codebook[tid] : 0.0f;
    __syncthreads();
    build_pair_lut<K, T>(lut, cb_s);
    __syncthreads();
    const u32 lut_lane = (u32)__cvta_generic_to_shared(lut) + 4u * (tid & (PairLut<K>::COPIES - 1));
    for (int it = 0; t < tiles; t += gridDim.x, it++) {
        u32 keys[4], f[4];
        block_keys<K>(w, keys, f);
        const u32 s2 = scale_pair<T>(e4m4_decode(code));
        const int tn = t + gridDim.x;
        if (tn < tiles) {  // next tile's words in flight during this tile's arithmetic and stores
            load_planes<K>(w, packed + (long)tn * TW + tid * K);
            code = absmax[(long)tn * 256 + tid];
        }
        unsigned char* buf = rows + (it & 1) * (128 * ROW);
        uint4* dst = reinterpret_cast<uint4*>(buf + (tid >> 1) * ROW + (tid & 1) * 64);
#pragma unroll
        for (int r = 0; r < 4; r++) {  // elements 8r..8r+7 of the block
            u32 v[4];
            chunk_pairs<K, T>(v, keys, f, s2, r, lut_lane);
            dst[r] = make_uint4(v[0], v[1], v[2], v[3]);
        }
        __syncthreads();
        const int kt = t / n_tiles, n0 = (t - kt * n_tiles) * KBIT_TILE_N, k0 = kt * KBIT_TILE_K;
#pragma unroll
        for (int i = 0; i < 4; i++) {  // 128 rows x 8 chunks of 16 bytes
            const int c = tid + 256 * i, row = c >> 3, j = c & 7;
            if (n0 + row < N && k0 + 8 * j < Kdim)
                *reinterpret_cast<uint4*>(out + (long)(n0 + row) * Kdim + k0 + 8 * j) =
                    *reinterpret_cast<const uint4*>(buf + row * ROW + 16 * j);
        }
    }
}

// Repack flat -> tiled.  One thread per tiled block slot, padding included (zeros),
// so the whole tiled buffer is written.  float absmax is E4M4-encoded on the way
// (divided by the power-of-two tensor scale the host chose).
template <int K, typename ABS>
__global__ void __launch_bounds__(256) kbit_repack(const u32* __restrict__ packed_flat, const ABS* __restrict__ absmax_flat,
                                                   u32* __restrict__ packed_tiled, u8* __restrict__ absmax_tiled,
                                                   int N, int Kdim, float inv_tensor_scale) {
    const int n_tiles = (N + KBIT_TILE_N - 1) / KBIT_TILE_N;
    const int k_tiles = (Kdim + KBIT_TILE_K - 1) / KBIT_TILE_K;
    const long slots = (long)k_tiles * n_tiles * KBIT_TILE_N * KBIT_KB_PER_TILE;
    const int kblocks = Kdim >> 5;
    const long stride = (long)gridDim.x * blockDim.x;
    for (long s = (long)blockIdx.x * blockDim.x + threadIdx.x; s < slots; s += stride) {
        const long tile = s / (KBIT_TILE_N * KBIT_KB_PER_TILE);
        const int within = (int)(s % (KBIT_TILE_N * KBIT_KB_PER_TILE));
        const int col = within >> 1, kb = within & 1;
        const int kt = (int)(tile / n_tiles), nt = (int)(tile % n_tiles);
        const int n = nt * KBIT_TILE_N + col, kblock = kt * 2 + kb;
        u32 code = 0;
        u32 w[K];
#pragma unroll
        for (int b = 0; b < K; b++) w[b] = 0;
        if (n < N && kblock < kblocks) {
            const long src = (long)n * kblocks + kblock;
#pragma unroll
            for (int b = 0; b < K; b++) w[b] = packed_flat[src * K + b];
            if (sizeof(ABS) == 1) code = (u32)absmax_flat[src];
            else code = e4m4_encode((float)absmax_flat[src] * inv_tensor_scale);
        }
#pragma unroll
        for (int b = 0; b < K; b++) packed_tiled[s * K + b] = w[b];
        absmax_tiled[s] = (u8)code;
    }
}
