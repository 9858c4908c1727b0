// Fused dequant + Hopper warpgroup MMA (wgmma) GEMM: C[M, N] = A[M, K] * W^T, sm_90a.
//
// Why a second fused GEMM: kbit_gemm (mma.sync, weights as the B operand) is latency
// bound with 4-warp CTAs and re-dequantizes every weight per 16-token block.  Here the
// dequantized weights are wgmma's *register* A operand (64 weight columns per
// warpgroup = the m64 side) and the tokens the shared-memory B operand (TOK tokens =
// the n side, 16..192), so one dequantized fragment feeds TOK tokens, the MMA runs
// asynchronously while the warps dequantize the next K tile, and the tokens move in their
// natural K order (by TMA, or 16-byte cp.async copies in kbit_wgmma; see "TMA" below).
//
// W is k-bit quantized in the TILED layout (kbitcupy/reference.py): tiles of
// 64 (K) x 128 (N), tile index k_tile * n_tiles + n_tile, inside a tile
// [col][kb][bit] plane words and E4M4 absmax bytes [col][kb]; padded columns and the
// padded half of a K % 64 == 32 tile hold zero words and absmax 0 (dequantize to 0).
//
// CTA: 256 threads = 2 warpgroups, one 128-column layout-tile strip (warpgroup w:
// columns 64w..64w+63; warp q of it: 16 columns) x TOK tokens, a contiguous range
// of K tiles (split-K: with 2..8 splits launched as one thread block cluster, the partials summed
// through DSMEM, see wgmma_cta's fixup; otherwise splitk_fixup in kbit_common.cuh).
//
// A operand (weights) without any K permutation: in the m64k16 register fragment lane
// (g, t) of warp q holds rows (columns of W) g and g + 8, k slots {2t, 2t+1} (a0, a1)
// and {2t+8, 2t+9} (a2, a3).  Instruction j (0..3) of a 64-wide K tile covers block
// kb = j / 2, 8-element chunks c = 2 (j % 2) and c + 1, so the lane needs the element
// pairs 4c + t of its blocks: byte c of the pair-key word q = t (pair_keys in
// kbit_common.cuh), which the lane builds alone (key_word below), then one PRMT + LDS
// pair lookup (half2/bf162 of two levels) + one HMUL2 by the E4M4 scale per register.
//
// B operand (tokens) in shared memory, K-major with the 128-byte swizzle: token r's 64
// elements (128 bytes) are row r, its 16-byte chunk c at r * 128 + ((c ^ (r % 8)) * 16)
// (stride byte offset 1024 per 8 tokens; stage buffers 1024-byte aligned, since the swizzle
// works on address bits).  Why: each warp's token copies then read 4 whole 128-byte lines
// and write 4 whole shared-memory rows (no bank conflicts).  With the earlier no-swizzle
// layout (core matrices of 8 tokens x 16 bytes) a warp read 8 half lines, and issuing the
// copies took 0.64 of a 1.32 us main-loop iteration at M = 512 (the copies queue behind L2
// requests; profiling/wgmma_trace.py, H200, 2026-11-25): with whole lines 0.20 of 0.86 us.
//
// Pipeline: `stages` buffers (runtime, 4..8) of {tokens TOK x 64, weight tile, absmax},
// tile t in buffer t % stages, prefetch distance dist = stages - 2.  Iteration it: wait
// until tile it + 1 has landed, fence.proxy.async (cp.async wrote through the generic
// proxy, wgmma reads through the async proxy), barrier; the wgmma group of tile it (4 x
// k16, fragments dequantized in the previous iteration); request tile it + dist (into the
// buffer of tile it - 2, whose group is retired and which every warp has dequantized);
// wgmma.wait_group 1 (retires group it - 1); dequantize tile it + 1 into the fragment set
// group it - 1 read, while group it runs.  The barrier between a tile's dequantize and its
// wgmma makes the 16 fragment registers complete before the first wgmma: with the
// dequantize right before its own wgmma, ptxas sank the arithmetic between the 4 wgmma,
// reused one register quad and serialized them (warning C7513) for TOK <= 64.
//
// TMA (the default: kbit_wgmma_tma and kbit_wgmma_grouped; kbit_wgmma is the cp.async path above): thread 0
// requests a stage as one 2-D tensor copy of the token tile in this same swizzle plus two 1-D bulk copies of
// the weight tile and absmax, all counted on the stage's mbarrier; every thread waits on it where the
// cp.async wait is, and no generic-proxy fence is needed.  Why: the cp.async path's copy issue (4-6 LDGSTS a
// thread) and its wait (a jump table on the runtime stage count) were ~40 % of a K tile at TOK = 128 (per-SASS
// profile, twenty-first session).  H200 2026-11-27 (run29.sh exp / exp2 / exp3, k = 4): dense TOTAL M = 64
// 50.6 -> 49.0 us, M = 128 64.0 -> 59.4 (with m64n128); grouped 8 / 10 experts 16..64 tokens 2-5 % faster.
// The token tiles alone by TMA (weights by cp.async) were 5 % slower: the gain is in dropping cp.async.
//
// Shared memory (dynamic, bytes): pair LUT | scale table (256 half2) | codebook (128) |
// misc (128; TMA: the stage mbarriers in its upper 64) | stages x stage.  The epilogue stages C through the (then idle) stage
// buffers for 16-byte row stores.
#include "kbit_pairlut.cuh"

namespace kbit_wgmma_detail {

// One K tile (64 = 4 x k16) of wgmma m64nNk16 in ONE asm statement (wgmma.fence first):
// A = this tile's 16 fragment registers, B = 4 shared-memory descriptors, D += A * B.
#define KBIT_WG_ACC8(o) "+f"(d[o + 0]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), \
                        "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), "+f"(d[o + 7])
#define KBIT_WG_IN "r"(f[0][0]), "r"(f[0][1]), "r"(f[0][2]), "r"(f[0][3]), "r"(f[1][0]), "r"(f[1][1]), "r"(f[1][2]), \
                   "r"(f[1][3]), "r"(f[2][0]), "r"(f[2][1]), "r"(f[2][2]), "r"(f[2][3]), "r"(f[3][0]), "r"(f[3][1]), \
                   "r"(f[3][2]), "r"(f[3][3]), "l"(b[0]), "l"(b[1]), "l"(b[2]), "l"(b[3]), "n"(1)
#define KBIT_WG_ACC_N16 "{%0,%1,%2,%3,%4,%5,%6,%7}, "
#define KBIT_WG_P_N16 "{\n.reg .pred p;\nsetp.ne.b32 p, %28, 0;\n"
#define KBIT_WG_AB_N16_0 "{%8,%9,%10,%11}, %24, p, 1, 1, 0;\n"
#define KBIT_WG_AB_N16_1 "{%12,%13,%14,%15}, %25, p, 1, 1, 0;\n"
#define KBIT_WG_AB_N16_2 "{%16,%17,%18,%19}, %26, p, 1, 1, 0;\n"
#define KBIT_WG_AB_N16_3 "{%20,%21,%22,%23}, %27, p, 1, 1, 0;\n"
#define KBIT_WG_ACC_N32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
#define KBIT_WG_P_N32 "{\n.reg .pred p;\nsetp.ne.b32 p, %36, 0;\n"
#define KBIT_WG_AB_N32_0 "{%16,%17,%18,%19}, %32, p, 1, 1, 0;\n"
#define KBIT_WG_AB_N32_1 "{%20,%21,%22,%23}, %33, p, 1, 1, 0;\n"
#define KBIT_WG_AB_N32_2 "{%24,%25,%26,%27}, %34, p, 1, 1, 0;\n"
#define KBIT_WG_AB_N32_3 "{%28,%29,%30,%31}, %35, p, 1, 1, 0;\n"
#define KBIT_WG_ACC_N64 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
#define KBIT_WG_P_N64 "{\n.reg .pred p;\nsetp.ne.b32 p, %52, 0;\n"
#define KBIT_WG_AB_N64_0 "{%32,%33,%34,%35}, %48, p, 1, 1, 0;\n"
#define KBIT_WG_AB_N64_1 "{%36,%37,%38,%39}, %49, p, 1, 1, 0;\n"
#define KBIT_WG_AB_N64_2 "{%40,%41,%42,%43}, %50, p, 1, 1, 0;\n"
#define KBIT_WG_AB_N64_3 "{%44,%45,%46,%47}, %51, p, 1, 1, 0;\n"
// m64n128: TOK = 128 as one n128 MMA per k16 instead of two n64 (half the HGMMA issue; H200 2026-11-27:
// equal on the cp.async path, -4.5 % of the TMA path's M = 128 TOTAL)
#define KBIT_WG_ACC_N128 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
#define KBIT_WG_P_N128 "{\n.reg .pred p;\nsetp.ne.b32 p, %84, 0;\n"
#define KBIT_WG_AB_N128_0 "{%64,%65,%66,%67}, %80, p, 1, 1, 0;\n"
#define KBIT_WG_AB_N128_1 "{%68,%69,%70,%71}, %81, p, 1, 1, 0;\n"
#define KBIT_WG_AB_N128_2 "{%72,%73,%74,%75}, %82, p, 1, 1, 0;\n"
#define KBIT_WG_AB_N128_3 "{%76,%77,%78,%79}, %83, p, 1, 1, 0;\n"
#define KBIT_WG_INS(N, J, TY) "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " KBIT_WG_ACC_N##N KBIT_WG_AB_N##N##_##J
#define KBIT_WG_TILE(N, TY, CT, ...)                                                                                 \
    __device__ __forceinline__ void wgmma_tile_n##N(float (&d)[N / 2], const u32 (&f)[4][4],                       \
                                                  const unsigned long long (&b)[4], CT) {                          \
        asm volatile("wgmma.fence.sync.aligned;\n" KBIT_WG_P_N##N KBIT_WG_INS(N, 0, TY) KBIT_WG_INS(N, 1, TY) KBIT_WG_INS(N, 2, TY) KBIT_WG_INS(N, 3, TY) "}\n"   \
                     : __VA_ARGS__                                                                                \
                     : KBIT_WG_IN);                                                                               \
    }
#define KBIT_WG_DEFINE(TY, CT)                                                                                      \
    KBIT_WG_TILE(16, TY, CT, KBIT_WG_ACC8(0))                                                                      \
    KBIT_WG_TILE(32, TY, CT, KBIT_WG_ACC8(0), KBIT_WG_ACC8(8))                                                     \
    KBIT_WG_TILE(64, TY, CT, KBIT_WG_ACC8(0), KBIT_WG_ACC8(8), KBIT_WG_ACC8(16), KBIT_WG_ACC8(24))             \
    KBIT_WG_TILE(128, TY, CT, KBIT_WG_ACC8(0), KBIT_WG_ACC8(8), KBIT_WG_ACC8(16), KBIT_WG_ACC8(24),             \
                 KBIT_WG_ACC8(32), KBIT_WG_ACC8(40), KBIT_WG_ACC8(48), KBIT_WG_ACC8(56))
KBIT_WG_DEFINE("f16", __half)
KBIT_WG_DEFINE("bf16", __nv_bfloat16)

__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The token tile by TMA: one 2-D tensor copy of TOK rows x 64 elements per
// stage, issued by one thread, landing in the 128-byte swizzle the wgmma descriptors expect, completing
// on the stage's mbarrier (arrive + expect_tx by the issuing thread, try_wait by every thread).
struct __align__(64) KbitTmap {  // CUtensorMap (cuTensorMapEncodeTiled, kbitcupy/wgmma.py), opaque
    unsigned long long w[16];
};
__device__ __forceinline__ void tma_load_2d(u32 dst, const KbitTmap* map, int c0, int c1, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}
// The TMA path's stage wait: a lost transaction (a wrong byte count or tensor map) traps after ~2^22 tries
// instead of hanging the GPU (the experiment's tests then fail at once).
__device__ __forceinline__ void mbar_wait_or_trap(u32 bar, u32 parity) {
    for (u32 n = 0; !mbar_try_wait(bar, parity); n++)
        if (n == (1u << 22)) __trap();
}
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// Keep the accumulators in registers across the asm statements (no reordering of
// reads of d around the async MMA).
template <int N>
__device__ __forceinline__ void reg_fence(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// Shared-memory matrix descriptor: 128-byte swizzle (mode 1, bits 62-63), K-major rows of
// 128 bytes, SBO 1024 B (next 8 tokens), LBO unused (16 B).  k16 step j of a tile starts
// 32 j bytes into the rows; the swizzle phase comes from the address bits, so the base
// offset field stays 0 (tile bases are 1024-byte aligned).
__device__ __forceinline__ unsigned long long smem_desc(u32 saddr) {
    return (unsigned long long)((saddr & 0x3FFFFu) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void cp_async_wait_upto(int pending) {
    switch (pending) {
        case 0: cp_async_wait<0>(); break;
        case 1: cp_async_wait<1>(); break;
        case 2: cp_async_wait<2>(); break;
        case 3: cp_async_wait<3>(); break;
        case 4: cp_async_wait<4>(); break;
        default: cp_async_wait<5>(); break;
    }
}

// wgmma reads its register A operand asynchronously: the registers of a group in flight
// must keep their values until wgmma.wait_group retires it.  The compiler does not know
// that (it reused the same registers for the next tile's fragments), so every fragment
// set is "used" by this empty asm after the wait that retires its group, so it stays
// live, in place, until then.  (A "+r" fence would redefine the registers, and ptxas
// then serializes every wgmma: warning C7513.)
__device__ __forceinline__ void frag_keep(const u32 (&f)[4][4]) {
#pragma unroll
    for (int j = 0; j < 4; j++) asm volatile("" ::"r"(f[j][0]), "r"(f[j][1]), "r"(f[j][2]), "r"(f[j][3]) : "memory");
}

// Pair-key word q = t of one block (see pair_keys): byte c = key of elements
// 8c + 2t, 8c + 2t + 1, i.e. bits 2b, 2b + 1 = (plane b >> (8c + 2t)) & 3.
template <int K>
__device__ __forceinline__ u32 key_word(const u32 (&p)[K], int sh) {
    u32 key = 0;
#pragma unroll
    for (int b = 0; b < (K < 4 ? K : 4); b++) key |= ((p[b] >> sh) & 0x03030303u) << (2 * b);
    return key;
}
// k = 5: the fifth plane's bits of the same pairs (the key's upper byte lanes, see pair_key); 0 below.
template <int K>
__device__ __forceinline__ u32 key_hi(const u32 (&p)[K], int sh) {
    return K == 5 ? (p[K - 1] >> sh) & 0x03030303u : 0u;
}
// One block's K plane words from the stage's weight tile at shared address wa (one vector load for k = 2, 4).
template <int K>
__device__ __forceinline__ void lds_planes(u32 (&p)[K], u32 wa) {
    if (K == 4) {
        asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(p[0]), "=r"(p[1 % K]), "=r"(p[2 % K]), "=r"(p[3 % K]) : "r"(wa));
    } else if (K == 2) {
        asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(p[0]), "=r"(p[1 % K]) : "r"(wa));
    } else {
        // asm volatile, as the vector loads above: these words are stage data that TMA / cp.async write while the
        // kernel runs, so each load must stay after the wait that guards it.  lds_u32 (a plain asm, no memory
        // clobber: a pure function of its address to the compiler) is for tables that are constant once built --
        // through it, NVVM hoisted the first tile's plane loads of a wgmma_cta inlined in a loop above the TMA
        // copies and waits (the stream-K experiment's k = 3 / 5 fault, profiling/NOTES.md fifty-fifth session).
#pragma unroll
        for (int b = 0; b < K; b++) asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(p[b]) : "r"(wa + 4 * b));
    }
}
// A block's scale pair: its E4M4 absmax byte (shared address abs_addr) through the scale table.
__device__ __forceinline__ u32 lds_scale(u32 abs_addr, u32 s2_base) {
    u32 code;
    asm volatile("ld.shared.u8 %0, [%1];\n" : "=r"(code) : "r"(abs_addr));
    return lds_u32(s2_base + 4u * code);
}

}  // namespace kbit_wgmma_detail

// Timeline probe (profiling/wgmma_trace.py builds with -DKBIT_WG_TRACE): thread 0 of each
// CTA stores clock64 at the phase boundaries (slots 0..5), globaltimer at entry / exit
// (6, 7), its SM (8) and whether it summed the split-K partials (9); the cluster sum's steps (10:
// partial stored, 11: first cluster barrier passed, 12: its share summed and stored).
#ifdef KBIT_WG_TRACE
#define KBIT_WG_TRACE_STRIDE 13
__device__ unsigned long long kbit_wg_trace[65536 * KBIT_WG_TRACE_STRIDE];
#define KBIT_WG_T(i, v)                                                                                   \
    do {                                                                                                  \
        if (threadIdx.x == 0 && blockIdx.x < 65536) kbit_wg_trace[blockIdx.x * KBIT_WG_TRACE_STRIDE + (i)] = (v); \
    } while (0)
// Per-iteration phase stamps of thread 0, main-loop iterations 0..KBIT_WG_ITS-1 (8 each).
#define KBIT_WG_ITS 8
__device__ unsigned long long kbit_wg_itrace[65536 * KBIT_WG_ITS * 8];
#define KBIT_WG_IT(it, i, v)                                                                                     \
    do {                                                                                                       \
        if (threadIdx.x == 0 && blockIdx.x < 65536 && (it) < KBIT_WG_ITS)                                     \
            kbit_wg_itrace[((long)blockIdx.x * KBIT_WG_ITS + (it)) * 8 + (i)] = (v);                          \
    } while (0)
#else
#define KBIT_WG_T(i, v) \
    do {                \
    } while (0)
#define KBIT_WG_IT(it, i, v) \
    do {                     \
    } while (0)
#endif

namespace kbit_wgmma_detail {

// The pair table and the E4M4 scale table of the default codebook (CBD: its levels are immediates)
// in shared memory, by all 256 threads, with no global access: a programmatic dependent builds them
// before griddepcontrol.wait (wgmma_cta's tables_built), off the path after it.
template <int K, typename T, int LC = -1>
__device__ __forceinline__ void wgmma_default_tables() {
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int LUT_BYTES = PairLut<K, LC>::WORDS * 4;
    float* cb_s = reinterpret_cast<float*>(smem + LUT_BYTES + 1024);
    const int tid = threadIdx.x;
    if (tid < 32) cb_s[tid] = tid < (1 << K) ? kbit_default_level<K>(tid) : 0.0f;
    __syncthreads();
    build_pair_lut<K, T, LC>(reinterpret_cast<u32*>(smem), cb_s);
    build_scale_table<T>(reinterpret_cast<u32*>(smem + LUT_BYTES), tid, 256);
}

// The TMA stage mbarriers' shared address (wgmma_cta: misc's upper 64 bytes), and their invalidation by thread
// 0 before a CTA runs wgmma_cta again (the grouped kernel's extra token tiles), every thread past its waits.
template <int K, int LC>
__device__ __forceinline__ u32 tma_mbar0() {
    extern __shared__ __align__(128) unsigned char smem[];
    return (u32)__cvta_generic_to_shared(smem + PairLut<K, LC>::WORDS * 4 + 1024 + 128 + 64);
}
template <int K, int LC>
__device__ __forceinline__ void tma_inval(int stages) {
    if (threadIdx.x == 0)
        for (int b = 0; b < stages; b++) mbar_inval(tma_mbar0<K, LC>() + 8u * b);
}

// The split-K sum over the cluster (cl: the tile's k_splits CTAs are one thread block cluster, rank =
// split).  Each puts its fp32 partial in its own (now idle) stage buffers; CTA r sums the r-th share of the
// tile's 4-column chunks from all of them through DSMEM, in split order (the workspace path's order, so the
// same bits), and writes C.  No workspace, fence or counter, and the sum and the stores are spread over the
// splits instead of left to the last CTA.  The second cluster barrier keeps every CTA's partial in place
// until the others have read it.
template <typename T, int TOK, int STAGE_BYTES>
__device__ __forceinline__ void cluster_sum_store(const float (&acc)[TOK / 2], unsigned char* stage0, u32 stage0_s,
                                                  T* __restrict__ C, int M, int N, int m0, int n0, int split,
                                                  int k_splits, float tensor_scale, int vec8, int tid) {
    constexpr int RS = 128 + 4;  // fp32 row stride: a warp's accumulator stores hit 32 banks
    static_assert(4 * STAGE_BYTES >= TOK * RS * 4, "the partial fits the stage buffers (>= 4 stages)");
    __syncthreads();             // every warp is done with the stage buffers
    float* red = reinterpret_cast<float*>(stage0);
    const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3, col_lo = 16 * warp + g;
    // accumulator 4 b + e: token 8 b + 2 t + (e & 1), column 16 warp + g + 8 (e >> 1)
#pragma unroll
    for (int b = 0; b < TOK / 8; b++)
#pragma unroll
        for (int e = 0; e < 4; e++) red[(8 * b + 2 * t + (e & 1)) * RS + col_lo + 8 * (e >> 1)] = acc[4 * b + e];
    KBIT_WG_T(10, clock64());
    cluster_sync();
    KBIT_WG_T(11, clock64());
    const int nch = min(TOK, M - m0) * 32;  // 4-column chunks of the tile's real tokens
    const int c0 = (int)((unsigned)nch * (unsigned)split / (unsigned)k_splits);  // nch <= 32 TOK: 32-bit
    const int c1 = (int)((unsigned)nch * (unsigned)(split + 1) / (unsigned)k_splits);
    for (int i = c0 + tid; i < c1; i += 256) {
        const int r = i >> 5, c4 = (i & 31) * 4;
        const int col = n0 + c4;
        if (col >= N) continue;
        const u32 la = stage0_s + 4u * (u32)(r * RS + c4);
        // splits in pairs, two DSMEM loads in flight (all of them in flight cost the grouped
        // kernel ~27 registers under CUDA 13, and with them its second CTA per SM).  More in flight
        // (all of a thread's chunks, two splits each) was slower: TOK = 64 / 2 splits 1.26 -> 1.36 us,
        // TOK = 128 / 6 splits 2.36 -> 3.08 (H100 2026-11-26, wgtrace28c / wgtrace28e): not latency.
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 1
        for (int sp = 0; sp < k_splits; sp += 2) {
            const float4 x0 = ld_cluster_f4(cluster_map(la, sp));
            const float4 x1 = sp + 1 < k_splits ? ld_cluster_f4(cluster_map(la, sp + 1)) : make_float4(0.f, 0.f, 0.f, 0.f);
            v.x += x0.x; v.y += x0.y; v.z += x0.z; v.w += x0.w;
            if (sp + 1 < k_splits) {
                v.x += x1.x; v.y += x1.y; v.z += x1.z; v.w += x1.w;
            }
        }
        const float s4[4] = {v.x, v.y, v.z, v.w};
        T* dst = C + (long)(m0 + r) * N + col;
        if (vec8 && col + 4 <= N) {  // 8-byte aligned: N % 8 == 0, 16-byte aligned base
            __align__(8) T o[4];
#pragma unroll
            for (int e = 0; e < 4; e++) o[e] = KbitType<T>::from_float(s4[e] * tensor_scale);
            *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(o);
        } else {
            for (int e = 0; e < 4 && col + e < N; e++) dst[e] = KbitType<T>::from_float(s4[e] * tensor_scale);
        }
    }
    KBIT_WG_T(12, clock64());
    // Keep every CTA's partial in place until the others have read it: the reads are done (their
    // values are in the C stores), so a relaxed arrive suffices; the release one (cluster_sync)
    // waited for the C stores to be performed, ~0.6 us of the CTA (H100, 2026-11-26, wgtrace28b /
    // wgtrace28c: 0.6 -> 0.03 us at TOK = 16 and 64, 2 splits).
    cluster_arrive_relaxed();
    cluster_wait();
}

// C through shared memory: the tile's accumulators staged through the (then idle) stage buffers as T rows,
// then stored in 16-byte pieces.
template <typename T, int TOK>
__device__ __forceinline__ void store_c(const float (&acc)[TOK / 2], unsigned char* stage0, T* __restrict__ C, int M,
                                        int N, int m0, int n0, float tensor_scale, int vec8, int tid) {
    constexpr int CS_STRIDE = 128 + 8;  // C staging row (elements), 16 B aligned, spreads banks
    __syncthreads();  // every warp is done with the stage buffers
    T* cs = reinterpret_cast<T*>(stage0);
    const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3, col_lo = 16 * warp + g;
    // accumulator 4 b + e: token 8 b + 2 t + (e & 1), column 16 warp + g + 8 (e >> 1)
#pragma unroll
    for (int b = 0; b < TOK / 8; b++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int tok = 8 * b + 2 * t + (e & 1);
            cs[tok * CS_STRIDE + col_lo + 8 * (e >> 1)] = KbitType<T>::from_float(acc[4 * b + e] * tensor_scale);
        }
    }
    __syncthreads();
    const int rows = min(TOK, M - m0);
    for (int i = tid; i < rows * 16; i += 256) {
        const int r = i >> 4, c8 = (i & 15) * 8;
        const int col = n0 + c8;
        if (col >= N) continue;
        T* dst = C + (long)(m0 + r) * N + col;
        const T* src = cs + r * CS_STRIDE + c8;
        if (vec8 && col + 8 <= N) {
            *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
        } else {
            for (int e = 0; e < 8 && col + e < N; e++) dst[e] = src[e];
        }
    }
}

// One CTA's work: token tile mt (TOK rows of A[M, Kdim]), column strip nt, K tiles of
// split `split` of `k_splits`; C[M, N] += its part (split-K tile index `tile` of `tiles`
// in ws / counters).  Returns false where a split-K contributor leaves the sum to the
// last one.  A, packed, absmax and C are this GEMM's bases (the grouped kernel passes
// one expert's).  LC: the pair table's copies (log2; -1: PairLut's default).  SUM64: float4 loads in
// flight per thread in the workspace sum at TOK = 64 (see SUM_CH).  TMA: the token tiles by tensor
// copies through `tmap` (rows tma_row0 + m0 ..; A then is not read), see load_tokens.
template <int K, typename T, int TOK, bool CBD = false, int LC = -1, int SUM64 = 4, bool TMA = false>
__device__ __forceinline__ bool wgmma_cta(const T* __restrict__ A, const u32* __restrict__ packed,
                                          const u8* __restrict__ absmax, const float* __restrict__ codebook,
                                          T* __restrict__ C, float* __restrict__ ws, int* __restrict__ counters,
                                          int M, int N, int Kdim, int mt, int nt, int split, int k_splits, int stages,
                                          float tensor_scale, int vec8, int tile, int tiles, bool pdl = false,
                                          bool cl = false, bool tables_built = false,
                                          const KbitTmap* tmap = nullptr, int tma_row0 = 0) {
    static_assert(TOK == 16 || TOK == 32 || TOK == 64 || TOK == 128 || TOK == 192 || TOK == 256, "TOK");
    constexpr int NACC = TOK / 2;                   // fp32 accumulators per thread (m64 x TOK / 128)
    constexpr int NSUB = TOK >= 64 ? TOK / 64 : 1;  // n64 sub-MMAs per k16 (TOK = 64, 192, 256)
    constexpr int A_BYTES = TOK * 128;              // tokens x 64 elements
    constexpr int W_BYTES = 1024 * K;               // one layout tile: 128 cols x 2 blocks x K words
    constexpr int STAGE_BYTES = (A_BYTES + W_BYTES + 256 + 1023) / 1024 * 1024;  // 1024-aligned (swizzle)
    constexpr int LUT_BYTES = PairLut<K, LC>::WORDS * 4;
    constexpr int SH = PairLut<K, LC>::LOG2_COPIES + 2;  // log2 bytes per LUT entry row

    extern __shared__ __align__(128) unsigned char smem[];
    u32* lut = reinterpret_cast<u32*>(smem);
    u32* s2tab = reinterpret_cast<u32*>(smem + LUT_BYTES);
    float* cb_s = reinterpret_cast<float*>(smem + LUT_BYTES + 1024);
    int* misc = reinterpret_cast<int*>(smem + LUT_BYTES + 1024 + 128);
    // stages from the first 1024-byte aligned shared address on (kbitcupy/wgmma.py adds the slack)
    const u32 smem_s = (u32)__cvta_generic_to_shared(smem);
    const u32 stage0_s = (smem_s + (u32)(LUT_BYTES + 1024 + 256) + 1023u) & ~1023u;
    unsigned char* stage0 = smem + (stage0_s - smem_s);
    // TMA: one mbarrier per stage buffer (<= 8) in misc's upper 64 bytes; bit b of tma_ph = the parity
    // of buffer b's next phase
    const u32 mbar0_s = tma_mbar0<K, LC>();
    u32 tma_ph = 0;
    if (TMA && threadIdx.x == 0) {
        for (int b = 0; b < stages; b++) mbar_init(mbar0_s + 8u * b, 1);
        fence_mbar_init();
    }
    // every thread waits for the stage's phase (tile t lives in buffer t % stages, its use t / stages)
    auto tma_wait = [&](int buf) {
        mbar_wait_or_trap(mbar0_s + 8u * (u32)buf, (tma_ph >> buf) & 1u);
        tma_ph ^= 1u << buf;
    };

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    KBIT_WG_T(6, probe_gtime());
    KBIT_WG_T(0, clock64());
    KBIT_WG_T(8, probe_smid());

    // ---------------------------------------------------------------- work item
    const int m0 = mt * TOK;
    const int n0 = nt * KBIT_TILE_N;
    const int n_tiles = (N + KBIT_TILE_N - 1) / KBIT_TILE_N;
    const int k_tiles = (Kdim + KBIT_TILE_K - 1) / KBIT_TILE_K;
    // 32-bit unsigned: the 64-bit division this was is a ~100-instruction subroutine on every
    // CTA's way to its first load; k_tiles * k_splits < 2^32 (kbitcupy.wgmma: k_tiles < 2^16)
    const int kt_begin = (int)((unsigned)k_tiles * (unsigned)split / (unsigned)k_splits);
    const int kt_end = (int)((unsigned)k_tiles * (unsigned)(split + 1) / (unsigned)k_splits);
    const int n_my = kt_end - kt_begin;

    // Token copies: copy id i = tid + 256 u (u < A_COPIES) -> token i / 8 = a_r0 + 32 u,
    // chunk i % 8 = a_c, shared byte 128 (a_r0 + 32 u) + 16 (a_c ^ (a_r0 % 8)) (the swizzled
    // chunk is the same for every u).  The row pointer and its validity are fixed per thread;
    // only the K offset moves.
    constexpr int A_COPIES = (TOK * 8 + 255) / 256;
    const int a_r0 = tid >> 3, a_c = tid & 7;
    const u32 a_soff = 128u * (u32)a_r0 + 16u * (u32)(a_c ^ (a_r0 & 7));
    const int a_rows = M - m0 - a_r0;  // copy u is a real token iff 32 u < a_rows
    const T* a_base = A + (long)(m0 + a_r0) * Kdim + a_c * 8;
    const long a_ustride = 32L * Kdim;
    constexpr int W_COPIES = (W_BYTES / 16 + 255) / 256;
    const u32* w_base = packed + (long)nt * (KBIT_TILE_N * KBIT_KB_PER_TILE * K) + 4 * tid;
    const long w_ktstride = (long)n_tiles * (KBIT_TILE_N * KBIT_KB_PER_TILE * K);
    const u8* abs_base = absmax + (long)nt * (KBIT_TILE_N * KBIT_KB_PER_TILE) + 16 * tid;
    const long abs_ktstride = (long)n_tiles * (KBIT_TILE_N * KBIT_KB_PER_TILE);

    auto load_tokens = [&](int buf, int kt) {
#ifdef KBIT_WG_NO_TOKENS  // experiment hook (profiling/run24.sh wgprobe, run33.sh l2): no token copies (wrong results)
        if (TMA && tid == 0) mbar_arrive(mbar0_s + 8u * (u32)buf);  // the stage's arrival, no bytes
        return;
#endif
        if (TMA) {  // rows past the tensor's (M; K % 64 == 32: the upper half) arrive as zeros
            if (tid == 0) {  // the stage's one arrival: after its weights' expect_tx, see load_stage
                const u32 bar = mbar0_s + 8u * (u32)buf;
                mbar_arrive_expect_tx(bar, A_BYTES);
                tma_load_2d(stage0_s + buf * STAGE_BYTES, tmap, kt * KBIT_TILE_K, tma_row0 + m0, bar);
            }
            return;
        }
        const u32 st = stage0_s + buf * STAGE_BYTES + a_soff;
        const bool kok = kt * KBIT_TILE_K + a_c * 8 < Kdim;  // K % 64 == 32: the upper half is zero-filled
#pragma unroll
        for (int u = 0; u < A_COPIES; u++) {
            if ((TOK * 8) % 256 == 0 || tid + 256 * u < TOK * 8) {
                const bool ok = kok && 32 * u < a_rows;
                cp_async16_zfill(st + 4096 * u, ok ? a_base + u * a_ustride + kt * KBIT_TILE_K : A, ok);
            }
        }
    };
    auto load_weights = [&](int buf, int kt) {  // the whole (kt, nt) layout tile, contiguous
        if (TMA) {  // two bulk copies by one thread on the stage's mbarrier (its arrival comes with the tokens)
            if (tid == 0) {
                const u32 bar = mbar0_s + 8u * (u32)buf, st = stage0_s + buf * STAGE_BYTES + A_BYTES;
                mbar_expect_tx(bar, W_BYTES + 256);
                bulk_load(st, w_base - 4 * tid + kt * w_ktstride, W_BYTES, bar);
                bulk_load(st + W_BYTES, abs_base - 16 * tid + kt * abs_ktstride, 256, bar);
            }
            return;
        }
        const u32 st = stage0_s + buf * STAGE_BYTES + 16 * tid;
#pragma unroll
        for (int u = 0; u < W_COPIES; u++)
            if ((W_BYTES / 16) % 256 == 0 || tid + 256 * u < W_BYTES / 16)
                cp_async16_zfill(st + A_BYTES + 4096 * u, w_base + kt * w_ktstride + 1024 * u, true);
        if (tid < 16) cp_async16_zfill(st + A_BYTES + W_BYTES, abs_base + kt * abs_ktstride, true);
    };
    auto load_stage = [&](int buf, int kt) {
        if (TMA) load_weights(buf, kt);  // the weights' expect_tx before the stage's arrival (the tokens')
        load_tokens(buf, kt);
        if (!TMA) load_weights(buf, kt);
    };

    // ---------------------------------------------------------------- prologue
    const int dist = stages - 2;  // prefetch distance (see header)
    // pdl (launched as a programmatic dependent of the previous grid, kbitcupy/_pdl.py):
    // the first tiles' weights are requested and the tables built before
    // griddepcontrol.wait; tokens (the previous grid may write A), the split-K workspace
    // and C only after it.  cp.async group i is then {all prologue weights + tokens of
    // tile 0} for i = 0, tokens of tile i after: tile i has landed once group i has.
    // CBD: the default codebook's levels are immediates (no global load on the way to the tables);
    // tables_built: the caller built both tables already (wgmma_default_tables, before its wait)
    if (tid < 32 && !tables_built) cb_s[tid] = tid < (1 << K) ? (CBD ? kbit_default_level<K>(tid) : codebook[tid]) : 0.0f;
    for (int i = 0; i < dist; i++) {
        if (pdl) {
            if (i < n_my) load_weights(i, kt_begin + i);
        } else {
            if (i < n_my) load_stage(i, kt_begin + i);
            if (!TMA) cp_async_commit();  // (TMA: no cp.async)
        }
    }
    __syncthreads();
#ifndef KBIT_WG_NO_TABLES  // diagnostic hook (profiling/run56.sh parts): no table build, wrong results
    if (!tables_built) {
        build_pair_lut<K, T, LC>(lut, cb_s);
        build_scale_table<T>(s2tab, tid, 256);
    }
#endif
    if (pdl) {
        griddep_wait();
        for (int i = 0; i < dist; i++) {
            if (i < n_my) load_tokens(i, kt_begin + i);
            if (!TMA) cp_async_commit();  // (TMA: no cp.async)
        }
        // the next grid may start its prologue; it reads A / workspace only after its own
        // wait (this grid complete), so no grid two back can still be running then
        griddep_launch_dependents();
    }
    KBIT_WG_T(1, clock64());  // pair table and scale table built (this thread's part)

    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; i++) acc[i] = 0.0f;

    const u32 lut_lane = (u32)__cvta_generic_to_shared(lut) + 4u * (u32)(lane & (PairLut<K, LC>::COPIES - 1));
    // 256-byte table rows (64 copies, KBIT_WG_K4_ROW256; byte keys, k <= 4): one PRMT makes a lookup's whole
    // offset key << 8 | lane * 4 from the table's base, where other rows add key << SH to the lane's copy
    constexpr bool ROW256 = SH == 8 && K <= 4;
    const u32 lane4 = 4u * (u32)lane;
    const u32 lut_row0 = ROW256 ? (u32)__cvta_generic_to_shared(lut) : lut_lane;
    const u32 s2_base = (u32)__cvta_generic_to_shared(s2tab);
    const int col_lo = 16 * warp + g;  // column of the 128-strip for fragment rows g (and +8)
    const int ksh = 2 * t;             // key_word shift

    // Two fragment sets: tile it dequantizes into one while the wgmma group of tile it - 1
    // may still read the other (see frag_keep).
    u32 frag_a[4][4], frag_b[4][4];
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) frag_a[j][r] = frag_b[j][r] = 0u;
    // Tile t lives in stage buffer t % stages.  Order per iteration it (see header):
    //   barrier (tile it + 1 landed; every warp has dequantized tile it and retired group it - 2)
    //   -> wgmma group of tile it -> request tile it + dist -> wait_group 1 (retires group
    //   it - 1) -> dequantize tile it + 1 into the set group it - 1 read.
    // The barrier between a tile's dequantize and its wgmma keeps ptxas from sinking the
    // fragment arithmetic between the 4 wgmma of the tile (it then reused one register quad
    // and serialized every wgmma: warning C7513).
    int rd_d = 0, rd_m = 0, wr = dist;
    auto dequant = [&](int it, u32 (&fr)[4][4]) {
        const u32 st = stage0_s + rd_d * STAGE_BYTES;
        rd_d = rd_d + 1 == stages ? 0 : rd_d + 1;
        const u32 ws_s = st + A_BYTES;
        const u32 abs_s = st + A_BYTES + W_BYTES;

        // ---- dequantize: blocks (col_lo, kb) and (col_lo + 8, kb), kb = 0, 1
#ifdef KBIT_WG_NO_DEQUANT  // experiment hook (profiling/gemm_probe.py): MMA + loads only
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) fr[j][r] = 0x3C003C00u ^ (u32)(it & 1);
#else
#pragma unroll
        for (int kb = 0; kb < 2; kb++) {
            u32 kw[2], hi[2], s2[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int col = col_lo + 8 * h;
                u32 p[K];
                lds_planes<K>(p, ws_s + 4u * (u32)((col * 2 + kb) * K));
                kw[h] = key_word<K>(p, ksh);
                hi[h] = key_hi<K>(p, ksh);
                s2[h] = lds_scale(abs_s + (u32)(col * 2 + kb), s2_base);
            }
#pragma unroll
            for (int c = 0; c < 4; c++) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const u32 off = ROW256 ? prmt(kw[h], lane4, 0x5504u | ((u32)c << 4)) : pair_key<K>(kw[h], hi[h], c) << SH;
                    // instruction j = 2 kb + c / 2; register a0/a1 (chunk even) or a2/a3 (chunk odd), row g + 8 h
                    fr[2 * kb + (c >> 1)][2 * (c & 1) + h] = hmul2_u32(lds_u32(lut_row0 + off), s2[h], T());
                }
            }
        }

#endif
    };
    auto mma = [&](int it, u32 (&fr)[4][4]) {
        const u32 st = stage0_s + rd_m * STAGE_BYTES;
        rd_m = rd_m + 1 == stages ? 0 : rd_m + 1;
#ifdef KBIT_WG_NO_MMA  // experiment hook: loads + dequantize only
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[(4 * j + r) % NACC] += __uint_as_float(fr[j][r] & 0x00010001u);
#else
        // ---- 4 x wgmma k16 over this tile (k16 j: chunks 2j, 2j + 1 -> +256 j bytes)
        unsigned long long bd[4];
#pragma unroll
        for (int j = 0; j < 4; j++) bd[j] = smem_desc(st + 32u * j);
        if (TOK == 16) {
            wgmma_tile_n16(*reinterpret_cast<float(*)[8]>(&acc[0]), fr, bd, T());
        } else if (TOK == 32) {
            wgmma_tile_n32(*reinterpret_cast<float(*)[16]>(&acc[0]), fr, bd, T());
        } else if (TOK == 128) {  // one m64n128 per k16 (the same accumulator layout as two n64)
            wgmma_tile_n128(*reinterpret_cast<float(*)[64]>(&acc[0]), fr, bd, T());
        } else {
#pragma unroll
            for (int sub = 0; sub < NSUB; sub++) {  // tokens 64 sub.. : 64 rows of 128 bytes on
                unsigned long long bs[4];
#pragma unroll
                for (int j = 0; j < 4; j++) bs[j] = bd[j] + ((8192ull * sub) >> 4);
                wgmma_tile_n64(*reinterpret_cast<float(*)[32]>(&acc[32 * sub]), fr, bs, T());
            }
        }
        wgmma_commit();
#endif
    };
    // tile 0: landed (dist groups committed, tile j = group j), visible to the async proxy
    if (!TMA) cp_async_wait_upto(dist - 1);
    if (TMA) {
        if (n_my > 0) tma_wait(0);
    } else {
        fence_proxy_async();
    }
    __syncthreads();
    KBIT_WG_T(2, clock64());  // tile 0 landed for every thread
    if (n_my > 0) dequant(0, frag_a);
    auto step = [&](int it, u32 (&cur)[4][4], u32 (&nxt)[4][4]) {
        // groups committed: dist + it; tile it + 1 = group it + 1 complete
        KBIT_WG_IT(it, 0, clock64());
        if (!TMA) cp_async_wait_upto(dist - 2);
        KBIT_WG_IT(it, 1, clock64());
        if (TMA) {  // tile it + 1 (buffer rd_d), as the cp.async wait above
            if (it + 1 < n_my) tma_wait(rd_d);
        } else {
            // cp.async wrote the tiles through the generic proxy; wgmma reads them through the
            // async proxy: make this thread's writes visible to it before the barrier.
            fence_proxy_async();
        }
        KBIT_WG_IT(it, 2, clock64());
        __syncthreads();
        KBIT_WG_IT(it, 3, clock64());
        mma(it, cur);
        KBIT_WG_IT(it, 4, clock64());
        // buffer of tile it + dist = that of tile it - 2: its group retired (wait below, last
        // iteration) and dequantized by every warp before the barrier above
        if (it + dist < n_my) load_stage(wr, kt_begin + it + dist);
        if (!TMA) cp_async_commit();
        wr = wr + 1 == stages ? 0 : wr + 1;
        KBIT_WG_IT(it, 5, clock64());
#ifndef KBIT_WG_NO_MMA
        wgmma_wait<1>();  // retires the group of tile it - 1, which read `nxt`
        reg_fence(acc);
#endif
        KBIT_WG_IT(it, 6, probe_clock_after(__float_as_uint(acc[0])));
        frag_keep(nxt);
        if (it + 1 < n_my) dequant(it + 1, nxt);
        KBIT_WG_IT(it, 7, probe_clock_after(nxt[3][3] ^ nxt[0][0]));
    };
    for (int it = 0; it < n_my; it += 2) {
        step(it, frag_a, frag_b);
        if (it + 1 < n_my) step(it + 1, frag_b, frag_a);
    }
    wgmma_wait<0>();
    reg_fence(acc);
    if (!TMA) cp_async_wait<0>();
    KBIT_WG_T(3, clock64());  // main loop done

#ifdef KBIT_WG_NO_SUM  // diagnostic hook (profiling/run56.sh parts): every split stores its own partial as C, wrong results
    k_splits = 1;
#endif
    // ---------------------------------------------------------------- split-K sum, cluster
    if (k_splits > 1 && cl) {
        cluster_sum_store<T, TOK, STAGE_BYTES>(acc, stage0, stage0_s, C, M, N, m0, n0, split, k_splits, tensor_scale,
                                               vec8, tid);
        KBIT_WG_T(4, clock64());
        KBIT_WG_T(9, split == 0 ? 1ull : 0ull);
        KBIT_WG_T(5, clock64());
        KBIT_WG_T(7, probe_gtime());
        return true;
    }

    // ---------------------------------------------------------------- split-K fixup, workspace
    if (k_splits > 1) {
        float4 v[NACC / 4];
#pragma unroll
        for (int i = 0; i < NACC / 4; i++) v[i] = make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
        // TOK >= 128 runs one CTA per SM: the last CTA's sum keeps 8-16 float4 loads in flight
        // per thread (4 made it one L2 round trip per 16 KB: 4.3 us at gate/up M = 128 with 3
        // splits, 7 us at down with 8; profiling/wgmma_trace.py, H200, 2026-11-25)
        constexpr int SUM_CH = TOK == 128 ? 16 : TOK == 192 ? 8 : TOK == 64 ? SUM64 : 4;
        const bool last =
            splitk_fixup<NACC / 4, 256, SUM_CH>(v, NACC / 4, ws, counters, misc, tile, tiles, split, k_splits,
                                                stage0_s, stages * STAGE_BYTES);  // (the stages are idle now)
        KBIT_WG_T(4, clock64());  // partials stored (and summed by the last CTA)
        KBIT_WG_T(9, last ? 1ull : 0ull);
        if (!last) {
            KBIT_WG_T(5, clock64());
            KBIT_WG_T(7, probe_gtime());
            return false;
        }
#pragma unroll
        for (int i = 0; i < NACC / 4; i++) {
            acc[4 * i] = v[i].x; acc[4 * i + 1] = v[i].y; acc[4 * i + 2] = v[i].z; acc[4 * i + 3] = v[i].w;
        }
    }

    // ---------------------------------------------------------------- C through shared memory
    store_c<T, TOK>(acc, stage0, C, M, N, m0, n0, tensor_scale, vec8, tid);
    KBIT_WG_T(5, clock64());
    KBIT_WG_T(7, probe_gtime());
    return true;
}

// Token tile mt, split and column strip nt of work item i: token tile fastest, or, launched in
// clusters of k_splits CTAs (cluster), split fastest (a tile's splits are one cluster, rank = split).
__device__ __forceinline__ void work_coords(int i, int m_tiles, int k_splits, int cluster, int& mt, int& split,
                                            int& nt) {
    if (cluster) {
        split = i % k_splits;
        const int rest = i / k_splits;
        mt = rest % m_tiles;
        nt = rest / m_tiles;
    } else {
        mt = i % m_tiles;
        const int rest = i / m_tiles;
        split = rest % k_splits;
        nt = rest / k_splits;
    }
}

}  // namespace kbit_wgmma_detail

// Dense GEMM.  Grid: 1-D, m_tiles * n_tiles * k_splits CTAs; CTA b -> token tile
// b % m_tiles, split (b / m_tiles) % k_splits, column strip b / (m_tiles * k_splits); with
// `cluster` (launched in clusters of k_splits CTAs, 2..8) split b % k_splits, token tile
// (b / k_splits) % m_tiles, strip b / (k_splits * m_tiles), and the split-K sum over DSMEM.
// CBD: the weight's codebook is the default one (kbit_default_level; codebook is not read): in safe
// PDL the tables are built before the wait.
// CTAs per SM the dense kernel's registers are capped for (experiment hook; the plan reads the
// registers and aims its stages and splits at what fits).
#ifndef KBIT_WG_MINB
#define KBIT_WG_MINB 1
#endif
// The dense k = 4 kernels at TOK >= 128 build the pair table at 64 copies (64 KB, 256-byte rows), so that one PRMT
// gives a lookup's whole offset (key << 8 | lane * 4) where the 32-copy table needs a PRMT and a shift-add: 16
// instructions fewer a thread a K tile, for one stage less (8 -> 7; kbitcupy.wgmma.plan sets lc = 6).  Why: the
// K tile follows the dequantize's instruction count (H200 2026-11-27, run33.sh prmt / row256): TOTAL M = 128 / 256
// 59.35 / 82.5 -> 58.5 / 80.3 us, M <= 64 unchanged.  -DKBIT_WG_K4_ROW256=0: the 32-copy table (A/B).
#ifndef KBIT_WG_K4_ROW256
#define KBIT_WG_K4_ROW256 1
#endif
// k = 2 / 3 at every TOK with the same 64-copy rows (4 / 16 KB tables, so no stage or CTA is lost).  H100 2026-11-27
// (run34.sh k23, two alternations): TOTAL M = 16..256 -1.0..-1.9 % at k = 2, -1.4..-2.6 % at k = 3.
// -DKBIT_WG_K23_ROW256=0: the 32-copy tables (A/B).
#ifndef KBIT_WG_K23_ROW256
#define KBIT_WG_K23_ROW256 1
#endif
#define KBIT_WG_DENSE_LC(K, TOK) \
    ((KBIT_WG_K4_ROW256 && (K) == 4 && (TOK) >= 128) || (KBIT_WG_K23_ROW256 && (K) <= 3) ? 6 : -1)  // host: wgmma.dense_lc
// The dense kernel's workspace-sum loads in flight at TOK = 64 (experiment hook, run28.sh sumch: 8 halves
// the last CTA's L2 round trips at 8 splits -- dense down M = 64, 3.97 us from the main loop's end,
// wgtrace28b -- at 116 registers under CUDA 13, where the grouped kernel would take 156 and lose its second
// CTA per SM).
#ifndef KBIT_WG_DENSE_SUM64
#define KBIT_WG_DENSE_SUM64 4
#endif
namespace kbit_wgmma_detail {
template <int K, typename T, int TOK, bool CBD, bool TMA>
__device__ __forceinline__ void wgmma_dense(const KbitTmap* tmap, const T* __restrict__ A, const u32* __restrict__ packed,
                                            const u8* __restrict__ absmax, const float* __restrict__ codebook,
                                            T* __restrict__ C, float* __restrict__ ws, int* __restrict__ counters,
                                            int M, int N, int Kdim, int m_tiles, int k_splits, int stages,
                                            float tensor_scale, int vec8, int pdl, int cluster) {
#ifndef KBIT_WG_CBD_LATE
    const bool early = CBD && pdl == KBIT_PDL_SAFE;
#else  // experiment hook (run24.sh cbd2): the levels compiled in, the tables built after the wait
    const bool early = false;
#endif
    if (early) {
        kbit_wgmma_detail::wgmma_default_tables<K, T, KBIT_WG_DENSE_LC(K, TOK)>();
        griddep_wait_release();
    } else {
        pdl_safe_entry(pdl);
    }
    int mt, split, nt;
    kbit_wgmma_detail::work_coords(blockIdx.x, m_tiles, k_splits, cluster, mt, split, nt);
    kbit_wgmma_detail::wgmma_cta<K, T, TOK, CBD, KBIT_WG_DENSE_LC(K, TOK), KBIT_WG_DENSE_SUM64, TMA>(
        A, packed, absmax, codebook, C, ws, counters, M, N, Kdim, mt, nt, split, k_splits, stages, tensor_scale, vec8,
        nt * m_tiles + mt, gridDim.x / k_splits, pdl == 1, cluster != 0, early, tmap);
}
}  // namespace kbit_wgmma_detail

#define KBIT_WG_DENSE_ARGS                                                                                     \
    const T *__restrict__ A, const u32 *__restrict__ packed, const u8 *__restrict__ absmax,                     \
        const float *__restrict__ codebook, T *__restrict__ C, float *__restrict__ ws, int *__restrict__ counters, \
        int M, int N, int Kdim, int m_tiles, int k_splits, int stages, float tensor_scale, int vec8, int pdl, int cluster
#define KBIT_WG_DENSE_PASS \
    A, packed, absmax, codebook, C, ws, counters, M, N, Kdim, m_tiles, k_splits, stages, tensor_scale, vec8, pdl, cluster
template <int K, typename T, int TOK, bool CBD = false>
__global__ void __launch_bounds__(256, KBIT_WG_MINB) kbit_wgmma(KBIT_WG_DENSE_ARGS) {
    kbit_wgmma_detail::wgmma_dense<K, T, TOK, CBD, false>(nullptr, KBIT_WG_DENSE_PASS);
}
// The same with the stages by TMA and bulk copies (the default; env KBIT_WG_TMA=0 in kbitcupy/wgmma.py for
// kbit_wgmma): tmap is a
// 2-D tensor map of A (K elements x M rows, 64 x TOK boxes, 128-byte swizzle); A itself is not read.
template <int K, typename T, int TOK, bool CBD = false>
__global__ void __launch_bounds__(256, KBIT_WG_MINB)
    kbit_wgmma_tma(const __grid_constant__ kbit_wgmma_detail::KbitTmap tmap, KBIT_WG_DENSE_ARGS) {
    kbit_wgmma_detail::wgmma_dense<K, T, TOK, CBD, true>(&tmap, KBIT_WG_DENSE_PASS);
}

// Grouped (MoE) GEMM over an expert bank (kbitcupy/grouped.py has the contract): for
// every slot s, C[r0:r1] = A[r0:r1] @ W_e^T, e = expert_ids[s], [r0, r1) = offsets[s..s+1].
// Grid: 1-D, n_slots * n_tiles * k_splits * m_tiles CTAs, slot-major (the CTAs of one
// expert are neighbours); m_tiles = ceil(max_tokens / TOK) from the host bound.  Guards
// as kbit_grouped: a bad expert id or bad offsets write nothing and set an error bit.  A
// slot with more tokens than m_tiles * TOK (max_tokens too small) is still computed:
// split 0 of each token tile does the extra tiles m_tiles apart, whole K, no split-K.
// `cluster`: as the dense kernel (a slot's CTAs split-major within a token tile and strip).
// CBD: the bank's codebook is the default one (no codebook load; the tables are still built after
// the wait, see below).
// The grouped kernel's safe early mode (pdl 3) builds the default codebook's tables before its wait
// from this k on (experiment hook).
#ifndef KBIT_WG_SAFE_TABLES_MIN_K
#define KBIT_WG_SAFE_TABLES_MIN_K 4
#endif
// LC: the pair table's copies (log2, -1: PairLut's default).  k = 5 at 8 copies (32 KB, more bank
// conflicts) fits two CTAs per SM at TOK = 64, where its 16 copies fit one (kbitcupy.wgmma.grouped_plan
// picks; H100 2026-11-26, profiling/run28.sh k5copies).
// The stages by TMA as kbit_wgmma_tma's, the token tiles through a tensor map of the whole A_sorted [rows, K]
// passed first (a tile's rows past its expert's are the next expert's tokens: their columns of C are never
// stored; a CTA running extra token tiles invalidates the stage mbarriers, which wgmma_cta sets up again).
template <int K, typename T, int TOK, bool CBD = false, int LC = -1>
__global__ void __launch_bounds__(256, 1)
    kbit_wgmma_grouped(const __grid_constant__ kbit_wgmma_detail::KbitTmap tmap, const T* __restrict__ A, const u32* __restrict__ packed, const u8* __restrict__ absmax,
                       const float* __restrict__ codebook, const float* __restrict__ tscale,
                       const int* __restrict__ expert_ids, const int* __restrict__ offsets, T* __restrict__ C,
                       float* __restrict__ ws, int* __restrict__ counters, int N, int Kdim, int E, int rows,
                       long long wpe, long long ape, int m_tiles, int k_splits, int stages, int max_tokens, int vec8,
                       int* __restrict__ err, int pdl, int cluster) {
    // pdl (launched as a programmatic dependent): 1 = the expert ids and offsets may come
    // from the previous grid (device routing), so wait for it before anything (only the
    // launch overlaps); 2 = the caller guarantees they do not (kbitcupy.grouped
    // ids_stable): the first token tile requests its weights and builds its tables
    // before the wait, as the dense kernel.  CBD's tables are built after the wait all the same: built
    // before the wait of mode 1 (as the dense kernel's CBD) they were 0.3-1.9 % slower at 16..64 tokens
    // per expert (H100 2026-11-26, run24.sh cbd: the early build competes with the previous kernel).
    // 3 (KBIT_GROUPED_SAFE_EARLY) = safe PDL with the same guarantee: the ids and offsets are read
    // before the wait, and the first token tile's first K tiles' weights only L2-prefetched (a hint:
    // the loads after the wait see whatever the previous grid wrote); the tensor scale, the weights
    // into shared memory, A, the workspace and C after it.  Every block waits before it exits: were
    // every block to exit unwaited, the next grid could start while the one before us runs.
    // H100, 2026-11-26 (safe26.log, k = 4, gate/up fused + down against the wait at entry): 8 experts
    // 16 / 32 / 64 tokens 18.73 / 20.30 / 24.59 -> 17.35 / 18.83 / 22.90 us (tables after the wait).
    const bool safe_early = pdl == KBIT_GROUPED_SAFE_EARLY;
    const bool early_ids = pdl == 2 || safe_early;  // the ids read before the wait
    if (pdl == 1) {
        griddep_wait_release();
    }
    const int n_tiles = (N + KBIT_TILE_N - 1) / KBIT_TILE_N;
    const int per_slot = m_tiles * k_splits * n_tiles;
    const int bid = blockIdx.x;
    const int slot = bid / per_slot;
    const int in_slot = bid - slot * per_slot;
    int mt, split, nt;  // clusters of k_splits CTAs: per_slot is a multiple, none spans two slots
    kbit_wgmma_detail::work_coords(in_slot, m_tiles, k_splits, cluster, mt, split, nt);
    const bool reporter = in_slot == 0 && threadIdx.x == 0;  // one error report per slot
    const int e = expert_ids[slot];
    const int r0 = offsets[slot], r1 = offsets[slot + 1];
    if (e < 0 || e >= E) {
        if (reporter) report_err(err, KBIT_ERR_EXPERT_ID, early_ids);
        if (safe_early) griddep_wait();
        return;
    }
    if (r0 < 0 || r1 < r0 || r1 > rows) {
        if (reporter) report_err(err, KBIT_ERR_OFFSETS, early_ids);
        if (safe_early) griddep_wait();
        return;
    }
    const int ntok = r1 - r0;
    if (ntok > max_tokens && reporter) report_err(err, KBIT_ERR_MAX_TOKENS, early_ids);
    // the same decision in every split of a tile, so split-K counters stay consistent
    if (mt * TOK >= ntok) {
        if (safe_early) griddep_wait();
        return;
    }
    const int tiles = (int)(gridDim.x / per_slot) * n_tiles * m_tiles;
    const int tile = (slot * n_tiles + nt) * m_tiles + mt;
    const T* Ae = A + (long)r0 * Kdim;
    T* Ce = C + (long)r0 * N;
    const u32* pe = packed + (long)e * wpe;
    const u8* ae = absmax + (long)e * ape;
    bool tables_built = false;
    if (safe_early) {
        // the K tiles wgmma_cta's prologue requests first (stages - 2 of this split's), or fewer
        // (KBIT_WG_SAFE_PF_TILES), as 128-byte L2 lines: 8k of weights and 2 of absmax per tile
        const int k_tiles = (Kdim + KBIT_TILE_K - 1) / KBIT_TILE_K;
        const int kt0 = (int)((unsigned)k_tiles * (unsigned)split / (unsigned)k_splits);
        const int kt1 = (int)((unsigned)k_tiles * (unsigned)(split + 1) / (unsigned)k_splits);
#ifdef KBIT_WG_SAFE_PF_TILES
        const int npf = min(KBIT_WG_SAFE_PF_TILES, kt1 - kt0);
#else
        const int npf = min(stages - 2, kt1 - kt0);
#endif
        constexpr int WL = 8 * K;  // lines of one layout tile's words
        for (int l = threadIdx.x; l < npf * (WL + 2); l += 256) {
            const int i = l / (WL + 2), r = l - i * (WL + 2);
            const long tl = (long)(kt0 + i) * n_tiles + nt;  // layout tile (K tile, strip)
            prefetch_l2(r < WL ? (const void*)(pe + tl * (32 * WL) + 32 * r) : (const void*)(ae + tl * 256 + 128 * (r - WL)));
        }
        // CBD: the default codebook's tables before the wait too where they are large (k >= 4: 32 KB+).
        // H100, 2026-11-26 (run26.sh safe, safe26.log, TOTAL gate/up fused + down, 16..64 tokens): k = 4
        // -0.1..-1.1 us (10 experts 64 tokens 25.83 -> 24.76), k = 2 +0.1..+0.5 at 8 experts.
        if (CBD && K >= KBIT_WG_SAFE_TABLES_MIN_K) {
            kbit_wgmma_detail::wgmma_default_tables<K, T, LC>();
            tables_built = true;
        }
        griddep_wait_release();
    }
    const float ts = tscale[e];
    for (int m = mt; m * TOK < ntok; m += m_tiles) {
        const bool first = m == mt;
        if (!first) {
            if (split != 0) break;
            __syncthreads();  // the previous tile's epilogue still reads the stage buffers
            kbit_wgmma_detail::tma_inval<K, LC>(stages);  // wgmma_cta initializes them again
        }
        kbit_wgmma_detail::wgmma_cta<K, T, TOK, CBD, LC, 4, true>(
            Ae, pe, ae, codebook, Ce, ws, counters, ntok, N, Kdim, m, nt, first ? split : 0, first ? k_splits : 1,
            stages, ts, vec8, tile, tiles, pdl == 2 && first, cluster != 0 && first, first && tables_built,
            &tmap, r0);
    }
}
