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
#include "kbit_pairlut.cuh"

// Grid: one block per 16 output columns; its W = blockDim.x/32 warps split K in
// steps of 128 (4 quantization blocks per column), warp w taking steps w, w+W, ...;
// lane (g, t) owns columns n0+g and n0+g+8 and block 4*s+t of step s.  D steps of
// weights stay in flight per lane (register ring).  A is staged in shared memory.
// ABS: unsigned char (E4M4) or float.  TILED: repacked layout, else flat.
// MT: token tiles of 8 (M <= 8 * MT); the weights are dequantized once for all of them.
template <int K, typename T, typename ABS, bool TILED, int D, int MT>
__global__ void __launch_bounds__(512, (D == 2 && K <= 4 && MT == 1) ? 2 : 1) kbit_gemv(const T* __restrict__ A, const u32* __restrict__ packed,
                                                    const ABS* __restrict__ absmax, const float* __restrict__ codebook,
                                                    T* __restrict__ C, int M, int N, int Kdim, float tensor_scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    u32* lut = reinterpret_cast<u32*>(smem);
    const int KS = (Kdim + 127) >> 7;  // steps of 128
    T* a_s = reinterpret_cast<T*>(smem + PairLut<K>::WORDS * 4);
    float* red = reinterpret_cast<float*>(a_s + (long)M * KS * 128);
    float* cb_s = red + (blockDim.x >> 5) * 128 * MT;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16;
    const int KB = Kdim >> 5;
    const int n_tiles = (N + KBIT_TILE_N - 1) / KBIT_TILE_N;

    // Per column (c = 0: n0+g, c = 1: n0+g+8): base offsets for local step 0 and the
    // stride per local step (kblock = 4 * (warp + sl * W) + t).
    long woff[2], aoff[2], wstep, astep;
    bool col_ok[2];
#pragma unroll
    for (int c = 0; c < 2; c++) {
        const int n = n0 + g + 8 * c;
        col_ok[c] = TILED || n < N;  // tiled buffers are padded to 128 columns
        if (TILED) {
            woff[c] = tiled_word_offset<K>(n, 4 * warp + t, n_tiles);
            aoff[c] = tiled_absmax_offset(n, 4 * warp + t, n_tiles);
        } else {
            woff[c] = ((long)n * KB + 4 * warp + t) * K;
            aoff[c] = (long)n * KB + 4 * warp + t;
        }
    }
    if (TILED) {
        wstep = 2L * W * n_tiles * (KBIT_TILE_N * KBIT_KB_PER_TILE * K);
        astep = 2L * W * n_tiles * (KBIT_TILE_N * KBIT_KB_PER_TILE);
    } else {
        wstep = 4L * W * K;
        astep = 4L * W;
    }
    const int S = warp < KS ? (KS - warp + W - 1) / W : 0;

    u32 wr[D][2][K];
    float sc[D][2];
    auto load_step = [&](int j, int sl) {
        const int kblock = 4 * (warp + sl * W) + t;
#pragma unroll
        for (int c = 0; c < 2; c++) {
            if (col_ok[c] && kblock < KB) {
                load_planes<K>(wr[j][c], packed + woff[c] + sl * wstep);
                sc[j][c] = load_scale(absmax, aoff[c] + sl * astep);
            } else {
#pragma unroll
                for (int b = 0; b < K; b++) wr[j][c][b] = 0u;
                sc[j][c] = 0.0f;
            }
        }
    };
#pragma unroll
    for (int j = 0; j < D; j++)
        if (j < S) load_step(j, j);

    // Stage A (rows < M) and the codebook, then build the pair table.
    {
        const int kpad = KS * 128;
        const int chunks = M * (kpad / 8);
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
            const int m = c / (kpad / 8), kk = (c % (kpad / 8)) * 8;
            uint4* dst = reinterpret_cast<uint4*>(a_s + (long)m * kpad + kk);
            if (kk < Kdim) cp_async16(dst, A + (long)m * Kdim + kk);
            else *dst = make_uint4(0u, 0u, 0u, 0u);
        }
        cp_async_commit();
        if (threadIdx.x < 32) cb_s[threadIdx.x] = threadIdx.x < (1 << K) ? codebook[threadIdx.x] : 0.0f;
        __syncthreads();
#ifndef KBIT_EXPERIMENT_NO_LUT  // profiling/gemv_stages.py: time without this stage
        build_pair_lut<K, T>(lut, cb_s);
#endif
        cp_async_wait<0>();
        __syncthreads();
    }

    const u32 lut_lane = (u32)__cvta_generic_to_shared(lut) + 4 * (lane & (PairLut<K>::COPIES - 1));
    const T* a_row = a_s + (long)g * KS * 128 + t * 32;
    float acc[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.f;

    for (int s0 = 0; s0 < S; s0 += D) {
#pragma unroll
        for (int j = 0; j < D; j++) {
            const int sl = s0 + j;
            if (sl < S) {
                uint4 a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    const uint4* ap = reinterpret_cast<const uint4*>(a_row + ((long)8 * mt * KS + warp + sl * W) * 128);
                    const bool row_ok = g + 8 * mt < M;
#pragma unroll
                    for (int r = 0; r < 4; r++) a[mt][r] = row_ok ? ap[r] : make_uint4(0u, 0u, 0u, 0u);
                }
                const u32 sA = scale_pair<T>(sc[j][0]), sB = scale_pair<T>(sc[j][1]);
                u32 wA[K], wB[K];
#pragma unroll
                for (int b = 0; b < K; b++) { wA[b] = wr[j][0][b]; wB[b] = wr[j][1][b]; }
                if (sl + D < S) load_step(j, sl + D);
#ifndef KBIT_EXPERIMENT_NO_COMPUTE
                block_pair_mma<K, T, MT>(acc, wA, sA, wB, sB, a, lut_lane);
#else  // keep the loads alive
                acc[0][0] += __uint_as_float((wA[0] ^ wB[K - 1] ^ sA ^ sB ^ a[0][0].x) & 0x3fffffu);
#endif
            }
        }
    }

    // Reduce the W warps' partial sums: red[warp][col 0..15][token 0..8MT-1].
    constexpr int TOK = 8 * MT;
    float* rw = red + warp * 16 * TOK;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        rw[g * TOK + 8 * mt + 2 * t] = acc[mt][0];
        rw[g * TOK + 8 * mt + 2 * t + 1] = acc[mt][1];
        rw[(g + 8) * TOK + 8 * mt + 2 * t] = acc[mt][2];
        rw[(g + 8) * TOK + 8 * mt + 2 * t + 1] = acc[mt][3];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < M * 16; i += blockDim.x) {
        const int m = i >> 4, c = i & 15, nn = n0 + c;
        float s = 0.f;
        for (int w = 0; w < W; w++) s += red[w * 16 * TOK + c * TOK + m];
        if (nn < N) C[(long)m * N + nn] = KbitType<T>::from_float(s * tensor_scale);
    }
}
