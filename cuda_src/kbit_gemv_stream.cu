// Streaming decode GEMV (M = 1..64, Hopper): C[M, N] = A[M, K] * W^T, W k-bit quantized in
// the TILED layout with E4M4 absmax.  Dispatched where measured fastest (H200: M = 16..32 on
// every big shape, up to 64 on gate/up, down, Q and O, from 4..8 on some gate/up widths);
// profiling/NOTES.md (seventh to ninth sessions) has where it wins and loses against kbit_gemv,
// the wgmma GEMM and dq + cuBLAS, and what limits it (the consumers' per-unit time, not the
// stage fill).
//
// Why try a second decode kernel: kbit_gemv (one block per 16-column group, the weights in
// a register ring) reaches only 50-63 % of the speed-of-light read on the H200, because
// its compute runs after the data has arrived instead of beside it, and 320 groups on 132
// SMs leave some SMs 3 blocks and others 2.  Here:
//  * work unit = one 128-column layout-tile strip x 128 K (two consecutive K tiles), the
//    units in n-major order, every CTA (one per SM) a contiguous equal share of them
//    (stream-K): every SM reads the same bytes;
//  * 4 producer warps request each unit (weight tiles, absmax, A rows) with 16-byte
//    cp.async into a ring of `stages` shared-memory stages and arrive on the stage's
//    mbarrier as their copies land (cp.async.mbarrier.arrive.noinc); 8 consumer warps
//    build the pair table meanwhile and consume the units as they land;
//  * consumer warp w owns columns 16w..16w+15 of the strip, lane (g, t) columns g and
//    g + 8 and quantization block t of the unit (K tile t / 2, block t % 2), and feeds the
//    pair-table lookups to mma.sync exactly as kbit_gemv does (block_pair_mma,
//    kbit_pairlut.cuh; for MT = 8 reading A inside its loop), fp32 accumulation, MT token
//    tiles of 8;
//  * a CTA's middle strips are whole and written directly; its first and last strip may
//    be shared with neighbouring CTAs and go through per-CTA fp32 slots (split-K): one
//    counter atomic (acq_rel) per shared strip -- the first strip's by a producer thread
//    mid-stream, the last strip's at the CTA's end -- and the CTA that completes a strip
//    sums its slots in CTA order (deterministic; counters return to 0).
// A rows are copied kvalid x 64 bytes per row (never past K); lanes whose block lies past
// K, and token rows >= M, feed zeros to the MMA.
//
// pdl (launched as a programmatic dependent): 1 = weights, codebook and pair table before
// griddepcontrol.wait; A, the workspace, the counters and C only after it; KBIT_PDL_SAFE = wait
// before anything (kbit_common.cuh).
#include "kbit_pairlut.cuh"

namespace kbit_stream_detail {

// k = 2: the quad table (QuadLut, kbit_pairlut.cuh; one LDS.64 per two pairs, 32 KB) instead of the pair table
// where KBIT_STREAM_Q2 (the environment's, kbitcupy._compile; kbitcupy.gemv_stream.table_bytes agrees): an
// experiment hook, off (H100, 2026-11-27, run38.sh sq2: faster only at M = 8, where the decode GEMV serves k = 2).
#ifndef KBIT_STREAM_Q2
#define KBIT_STREAM_Q2 0
#endif

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
// Stage layout (bytes): K tile 0 words | 64 B pad (the two tiles' lanes then hit disjoint
// banks) | K tile 1 words | absmax tile 0 (256) | absmax tile 1 (256) | TOK rows of A
// (272-byte stride: 128 elements + 16 B pad; chunks swizzled, a_chunk).
template <int K, int MT>
struct StageLayout {
    static constexpr int TILE_BYTES = KBIT_TILE_N * KBIT_KB_PER_TILE * K * 4;
    static constexpr int W1 = TILE_BYTES + 64;
    static constexpr int ABS = W1 + TILE_BYTES;
    static constexpr int A = ABS + 512;
    static constexpr int A_ROW = 272;
    static constexpr int BYTES = (A + 8 * MT * A_ROW + 127) / 128 * 128;
};

// 16-byte chunk c (8 elements of K) of a staged A row sits at chunk a_chunk(c): chunks 8..15
// swap pairs (c ^ 2).  A lane (g, t) reads chunks 4t..4t+3 of row g: unswizzled, lanes t and
// t + 2 hit the same banks (128 bytes apart), a 2-way conflict on every A-fragment load;
// with the swap the 8 lanes of a quarter-warp (two rows 272 bytes apart) cover all 32 banks.
#ifndef KBIT_STREAM_A_LINEAR  // experiment hook (profiling/stream_probe.py): the unswizzled rows
__device__ __forceinline__ int a_chunk(int c) { return c ^ ((c >> 2) & 2); }
#else
__device__ __forceinline__ int a_chunk(int c) { return c; }
#endif

// A CTA's position in its unit sequence: strip j, unit p of the strip, stage s, stage parity ph.
// Stepped by increments: a division by the runtime U or stage count per unit cost ~70 of the
// consumers' ~340 instructions per unit and ~120 of the producers' (ncu SASS counts, H200,
// ninth session).
struct UnitPos {
    int j, p, s, ph;
    __device__ __forceinline__ UnitPos(int u, int U) : j(u / U), p(u % U), s(0), ph(0) {}
    __device__ __forceinline__ void next(int U, int stages) {
        if (++p == U) { p = 0; j++; }
        if (++s == stages) { s = 0; ph ^= 1; }
    }
};

// CTA owning unit u when T units are cut into G contiguous shares (the first T % G get one more).
__device__ __forceinline__ int cta_of(int u, int q, int r) {
    const int big = r * (q + 1);
    return u < big ? u / (q + 1) : r + (u - big) / q;
}

}  // namespace kbit_stream_detail

// profiling/stream_probe.py builds with -DKBIT_STREAM_TRACE: thread 0 of each CTA stores clock64
// at entry [1], after the prologue [2], after unit i's data landed [3 + i] (i < 8), after flush f
// [11 + f] (f < 4) and at exit [15]; globaltimer at entry [0] (aligns CTAs).
#ifdef KBIT_STREAM_TRACE
__device__ unsigned long long kbit_stream_trace[1024 * 16];
#define KST(i)                                                                          \
    do {                                                                                \
        if (tid == 0) {                                                                 \
            unsigned long long c_;                                                      \
            asm volatile("mov.u64 %0, %%clock64;" : "=l"(c_)::"memory");                \
            kbit_stream_trace[blockIdx.x * 16 + (i)] = c_;                              \
        }                                                                               \
    } while (0)
#else
#define KST(i) ((void)0)
#endif

// Producer warps (an experiment hook: profiling/stream_probe.py times other counts; the launcher's
// block size is 256 + 32 x this).
#ifndef KBIT_STREAM_PRODUCERS
#define KBIT_STREAM_PRODUCERS 4
#endif
constexpr int KBIT_STREAM_NP = 32 * KBIT_STREAM_PRODUCERS;

// CTAs per SM the registers are capped for (an experiment hook: profiling/stream_probe.py times
// two CTAs per SM with a grid of 2 x SMs, i.e. 16 consumer warps per SM: slower, ninth session).
#ifndef KBIT_STREAM_MINB
#define KBIT_STREAM_MINB 1
#endif

// Slots loaded together in the split-K sum (one L2 round trip per batch on the summing CTA's exit
// path, which ends the kernel): 8 / 4 / 4 for MT = 1 / 2 / 4.  H200, eighth session
// (..._stream_sum.log): 4 instead of 2 at MT = 4 is 1-7 % faster; 16 float4 in flight at MT = 1, 2
// too costs the main loop registers (80 -> 112, 119 -> 144) and was 2-5 % slower.
#ifndef KBIT_STREAM_SUM_SLOTS
#define KBIT_STREAM_SUM_SLOTS (MT == 1 ? 8 : MT <= 4 ? 4 : 1)
#endif

// A barrier among the consumer warps only (id 1; the producer warp never joins it).
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

// 256 + 32 x KBIT_STREAM_PRODUCERS threads: warps 0..7 consume (8 warps x 16 columns = one
// 128-column strip), the others produce (request units, refill freed stages), so that the
// request issue, which the memory system paces to the DRAM stream, never holds the
// consumers (with one issuing thread inside a consumer warp the prologue took 3 us).  One
// CTA per SM (gridDim.x <= number of units).  Dynamic shared memory:
// pair table | stages x StageLayout | 2 x stages + 2 mbarriers | codebook (32 floats) | 2 flags (16 B) |
// scale table (256 words: E4M4 code -> scale as a half2 / bf162 pair).
template <int K, typename T, int MT>
__global__ void __launch_bounds__(256 + KBIT_STREAM_NP, KBIT_STREAM_MINB)
    kbit_gemv_stream(const T* __restrict__ A, const u32* __restrict__ packed, const u8* __restrict__ absmax,
                     const float* __restrict__ codebook, T* __restrict__ C, float* __restrict__ ws,
                     int* __restrict__ counters, int M, int N, int Kdim, int stages, float tensor_scale, int pdl) {
    using namespace kbit_stream_detail;
    pdl_safe_entry(pdl);           // KBIT_PDL_SAFE: wait before anything (kbit_common.cuh)
    const bool early = pdl == 1;   // weights before the wait, A after it
    typedef StageLayout<K, MT> SL;
    extern __shared__ __align__(128) unsigned char smem[];
    u32* lut = reinterpret_cast<u32*>(smem);
    typedef LutLayout<K, KBIT_STREAM_Q2> LUT;
    constexpr bool QUAD = LUT::QUAD;
    unsigned char* stage0 = smem + LUT::WORDS * 4;
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(stage0 + (long)stages * SL::BYTES);
    float* cb_s = reinterpret_cast<float*>(bars + 2 * stages + 2);
    int* flags = reinterpret_cast<int*>(cb_s + 32);
    u32* s2tab = reinterpret_cast<u32*>(flags + 4);
    const u32 stage0_s = smem_addr(stage0), full0 = smem_addr(bars), empty0 = full0 + 8 * stages;
    const u32 first_done = empty0 + 8 * stages, published = first_done + 8;  // the early publish (below)

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
#ifdef KBIT_STREAM_TRACE
    if (tid == 0) {
        unsigned long long g_;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g_));
        kbit_stream_trace[blockIdx.x * 16] = g_;
    }
#endif
    KST(1);
    const int n_tiles = (N + KBIT_TILE_N - 1) / KBIT_TILE_N;
    const int KT = (Kdim + KBIT_TILE_K - 1) / KBIT_TILE_K;  // K tiles (the last may be half padding)
    const int U = (KT + 1) >> 1;                             // units per strip
    const int total = n_tiles * U, q = total / gridDim.x, r = total % gridDim.x;
    const int u0 = blockIdx.x * q + min((int)blockIdx.x, r);
    const int nu = q + ((int)blockIdx.x < r);
    // The CTA's first strip is shared with earlier CTAs and ends before the CTA's last unit: its
    // partial sum goes to a split-K slot mid-stream, and a producer thread publishes it (fence +
    // counter atomic) while the consumers go on; an earlier CTA, which reaches that strip at the end
    // of its own stream, then finds it ready.  (Published at the CTA's end, beside the last strip,
    // these were two serial atomic round trips on every CTA's exit path.)
#ifndef KBIT_STREAM_NO_FIXUP
    const int jfirst = (u0 % U != 0 && u0 / U != (u0 + nu - 1) / U) ? u0 / U : -1;
#else
    const int jfirst = -1;
#endif

    if (tid == 0) {
        for (int s = 0; s < stages; s++) {
            mbar_init(full0 + 8 * s, KBIT_STREAM_NP);  // one arrive per producer thread
            mbar_init(empty0 + 8 * s, 8);
        }
        mbar_init(first_done, 8);
        mbar_init(published, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp >= 8) {  // ------------------------------------------------ producers
        // unit i -> stage i % stages in 16-byte cp.async copies spread over the 128 producer
        // threads, each thread's arrive (noinc) on the stage's full barrier firing once its
        // copies have landed
        const int pt = tid - 256;
        auto request = [&](const UnitPos& x, bool w, bool a) {
            const int j = x.j, p = x.p, s = x.s;
            const bool two = 2 * p + 1 < KT;
            const u32 dst = stage0_s + s * SL::BYTES;
            if (w) {
                const long tile0 = (long)(2 * p) * n_tiles + j;
                constexpr int TCH = SL::TILE_BYTES / 16;  // 16-byte chunks per K tile
                const int nch = (two ? 2 : 1) * (TCH + 16);
                for (int c = pt; c < nch; c += KBIT_STREAM_NP) {
                    const int h = c >= TCH + 16, cc = c - h * (TCH + 16);
                    const long tile = tile0 + h * n_tiles;
                    if (cc < TCH)
                        cp_async16_zfill(dst + (h ? SL::W1 : 0) + cc * 16, packed + tile * (SL::TILE_BYTES / 4) + cc * 4, true);
                    else
                        cp_async16_zfill(dst + SL::ABS + h * 256 + (cc - TCH) * 16, absmax + tile * 256 + (cc - TCH) * 16, true);
                }
            }
            if (a) {
                const int kvalid = min(4, (Kdim - 128 * p) >> 5);  // 32-element blocks of A before K ends
                const int rch = kvalid * 4;                         // chunks per row
                for (int c = pt; c < M * rch; c += KBIT_STREAM_NP) {
                    const int m = kvalid == 4 ? c >> 4 : c / rch, cc = kvalid == 4 ? c & 15 : c % rch;
                    cp_async16_zfill(dst + SL::A + m * SL::A_ROW + a_chunk(cc) * 16, A + (long)m * Kdim + 128 * p + cc * 8,
                                     true);
                }
#ifndef KBIT_STREAM_SYNC_ARRIVE
                // fires when this thread's copies so far (this unit's among them) have landed
                asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(full0 + 8 * s) : "memory");
#else  // sanitizer cross-check (serializes the producers): wait for the copies, then a plain arrive
                cp_async_wait<0>();
                mbar_arrive(full0 + 8 * s);
#endif
            }
        };
        const int first = min(nu, stages);
        UnitPos pos(u0, U);
        for (int i = 0; i < first; i++, pos.next(U, stages)) request(pos, true, !early);
        if (early) {  // A may come from the previous grid
            griddep_wait();
            UnitPos y(u0, U);
            for (int i = 0; i < first; i++, y.next(U, stages)) request(y, false, true);
        }
        griddep_launch_dependents();
        for (int i = first; i < nu; i++, pos.next(U, stages)) {  // refill a stage once the 8 consumer warps have read it
            mbar_wait(empty0 + 8 * pos.s, pos.ph ^ 1);
            request(pos, true, true);
        }
        if (jfirst >= 0 && pt == 0) {  // publish the first strip's slot once the consumers stored it
            mbar_wait(first_done, 0);  // acquire (CTA): the 8 warps' slot stores
#ifdef KBIT_STREAM_PUBLISH_DELAY_US  // test hook: publish late, so that this CTA sums its first strip
            for (int d = 0; d < 1000 * KBIT_STREAM_PUBLISH_DELAY_US; d += 500) __nanosleep(500);
#endif
            const int cf = cta_of(jfirst * U, q, r), nc1 = cta_of(jfirst * U + U - 1, q, r) - cf + 1;
            int old;
            asm volatile("atom.add.acq_rel.gpu.s32 %0, [%1], 1;\n" : "=r"(old) : "l"(counters + jfirst) : "memory");
            flags[1] = old == nc1 - 1;  // the last contributor: the consumers sum it at the end
            mbar_arrive(published);     // release (CTA): flags[1] and the acquired slots
        }
        return;
    }

    // ------------------------------------------------------------------ consumers
#ifndef KBIT_EXPERIMENT_CB_CONST
    if (tid < 32) cb_s[tid] = tid < (1 << K) ? __ldg(codebook + tid) : 0.0f;
#else  // experiment: no codebook load (wrong levels; times the load's share of the prologue)
    if (tid < 32) cb_s[tid] = tid < (1 << K) ? (float)(2 * tid + 1 - (1 << K)) / (float)(1 << K) : 0.0f;
#endif
    consumer_sync();
    if (QUAD) build_quad_lut<T>(lut, cb_s, 256, tid);
    else build_pair_lut<K, T>(lut, cb_s, 256);
    // the scale table (build_scale_table's entries) with one code per consumer thread: no loop
    s2tab[tid] = scale_pair<T>(e4m4_decode((u32)tid));
    griddep_wait();  // (pdl) ws, counters and C may belong to the previous grid
    consumer_sync();  // pair table complete
    griddep_launch_dependents();  // after our own wait: no grid two back can still run
    KST(2);

    const u32 lut_lane = smem_addr(lut) + LUT::lane_offset(lane);
    const int g = lane >> 2, t = lane & 3, half = t >> 1, kb = t & 1;
    const int c0 = 16 * warp + g;  // strip columns c0 and c0 + 8
    // This lane's byte offsets inside a stage, computed once and kept opaque: the compiler
    // re-derived them from the thread index in every unit (~40 of ~300 instructions per unit;
    // ncu SASS counts, H200, ninth session).  Column c0 + 8's block is 8 columns x 2 blocks x K
    // words after column c0's; its absmax byte 16 after.  A: row g, chunk a_chunk(4t + e).
    u32 o_w = (half ? SL::W1 : 0) + 4 * (c0 * 2 + kb) * K, o_ab = SL::ABS + half * 256 + c0 * 2 + kb, o_a[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        o_a[e] = SL::A + g * SL::A_ROW + 16 * a_chunk(4 * t + e);
        asm volatile("" : "+r"(o_a[e]));
    }
    asm volatile("" : "+r"(o_w), "+r"(o_ab));
    bool row_ok[MT];  // token row 8 mt + g exists
#pragma unroll
    for (int mt = 0; mt < MT; mt++) row_ok[mt] = 8 * mt + g < M;
    // M > 32: the A fragments read from the stage inside the MMA loop (8 token tiles x 4 chunks
    // in registers would be 128 of them), one accumulator chain per token tile (8 independent ones)
    constexpr bool BIG = MT > 4;
    constexpr int MT1 = BIG ? 1 : MT;  // acc1: the second chain (unused when BIG)
    float acc0[MT][4], acc1[MT1][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc0[mt][e] = acc1[BIG ? 0 : mt][e] = 0.f;
    // v[mt] = C^T[col c0, c0 + 8][tokens 8mt + 2t, 8mt + 2t + 1] -> C
    auto write_c = [&](int j, const float4 (&v)[MT]) {
        const int n0 = j * KBIT_TILE_N + c0, n1 = n0 + 8;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int m0 = 8 * mt + 2 * t;
            if (m0 < M) {
                if (n0 < N) C[(long)m0 * N + n0] = KbitType<T>::from_float(v[mt].x * tensor_scale);
                if (n1 < N) C[(long)m0 * N + n1] = KbitType<T>::from_float(v[mt].z * tensor_scale);
            }
            if (m0 + 1 < M) {
                if (n0 < N) C[(long)(m0 + 1) * N + n0] = KbitType<T>::from_float(v[mt].y * tensor_scale);
                if (n1 < N) C[(long)(m0 + 1) * N + n1] = KbitType<T>::from_float(v[mt].w * tensor_scale);
            }
        }
    };
    // A CTA's units cover strips j0 .. j1: the middle strips whole (written directly), the first
    // and the last possibly in part.  Those two partial sums go to their split-K slots (per-CTA
    // fp32 slots, ws[slot][strip][thread]), and their counters are bumped together at the end:
    // one latency chain (fence, atomic, sum) per CTA, none in the middle of its stream.
    const long TILE_FLOATS = (long)MT * 4 * 256, split_stride = (long)n_tiles * TILE_FLOATS;
    int jf = -1;  // the partial first strip, -1: none

    UnitPos pos(u0, U);
    for (int i = 0; i < nu; i++, pos.next(U, stages)) {
        const int j = pos.j, p = pos.p, s = pos.s;
        const int kvalid = min(4, (Kdim - 128 * p) >> 5);
        mbar_wait(full0 + 8 * s, pos.ph);
        if (i < 8) KST(3 + i);
        const unsigned char* st = stage0 + (long)s * SL::BYTES;
        // this lane's two blocks (columns c0, c0 + 8; block t of the unit)
        u32 wA[K], wB[K];
        const u32* wp = reinterpret_cast<const u32*>(st + o_w);
        constexpr int o1 = 16 * K;  // words from column c0's block to column c0 + 8's
        if (K == 4) {
            const uint4 x = *reinterpret_cast<const uint4*>(wp), y = *reinterpret_cast<const uint4*>(wp + o1);
            wA[0] = x.x; wA[1 % K] = x.y; wA[2 % K] = x.z; wA[3 % K] = x.w;
            wB[0] = y.x; wB[1 % K] = y.y; wB[2 % K] = y.z; wB[3 % K] = y.w;
        } else if (K == 2) {
            const uint2 x = *reinterpret_cast<const uint2*>(wp), y = *reinterpret_cast<const uint2*>(wp + o1);
            wA[0] = x.x; wA[1 % K] = x.y;
            wB[0] = y.x; wB[1 % K] = y.y;
        } else {
#pragma unroll
            for (int b = 0; b < K; b++) { wA[b] = wp[b]; wB[b] = wp[o1 + b]; }
        }
        const u32 sA = s2tab[st[o_ab]], sB = s2tab[st[o_ab + 16]];
        const bool k_ok = t < kvalid;  // block t lies before K's end
        if constexpr (BIG) {  // A read during the MMAs: the stage is released after them
            block_pair_mma<K, T, MT, QUAD>(acc0, acc0, wA, sA, wB, sB, [&](int mt, int r) {
                return k_ok && row_ok[mt] ? *reinterpret_cast<const uint4*>(st + o_a[r] + 8 * mt * SL::A_ROW)
                                          : make_uint4(0u, 0u, 0u, 0u);
            }, lut_lane);
            __syncwarp();
            if (lane == 0) mbar_arrive(empty0 + 8 * s);
        } else {
            uint4 a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const bool ok = k_ok && row_ok[mt];
#pragma unroll
                for (int e = 0; e < 4; e++)
                    a[mt][e] = ok ? *reinterpret_cast<const uint4*>(st + o_a[e] + 8 * mt * SL::A_ROW) : make_uint4(0u, 0u, 0u, 0u);
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(empty0 + 8 * s);  // this warp is done with the stage
#ifndef KBIT_STREAM_NO_COMPUTE  // profiling/stream_probe.py: time without the dequantize + MMA
            block_pair_mma<K, T, MT, QUAD>(acc0, acc1, wA, sA, wB, sB, a, lut_lane);
#else
            acc0[0][0] += __uint_as_float((wA[0] ^ wB[K - 1] ^ sA ^ sB ^ a[0][0].x) & 0x3fffffu);
#endif
        }
        if (i < nu - 1 && p + 1 < U) continue;
        // end of this CTA's part of strip j
        float4 v[MT];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            v[mt] = make_float4(acc0[mt][0], acc0[mt][1], acc0[mt][2], acc0[mt][3]);
            if constexpr (!BIG) {
                v[mt].x += acc1[mt][0]; v[mt].y += acc1[mt][1]; v[mt].z += acc1[mt][2]; v[mt].w += acc1[mt][3];
#pragma unroll
                for (int e = 0; e < 4; e++) acc1[mt][e] = 0.f;
            }
#pragma unroll
            for (int e = 0; e < 4; e++) acc0[mt][e] = 0.f;
        }
#ifndef KBIT_STREAM_NO_FIXUP  // profiling/stream_probe.py: time without the split-K sums (wrong results)
        const bool whole = cta_of(j * U, q, r) == cta_of(j * U + U - 1, q, r);
#else
        const bool whole = true;
#endif
        if (i < nu - 1) {
            if (whole) {
                write_c(j, v);
            } else {  // the first strip (jfirst), begun by earlier CTAs: its slot now, published by a producer
                jf = j;
                float* dst = ws + ((int)blockIdx.x - cta_of(j * U, q, r)) * split_stride + (long)j * TILE_FLOATS + tid * 4;
#pragma unroll
                for (int mt = 0; mt < MT; mt++) __stcg(reinterpret_cast<float4*>(dst + mt * 4 * 256), v[mt]);
                __syncwarp();
                if (lane == 0) mbar_arrive(first_done);  // release (CTA) to the publishing producer thread
            }
            continue;
        }
        // the last unit: the last strip (if partial) and the kept first one go through the
        // split-K slots; the CTA that completes a strip sums its slots
        if (whole) write_c(j, v);
        const bool has[2] = {!whole, jf >= 0};  // [0]: the last strip (v), [1]: the first (stored)
        if (!has[0] && !has[1]) break;
        KST(11);
        int slot[2], nc[2];
        const int js[2] = {j, jf};
#pragma unroll
        for (int d = 0; d < 2; d++) {
            slot[d] = nc[d] = 0;
            if (has[d]) {
                const int cf = cta_of(js[d] * U, q, r);
                slot[d] = (int)blockIdx.x - cf;
                nc[d] = cta_of(js[d] * U + U - 1, q, r) - cf + 1;
            }
        }
        if (has[0]) {
            float* dst = ws + slot[0] * split_stride + (long)j * TILE_FLOATS + tid * 4;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) __stcg(reinterpret_cast<float4*>(dst + mt * 4 * 256), v[mt]);
        }
        // release: every consumer's stores before thread 0's fence and counter atomic
        consumer_sync();
        if (tid == 0) {  // acq_rel: releases the slots stored before the barrier, acquires the others'
            int old = 0;
            if (has[0])
                asm volatile("atom.add.acq_rel.gpu.s32 %0, [%1], 1;\n" : "=r"(old) : "l"(counters + js[0]) : "memory");
            flags[0] = has[0] && old == nc[0] - 1;
            if (has[1]) mbar_wait(published, 0);  // the producer's publish of the first strip (flags[1])
            else flags[1] = 0;
        }
        consumer_sync();
        KST(12);
#pragma unroll
        for (int d = 0; d < 2; d++) {
            if (flags[d]) {  // sum the slots in CTA order (deterministic), the own slot from registers
                float4 sum[MT];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) sum[mt] = make_float4(0.f, 0.f, 0.f, 0.f);
                const float* src = ws + (long)js[d] * TILE_FLOATS + tid * 4;
                constexpr int SB = KBIT_STREAM_SUM_SLOTS;
                for (int sp0 = 0; sp0 < nc[d]; sp0 += SB) {
                    float4 x[SB][MT];
#pragma unroll
                    for (int b = 0; b < SB; b++)
#pragma unroll
                        for (int mt = 0; mt < MT; mt++)
                            x[b][mt] = sp0 + b >= nc[d] ? make_float4(0.f, 0.f, 0.f, 0.f)
                                       : d == 0 && sp0 + b == slot[0]
                                           ? v[mt]
                                           : __ldcg(reinterpret_cast<const float4*>(src + (sp0 + b) * split_stride + mt * 4 * 256));
#pragma unroll
                    for (int b = 0; b < SB; b++)  // in slot order: the sum does not depend on timing
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) {
                            sum[mt].x += x[b][mt].x; sum[mt].y += x[b][mt].y; sum[mt].z += x[b][mt].z; sum[mt].w += x[b][mt].w;
                        }
                }
                write_c(js[d], sum);
                if (tid == 0) counters[js[d]] = 0;  // ready for the next launch
            }
        }
    }
    KST(15);
}
