// Grouped (MoE) k-bit matmul: for every active expert slot s,
//   C[r0:r1, :] = A[r0:r1, :] @ W_e^T,  e = expert_ids[s], [r0, r1) = [offsets[s], offsets[s+1]),
// all slots in ONE launch over an expert bank (kbitcupy/grouped.py): the E experts'
// tiled packed words / E4M4 absmax live in one allocation each ([E, words_per_expert],
// [E, absmax_per_expert]), one shared codebook, a float32 tensor scale per expert.
//
// Design: the dense decode GEMV (kbit_gemv.cu) with 16 token rows per mma and the
// dequantized B fragments reused for every row chunk.
//  * grid.x = blocks of CG column groups of 8 output columns, grid.y = expert slot.
//    The block's W = CG * KW warps: warp (cg, kw) owns column group cg and the K steps
//    (128 wide: 4 quantization blocks per column) kw, kw + KW, ...; KW warps per column
//    group split K and are reduced through shared memory at the end.
//  * lane (g = lane/4, t = lane%4) owns column n0 + g and quantization block 4*s + t of
//    step s, exactly as in the dense kernel.  The pair lookup table turns its k bit
//    planes into 16 packed half2/bf162 B-fragment registers (scaled by the block
//    scale) once per step; then for every chunk of 16 token rows the lane loads A rows
//    g and g + 8 of the same block (a0/a2 = row g, a1/a3 = row g + 8) and issues 8
//    mma.m16n8k16 with fp32 accumulation.  Dequantization is paid once per weight,
//    MMAs and A traffic grow with the tokens of the expert.
//  * The expert's A rows of the current pass are staged once per block in shared memory
//    (cp.async, overlapped with the pair-table build and the first weight loads in
//    flight), in a swizzled layout that makes the per-lane LDS.128 reads conflict-free.
//    pass_rows (host: min(max_tokens, 64), fewer if shared memory would overflow) rows
//    are staged per pass; an expert with more rows is done in several passes (weights
//    re-read, table kept), so any token count is computed correctly.
//  * MC (template) = 16-row MMA chunks held in registers (1, 2, 4 -> 16, 32, 64 rows),
//    chosen on the host from pass_rows; the B fragments of a step serve every chunk.
//  * Guards (no out-of-bounds access for any input): expert id outside [0, E) -> flag
//    bit 1, offsets with r0 < 0, r1 < r0 or r1 > rows -> flag bit 2; the slot writes
//    nothing.  More tokens than max_tokens -> info bit 4 (still computed correctly).
//    Slots with 0 tokens exit before building the table.
//  * The split-K reduction is in a fixed order: results are deterministic.
#include "kbit_pairlut.cuh"

#define KBIT_GROUPED_MAX_THREADS 256
// Blocks of 256 threads that must fit one SM's registers: 3 (<= 85 registers) for the
// single-chunk decode variant with k <= 4, else 2 (<= 128).
#ifndef KBIT_GROUPED_MINB
#define KBIT_GROUPED_MINB(K, MC) (((K) <= 4 && (MC) == 1) ? 3 : 2)
#endif

// One quantization block (32 weights of one column, k bit planes) -> 16 B-fragment
// registers: b[4r + q] = packed pair (8r + 2q, 8r + 2q + 1) times the block scale.
// lut_lane = shared-window address of the pair table + 4 * (lane % COPIES).
template <int K, typename T>
__device__ __forceinline__ void block_fragments(u32 (&b)[16], const u32 (&w)[K], u32 s2, u32 lut_lane) {
    u32 keys[4], f[4];
    block_keys<K>(w, keys, f);
#pragma unroll
    for (int r = 0; r < 4; r++) {
#pragma unroll
        for (int q = 0; q < 4; q++) b[4 * r + q] = hmul2_u32(lut_lookup<K>(lut_lane, keys[q], f[q], r), s2, T());
    }
}

// 8 MMAs: one quantization block of 16 token rows against this lane's column.
template <typename T>
__device__ __forceinline__ void chunk_mma(float (&acc)[4], const uint4 (&x)[4], const uint4 (&y)[4],
                                          const u32 (&b)[16]) {
#pragma unroll
    for (int r = 0; r < 4; r++) {
        // a0 = row g pair 0, a1 = row g+8 pair 0, a2 = row g pair 1, a3 = row g+8 pair 1
        mma_16816(acc, x[r].x, y[r].x, x[r].y, y[r].y, b[4 * r + 0], b[4 * r + 1], T());
        mma_16816(acc, x[r].z, y[r].z, x[r].w, y[r].w, b[4 * r + 2], b[4 * r + 3], T());
    }
}

template <typename T>
__device__ __forceinline__ void store_pair(T* __restrict__ C, long idx, int nn, int N, float v0, float v1,
                                           bool vec_ok) {
    if (vec_ok && nn + 1 < N) {
        *reinterpret_cast<typename KbitType<T>::T2*>(C + idx) = KbitType<T>::pack2(v0, v1);
    } else {
        if (nn < N) C[idx] = KbitType<T>::from_float(v0);
        if (nn + 1 < N) C[idx + 1] = KbitType<T>::from_float(v1);
    }
}

// A rows of the current pass live in shared memory, row m at byte m * a_row_bytes(K),
// unpadded but swizzled: the 16-byte quarter q of quantization block kb of row m is
// stored at quarter q ^ a_swizzle(m, kb) of that block.  In one LDS.128 phase the 8
// lanes (g = 2p, 2p + 1; t = 0..3) read quarter r of blocks 4s + t of rows with g's
// parity; the swizzle ((t >> 1) << 1 | (g & 1)) maps those 8 lanes onto 8 distinct
// 16-byte bank groups (block kb = 4s + t puts t & 1 into bank-group bit 2).
__host__ __device__ __forceinline__ int a_row_bytes(int Kdim) { return ((Kdim * 2 + 127) / 128) * 128; }
__device__ __forceinline__ int a_swizzle(int m, int kb) { return (((kb >> 1) & 1) << 1) | (m & 1); }

// Rows g and g + 8 of one 16-row chunk at the lane's block (row_g = pointer to row g,
// block kb; sw = a_swizzle of the lane, the same for g and g + 8).  Rows >= nrows and
// blocks past K read as zeros.
__device__ __forceinline__ void lds_a_chunk(uint4 (&x)[4], uint4 (&y)[4], const unsigned char* row_g, int rstride,
                                            int sw, bool okx, bool oky) {
#pragma unroll
    for (int r = 0; r < 4; r++) {
        x[r] = okx ? *reinterpret_cast<const uint4*>(row_g + ((r ^ sw) << 4)) : make_uint4(0u, 0u, 0u, 0u);
        y[r] = oky ? *reinterpret_cast<const uint4*>(row_g + 8 * rstride + ((r ^ sw) << 4))
                   : make_uint4(0u, 0u, 0u, 0u);
    }
}

// Dynamic shared memory: pair table | codebook (32 floats) | reduction (W * MC * 4 * 32
// floats, only when KW > 1) | A rows (pass_rows * a_row_bytes(Kdim)).
// cg = column groups per block (power of two, divides the warp count).  rows = A's row
// count (bound for offsets).  wpe / ape = words / absmax bytes per expert.
// pass_rows = token rows per pass (1 .. 16 * MC): the staged row capacity.
// err = error flag (atomicOr of KBIT_ERR_* bits).
template <int K, typename T, int MC>
__global__ void __launch_bounds__(KBIT_GROUPED_MAX_THREADS, KBIT_GROUPED_MINB(K, MC))
    kbit_grouped(const T* __restrict__ A, const u32* __restrict__ packed, const u8* __restrict__ absmax,
                 const float* __restrict__ codebook, const float* __restrict__ tscale,
                 const int* __restrict__ expert_ids, const int* __restrict__ offsets, T* __restrict__ C, int N,
                 int Kdim, int E, int rows, long long wpe, long long ape, int cg, int pass_rows, int max_tokens,
                 int* __restrict__ err, int pdl) {
    constexpr int D = 4;  // weight steps in flight per lane (register ring)
    // pdl: ids and offsets may come from the previous grid (device routing): a
    // programmatic dependent waits for it before anything, only the launch overlaps.
    if (pdl) {
        griddep_wait_release();
    }
    const int slot = blockIdx.y;
    const int e = ld_after_wait(expert_ids + slot);  // (not hoisted above the wait: kbit_common.cuh)
    const int r0 = ld_after_wait(offsets + slot), r1 = ld_after_wait(offsets + slot + 1);
    if (e < 0 || e >= E) {
        if (threadIdx.x == 0) atomicOr(err, KBIT_ERR_EXPERT_ID);
        return;
    }
    if (r0 < 0 || r1 < r0 || r1 > rows) {
        if (threadIdx.x == 0) atomicOr(err, KBIT_ERR_OFFSETS);
        return;
    }
    const int ntok = r1 - r0;
    if (ntok == 0) return;  // uniform over the block: nothing to do for this expert
    if (ntok > max_tokens && threadIdx.x == 0 && blockIdx.x == 0) atomicOr(err, KBIT_ERR_MAX_TOKENS);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
    const int KW = W / cg;
    const int cgi = warp / KW, kw = warp - cgi * KW;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = (blockIdx.x * cg + cgi) * 8;
    const int n = n0 + g;
    const int KB = Kdim >> 5;
    const int KS = (Kdim + 127) >> 7;
    const int n_tiles = (N + KBIT_TILE_N - 1) / KBIT_TILE_N;
    const bool col_ok = n < n_tiles * KBIT_TILE_N;  // inside the tiled padding

    extern __shared__ __align__(16) unsigned char smem[];
    u32* lut = reinterpret_cast<u32*>(smem);
    float* cb_s = reinterpret_cast<float*>(smem + PairLut<K>::WORDS * 4);
    float* red = cb_s + 32;
    unsigned char* a_s = reinterpret_cast<unsigned char*>(red + (KW > 1 ? W * MC * 4 * 32 : 0));
    const int rstride = a_row_bytes(Kdim);

    const u32* pk = packed + (long)e * wpe;
    const u8* am = absmax + (long)e * ape;
    // Lane's block for local step sl is kblock = 4 * (kw + sl * KW) + t.
    const long woff = tiled_word_offset<K>(n, 4 * kw + t, n_tiles);
    const long aoff = tiled_absmax_offset(n, 4 * kw + t, n_tiles);
    const long wstep = 2L * KW * n_tiles * (KBIT_TILE_N * KBIT_KB_PER_TILE * K);
    const long astep = 2L * KW * n_tiles * (KBIT_TILE_N * KBIT_KB_PER_TILE);
    const int S = kw < KS ? (KS - kw + KW - 1) / KW : 0;

    u32 wr[D][K];
    u32 sc[D];  // absmax, raw (scale_from_raw at use)
    auto load_step = [&](int j, int sl) {
        const int kblock = 4 * (kw + sl * KW) + t;
        if (col_ok && kblock < KB) {
            load_planes<K>(wr[j], pk + woff + sl * wstep);
            sc[j] = load_scale_raw(am, aoff + sl * astep);
        } else {
#pragma unroll
            for (int b = 0; b < K; b++) wr[j][b] = 0u;
            sc[j] = 0u;
        }
    };
    // Stage rows [rbase, rbase + nrows) of this expert's A (cp.async, 16 bytes each).
    auto stage_a = [&](int rbase, int nrows) {
        const int cpr = Kdim >> 3;  // 16-byte chunks per row
        for (int c = threadIdx.x; c < nrows * cpr; c += blockDim.x) {
            const int m = c / cpr, q = c - m * cpr;  // q = 4 * kb + quarter
            const int kb = q >> 2;
            cp_async16(a_s + m * rstride + ((q ^ a_swizzle(m, kb)) << 4), A + (long)(r0 + rbase + m) * Kdim + q * 8);
        }
        cp_async_commit();
    };

#pragma unroll
    for (int j = 0; j < D; j++)
        if (j < S) load_step(j, j);
    stage_a(0, min(pass_rows, ntok));

    if (threadIdx.x < 32) cb_s[threadIdx.x] = threadIdx.x < (1 << K) ? codebook[threadIdx.x] : 0.0f;
    __syncthreads();
    build_pair_lut<K, T>(lut, cb_s);
    cp_async_wait<0>();
    __syncthreads();

    const u32 lut_lane = (u32)__cvta_generic_to_shared(lut) + 4u * (u32)(lane & (PairLut<K>::COPIES - 1));
    const int sw = ((t >> 1) << 1) | (g & 1);
    const unsigned char* a_lane = a_s + g * rstride + t * 64;  // + 16c * rstride + step * 256
    const float ts = tscale[e];
    const bool vec_ok = (N & 1) == 0;

    for (int rbase = 0; rbase < ntok; rbase += pass_rows) {
        const int prow = min(pass_rows, ntok - rbase);  // rows in this pass
        if (rbase > 0) {
            // Another pass (more rows than one pass holds): restage A, reload the ring.
            __syncthreads();  // everyone is done with the previous pass's A and reduction buffer
#pragma unroll
            for (int j = 0; j < D; j++)
                if (j < S) load_step(j, j);
            stage_a(rbase, prow);
            cp_async_wait<0>();
            __syncthreads();
        }
        const int nch = (prow + 15) >> 4;  // <= MC
        float acc[MC][4];
#pragma unroll
        for (int c = 0; c < MC; c++) acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.0f;

        for (int s0 = 0; s0 < S; s0 += D) {
#pragma unroll
            for (int j = 0; j < D; j++) {
                const int sl = s0 + j;
                if (sl < S) {
                    const int step = kw + sl * KW;
                    const bool kok = 4 * step + t < KB;
                    const u32 s2 = scale_pair<T>(scale_from_raw<u8>(sc[j]));
                    u32 wj[K];
#pragma unroll
                    for (int b = 0; b < K; b++) wj[b] = wr[j][b];
                    if (sl + D < S) load_step(j, sl + D);
                    u32 bf[16];
                    block_fragments<K, T>(bf, wj, s2, lut_lane);
                    const unsigned char* a_blk = a_lane + step * 256;
#pragma unroll
                    for (int c = 0; c < MC; c++) {
                        if (c < nch) {
                            uint4 x[4], y[4];
                            lds_a_chunk(x, y, a_blk + 16 * c * rstride, rstride, sw, kok && 16 * c + g < prow,
                                        kok && 16 * c + g + 8 < prow);
                            chunk_mma<T>(acc[c], x, y, bf);
                        }
                    }
                }
            }
        }

        // Split-K reduction over the KW warps of this column group (fixed order).
        if (KW > 1) {
            if (kw > 0) {
#pragma unroll
                for (int c = 0; c < MC; c++)
                    if (c < nch) {
#pragma unroll
                        for (int i = 0; i < 4; i++) red[((warp * MC + c) * 4 + i) * 32 + lane] = acc[c][i];
                    }
            }
            __syncthreads();
            if (kw == 0) {
                for (int w2 = 1; w2 < KW; w2++) {
#pragma unroll
                    for (int c = 0; c < MC; c++)
                        if (c < nch) {
#pragma unroll
                            for (int i = 0; i < 4; i++) acc[c][i] += red[(((warp + w2) * MC + c) * 4 + i) * 32 + lane];
                        }
                }
            }
        }
        // acc[c][0..1]: row rbase + 16c + g, columns n0 + 2t, +1; acc[c][2..3]: row + 8.
        if (kw == 0) {
            const int nn = n0 + 2 * t;
#pragma unroll
            for (int c = 0; c < MC; c++) {
                if (c < nch) {
                    const int row = rbase + 16 * c + g;
                    if (row < ntok)
                        store_pair<T>(C, (long)(r0 + row) * N + nn, nn, N, acc[c][0] * ts, acc[c][1] * ts, vec_ok);
                    if (row + 8 < ntok)
                        store_pair<T>(C, (long)(r0 + row + 8) * N + nn, nn, N, acc[c][2] * ts, acc[c][3] * ts, vec_ok);
                }
            }
        }
    }
}

// ---------------------------------------------------------------- MoE helpers
// The helpers of a MoE step (gather -> grouped gate/up -> silu_mul -> grouped down ->
// combine) take part in a PDL chain (kbitcupy/_pdl.py): launched as programmatic
// dependents (pdl) they wait for the previous kernel first; all of them then let the
// next kernel launch at once (it reads their output only after its own wait, i.e. after
// they completed), so its weight requests overlap them.
__device__ __forceinline__ void moe_helper_prologue(int pdl) {
    if (pdl) griddep_wait();
    griddep_launch_dependents();
}

// out[i] = x[idx[i]] for rows of `row_units` units of U (uint4 where the row bytes and
// pointers allow, else unsigned short): the tokens gathered into expert order.  An index
// outside x's nsrc rows (a hand-made routing) gathers zeros and sets KBIT_ERR_ROWS.
template <typename U>
__global__ void __launch_bounds__(256) kbit_gather_rows(const U* __restrict__ x, const int* __restrict__ idx,
                                                        U* __restrict__ out, int rows, int row_units, int nsrc,
                                                        int* __restrict__ err, int pdl) {
    moe_helper_prologue(pdl);
    const long total = (long)rows * row_units;
    const long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const long r = i / row_units;
        const int c = (int)(i - r * row_units);
        const int s = idx[r];
        if ((unsigned)s < (unsigned)nsrc) {
            out[i] = x[(long)s * row_units + c];
        } else {
            out[i] = U{};
            if (c == 0) atomicOr(err, KBIT_ERR_ROWS);
        }
    }
}

// out[r, i] = silu(gate[r, i]) * up[r, i] in fp32, rounded once.  Row strides in
// elements (the fused gate/up output is [rows, 2I]: gate = columns 0..I-1, up = I..2I-1).
template <typename T>
__global__ void __launch_bounds__(256) kbit_silu_mul(const T* __restrict__ gate, const T* __restrict__ up,
                                                     T* __restrict__ out, int rows, int I, long long ld_gate,
                                                     long long ld_up, int pdl) {
    moe_helper_prologue(pdl);
    const long total = (long)rows * I;
    const long stride = (long)gridDim.x * blockDim.x;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const long r = idx / I;
        const int i = (int)(idx - r * I);
        const float gv = KbitType<T>::to_float(gate[r * ld_gate + i]);
        const float uv = KbitType<T>::to_float(up[r * ld_up + i]);
        out[idx] = KbitType<T>::from_float(silu_mul_f(gv, uv));
    }
}

// out[tok, h] = sum_j weights[tok, j] * Cs[pos[tok, j], h] in fp32 (fixed j order),
// rounded once.  pos = row of pair (tok, j) in the expert-sorted layout.  The choices go in
// batches of 8: their pos / weight loads, then their rows' loads, each batch in flight together,
// then the sum in j order.  One choice at a time was two dependent L2 round trips per choice
// (topk = 10 at decode: ~20 in a row per thread).
#define KBIT_COMBINE_BATCH 8
template <typename T, typename WT>
__global__ void __launch_bounds__(256) kbit_moe_combine(const T* __restrict__ Cs, const int* __restrict__ pos,
                                                        const WT* __restrict__ weights, T* __restrict__ out,
                                                        int ntok, int topk, int H, int pdl) {
    moe_helper_prologue(pdl);
    const long total = (long)ntok * H;
    const long stride = (long)gridDim.x * blockDim.x;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const long tok = idx / H;
        const int h = (int)(idx - tok * H);
        float s = 0.0f;
        for (int j0 = 0; j0 < topk; j0 += KBIT_COMBINE_BATCH) {
            const long p0 = tok * topk + j0;
            const int nb = min(KBIT_COMBINE_BATCH, topk - j0);
            int pr[KBIT_COMBINE_BATCH];
            float wv[KBIT_COMBINE_BATCH], cv[KBIT_COMBINE_BATCH];
#pragma unroll
            for (int u = 0; u < KBIT_COMBINE_BATCH; u++)
                if (u < nb) {
                    pr[u] = pos[p0 + u];
                    wv[u] = KbitType<WT>::to_float(weights[p0 + u]);
                }
#pragma unroll
            for (int u = 0; u < KBIT_COMBINE_BATCH; u++)
                if (u < nb) cv[u] = KbitType<T>::to_float(Cs[(long)pr[u] * H + h]);
#pragma unroll
            for (int u = 0; u < KBIT_COMBINE_BATCH; u++)
                if (u < nb) s += wv[u] * cv[u];
        }
        out[idx] = KbitType<T>::from_float(s);
    }
}

// The routing kernels' block-wide exclusive scans of the per-expert row counts cnt[0..E] (E: the
// parked bad ids) and of "expert is active": thread tid owns experts [lo, hi), whose first row is
// `run` and first slot `slot`; nact = active experts.  part: 2 * blockDim ints of shared scratch.
__device__ __forceinline__ void route_scan(const int* cnt, int E, int* part, int& lo, int& hi, int& run, int& slot,
                                           int& nact) {
    const int tid = threadIdx.x, bd = blockDim.x;
    const int c = (E + 1 + bd - 1) / bd;
    lo = min(tid * c, E + 1);
    hi = min(lo + c, E + 1);
    int rows = 0, act = 0;
    for (int j = lo; j < hi; j++) {
        rows += cnt[j];
        act += (j < E && cnt[j] > 0);
    }
    part[tid] = rows;
    part[bd + tid] = act;
    __syncthreads();
    for (int off = 1; off < bd; off <<= 1) {  // Hillis-Steele inclusive scan
        const int r = tid >= off ? part[tid - off] : 0, a = tid >= off ? part[bd + tid - off] : 0;
        __syncthreads();
        part[tid] += r;
        part[bd + tid] += a;
        __syncthreads();
    }
    run = part[tid] - rows;
    slot = part[bd + tid] - act;
    nact = part[2 * bd - 1];
}

// MoE routing for decode-sized batches in one block (the CuPy argsort path costs ~15
// launches, ~57 us on H200): a counting sort of the P = T * topk choices by expert,
// stable in the choice index, so the layout equals moe.reference_route's.  Ids outside
// [0, E) set err bit 1 and are parked after every valid row (their outputs undefined).
// Dynamic smem: ints cnt[E + 1], start[E + 1], part[2 * blockDim], ids[P].
// pdl: launched as a programmatic dependent (kbitcupy/_pdl.py, either mode): wait for the previous
// grid before reading the ids; then let the next grid (the grouped gate/up, which reads our output
// only after its own wait) launch, so its blocks are resident when we finish.
__global__ void __launch_bounds__(1024) kbit_moe_route(const int* __restrict__ ids_in, int P, int topk, int E, int S,
                                                       int* __restrict__ sorted_token, int* __restrict__ pos,
                                                       int* __restrict__ expert_ids, int* __restrict__ offsets,
                                                       int* __restrict__ err, int pdl) {
    moe_helper_prologue(pdl);
    extern __shared__ int sm_route[];
    int* cnt = sm_route;
    int* start = cnt + (E + 1);
    int* part = start + (E + 1);  // [0, bd): rows before each chunk, [bd, 2bd): active experts before it
    int* ids = part + 2 * blockDim.x;
    const int tid = threadIdx.x, bd = blockDim.x;
    for (int i = tid; i <= E; i += bd) cnt[i] = 0;
    __syncthreads();
    for (int p = tid; p < P; p += bd) {
        int e = ids_in[p];
        if (e < 0 || e >= E) {
            e = E;
            atomicOr(err, 1);
        }
        ids[p] = e;
        atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    int lo, hi, run, slot, nact;
    route_scan(cnt, E, part, lo, hi, run, slot, nact);
    for (int j = lo; j < hi; j++) {
        start[j] = run;
        if (j < E && cnt[j] > 0) {
            expert_ids[slot] = j;
            offsets[slot] = run;
            slot++;
        }
        run += cnt[j];
    }
    __syncthreads();  // start[E] (read below) is written by the thread whose chunk holds E
    for (int s = nact + tid; s <= S; s += bd) {  // unused slots: expert 0, no rows
        if (s < S) expert_ids[s] = 0;
        offsets[s] = s == nact ? start[E] : P;
    }
    __syncthreads();
    for (int p = tid; p < P; p += bd) {  // stable rank among equal experts
        const int e = ids[p];
        int r = 0;
        for (int q = 0; q < p; q++) r += ids[q] == e;
        const int dst = start[e] + r;
        pos[p] = dst;
        sorted_token[dst] = p / topk;
    }
}

// The same routing for P <= 32 choices (a decode step of 1..3 tokens at top-10) on one warp, by comparison instead of
// counting: lane p holds choice p; its sorted row is the number of choices before it in (expert, choice) order (the
// stable counting sort's row), its expert's slot the number of distinct smaller experts.  No per-expert array, so
// none of kbit_moe_route's E-long zeroing and scan (512 experts: eight scan rounds of two barriers) for 10 choices.
// The same arrays, bad ids included (parked as expert E after every valid row).
__global__ void __launch_bounds__(32) kbit_moe_route_warp(const int* __restrict__ ids_in, int P, int topk, int E, int S,
                                                        int* __restrict__ sorted_token, int* __restrict__ pos,
                                                        int* __restrict__ expert_ids, int* __restrict__ offsets,
                                                        int* __restrict__ err, int pdl) {
    moe_helper_prologue(pdl);
    const unsigned full = 0xffffffffu;
    const int lane = threadIdx.x;
    int e = E + 1;  // lanes past P sort after every choice
    if (lane < P) {
        e = ld_after_wait(ids_in + lane);
        if (e < 0 || e >= E) {
            e = E;
            atomicOr(err, 1);
        }
    }
    int row = 0;
    bool first = lane < P && e < E;  // the first choice of its (valid) expert
    for (int q = 0; q < 32; q++) {
        const int eq = __shfl_sync(full, e, q);
        row += eq < e || (eq == e && q < lane);
        first = first && !(eq == e && q < lane);
    }
    const unsigned firsts = __ballot_sync(full, first);
    int slot = 0;
    for (int q = 0; q < 32; q++) slot += ((firsts >> q) & 1u) && __shfl_sync(full, e, q) < e;
    const int nact = __popc(firsts), nvalid = __popc(__ballot_sync(full, lane < P && e < E));
    if (lane < P) {
        pos[lane] = row;
        sorted_token[row] = lane / topk;
    }
    if (first) {
        expert_ids[slot] = e;
        offsets[slot] = row;
    }
    for (int s = nact + lane; s <= S; s += 32) {  // unused slots: expert 0, no rows (as kbit_moe_route)
        if (s < S) expert_ids[s] = 0;
        offsets[s] = s == nact ? nvalid : P;
    }
}

// MoE routing for prefill-sized batches (P > ROUTE_KERNEL_MAX_PAIRS, kbitcupy/moe.py): the same
// stable counting sort as kbit_moe_route in three grid-wide passes over blocks of 1024 choices (the
// one-block kernel's stable rank is O(P^2); the CuPy argsort path it replaces took ~115 us per layer
// step at 2560-10240 choices on H100, profiling/results/..._layer26-se0.md).
// Pass 1: per-block expert histograms hist[b][0..E] (E = the bucket of ids outside [0, E)), the ids
// cleaned into ids_c.  Dynamic smem: ints cnt[E + 1].
__global__ void __launch_bounds__(1024) kbit_moe_route_count(const int* __restrict__ ids_in, int P, int E,
                                                             int* __restrict__ ids_c, int* __restrict__ hist,
                                                             int* __restrict__ err) {
    extern __shared__ int cnt_rc[];
    const int tid = threadIdx.x, p = blockIdx.x * 1024 + tid;
    for (int i = tid; i <= E; i += 1024) cnt_rc[i] = 0;
    __syncthreads();
    if (p < P) {
        int e = ids_in[p];
        if (e < 0 || e >= E) {
            e = E;
            atomicOr(err, 1);
        }
        ids_c[p] = e;
        atomicAdd(&cnt_rc[e], 1);
    }
    __syncthreads();
    for (int i = tid; i <= E; i += 1024) hist[(long)blockIdx.x * (E + 1) + i] = cnt_rc[i];
}

// Pass 2 (one block): hist[b][e] becomes the first row of block b's choices of expert e (the
// expert's start + the rows of earlier blocks), and the slot layout (expert_ids, offsets, unused
// slots) is written as kbit_moe_route writes it.  Dynamic smem: ints tot[E + 1], part[2 * blockDim].
__global__ void __launch_bounds__(1024) kbit_moe_route_scan(int B, int P, int E, int S, int* __restrict__ hist,
                                                            int* __restrict__ expert_ids, int* __restrict__ offsets) {
    extern __shared__ int sm_rs[];
    int* tot = sm_rs;
    int* part = tot + (E + 1);
    const int tid = threadIdx.x, bd = blockDim.x;
    for (int e = tid; e <= E; e += bd) {  // per expert: exclusive prefix over blocks, total
        int run = 0;
        for (int b = 0; b < B; b++) {
            const int c = hist[(long)b * (E + 1) + e];
            hist[(long)b * (E + 1) + e] = run;
            run += c;
        }
        tot[e] = run;
    }
    __syncthreads();
    int lo, hi, run, slot, nact;
    route_scan(tot, E, part, lo, hi, run, slot, nact);
    for (int j = lo; j < hi; j++) {
        const int cj = tot[j];
        for (int b = 0; b < B; b++) hist[(long)b * (E + 1) + j] += run;
        if (j < E && cj > 0) {
            expert_ids[slot] = j;
            offsets[slot] = run;
            slot++;
        }
        if (j == E) tot[E] = run;  // now the first row of the parked (bad id) choices
        run += cj;
    }
    __syncthreads();
    for (int s = nact + tid; s <= S; s += bd) {  // unused slots: expert 0, no rows
        if (s < S) expert_ids[s] = 0;
        offsets[s] = s == nact ? tot[E] : P;
    }
}

// Pass 3: the stable rank of each choice among its block's choices of the same expert, in choice
// order: the block's 32 warps one after the other, each warp's equal ids found with match_any (its
// leader takes the running row of that expert and advances it).  Dynamic smem: ints run[E + 1].
__global__ void __launch_bounds__(1024) kbit_moe_route_scatter(const int* __restrict__ ids_c, int P, int topk, int E,
                                                               const int* __restrict__ hist,
                                                               int* __restrict__ sorted_token, int* __restrict__ pos) {
    extern __shared__ int run_rs[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, p = blockIdx.x * 1024 + tid;
    for (int i = tid; i <= E; i += 1024) run_rs[i] = hist[(long)blockIdx.x * (E + 1) + i];
    const int e = p < P ? ids_c[p] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    const int leader = __ffs(same) - 1, before = __popc(same & ((1u << lane) - 1u));
    __syncthreads();
    for (int w = 0; w < 32; w++) {
        if (warp == w) {
            int base = 0;
            if (lane == leader && e >= 0) {
                base = run_rs[e];
                run_rs[e] = base + __popc(same);
            }
            base = __shfl_sync(0xffffffffu, base, leader);
            if (e >= 0) {
                const int dst = base + before;
                pos[p] = dst;
                sorted_token[dst] = p / topk;
            }
        }
        __syncthreads();
    }
}
