// Decode GEMV (M = 1..8): C[M, N] = A[M, K] * W^T, W k-bit quantized.
//
// Why this shape (see profiling/NOTES.md for the instruction budget): at Hopper
// bandwidth a k = 4 weight arrives every ~0.1 ns, leaving ~4-6 issued instructions
// per weight for the whole GPU.  Per-element bit extraction plus a shuffle and an FMA
// per M row costs several times that.  So:
//  * pair lookup table: word-wide LOP3s turn the k bit planes of a block into 16
//    byte-sized keys, each naming two neighbouring elements; one conflict-free
//    shared-memory load (the table is replicated per lane) returns both codebook
//    levels as a packed half2/bf162 (k = 2 at one token tile: one LDS.64 of a quad table returns
//    two pairs, see gemv_quad);
//  * the block scale multiplies the pair once (HMUL2; E4M4 scales are exact in
//    fp16/bf16), so the packed pair is directly an mma.sync B-fragment register;
//  * the tensor core does every multiply-add for all M <= 8 rows at once with fp32
//    accumulation, so the cost per weight does not grow with M.
// Any permutation of the K dimension applied to both A and B leaves the dot product
// unchanged, so each lane feeds the MMA the elements its own block holds: lane
// (g = lane/4, t = lane%4) owns column n0 + g and quantization block 4*s + t of step
// s; it supplies A row g of the same block (rows >= M are zeros).
#include "kbit_pairlut.cuh"

// profiling/gemv_trace.py (and grouped_trace.py) build with -DKBIT_TRACE: per-block timeline in a global
// buffer (clock64 per SM; globaltimer at entry and exit to align blocks), row = the linear block index.
#ifdef KBIT_TRACE
#define KBIT_TRACE_STRIDE 64
__device__ unsigned long long kbit_trace[4096 * KBIT_TRACE_STRIDE];
#define KTR(i, v) kbit_trace[((long)blockIdx.y * gridDim.x + blockIdx.x) * KBIT_TRACE_STRIDE + (i)] = (v)
#endif

// k = 2 at one token tile: the quad table (QuadLut, 32 KB; half the lookups of the pair table), except in the
// several-wave grouped kernel (kbit_gemv_grouped_slw).  H100, 2026-11-27 (thirty-first session, run38.sh q2):
// dense M = 1 TOTAL 16.28 -> 15.67 us (gate/up 4.07 -> 3.83, Q 3.18 -> 3.04), M = 4 18.75 -> 18.46, M = 8 equal;
// grouped 8 / 10 experts 1 token gate/up fused + down 9.07 / 11.15 -> 8.83 / 10.59.  Slower: two token tiles (the
// staged A and the table cost a block per SM: dense gate/up M = 16 9.37 -> 12.25; grouped 16 tokens +0.2-0.5 us)
// and the 4-warp blocks of many experts (32 experts down 10.24 -> 10.89, 4 tokens 10.87 -> 12.35: a 32 KB build
// per 4 warps).  KBIT_GEMV_Q2=0 (the environment, kbitcupy._compile; kbitcupy.gemv.table_bytes agrees): the pair
// table everywhere.
#ifndef KBIT_GEMV_Q2
#define KBIT_GEMV_Q2 1
#endif
template <int K, int MT> __host__ __device__ constexpr bool gemv_quad() { return K == 2 && MT == 1 && KBIT_GEMV_Q2; }

// The staged A rows' bank swizzle.  A lane (g, t) reads 16-byte chunks 4t..4t+3 of its row's step, one LDS.128 each,
// and rows are a multiple of 256 bytes apart: a quarter-warp pass (rows 2j and 2j + 1, t = 0..3) read both rows'
// chunks from the same banks, 4-way at M >= 2 (2-way at M = 1: lanes t and t + 2).  Swizzled (ASW): chunk q of an
// odd row is stored at q ^ 2, and such a lane reads its chunks 0, 1 from 32 bytes further and 2, 3 from 32 bytes
// back (two bases, the offsets stay immediates): two passes instead of four at M >= 2.  H200, 2026-11-27 (run41.sh
// asw2, two passes against b0b87fc): dense M = 4 TOTAL k = 4 19.95 -> 19.17 us, k = 2 18.09 -> 17.19; M = 1 k = 4
// equal, k = 2 15.01 -> 15.15 (its cheaper step pays more for the lane's second base: off at k = 2); grouped k = 4
// 4 tokens gate/up fused + down 10.95 / 12.64 -> 10.62 / 12.25 (8 / 10 experts), 1 token equal.  Tried and not kept:
// the t-conflict too (chunk q ^ (q bit 3), three XORs a step: M = 1 +1.4 %), and 16-byte gaps in the rows instead
// (made A's cp.async copies slow: +22 % at M = 1; ncu long-scoreboard stalls x3.5).
// Two token tiles (M = 9..16; 16 rows, eight row pairs): H100 (run41.sh m816, two passes) dense k = 4 GEMV TOTAL M = 9
// 31.07 -> 28.74 us, M = 16 41.39 -> 35.87.  There at k <= 4 (k = 2's two-tile kernel uses the pair table, its step as
// k = 3's): at k = 5 the lane's second base made the grouped kernel spill 16 bytes on sm_80 at its 128-register cap.
// KBIT_GEMV_ASW (an experiment hook): 0 off, 1 on (one token tile), 2 on at every tile; default: one tile at k >= 3,
// two at k <= 4.
#ifndef KBIT_GEMV_ASW
#define KBIT_GEMV_ASW -1
#endif
template <int K, int MT> __host__ __device__ constexpr bool gemv_asw() {
    return KBIT_GEMV_ASW == 2 || (KBIT_GEMV_ASW < 0 ? (MT == 1 ? K >= 3 : K <= 4) : KBIT_GEMV_ASW > 0 && MT == 1);
}
// The full swizzle (FSW; two token tiles, where ASW is on): the t-conflict too -- lanes t and t + 2 read 128 bytes
// apart, a 2-way conflict ASW leaves -- chunk q of row m stored at q ^ ((q bit 3) | (m & 1) << 1), and a lane reads
// its chunk r at base ^ 16 r (its base holds the swizzle; three XORs a step a tile).  At two tiles a step's eight
// LDS.128 were 64 of its ~96 shared-memory wavefronts (32 lookups), 32 with it.  H100, 2026-11-27 (run42.sh fsw, two
// passes): dense k = 4 GEMV M = 16 down 7.61 -> 7.23 us, Q 6.40 -> 6.10, O 6.61 -> 6.27, KV 3.98 -> 3.81 (GEMV TOTAL
// M = 9 / 12 / 16 -1.4 / -1.9 / -4.6 %; k = 2 / 3 alike); grouped k = 4 12 / 16 tokens gate/up fused + down -3..-7 %.
// One token tile keeps ASW's form (there the full swizzle cost M = 1 +1.4 %, run41 asw).  KBIT_GEMV_FSW=0 (an
// experiment hook): ASW's form at two tiles too.
#ifndef KBIT_GEMV_FSW
#define KBIT_GEMV_FSW 1
#endif
template <int K, int MT> __host__ __device__ constexpr bool gemv_fsw() {
    return KBIT_GEMV_FSW && MT >= 2 && gemv_asw<K, MT>();
}
// A staged row by row at fixed chunk columns (stage_A's ROWS; gemv_block says where).  H200, 2026-11-27 (thirty-sixth
// session, run43.sh rows / rows2, two passes): dense k = 4 GEMV TOTAL M = 16 28.74 -> 25.40 us, M = 8 22.76 -> 21.37;
// grouped k = 4 16 tokens gate/up fused + down 18.4 / 23.8 -> 16.1 / 20.9 us (8 / 10 experts); where a thread has one or
// two chunks (M = 1 / 2, grouped 1..8 tokens) 0.01-0.1 us slower, so not there.  0: the linear loop everywhere.
#ifndef KBIT_GEMV_STAGE_ROWS
#define KBIT_GEMV_STAGE_ROWS 1
#endif
template <int K, int MT> __device__ __forceinline__ int a_swizzle(int q, int m) {
    return gemv_fsw<K, MT>() ? q ^ (((q >> 3) & 1) | ((m & 1) << 1)) : gemv_asw<K, MT>() ? q ^ ((m & 1) << 1) : q;
}

// A block's threads and the caller's linear index: 1-D blocks, or (SLICES) blockDim.y slices
// side by side (the constants keep the 1-D instantiations' code as it was).
template <bool SLICES> __device__ __forceinline__ unsigned block_threads() {
    return SLICES ? blockDim.x * blockDim.y : blockDim.x;
}
template <bool SLICES> __device__ __forceinline__ unsigned block_tid() {
    return SLICES ? threadIdx.y * blockDim.x + threadIdx.x : threadIdx.x;
}
// The pair table from the levels in cb_s (complete: after a barrier), by the block's threads.
template <int K, typename T, bool SLICES, bool Q>
__device__ __forceinline__ void build_block_lut(u32* lut, const float* cb_s, unsigned nthr, unsigned tid) {
#ifndef KBIT_EXPERIMENT_NO_LUT  // profiling/gemv_stages.py: time without this stage
    if (LutLayout<K, Q>::QUAD) build_quad_lut<T>(lut, cb_s, nthr, tid);
    else if (SLICES) build_pair_lut<K, T>(lut, cb_s, nthr, tid);
    else build_pair_lut<K, T>(lut, cb_s);
#endif
}
// The default codebook's pair table (CBD: levels as immediates, no global load), so a kernel can
// build it before griddepcontrol.wait.  cb_s: 32 floats of scratch no other thread touches
// until the caller's next barrier.
template <int K, typename T, bool SLICES, bool Q>
__device__ __forceinline__ void build_default_lut(u32* lut, float* cb_s, unsigned nthr, unsigned tid) {
    if (tid < 32) cb_s[tid] = tid < (1u << K) ? kbit_default_level<K>(tid) : 0.0f;
    __syncthreads();
    build_block_lut<K, T, SLICES, Q>(lut, cb_s, nthr, tid);
}

// gemv_block's operands bound late (the grouped kernel's wait-first launch, kbit_gemv_grouped's LB):
// NoBind = the operands are the arguments; LateBind{f}: f(BindOut&) gives their offsets from the
// arguments (false: nothing to compute), called once the block's expert-independent set-up (its first
// group's word offsets included) is done -- the first pass's f waits for the previous grid and reads
// the slot's expert and rows there.
struct BindOut {
    long wbase, abase, aoff, coff;  // packed words, absmax bytes, A and C elements
    int m, roff;                    // rows, a_rows offset
    float ts;                       // tensor scale
};
struct NoBind {
    static constexpr bool active = false;
    __device__ bool operator()(BindOut&) const { return true; }
};
template <class F>
struct LateBind {
    F f;
    static constexpr bool active = true;
    __device__ bool operator()(BindOut& o) const { return f(o); }
};

// The weight word offsets of gemv_block's ring (woff): 32-bit in the dense kernel (KEEP), where the signed 64-bit
// form took ~20 SASS a ring slot (address; the absmax index a signed division by k: ~10 more at k = 3 / 5) and ~11
// registers.  H200, 2026-11-28 (profiling/run46.sh ab3, with gemv.resident_cap_smem): M = 1 TOTAL k = 3 / 5 -7 % / -6 %,
// k = 2 / 4 -0.3 % / -1 %.  The grouped kernels keep 64-bit (their 96-register slices form spills with 32).
// Experiment hooks: -DKBIT_GEMV_OFF32=0 / -DKBIT_GROUPED_OFF32=1.
#ifndef KBIT_GEMV_OFF32
#define KBIT_GEMV_OFF32 1
#endif
#ifndef KBIT_GROUPED_OFF32
#define KBIT_GROUPED_OFF32 0
#endif
template <bool OFF32> struct WordOff { typedef long T; };
template <> struct WordOff<true> { typedef u32 T; };
__device__ __forceinline__ void woff_opaque(u32& w) { asm volatile("" : "+r"(w)); }
__device__ __forceinline__ void woff_opaque(long& w) { asm volatile("" : "+l"(w)); }

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
// C8 (8-column groups, M <= 4; kbit_gemv only): the MMA's rows g and g + 8 are the same column
// n0 + g, its blocks in the first and second 128-K half of a 256-K step, and its token columns
// 0..3 / 4..7 the A rows of those halves (the cross terms are never read).  Half as many
// columns per group: gate/up's 320 groups on 132 SMs leave 3 on some SMs and 2 on others,
// its 640 half-width ones 5 and 4.
// Bind: NoBind, or LateBind (above): M is then the rows the shared memory is laid out for and the
// operands are the arguments plus bind's offsets.  KEEP (the dense kbit_gemv): see addr_ready.
template <int K, typename T, typename ABS, bool TILED, int D, int MT, bool MULTI, bool DUAL, bool LATE, int AMODE = 0,
          bool SLICES = false, bool CBD = false, bool C8 = false, class Bind = NoBind, bool KEEP = false, bool QUAD = false,
          bool TSR = false>
__device__ __forceinline__ void gemv_block(const T* __restrict__ A, const u32* __restrict__ packed,
                                           const ABS* __restrict__ absmax, const float* __restrict__ codebook,
                                           T* __restrict__ C, int M, int N, int Kdim, float tensor_scale, int grp0,
                                           int grp_stride, int ngroups, bool pdl = false,
                                           const int* __restrict__ a_rows = nullptr, int a_nrows = 0,
                                           bool safe_pf = false, bool lut_ready = false,
                                           const float* __restrict__ tscale_late = nullptr, int pf_steps = D,
                                           const Bind& bind = Bind()) {
    extern __shared__ __align__(16) unsigned char smem[];
#ifdef KBIT_TRACE
    if (threadIdx.x == 0) {
        KTR(0, probe_gtime()); KTR(1, probe_clock()); KTR(2, probe_smid());
    }
#endif
    // A staged row by row (stage_A) at two or four token tiles and in the token split's CTAs (TSR), where a thread has
    // four 16-byte chunks or more; the one-tile kernels, which also serve M = 1, keep the linear loop.
    constexpr bool ROWS = KBIT_GEMV_STAGE_ROWS && AMODE != 2 && (MT >= 2 || TSR);
    u32* lut = reinterpret_cast<u32*>(smem);
    static_assert(!C8 || (MT == 1 && AMODE == 0 && !SLICES), "C8: one token tile (M <= 4), dense kernel only");
    constexpr int SK = C8 ? 256 : 128;    // K per step
    const int KS = (Kdim + SK - 1) >> (C8 ? 8 : 7);  // steps
    const int KP = KS * SK;               // staged A row length
    T* a_s = reinterpret_cast<T*>(smem + LutLayout<K, QUAD>::WORDS * 4);
    float* red = reinterpret_cast<float*>(a_s + (long)M * KP);
    // 1-D blocks unless SLICES (the constants keep the other instantiations' code as it was)
    const int ny = SLICES ? (int)blockDim.y : 1, ty = SLICES ? (int)threadIdx.y : 0;
    const unsigned nthr = block_threads<SLICES>(), tid = block_tid<SLICES>();
    float* cb_s = red + (nthr >> 5) * 128 * MT;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int KB = Kdim >> 5;
    const int n_tiles = (N + KBIT_TILE_N - 1) / KBIT_TILE_N;
    const int S = warp < KS ? (KS - warp + W - 1) / W : 0;
    // In both layouts a block's absmax index is its word offset / K, so only the word
    // offsets are kept; 32-bit in the dense kernel (WordOff, above; gemv refuses weights of 2^32 words).
    typedef typename WordOff<KEEP ? KBIT_GEMV_OFF32 : KBIT_GROUPED_OFF32>::T woff_t;
    const woff_t wstep = TILED ? (woff_t)(SK / 64) * W * n_tiles * (KBIT_TILE_N * KBIT_KB_PER_TILE * K)
                               : (woff_t)(SK / 32) * W * K;
    // the lane's column and quantization block for ring slot c at its warp's local step j
    auto col_of = [&](int grp, int c) { return C8 ? grp * 8 + g : grp * 16 + g + 8 * c; };
    auto kblock_of = [&](int j, int c) { return C8 ? 8 * (warp + j * W) + 4 * c + t : 4 * (warp + j * W) + t; };

    // Per column (c = 0: n0+g, c = 1: n0+g+8): word offset of local step 0.
    woff_t woff[2];
    bool col_ok[2];
    u32 wr[D][2][K];
    u32 sc[D][2];  // absmax, raw (scale_from_raw at use)
    auto load_step = [&](int j, int sl) {
#pragma unroll
        for (int c = 0; c < 2; c++) {
            if (col_ok[c] && kblock_of(sl, c) < KB) {
                const woff_t w = woff[c] + (woff_t)sl * wstep;
                load_planes<K>(wr[j][c], packed + w);
                sc[j][c] = load_scale_raw(absmax, w / K);
            } else {
#pragma unroll
                for (int b = 0; b < K; b++) wr[j][c][b] = 0u;
                sc[j][c] = 0u;
            }
        }
    };
    // ring slot c of group grp: whether its column is loaded (tiled buffers are padded to 128
    // columns; a slice past the last group loads nothing) and the word offset of its local step 0
    auto slot_start = [&](int grp, int c, woff_t& w0) {
        const int n = col_of(grp, c), kb = kblock_of(0, c);
        w0 = (woff_t)(TILED ? tiled_word_offset<K>(n, kb, n_tiles) : ((long)n * KB + kb) * K);
        return (!SLICES || grp < ngroups) && (TILED || n < N);
    };
    auto start_group = [&](int grp) {
#pragma unroll
        for (int c = 0; c < 2; c++) col_ok[c] = slot_start(grp, c, woff[c]);
#pragma unroll
        for (int j = 0; j < D; j++)
            if (j < S && (MULTI || j == 0)) load_step(j, j);
    };
    // safe_pf (safe PDL, not yet waited): the first pf_steps (<= D) ring steps of group grp as
    // L2 prefetches only (prefetch_l2: no effect on what the loads after the wait return).
    // How much is best depends on the shape (kbitcupy.gemv.safe_prefetch_steps): all of a
    // warp's steps (up to 8) was slower everywhere (H200, dense k = 4 M = 1 TOTAL +3.9 %,
    // grouped +0.5..+18 %: nvidia-h200_2026-11-25_pf23.log, stable23.log), and so were the steps
    // not prefetched before the wait prefetched right after it (H100, k = 4 M = 1 TOTAL 18.58 ->
    // 19.24 us, postpf23): step 0's reads should land first.
    auto prefetch_group = [&](int grp) {
#pragma unroll
        for (int c = 0; c < 2; c++) {
            woff_t w0;
            if (!slot_start(grp, c, w0)) continue;
#pragma unroll
            for (int j = 0; j < D; j++)
                if (j < pf_steps && j < S && kblock_of(j, c) < KB) {
                    prefetch_l2(packed + w0 + j * wstep);
                    prefetch_l2(absmax + (w0 + j * wstep) / K);
                }
        }
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
    // CBD and safe PDL: the default codebook's levels are immediates, so the pair table (shared
    // memory only) is built before the wait as well, off the path after it (k = 5 gate/up: its
    // 64 KB table took ~1.5 us, profiling/NOTES.md tenth session).
    // lut_ready: the caller built it so already (the grouped kernel, kbit_gemv_grouped).
    const bool early_lut = CBD && (safe_pf || lut_ready);
    // The first group's word offsets (relative to the expert) computed once, before the wait, and kept opaque so
    // the loads after it use them: ptxas had computed them again there (~50 instructions a warp between the wait
    // and the first weight loads).  Where:
    // - Bind (the grouped wait-first launch): before bind's wait, off the path from the ids to the weights.
    // - KEEP and safe PDL (the dense kernel).  H100, 2026-11-27 (thirtieth session, gemv_pfa37.log): dense TOTAL
    //   M = 1 k = 2 16.57 -> 16.33 us, k = 4 18.62 -> 18.40, M = 4 -0.4 % / -1.3 %.  Not in the grouped stable mode:
    //   slower there (moe_keep37.log).  -DKBIT_GEMV_PF_RECOMPUTE (experiment hook): the dense kernel as before.
#ifndef KBIT_GEMV_PF_RECOMPUTE
    const bool addr_ready = Bind::active || (KEEP && safe_pf);
#else
    const bool addr_ready = Bind::active;
#endif
    if (addr_ready) {
#pragma unroll
        for (int c = 0; c < 2; c++) {
            col_ok[c] = slot_start(MULTI ? grp : (int)blockIdx.x * ny + ty, c, woff[c]);
            woff_opaque(woff[c]);
        }
    }
    if (safe_pf) {  // safe PDL: the first weights only prefetched into L2, then the wait
        prefetch_group(MULTI ? grp : (int)blockIdx.x * ny + ty);
        if (CBD) build_default_lut<K, T, SLICES, QUAD>(lut, cb_s, nthr, tid);
        griddep_wait_release();
#ifdef KBIT_TRACE
        if (threadIdx.x == 0 && ty == 0) KTR(48, probe_gtime());
#endif
    }
    // tscale_late (the grouped kernel's safe early mode, waited by now): the tensor scale is a
    // weight too, so it is read here rather than by the caller
    if (tscale_late) tensor_scale = ld_after_wait(tscale_late);
    if constexpr (Bind::active) {  // the operands (and for the first pass the wait) now
        BindOut b;
        if (!bind(b)) return;
        packed += b.wbase;
        absmax += b.abase;
        A += b.aoff;
        C += b.coff;
        M = b.m;
        tensor_scale = b.ts;
        if (AMODE == 1) a_rows += b.roff;
    }
    if (addr_ready) {
#pragma unroll
        for (int j = 0; j < D; j++)
            if (j < S && (MULTI || j == 0)) load_step(j, j);
    } else {
        start_group(MULTI ? grp : (int)blockIdx.x * ny + ty);
    }
#ifdef KBIT_TRACE  // 49: thread 0's first weights requested (in-order issue: the clock reads once their loads issued)
    if (threadIdx.x == 0 && ty == 0) KTR(49, probe_clock());
#endif
// Experiment hook: the whole ring requested before the prologue.  H100, 2026-11-25 (after the
// absmax fix): k = 4 M = 1 TOTAL 3 % slower, k = 2 / 5 equal, with PDL 1 % faster (run14.sh ring).
#ifdef KBIT_EXPERIMENT_RING_EARLY
    if (!MULTI) fill_ring();
#endif
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
    // Chunk q (16 bytes, elements 8q..8q+7) of staged row m.
    auto stage_chunk = [&](int m, int q) {
        const int kk = q * 8;
        uint4* dst = reinterpret_cast<uint4*>(a_s + (long)m * KP + a_swizzle<K, MT>(q, m) * 8);
        if constexpr (AMODE == 0) {
            if (kk < Kdim) cp_async16(dst, A + (long)m * Kdim + kk);
            else *dst = make_uint4(0u, 0u, 0u, 0u);
        } else if constexpr (AMODE == 1) {
            const int row = ld_after_wait(a_rows + m);
            if (kk < Kdim && row >= 0 && row < a_nrows) cp_async16(dst, A + (long)row * Kdim + kk);
            else *dst = make_uint4(0u, 0u, 0u, 0u);
        } else {
            if (kk < Kdim) {
                const T* src = A + (long)m * (2 * Kdim) + kk;
                const uint4 gw = ld_after_wait_v4(src);
                const uint4 uw = ld_after_wait_v4(src + Kdim);
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
    };
    auto stage_A = [&]() {
        const int cpr = KP / 8;  // chunks a row (KP is whole steps: a multiple of 16 chunks)
        // ROWS: row by row at fixed chunk columns, as zero-filling cp.async (AMODE 0 / 1): a thread's chunk index steps
        // by a multiple of 32, so its swizzle bits stay and both addresses step by constants -- the inner loop 14 SASS
        // instructions a 16-byte chunk.  The linear loop below spends ~40 (row stepping, 64-bit address math, the
        // zero-store branch): 800 a thread for down's 160 KB at M = 16, all between the wait and the first MMA.
        if constexpr (ROWS) {
            // The thread's chunk columns q0, q0 + dq, ... < cpr, each down rows m0, m0 + P, ...: P rows a pass where
            // the block's threads cover a row (q0, m0 from tid without a division), else one.
            int P = 1, m0 = 0, q0 = tid, dq = nthr;
            if ((int)nthr >= cpr) {
                P = 0;
                for (int s2 = cpr; s2 <= (int)nthr; s2 += cpr) P++;
                while (q0 >= cpr) { q0 -= cpr; m0++; }
                dq = cpr;                 // one column
                if (m0 >= P) q0 = cpr;    // the threads past P whole rows stage nothing
            }
            const u32 a_base = (u32)__cvta_generic_to_shared(a_s);
            for (int q = q0; q < cpr; q += dq) {
                const bool kv = q * 8 < Kdim;
                // the swizzle of a row of the other parity: chunk bit 1 flipped, so byte bit 5 of the offset
                const u32 flip = (P & 1) ? 16u * (u32)(a_swizzle<K, MT>(q, 1) ^ a_swizzle<K, MT>(q, 0)) : 0u;
                u32 off = 2u * (u32)(m0 * KP + a_swizzle<K, MT>(q, m0) * 8);
                // (a chunk past K reads nothing: its source stays at A)
                const T* src = kv ? A + (long)m0 * Kdim + q * 8 : A;
                const long ds = kv ? (long)P * Kdim : 0L;
                for (int m = m0; m < M; m += P) {
                    if constexpr (AMODE == 0) {
                        cp_async16_zfill(a_base + off, src, kv);
                        src += ds;
                    } else {
                        const int row = ld_after_wait(a_rows + m);
                        const bool v = kv && row >= 0 && row < a_nrows;
                        cp_async16_zfill(a_base + off, v ? A + (long)row * Kdim + q * 8 : A, v);
                    }
                    off = (off + 2u * (u32)(P * KP)) ^ flip;
                }
            }
            cp_async_commit();
            return;
        }
#ifndef KBIT_GEMV_STAGE_DIV  // (experiment hook: the division as before 2026-11-27)
        // The dense kernel (KEEP) steps its chunks' rows instead of dividing by the row's chunks (a runtime
        // division between the wait and A's cp.async).  H100, 2026-11-27 (gemv_nodiv37.log): dense TOTAL M = 1
        // k = 2 / 3 / 4 / 5 -0.11 / -0.11 / +0.04 / -0.12 us, M = 4 -0.25 / -0.51 / -0.01 / -0.35.
        for (int c = tid, m = 0, cb = 0; c < M * cpr; c += nthr) {
            if (KEEP) {
                while (c - cb >= cpr) { cb += cpr; m++; }
            } else {
                m = c / cpr;
                cb = m * cpr;
            }
            stage_chunk(m, c - cb);
        }
#else
        for (int c = tid; c < M * cpr; c += nthr) stage_chunk(c / cpr, c % cpr);
#endif
        cp_async_commit();
    };
    // pdl (launched as a programmatic dependent of the previous grid, which may write
    // A): weights, codebook and pair table first, A only after griddepcontrol.wait.
    // Otherwise A is requested first, so it lands while the table is built (pdl's
    // order costs ~6 % without the overlap; H200, 2026-11-22, profiling/pdl_ab.py).
    if (!pdl) stage_A();
    // Codebook to shared memory, then the pair table; A lands meanwhile.
    {
        if (!early_lut) {
            if (tid < 32) cb_s[tid] = cb_v;
            __syncthreads();
        }
#ifdef KBIT_TRACE
        if (threadIdx.x == 0) KTR(46, probe_clock());
#endif
        if (!early_lut) build_block_lut<K, T, SLICES, QUAD>(lut, cb_s, nthr, tid);
        if (pdl) {  // A may come from the previous grid: wait for it only now
            griddep_wait();
#ifdef KBIT_TRACE
            if (threadIdx.x == 0 && ty == 0) KTR(48, probe_gtime());
#endif
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
#ifndef KBIT_EXPERIMENT_RING_EARLY
    if (!MULTI && !LATE) fill_ring();
#endif

    const u32 lut_lane = (u32)__cvta_generic_to_shared(lut) + LutLayout<K, QUAD>::lane_offset(lane);
    // C8: lanes g < 4 feed token column g the first half's A row g, lanes g >= 4 the second's row g - 4
    const T* a_row = C8 ? a_s + (long)(g & 3) * KP + (g >> 2) * 128 + t * 32 : a_s + (long)g * KP + t * 32;
    // The lane's base, a_swizzle's offset of its first chunk added: (ASW) an odd row's lane reads its chunks 0, 1 there
    // (32 bytes on) and 2, 3 at 64 bytes back; (FSW) the lane's swizzle sits in bits 4..5 of the base (a row's 64-byte
    // quarter starts with those bits clear), chunk r at base ^ 16 r.
    constexpr bool ASW = gemv_asw<K, MT>(), FSW = gemv_fsw<K, MT>();
    const u32 a_off = FSW ? 16u * (u32)((t >> 1) | ((g & 1) << 1)) : ASW ? 32u * (u32)((C8 ? g & 3 : g) & 1) : 0u;
    const u32 a_sh = (u32)__cvta_generic_to_shared(a_row) + a_off;
    constexpr int TOK = 8 * MT;
    do {
        const int n0 = (MULTI ? grp : (int)blockIdx.x * ny + ty) * (C8 ? 8 : 16);
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
                            reinterpret_cast<const uint4*>(a_row + (long)8 * mt * KP + (long)(warp + sl * W) * SK);
                        const bool row_ok = (C8 ? (g & 3) : g + 8 * mt) < M;
                        // (8 mt rows and whole steps on: the row parity and bits 4..5 kept)
                        const u32 ao = a_sh + 2u * (8 * mt * KP + (warp + sl * W) * SK);
                        if (FSW) {
                            a[mt][0] = lds_u128_if<0>(ao, row_ok);
                            a[mt][1] = lds_u128_if<0>(ao ^ 16u, row_ok);
                            a[mt][2] = lds_u128_if<0>(ao ^ 32u, row_ok);
                            a[mt][3] = lds_u128_if<0>(ao ^ 48u, row_ok);
                        } else if (ASW) {
                            const u32 bo = ao - 2u * a_off;
                            a[mt][0] = lds_u128_if<0>(ao, row_ok);
                            a[mt][1] = lds_u128_if<16>(ao, row_ok);
                            a[mt][2] = lds_u128_if<32>(bo, row_ok);
                            a[mt][3] = lds_u128_if<48>(bo, row_ok);
                        } else {
#pragma unroll
                            for (int r = 0; r < 4; r++) a[mt][r] = row_ok ? ap[r] : make_uint4(0u, 0u, 0u, 0u);
                        }
                    }
                    const u32 sA = scale_pair<T>(scale_from_raw<ABS>(sc[j][0]));
                    const u32 sB = scale_pair<T>(scale_from_raw<ABS>(sc[j][1]));
                    u32 wA[K], wB[K];
#pragma unroll
                    for (int b = 0; b < K; b++) { wA[b] = wr[j][0][b]; wB[b] = wr[j][1][b]; }
#ifdef KBIT_TRACE
                    if (lane == 0 && warp < 8 && sl < 2) KTR(4 + 4 * warp + 2 * sl, probe_clock_after(wA[0] ^ wB[0]));
#endif
                    if (sl + D < S) load_step(j, sl + D);
#ifndef KBIT_EXPERIMENT_RING_EARLY
                    if (LATE && !MULTI && sl == 0) fill_ring();  // once step 0 has landed
#endif
#ifndef KBIT_EXPERIMENT_NO_COMPUTE
                    block_pair_mma<K, T, MT, LutLayout<K, QUAD>::QUAD>(acc, acc2, wA, sA, wB, sB, a, lut_lane);
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
        constexpr int NC = C8 ? 8 : 16;  // columns per group
        for (int i = threadIdx.x; i < M * NC; i += blockDim.x) {
            const int m = i >> (C8 ? 3 : 4), c = i & (NC - 1), nn = n0 + c;
            float s = 0.f;
            for (int w = 0; w < W; w++) {
                s += red_y[w * 16 * TOK + c * TOK + m];
                if (C8) s += red_y[w * 16 * TOK + (c + 8) * TOK + m + 4];  // the second K half
            }
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
// 2-7 % at k = 4.  Four token tiles with one group a block: at most 256 threads (kbitcupy.gemv.plan), so
// up to 255 registers (k = 4 spilled 4-16 bytes at 512 threads' 128).
#ifndef KBIT_GEMV_BOUNDS  // experiment hooks (profiling/gemv_ab.py, moe_ab.py variants)
#define KBIT_GEMV_BOUNDS (MT == 4 && !SLICES ? 256 : 512), 1
#endif
#ifndef KBIT_GROUPED_BOUNDS
#define KBIT_GROUPED_BOUNDS 512, 1
#endif
// SLICES: blockDim.y column groups per block (kbitcupy.gemv.plan's gpb > 1).
// CBD: the default codebook (kbit_default_level; codebook is not read).  H100, 2026-11-25: k = 4
// M = 1 dense TOTAL -2.8 %, k = 5 -2.6 % (profiling/NOTES.md, thirteenth session).
// TS (token split; kbitcupy.gemv.plan's ts, one token tile): grid.y CTAs per column group, CTA y computing rows R y ..
// R y + R - 1 (R = 4 with C8, else 8), each staging only its rows and reading the group's weights (the second time
// mostly from L2): for shapes whose few column groups leave most SMs idle (KV: 32 groups of 16 columns on 132 SMs).
template <int K, typename T, typename ABS, bool TILED, int D, int MT, bool DUAL, bool LATE, bool SLICES = false,
          bool CBD = false, bool C8 = false, bool TS = false>
__global__ void __launch_bounds__(KBIT_GEMV_BOUNDS)
    kbit_gemv(const T* __restrict__ A, const u32* __restrict__ packed, const ABS* __restrict__ absmax,
              const float* __restrict__ codebook, T* __restrict__ C, int M, int N, int Kdim, float tensor_scale,
              int pdl) {
    static_assert(!TS || (MT == 1 && !SLICES), "TS: one token tile, one group per block");
    if (TS) {
        constexpr int R = C8 ? 4 : 8;
        const int r0 = (int)blockIdx.y * R;
        A += (long)r0 * Kdim;
        C += (long)r0 * N;
        M = min(M - r0, R);
    }
#ifdef KBIT_EXP_A_COPIES  // diagnostic (profiling/chain_trace.py A_COPIES): block b reads copy b % n of A (the caller
    // passes n identical copies of [M, K]); whether the blocks' reads of one A are an L2 hot spot after the wait
    A += (long)(blockIdx.x % KBIT_EXP_A_COPIES) * M * Kdim;
#endif
    // KBIT_PDL_SAFE(_PF1): wait before any load, the first D (one) ring steps prefetched into L2 before it
    gemv_block<K, T, ABS, TILED, D, MT, false, DUAL, LATE, 0, SLICES, CBD, C8, NoBind, true, gemv_quad<K, MT>(), TS>(A, packed, absmax, codebook, C, M, N,
                                        Kdim, tensor_scale, blockIdx.x, gridDim.x, C8 ? (N + 7) / 8 : (N + 15) / 16, pdl == 1,
                                        nullptr, 0, pdl == KBIT_PDL_SAFE || pdl == KBIT_PDL_SAFE_PF1, false, nullptr,
                                        pdl == KBIT_PDL_SAFE_PF1 ? 1 : D);
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
// The grouped kernel's ring filled once step 0 has landed (the dense LATE) at k = 5 only: H100,
// 2026-11-26 (twentieth session, late23, default launch, 8 experts): k = 5 gate/up fused + down 1 /
// 4 / 8 tokens 16.34 / 16.66 / 17.78 -> 15.50 / 15.90 / 17.13 us, but k = 2 / 4 0.3-0.6 us slower.
// (An experiment hook: -DKBIT_GROUPED_LATE=... overrides it.)
#ifndef KBIT_GROUPED_LATE
#define KBIT_GROUPED_LATE (K == 5)
#endif
// The safe early (stable) mode keeping its first word offsets from before the wait, as the dense kernel (gemv_block's
// KEEP; an experiment hook, off): H100, 2026-11-27 (moe_keep37.log, two alternations) k = 4 gate/up fused + down
// stable 1 token 10.24 / 12.55 -> 10.67 / 12.87 us (8 / 10 experts), k = 2 equal or slower.
#ifndef KBIT_GROUPED_KEEP_ADDR
#define KBIT_GROUPED_KEEP_ADDR false
#endif
// Ring steps the safe early mode L2-prefetches before its wait (an experiment hook: 0 = none).
#ifndef KBIT_GROUPED_PF_STEPS
#define KBIT_GROUPED_PF_STEPS 1
#endif
// The thread that reports a slot's errors (the first of the slot's first block).
template <bool SL>
__device__ __forceinline__ bool grouped_reporter() {
    return threadIdx.x == 0 && (!SL || threadIdx.y == 0) && blockIdx.x == 0;
}
// A grouped launch's slot: its expert and rows read (ld_after_wait: after the caller's wait, if any) and checked;
// false = nothing to compute (a bad id or offsets also set the error flag, by one thread a slot: rep).
__device__ __forceinline__ bool grouped_slot(const int* __restrict__ expert_ids, const int* __restrict__ offsets,
                                             int slot, int E, int rows, int max_tokens, int* __restrict__ err, bool rep,
                                             bool wait_first, int& e, int& r0, int& r1) {
    e = ld_after_wait(expert_ids + slot);
    r0 = ld_after_wait(offsets + slot);
    r1 = ld_after_wait(offsets + slot + 1);
    if (e < 0 || e >= E || r0 < 0 || r1 < r0 || r1 > rows) {
        if (rep) report_err(err, (e < 0 || e >= E) ? KBIT_ERR_EXPERT_ID : KBIT_ERR_OFFSETS, wait_first);
        return false;
    }
    if (r1 - r0 > max_tokens && rep) report_err(err, KBIT_ERR_MAX_TOKENS, wait_first);
    return true;
}
// A slot's rows are computed in passes of at most max_tokens (<= 8 MT) rows; pass c0's first A element (AMODE 1
// gathers its rows through a_rows instead, AMODE 2's rows are [gate | up]).
template <int MT>
__device__ __forceinline__ int grouped_chunk(int max_tokens) { return min(8 * MT, max(1, max_tokens)); }
template <int AMODE>
__device__ __forceinline__ long grouped_a_off(int c0, int Kdim) {
    return AMODE == 1 ? 0L : (long)c0 * (AMODE == 2 ? 2 * Kdim : Kdim);
}
// The grouped kernels' default-codebook pair table before their wait (CBD: no global load), then a barrier: its
// level scratch is where A is staged later.
template <int K, typename T, bool SL, bool Q>
__device__ __forceinline__ void grouped_early_lut() {
    extern __shared__ __align__(16) unsigned char smem_g[];
    build_default_lut<K, T, SL, Q>(reinterpret_cast<u32*>(smem_g), reinterpret_cast<float*>(smem_g + LutLayout<K, Q>::WORDS * 4),
                                block_threads<SL>(), block_tid<SL>());
    __syncthreads();
}
// The wait-first launch (pdl 1; kbit_gemv_grouped's LB instantiation, kbitcupy.gemv.grouped_gemv): the wait
// and the ids read inside gemv_block (LateBind), after its expert-independent set-up.  In the order wait -> ids
// -> gemv_block that set-up (~180 instructions a warp, a division among them) ran between the ids' arrival and
// the first weight loads (SASS, profiling/grouped_trace.py).  An instantiation of its own: the same code as a
// runtime branch of one kernel moved the other modes' schedule (k = 4 stable mode +0.5 us a kernel).  H100,
// 2026-11-27 (thirtieth session, moe_lb37.log, k = 2..5, 8 / 10 experts, 1 / 4 / 8 tokens, gate/up fused +
// down): 0.3-0.9 us faster per pair, k = 4 1 token 11.70 / 13.91 -> 11.39 / 13.38 us.
template <int K, typename T, int MT, int AMODE, bool SL, bool CBD, bool Q>
__device__ __forceinline__ void grouped_gemv_late(const T* __restrict__ A, const u32* __restrict__ packed,
                                                  const u8* __restrict__ absmax, const float* __restrict__ codebook,
                                                  const float* __restrict__ tscale, const int* __restrict__ expert_ids,
                                                  const int* __restrict__ offsets, T* __restrict__ C, int N, int Kdim,
                                                  int E, int rows, long long wpe, long long ape, int max_tokens,
                                                  int* __restrict__ err, const int* __restrict__ a_rows, int a_nrows) {
    const int slot = blockIdx.y, chunk = grouped_chunk<MT>(max_tokens);  // rows per pass
    const bool rep = grouped_reporter<SL>();
    int e = 0, r0 = 0, r1 = 0, c0 = 0;
    bool first = true, ok = false;
    auto bind = [&](BindOut& o) {
        if (first) {
            first = false;
            griddep_wait_release();
#ifdef KBIT_TRACE
            if (threadIdx.x == 0 && threadIdx.y == 0) KTR(48, probe_gtime());
#endif
            if (!grouped_slot(expert_ids, offsets, slot, E, rows, max_tokens, err, rep, false, e, r0, r1)) return false;
            c0 = r0;
        }
        ok = c0 < r1;  // (a slot with no rows: nothing; it has waited)
        if (!ok) return false;
        o.wbase = e * wpe;
        o.abase = e * ape;
        o.aoff = grouped_a_off<AMODE>(c0, Kdim);
        o.coff = (long)c0 * N;
        o.m = min(chunk, r1 - c0);
        o.roff = c0;
        o.ts = tscale[e];  // (after the wait: e is read there)
        return true;
    };
    // one inline of gemv_block for every pass (the base operands; bind adds each pass's offsets)
    while (true) {
        gemv_block<K, T, u8, true, SL ? KBIT_GROUPED_SL_DEPTH : 2, MT, !SL, false, KBIT_GROUPED_LATE, AMODE, SL, CBD,
                   false, LateBind<decltype(bind)>, false, Q>(
            A, packed, absmax, codebook, C, chunk, N, Kdim, 0.f, blockIdx.x, gridDim.x, (N + 15) / 16, false,
            AMODE == 1 ? a_rows : nullptr, a_nrows, false, CBD, nullptr, 1, LateBind<decltype(bind)>{bind});
        if (!ok) return;
        c0 += chunk;
        if (c0 >= r1) return;  // (block-uniform)
        __syncthreads();
    }
}

// Q: the quad table (gemv_quad; not the several-wave kernel kbit_gemv_grouped_slw).
template <int K, typename T, int MT, int AMODE, bool SL, bool CBD, bool LB, bool Q>
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
    // 3 = safe PDL with the same guarantee: the ids are read before the wait and the first
    // pass only L2-prefetches its weights' first ring step (and builds a CBD table) before it,
    // as the dense kernel's safe mode -- the weights, the tensor scale, A and out after it.
    // H100, 2026-11-25 (twentieth session, stable23b, k = 4, 8 experts, gate/up fused + down):
    // 1 token 11.68 -> 10.48 us (whole ring prefetched) -> 10.30 (one step), 4 tokens 11.96 ->
    // 11.01 -> 10.65.
    // CBD (the default codebook): the table needs no global load, so pdl 1 builds it before the
    // wait too, once for all row chunks (nothing else writes it); its level scratch is where A
    // is staged later, hence the barrier.
    const bool lut_ready = CBD && pdl == 1;
    const bool early_ids = pdl == 2 || pdl == KBIT_GROUPED_SAFE_EARLY;  // not waited yet
#ifdef KBIT_TRACE  // (grouped_trace.py) 47: the block's entry, 48: its wait passed (globaltimer)
    if (threadIdx.x == 0 && threadIdx.y == 0) KTR(47, probe_gtime());
#endif
    if constexpr (LB) {  // the wait-first launch's instantiation: only that (one inline of gemv_block)
        if (CBD) grouped_early_lut<K, T, SL, Q>();
        grouped_gemv_late<K, T, MT, AMODE, SL, CBD, Q>(A, packed, absmax, codebook, tscale, expert_ids, offsets, C, N, Kdim,
                                                    E, rows, wpe, ape, max_tokens, err, a_rows, a_nrows);
        return;
    }
#ifdef KBIT_GROUPED_SAFE_EARLY_WAITFIRST  // experiment hook (run35.sh swf): the safe early mode waiting at entry
    if (pdl == KBIT_GROUPED_SAFE_EARLY) griddep_wait();
#endif
    if (pdl == 1) {
        if (CBD) grouped_early_lut<K, T, SL, Q>();
        griddep_wait_release();
#ifdef KBIT_TRACE
        if (threadIdx.x == 0 && threadIdx.y == 0) KTR(48, probe_gtime());
#endif
    }
    int e, r0, r1;
    if (!grouped_slot(expert_ids, offsets, blockIdx.y, E, rows, max_tokens, err, grouped_reporter<SL>(), early_ids, e,
                      r0, r1))
        return;
    // A block with no rows still waits: were every block to exit unwaited, the next grid (which
    // reads weights before its wait with pdl 1 / 2) could start while the one before us runs.
    if (early_ids && r1 == r0) griddep_wait();
    const bool safe_early = pdl == KBIT_GROUPED_SAFE_EARLY;
    // AMODE 1 (the row gather fused in): sorted row r is A's row a_rows[r]; AMODE 2: A's rows
    // are [gate | up] (2 Kdim) and the kernel multiplies silu(gate) * up (kbitcupy/moe.py)
    // Passes of at most max_tokens rows: the launch reserves shared memory for that many staged A rows
    // (kbitcupy.gemv.grouped_plan), so small plans fit more blocks per SM.
    const int chunk = grouped_chunk<MT>(max_tokens);
    for (int c0 = r0; c0 < r1; c0 += chunk) {
        // (MULTI = !SL; SL: groups from blockIdx.x and threadIdx.y as in kbit_gemv)
        gemv_block<K, T, u8, true, SL ? KBIT_GROUPED_SL_DEPTH : 2, MT, !SL, false, KBIT_GROUPED_LATE, AMODE, SL, CBD,
                   false, NoBind, KBIT_GROUPED_KEEP_ADDR, Q>(
            A + grouped_a_off<AMODE>(c0, Kdim), packed + e * wpe, absmax + e * ape,
            codebook, C + (long)c0 * N, min(chunk, r1 - c0), N, Kdim, safe_early ? 0.f : tscale[e], blockIdx.x,
            gridDim.x, (N + 15) / 16, pdl == 2 && c0 == r0, AMODE == 1 ? a_rows + c0 : nullptr, a_nrows,
            safe_early && c0 == r0, lut_ready, safe_early ? tscale + e : nullptr, KBIT_GROUPED_PF_STEPS);
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
// CBD: the default codebook compiled in (as kbit_gemv's; the bank's default_codebook).  LB: the instantiation
// for the wait-first launch (grouped_gemv_late whatever pdl says: it waits first, which is correct in every
// mode; the host runs it for pdl 1 only).
template <int K, typename T, int MT, int AMODE, bool CBD = false, bool LB = false>
__global__ void __launch_bounds__(KBIT_GROUPED_BOUNDS) kbit_gemv_grouped(KBIT_GROUPED_ARGS) {
    grouped_gemv_body<K, T, MT, AMODE, false, CBD, LB, gemv_quad<K, MT>()>(KBIT_GROUPED_PASS);
}
// The slices form (grouped_plan's gpb).  At most 128 registers, so its 16-warp blocks launch
// (uncapped it would take more).  KBIT_GROUPED_SL_MAXNREG=80 (an experiment: three 256-thread
// blocks per SM, as the dense kernel) spills 16-104 bytes and was not faster (moe_sl10.sh).
#ifndef KBIT_GROUPED_SL_MAXNREG
#define KBIT_GROUPED_SL_MAXNREG 128
#endif
// kbit_gemv_grouped_slw: the same at 96 registers (no spills at k = 2, 4): five 4-warp blocks per SM
// instead of four, for the several-wave plans (kbitcupy.gemv.grouped_kernel_key).  Their time is the
// warps' dependent lookup -> MMA chains, not the bytes in flight: L2 prefetches of two / four steps
// past the ring were 3-15 % slower, the 96-register cap 5-25 % faster on down (4 one-warp groups a
// block) and k = 2 gate/up (H100, 2026-11-26, profiling/results/..._pfa27.log).
#ifndef KBIT_GROUPED_SLW_MAXNREG
#define KBIT_GROUPED_SLW_MAXNREG 96
#endif
#define KBIT_GROUPED_SLICES_KERNEL(NAME, MAXNREG, QUAD_OK)                                        \
    template <int K, typename T, int MT, int AMODE, bool CBD = false, bool LB = false>                 \
    __global__ void __maxnreg__(MAXNREG) NAME(KBIT_GROUPED_ARGS) {                                \
        grouped_gemv_body<K, T, MT, AMODE, true, CBD, LB, QUAD_OK && gemv_quad<K, MT>()>(KBIT_GROUPED_PASS); \
    }
KBIT_GROUPED_SLICES_KERNEL(kbit_gemv_grouped_sl, KBIT_GROUPED_SL_MAXNREG, true)
KBIT_GROUPED_SLICES_KERNEL(kbit_gemv_grouped_slw, KBIT_GROUPED_SLW_MAXNREG, false)
