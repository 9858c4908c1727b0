// Fused dequant + tensor-core GEMM for M = 9..~256: C[M, N] = A[M, K] * W^T.
//
// W is k-bit quantized in the TILED layout (kbitcupy/reference.py): tiles of
// 64 (K) x 128 (N), tile index k_tile * n_tiles + n_tile, inside a tile
// [col][kb][bit] plane words, E4M4 absmax bytes [col][kb], a power-of-two
// tensor_scale applied to the fp32 result.  Padded columns / the padded half of
// a K % 64 == 32 tile hold zero words and absmax 0, so they dequantize to 0.
//
// Data flow per CTA (128 threads = 4 warps, one (TILE_M x TILE_N) output tile,
// one contiguous range of K "steps"):
//  * a K step is 128 wide = two 64-wide layout tiles.  A cp.async pipeline of
//    `stages` buffers (runtime, 2..8) brings in per step: the A tile
//    [TILE_M][128] in fragment order (4-byte copies, see below; rows >= M and
//    columns >= K zero-filled by cp.async's src-size operand, never read), the
//    two B tiles' plane words for the CTA's TILE_N columns (16-byte copies of a
//    contiguous run of the layout; a tile past the end of K is zero-filled) and
//    their absmax bytes.
//  * K permutation (as in kbit_gemv.cu): any permutation of K applied to both A
//    and B leaves the product unchanged.  In the m16n8k16 fragments lane
//    (g = lane/4, t = lane%4) supplies k slots {2t, 2t+1, 2t+8, 2t+9}; we let it
//    supply, for MMA j (0..7) of the step, elements 4j..4j+3 of quantization
//    block t of the step (block t = layout tile t>>1, kb = t&1), column g of the
//    n8 block.  So one lane dequantizes whole 32-element blocks: the pair
//    lookup table turns its k plane words into 16 byte-sized pair keys with a
//    few word-wide LOP3s (pair_keys), one LDS per key returns two levels as a
//    packed half2/bf162, one HMUL2 applies the block scale (E4M4 scales are
//    exact in fp16/bf16) and the result is a B-fragment register as is.  The
//    A side needs elements 32t + 4j .. +3 of rows g and g + 8; shared memory
//    holds A in that order (16-byte chunk per (m16 block, g, t, j) = the four
//    fragment registers a0..a3), so one LDS.128 gives an MMA's whole A operand
//    in consecutive registers (no register shuffles).  The price is that A is
//    copied with 4-byte cp.async (8 * M_BLOCKS per thread and step).
//  * warp w owns the columns [w*TILE_N/4, (w+1)*TILE_N/4) of the tile and all
//    M_BLOCKS m16 blocks, so every B fragment is dequantized once per CTA and
//    reused for M_BLOCKS MMAs; every A fragment for TILE_N/32 (n8 blocks) x 2.
//  * fp32 accumulation in registers.  Epilogue: k_splits == 1 writes C
//    directly (masked to m < M, n < N).  Split-K: every CTA of an output tile
//    stores its fp32 partial into its own slot of the workspace (ws[split][tile]
//    in fragment order, coalesced 16-byte stores), then one acquire-release
//    atomicAdd on the tile's counter; the CTA that sees count == k_splits - 1
//    sums the k_splits slots in split order (deterministic: the result does not
//    depend on which CTA arrives last), writes C and resets the counter to 0,
//    so the counters are all zero again after every launch (no host memset).
//    (A "first CTA stores, later CTAs atomicAdd" scheme would need the later
//    CTAs to wait for the first one's store: the first arrival is only known
//    through the counter, and an atomicAdd landing before the plain store
//    would be overwritten.  Per-split slots avoid the wait and the atomics.)
//    The last CTA loads every slot before its adds; at M <= 8 the slots hold
//    only fragment registers 0, 1 (rows g: rows g + 8 are past M), half the
//    bytes.  `cluster` (sm_90, one m tile): the tile's splits are one thread
//    block cluster and sum over DSMEM instead (cluster_sum_c), same order.
//  * Prologue: the scale table (and with the default codebook, flags bit 1,
//    the pair table from immediates) is built before the PDL wait, and in
//    safe PDL the first stage's weight lines are L2-prefetched before it.
//
// Shared memory (dynamic, bytes): pair LUT (PairLut<K>::WORDS*4) | scale table
// (256 half2 = 1 KB) | codebook (128) | misc (128) | stages x stage buffers.
// Bank conflicts: the LUT is replicated per lane (conflict-free for k <= 4,
// 2-way for k = 5 with 16 copies); the B tile of the second layout tile is
// offset by 16 words mod 32 so the k plane loads of a warp (8 columns x 4
// blocks) are conflict-free for every k; the A chunks are XOR-swizzled
// (chunk 8t + j stored at 8t + (j ^ (2t | g & 1))) so every LDS.128 phase (8
// lanes: g = 2p, 2p + 1, t = 0..3) hits 8 distinct bank groups and every
// 4-byte cp.async warp store hits 32 distinct banks.
#include "kbit_pairlut.cuh"

#ifndef KBIT_GEMM_PF
#define KBIT_GEMM_PF 1  // stages L2-prefetched before the safe-PDL wait (0: none; 2 / all measured no better)
#endif

namespace kbit_gemm_detail {

// Words per layout tile region of one stage in shared memory (TILE_N columns x
// 2 blocks x k planes) plus 16 words: the second tile starts 16 banks over.
template <int K, int TILE_N> struct GemmSmem {
    static constexpr int TB = TILE_N * 2 * K + 16;    // words per B tile region
    static constexpr int TA = TILE_N * 2 + 16;        // bytes per absmax tile region
    static constexpr int RS = TILE_N + 8;             // fp32 row stride of the cluster sum's partial (8-byte
                                                      // stores of a half-warp hit 32 banks)
};

__device__ __forceinline__ void cp_async4_zfill(void* smem, const void* gmem, bool valid) {
    u32 s = (u32)__cvta_generic_to_shared(smem);
    int sz = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(sz));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The cluster split-K sum (kbit_gemm's `cluster` launch: the tile's k_splits CTAs are one thread
// block cluster, rank = split).  Every CTA's partial is in its shared memory at `red` (rows x
// TILE_N fp32, row stride RS); each CTA sums a 1 / k_splits share of the tile's 4-column chunks from
// all of them over DSMEM in split order (the workspace path's order: the same bits) and writes C.
// No workspace, fence or counter, and the sum is spread over the splits instead of left to the last
// CTA.  The second cluster barrier keeps every partial in place until the others have read it.
template <typename T, int TILE_N, int RS>
__device__ __forceinline__ void cluster_sum_c(const float* red, T* __restrict__ C, int M, int N, int m0, int n0,
                                           int rows, int split, int k_splits, float tensor_scale, int vec2) {
    cluster_sync();
    const u32 red_s = (u32)__cvta_generic_to_shared(red);
    constexpr int CPR = TILE_N / 4;  // 4-column chunks a row
    const int nch = rows * CPR;
    const int c0 = nch * split / k_splits, c1 = nch * (split + 1) / k_splits;
    for (int i = c0 + (int)threadIdx.x; i < c1; i += (int)blockDim.x) {
        const int r = i / CPR, c4 = (i - r * CPR) * 4;
        const int col = n0 + c4;
        if (col >= N) continue;
        const u32 la = red_s + 4u * (u32)(r * RS + c4);
        float4 x[KBIT_MAX_CLUSTER];  // every split's load in flight before the adds
#pragma unroll
        for (int sp = 0; sp < KBIT_MAX_CLUSTER; sp++)
            if (sp < k_splits) x[sp] = ld_cluster_f4(cluster_map(la, sp));
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int sp = 0; sp < KBIT_MAX_CLUSTER; sp++)
            if (sp < k_splits) {
                v.x += x[sp].x; v.y += x[sp].y; v.z += x[sp].z; v.w += x[sp].w;
            }
        T* dst = C + (long)(m0 + r) * N + col;
        if (vec2) {  // N even: col + 1 < N wherever col < N
            *reinterpret_cast<typename KbitType<T>::T2*>(dst) = KbitType<T>::pack2(v.x * tensor_scale, v.y * tensor_scale);
            if (col + 2 < N)
                *reinterpret_cast<typename KbitType<T>::T2*>(dst + 2) =
                    KbitType<T>::pack2(v.z * tensor_scale, v.w * tensor_scale);
        } else {
            const float s4[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (col + e < N) dst[e] = KbitType<T>::from_float(s4[e] * tensor_scale);
        }
    }
    // the reads are done (their values are in the C stores): a relaxed arrive suffices
    cluster_arrive_relaxed();
    cluster_wait();
}
#endif

// The epilogue of kbit_gemm (out of line, see the kernel's end): the CTA's fp32 sums are in shared
// memory at `xs` as float4 [warp][mb][nb][lane] (fragment order); the split-K fixup and the C stores.
template <int K, typename T, int M_BLOCKS, int TILE_N>
__device__ __noinline__ void gemm_epilogue(unsigned char* xs, T* __restrict__ C, float* __restrict__ ws,
                                           int* __restrict__ counters, int* misc, int M, int N, int m0, int n0,
                                           int tile, int split, int k_splits, float tensor_scale, bool vec2,
                                           int cluster) {
    constexpr int TILE_M = 16 * M_BLOCKS, WN = TILE_N / 4, NB8 = WN / 8;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    float acc[M_BLOCKS][NB8][4];
    {  // the thread's own sums back (no barrier: each thread reads what it wrote)
        const float4* xf = reinterpret_cast<const float4*>(xs) + warp * (M_BLOCKS * NB8 * 32) + lane;
#pragma unroll
        for (int mb = 0; mb < M_BLOCKS; mb++)
#pragma unroll
            for (int nb = 0; nb < NB8; nb++) {
                const float4 v = xf[(mb * NB8 + nb) * 32];
                acc[mb][nb][0] = v.x; acc[mb][nb][1] = v.y; acc[mb][nb][2] = v.z; acc[mb][nb][3] = v.w;
            }
    }

    // ---------------------------------------------------------------- split-K fixup
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (cluster) {
        __syncthreads();  // every thread has its sums out of xs
        float* red = reinterpret_cast<float*>(xs);
        const int rows = min(TILE_M, M - m0);
#pragma unroll
        for (int mb = 0; mb < M_BLOCKS; mb++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = mb * 16 + g + 8 * h;
                if (row < rows) {
#pragma unroll
                    for (int nb = 0; nb < NB8; nb++)
                        *reinterpret_cast<float2*>(red + row * GemmSmem<K, TILE_N>::RS + warp * WN + nb * 8 + 2 * t) =
                            make_float2(acc[mb][nb][2 * h], acc[mb][nb][2 * h + 1]);
                }
            }
        cluster_sum_c<T, TILE_N, GemmSmem<K, TILE_N>::RS>(red, C, M, N, m0, n0, rows, split, k_splits, tensor_scale,
                                                          vec2);
        return;
    }
#endif
    if (k_splits > 1) {
        const long split_stride = (long)(gridDim.x / k_splits) * (TILE_M * TILE_N);
        // One m16 block whose rows g + 8 are all past M (M <= 8): only fragment registers 0, 1 carry
        // rows, so the partials are 8-byte halves (half the workspace traffic and the sum's loads).
        // H100 M = 8 k = 4: gate/up -0.75 us, down -1.1 at the default plans (run44.sh early).
        const bool half = M_BLOCKS == 1 && M - m0 <= 8;
        float* base = ws + (long)tile * (TILE_M * TILE_N) +
                      (half ? warp * (NB8 * 64) + lane * 2 : warp * (M_BLOCKS * NB8 * 128) + lane * 4);
        float* mine = base + split * split_stride;
        if (half) {
#pragma unroll
            for (int nb = 0; nb < NB8; nb++)
                __stcg(reinterpret_cast<float2*>(mine + nb * 64), make_float2(acc[0][nb][0], acc[0][nb][1]));
        } else {
#pragma unroll
            for (int mb = 0; mb < M_BLOCKS; mb++) {
                if (m0 + mb * 16 < M) {
#pragma unroll
                    for (int nb = 0; nb < NB8; nb++)
                        __stcg(reinterpret_cast<float4*>(mine + (mb * NB8 + nb) * 128),
                               make_float4(acc[mb][nb][0], acc[mb][nb][1], acc[mb][nb][2], acc[mb][nb][3]));
                }
            }
        }
#if KBIT_GEMM_PROBE_NOFIX  // probe: partials stored, no count, no sum, no C (results wrong)
        return;
#endif
        // thread 0's acquire-release atomic orders the CTA's barrier-ordered partial stores
        // before the count, and the last CTA's loads after it
        __syncthreads();
        if (tid == 0) misc[0] = atomic_add_acq_rel(counters + tile, 1) == k_splits - 1;
        __syncthreads();
        if (!misc[0]) return;
        // Every split's slot loaded before the adds (this CTA's own too: the same thread stored it,
        // so it reads back acc's values), summed in split order: the same bits whichever CTA is
        // last.  The old loop, one dependent load an add, cost down at M = 8 (20 slots) 3.9 us.
        if (half) {
            float2 s[NB8];
#pragma unroll
            for (int nb = 0; nb < NB8; nb++) s[nb] = make_float2(0.f, 0.f);
#pragma unroll 4
            for (int sp = 0; sp < k_splits; sp++) {
                float2 v[NB8];
#pragma unroll
                for (int nb = 0; nb < NB8; nb++) v[nb] = __ldcg(reinterpret_cast<const float2*>(base + sp * split_stride + nb * 64));
#pragma unroll
                for (int nb = 0; nb < NB8; nb++) {
                    s[nb].x += v[nb].x; s[nb].y += v[nb].y;
                }
            }
#pragma unroll
            for (int nb = 0; nb < NB8; nb++) {
                acc[0][nb][0] = s[nb].x; acc[0][nb][1] = s[nb].y;
            }
        } else {
#pragma unroll
            for (int mb = 0; mb < M_BLOCKS; mb++) {
                if (m0 + mb * 16 < M) {
                    float4 s[NB8];
#pragma unroll
                    for (int nb = 0; nb < NB8; nb++) s[nb] = make_float4(0.f, 0.f, 0.f, 0.f);
                    const float* bm = base + mb * NB8 * 128;
#pragma unroll 4
                    for (int sp = 0; sp < k_splits; sp++) {
                        float4 v[NB8];
#pragma unroll
                        for (int nb = 0; nb < NB8; nb++)
                            v[nb] = __ldcg(reinterpret_cast<const float4*>(bm + sp * split_stride + nb * 128));
#pragma unroll
                        for (int nb = 0; nb < NB8; nb++) {
                            s[nb].x += v[nb].x; s[nb].y += v[nb].y; s[nb].z += v[nb].z; s[nb].w += v[nb].w;
                        }
                    }
#pragma unroll
                    for (int nb = 0; nb < NB8; nb++) {
                        acc[mb][nb][0] = s[nb].x; acc[mb][nb][1] = s[nb].y; acc[mb][nb][2] = s[nb].z; acc[mb][nb][3] = s[nb].w;
                    }
                }
            }
        }
        if (tid == 0) counters[tile] = 0;
    }

    // ---------------------------------------------------------------- C
#pragma unroll
    for (int mb = 0; mb < M_BLOCKS; mb++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = m0 + mb * 16 + g + 8 * h;
            if (row >= M) continue;
            T* crow = C + (long)row * N;
#pragma unroll
            for (int nb = 0; nb < NB8; nb++) {
                const int col = n0 + warp * WN + nb * 8 + 2 * t;
                const float v0 = acc[mb][nb][2 * h] * tensor_scale, v1 = acc[mb][nb][2 * h + 1] * tensor_scale;
                if (vec2) {
                    if (col < N)
                        *reinterpret_cast<typename KbitType<T>::T2*>(crow + col) = KbitType<T>::pack2(v0, v1);
                } else {
                    if (col < N) crow[col] = KbitType<T>::from_float(v0);
                    if (col + 1 < N) crow[col + 1] = KbitType<T>::from_float(v1);
                }
            }
        }
    }
}

}  // namespace kbit_gemm_detail

// Grid: 1-D, m_tiles * n_blocks * k_splits CTAs, CTA b -> m tile b % m_tiles,
// split (b / m_tiles) % k_splits, column block b / (m_tiles * k_splits).
// flags: bit 0 = C rows take 4-byte stores (N even, C 4-byte aligned), bit 1 = the default
// codebook (its levels are immediates: the pair table is built before the PDL wait, codebook unread).
template <int K, typename T, int M_BLOCKS, int TILE_N>
__global__ void __launch_bounds__(128, 1) kbit_gemm(const T* __restrict__ A, const u32* __restrict__ packed,
                                                      const u8* __restrict__ absmax, const float* __restrict__ codebook,
                                                      T* __restrict__ C, float* __restrict__ ws, int* __restrict__ counters,
                                                      int M, int N, int Kdim, int m_tiles, int k_splits, int stages,
                                                      float tensor_scale, int flags, int pdl, int cluster) {
    using namespace kbit_gemm_detail;
    static_assert(TILE_N == 64 || TILE_N == 128, "TILE_N must be 64 or 128");
    static_assert(M_BLOCKS >= 1 && M_BLOCKS <= 4, "M_BLOCKS must be 1..4");
    constexpr int TILE_M = 16 * M_BLOCKS;
    constexpr int WN = TILE_N / 4;   // columns per warp
    constexpr int NB8 = WN / 8;      // n8 blocks per warp
    constexpr int TB = GemmSmem<K, TILE_N>::TB;
    constexpr int TA = GemmSmem<K, TILE_N>::TA;
    constexpr int A_BYTES = TILE_M * 256;
    constexpr int B_BYTES = 2 * TB * 4;
    constexpr int STAGE_BYTES = (A_BYTES + B_BYTES + 2 * TA + 127) / 128 * 128;
    constexpr int LUT_BYTES = PairLut<K>::WORDS * 4;
    constexpr int SH = PairLut<K>::LOG2_COPIES + 2;  // log2 bytes per LUT entry row
    const bool vec2 = flags & 1, cbd = flags & 2;

    extern __shared__ __align__(128) unsigned char smem[];
    u32* lut = reinterpret_cast<u32*>(smem);
    u32* s2tab = reinterpret_cast<u32*>(smem + LUT_BYTES);
    float* cb_s = reinterpret_cast<float*>(smem + LUT_BYTES + 1024);
    int* misc = reinterpret_cast<int*>(smem + LUT_BYTES + 1024 + 128);
    unsigned char* stage0 = smem + LUT_BYTES + 1024 + 256;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;

    // ---------------------------------------------------------------- work item
    const int bid = blockIdx.x;
    const int mt = bid % m_tiles;
    const int rest = bid / m_tiles;
    const int split = rest % k_splits;
    const int nblk = rest / k_splits;
    const int m0 = mt * TILE_M;
    const int n0 = nblk * TILE_N;
    const int n_tiles = (N + KBIT_TILE_N - 1) / KBIT_TILE_N;
    const int k_tiles = (Kdim + KBIT_TILE_K - 1) / KBIT_TILE_K;
    const int KS = (k_tiles + 1) >> 1;  // steps of 128
    const int ks_begin = (int)((long)KS * split / k_splits);
    const int ks_end = (int)((long)KS * (split + 1) / k_splits);
    const int n_my = ks_end - ks_begin;

    // layout offsets of this CTA's columns inside a layout tile
    const int nt = n0 >> 7;
    const long tile_words = (long)KBIT_TILE_N * KBIT_KB_PER_TILE * K;
    const long col_words = (long)(n0 & 127) * KBIT_KB_PER_TILE * K;
    const long col_bytes = (long)(n0 & 127) * KBIT_KB_PER_TILE;
    const long b_jstride = (long)n_tiles * tile_words;  // words from layout tile kt to kt + 1

    // A copy assignment (see load_stage)
    const int a_rb = lane >> 4, a_u = lane & 15;
    const int a_col = 32 * warp + 2 * a_u;
    const T* a_src = A + (long)(m0 + 8 * a_rb) * Kdim + a_col;
    const int a_rows = M - m0 - 8 * a_rb;
    const int a_dst0 = (8 * warp + ((a_u >> 1) ^ (2 * warp))) * 4 + 2 * (a_u & 1) + a_rb;
    const int a_dst1 = (8 * warp + ((a_u >> 1) ^ (2 * warp + 1))) * 4 + 2 * (a_u & 1) + a_rb;

    auto load_stage = [&](int buf, int ks) {
        unsigned char* st = stage0 + buf * STAGE_BYTES;
        u32* As = reinterpret_cast<u32*>(st);
        u32* Bs = reinterpret_cast<u32*>(st + A_BYTES);
        unsigned char* Abs = st + A_BYTES + B_BYTES;
        // A: 4-byte copies into the fragment-ordered layout.  Warp w copies block t = w
        // of the step; lane (rb = lane / 16, u = lane % 16) copies elements
        // 32w + 2u, +1 of row g + 8 rb: fragment word 2 (u & 1) + rb of chunk
        // 8w + u / 2.  Per i: m16 block mb, row pair g.  (32w + 2u < K is warp-uniform.)
        const bool kok = ks * 128 + a_col < Kdim;
        const T* src0 = a_src + ks * 128;
#pragma unroll
        for (int i = 0; i < 8 * M_BLOCKS; i++) {
            const int mb = i >> 3, gg = i & 7;
            const bool ok = kok && mb * 16 + gg < a_rows;
            const T* src = ok ? src0 + (long)(mb * 16 + gg) * Kdim : A;
            cp_async4_zfill(As + (mb * 8 + gg) * 128 + ((gg & 1) ? a_dst1 : a_dst0), src, ok);
        }
        // B: the CTA's columns of layout tiles 2ks (j = 0) and 2ks + 1 (j = 1): one contiguous
        // run of BCH 16-byte chunks each.  Tile 2ks always exists; 2ks + 1 may lie past K.
        constexpr int BCH = TILE_N * K / 2;
        const long b0 = ((long)(2 * ks) * n_tiles + nt) * tile_words + col_words;
        const bool ok1 = 2 * ks + 1 < k_tiles;
#pragma unroll
        for (int i = 0; i < (2 * BCH + 127) / 128; i++) {
            const int id = tid + i * 128;
            if ((2 * BCH) % 128 == 0 || id < 2 * BCH) {
                const int j = id >= BCH ? 1 : 0;  // warp-uniform (BCH is a multiple of 32)
                const int w = id - j * BCH;
                const bool ok = j == 0 || ok1;
                const u32* src = packed + (ok ? b0 + j * b_jstride + w * 4 : 0);
                cp_async16_zfill(Bs + j * TB + w * 4, src, ok);
            }
        }
        // absmax: the same two tiles, TILE_N * 2 bytes = TILE_N / 8 chunks each
        constexpr int ACH = TILE_N / 8;
        if (tid < 2 * ACH) {
            const int j = tid >= ACH ? 1 : 0;
            const int w = tid - j * ACH;
            const bool ok = j == 0 || ok1;
            const u8* src = absmax + (ok ? ((long)(2 * ks + j) * n_tiles + nt) * (KBIT_TILE_N * KBIT_KB_PER_TILE) + col_bytes + w * 16 : 0);
            cp_async16_zfill(Abs + j * TA + w * 16, src, ok);
        }
    };

    // ---------------------------------------------------------------- prologue
    // Safe PDL: the first KBIT_GEMM_PF stages' weight lines L2-prefetched before the wait (a hint: the
    // loads after it return what they would without it).  H100 M = 8 k = 4: gate/up -0.6..-0.8 us,
    // down -0.4..-0.6 (profiling/run44.sh early).
    if (KBIT_GEMM_PF > 0 && pdl == KBIT_PDL_SAFE) {
        constexpr int LB = TILE_N * K / 16;  // 128-byte lines of one layout tile's columns
        constexpr int LA = (TILE_N * 2 + 127) / 128;
        const int s0 = ks_begin, s1 = min(ks_begin + KBIT_GEMM_PF, ks_end);
        for (int id = tid; id < (s1 - s0) * 2 * (LB + LA); id += 128) {
            const int i = id / (2 * (LB + LA)), r = id - i * 2 * (LB + LA);
            const int j = r >= LB + LA ? 1 : 0, l = r - j * (LB + LA);
            const int tile = 2 * (s0 + i) + j;
            if (tile >= k_tiles) continue;
            if (l < LB)
                prefetch_l2(packed + ((long)tile * n_tiles + nt) * tile_words + col_words + l * 32);
            else
                prefetch_l2(absmax + ((long)tile * n_tiles + nt) * (KBIT_TILE_N * KBIT_KB_PER_TILE) + col_bytes +
                            (l - LB) * 128);
        }
    }
    // Shared memory only, before the wait: the scale table, and with the default codebook the pair
    // table (H100 M = 8: -0.3 us at the default plans, run44.sh early).
    if (cbd) {
        if (tid < 32) cb_s[tid] = tid < (1 << K) ? kbit_default_level<K>(tid) : 0.0f;
        __syncthreads();
        build_pair_lut<K, T>(lut, cb_s);
    }
    build_scale_table<T>(s2tab, tid, 128);
    // pdl (a programmatic dependent, kbitcupy/_pdl.py): wait for the previous grid before
    // any load, so only the launch and the shared-memory set-up overlap its tail.  (Requesting the
    // weights before the wait, as kbit_wgmma does, took ptxas 30 more registers here and spilled on sm_80.)
    if (pdl) {
        griddep_wait_release();
    }
    // (ld_after_wait: a plain read of the codebook was hoisted above the wait, kbit_common.cuh)
    if (!cbd && tid < 32) cb_s[tid] = tid < (1 << K) ? ld_after_wait(codebook + tid) : 0.0f;
    for (int i = 0; i < stages - 1; i++) {
        if (i < n_my) load_stage(i, ks_begin + i);
        cp_async_commit();
    }
    __syncthreads();
    if (!cbd) build_pair_lut<K, T>(lut, cb_s);

    float acc[M_BLOCKS][NB8][4];
#pragma unroll
    for (int mb = 0; mb < M_BLOCKS; mb++)
#pragma unroll
        for (int nb = 0; nb < NB8; nb++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mb][nb][i] = 0.0f;

    const u32 lut_lane = (u32)__cvta_generic_to_shared(lut) + 4u * (u32)(lane & (PairLut<K>::COPIES - 1));
    const u32 s2_base = (u32)__cvta_generic_to_shared(s2tab);
    // A: lane (g, t) reads chunk 8t + (j ^ a_x) of row pair (mb, g): words a0..a3 of MMA j
    const int a_x = 2 * t + (g & 1);
    const int a_lane = g * 128 + 32 * t;  // words
    // B: plane words of (tile t>>1, column c, kb t&1); absmax byte likewise
    const int b_lane = (t >> 1) * TB + (t & 1) * K + 2 * K * (warp * WN + g);
    const int abs_lane = (t >> 1) * TA + (t & 1) + 2 * (warp * WN + g);

    int rd = 0, wr = stages - 1;
    for (int it = 0; it < n_my; it++) {
        cp_async_wait_dyn(stages - 2);
        __syncthreads();
        if (it + stages - 1 < n_my) load_stage(wr, ks_begin + it + stages - 1);
        cp_async_commit();
        wr = wr + 1 == stages ? 0 : wr + 1;

        const unsigned char* st = stage0 + rd * STAGE_BYTES;
        rd = rd + 1 == stages ? 0 : rd + 1;
        const u32* As = reinterpret_cast<const u32*>(st);
        const u32* Bs = reinterpret_cast<const u32*>(st + A_BYTES);
        const unsigned char* Abs = st + A_BYTES + B_BYTES;
#if KBIT_GEMM_PROBE_NOCOMP  // probe: the pipeline without the dequantize and MMA (results wrong)
        if (As[tid] == 0x7fffffffu && Bs[tid] == 0x7fffffffu) acc[0][0][0] += 1.0f;
        continue;
#endif

        // Dequantization state of this lane's blocks: 16 pair keys and a scale per n8 block.
        u32 keys[NB8][4];
        u32 hi5[NB8][4];
        u32 s2[NB8];
#pragma unroll
        for (int nb = 0; nb < NB8; nb++) {
            const u32* bp = Bs + b_lane + nb * 16 * K;
            u32 w[K];
            if (K == 4) {
                const uint4 v = *reinterpret_cast<const uint4*>(bp);
                w[0] = v.x; w[1 % K] = v.y; w[2 % K] = v.z; w[3 % K] = v.w;
            } else if (K == 2) {
                const uint2 v = *reinterpret_cast<const uint2*>(bp);
                w[0] = v.x; w[1 % K] = v.y;
            } else {
#pragma unroll
                for (int b = 0; b < K; b++) w[b] = bp[b];
            }
            const u32 code = Abs[abs_lane + nb * 16];
            s2[nb] = lds_u32(s2_base + 4u * code);
            if (K <= 4) {
                pair_keys<K>(w, keys[nb]);
            } else {
                const u32 (&w4)[4] = *reinterpret_cast<const u32(*)[4]>(&w[0]);
                pair_keys<4>(w4, keys[nb]);
                plane4_fields(w[K - 1], hi5[nb]);
            }
        }

#pragma unroll
        for (int r = 0; r < 4; r++) {
            // MMAs j = 2r (pairs q = 0, 1) and 2r + 1 (pairs q = 2, 3) of every (m16, n8) block
            uint4 a[2][M_BLOCKS];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int aoff = a_lane + (((2 * r + e) ^ a_x) << 2);
#pragma unroll
                for (int mb = 0; mb < M_BLOCKS; mb++)
                    a[e][mb] = *reinterpret_cast<const uint4*>(As + aoff + mb * 8 * 128);
            }
#pragma unroll
            for (int nb = 0; nb < NB8; nb++) {
                u32 b[4];
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const u32 key = pair_key<K>(keys[nb][q], hi5[nb][q], r);
                    b[q] = hmul2_u32(lds_u32(lut_lane + (key << SH)), s2[nb], T());
                }
#pragma unroll
                for (int mb = 0; mb < M_BLOCKS; mb++) {
                    mma_16816(acc[mb][nb], a[0][mb].x, a[0][mb].y, a[0][mb].z, a[0][mb].w, b[0], b[1], T());
                    mma_16816(acc[mb][nb], a[1][mb].x, a[1][mb].y, a[1][mb].z, a[1][mb].w, b[2], b[3], T());
                }
            }
        }
    }
    cp_async_wait<0>();

    // ---------------------------------------------------------------- epilogue
    // The sums go to the (now idle) stage buffers and the split-K fixup and C stores run out of line
    // (gemm_epilogue), so that its code does not set the K loop's registers: inlined, each change to
    // it moved ptxas between 96 and 128 registers for the loop and its address math by 30-140 SASS
    // instructions a K step (H100 M = 8: +-0.3 us, profiling/run44.sh).
    __syncthreads();
    float4* xf = reinterpret_cast<float4*>(stage0) + warp * (M_BLOCKS * NB8 * 32) + lane;
#pragma unroll
    for (int mb = 0; mb < M_BLOCKS; mb++)
#pragma unroll
        for (int nb = 0; nb < NB8; nb++)
            xf[(mb * NB8 + nb) * 32] = make_float4(acc[mb][nb][0], acc[mb][nb][1], acc[mb][nb][2], acc[mb][nb][3]);
    gemm_epilogue<K, T, M_BLOCKS, TILE_N>(stage0, C, ws, counters, misc, M, N, m0, n0, nblk * m_tiles + mt, split,
                                              k_splits, tensor_scale, vec2, cluster);
}
