"""wgmma + dequantize-shaped shared-memory loads, no global memory (issue 4): what bounds the wgmma
kernels' K tile at TOK = 128 when nothing comes from DRAM.

One CTA of 256 threads (2 warpgroups) per SM, the kernel's loop shape: per K tile a block barrier (or
none), 4 x wgmma m64n128k16 (A = this tile's 16 fragment registers, B = 128 tokens x 64 from one of 6
rotating 16 KB stages, random halves), commit, wait_group 1, then the next tile's "dequantize" into the
other fragment set, built from

  PL  plane loads: 4 LDS.128 a thread from the stage's 4 KB weight part (8 distinct 16-byte words a
      warp, as the kernel's lanes t = 0..3 of a column share their planes), folded into 4 key words;
  LK  pair lookups: 16 a thread, PRMT (key byte << 8 | lane * 4) + LDS from a 64 KB table of 256-byte rows
      (the k = 4 ROW256 table: conflict-free), each times a scale (HMUL2) into a fragment register;
  SC  scale loads: 4 a thread, an absmax byte (LDS.U8) then its half2 from a 1 KB table.

Variants switch these on and off (and the MMA, the barrier, the planes' source, a register decode, a
software-pipelined dequantize, ping-pong between the warpgroups, two K tiles a wgmma group), so the K
tile's time splits into what the tensor core and the dequantize cost alone and together.

H200, 2026-11-29 (profiling/results/nvidia-h200_2026-11-29_wgmma_lds55.log): MMA alone 288 ns a tile,
the dequantize alone 213, both 441 -- close to MMA + 0.7 x dequantize whatever the dequantize is made of
(loads or ALU), except light ALU work (~116 ns alone), which hides.  Ping-pong 417, with the dequantize
pipelined 380; in the real kernel neither form paid (profiling/run55.sh).

usage (GPU machine): [ONLY=substring] python3 profiling/wgmma_lds_probe.py   (all variants: ~2 min of compile)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wgmma_rate_probe import build  # noqa: E402

SRC = r'''
typedef unsigned u32;
__device__ __forceinline__ unsigned long long sdesc(u32 s) {
  return (unsigned long long)((s & 0x3FFFFu) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62); }
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 s) { u32 r; asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s)); return r; }
__device__ __forceinline__ u32 lds32(u32 a) { u32 v; asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a)); return v; }
__device__ __forceinline__ u32 lds8(u32 a) { u32 v; asm volatile("ld.shared.u8 %0, [%1];" : "=r"(v) : "r"(a)); return v; }
__device__ __forceinline__ uint4 lds128(u32 a) {
  uint4 v; asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a)); return v; }
__device__ __forceinline__ u32 hmul2(u32 a, u32 b) { u32 r; asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
#define ACC8(o) "+f"(d[o + 0]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), "+f"(d[o + 7])
__device__ __forceinline__ void tile(float (&d)[64], const u32 (&f)[4][4], const unsigned long long (&b)[4]) {
  asm volatile("wgmma.fence.sync.aligned;\n{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %80, p, 1, 1, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%68,%69,%70,%71}, %81, p, 1, 1, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%72,%73,%74,%75}, %82, p, 1, 1, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%76,%77,%78,%79}, %83, p, 1, 1, 0;\n}\n"
    : ACC8(0), ACC8(8), ACC8(16), ACC8(24), ACC8(32), ACC8(40), ACC8(48), ACC8(56)
    : "r"(f[0][0]), "r"(f[0][1]), "r"(f[0][2]), "r"(f[0][3]), "r"(f[1][0]), "r"(f[1][1]), "r"(f[1][2]), "r"(f[1][3]),
      "r"(f[2][0]), "r"(f[2][1]), "r"(f[2][2]), "r"(f[2][3]), "r"(f[3][0]), "r"(f[3][1]), "r"(f[3][2]), "r"(f[3][3]),
      "l"(b[0]), "l"(b[1]), "l"(b[2]), "l"(b[3]));
}
__device__ __forceinline__ void keep(const u32 (&f)[4][4]) {
#pragma unroll
  for (int j = 0; j < 4; j++) asm volatile("" ::"r"(f[j][0]), "r"(f[j][1]), "r"(f[j][2]), "r"(f[j][3]) : "memory");
}
constexpr int ROT = 6, SB = 16384 + 4096 + 1024;  // stage: tokens 128 x 64 halves, weights 4 KB, absmax 256 (+pad)

__device__ __forceinline__ uint4 ldg128_ca(const void* p) {
  uint4 v; asm volatile("ld.global.ca.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)); return v; }
__device__ __forceinline__ uint4 ldg128_na(const void* p) {
  uint4 v; asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)); return v; }
__device__ __forceinline__ u32 lds16(u32 a) { u32 v; asm volatile("ld.shared.u16 %0, [%1];" : "=r"(v) : "r"(a)); return v; }

// k = 4 register decode (the twenty-eighth session's prmt33 form): the 16 levels' low / high bytes in 8 registers,
// PRMT on 3-bit selectors, bit 3 through PRMT's sign-replicate mode as a byte mask; out[c] = the pair of chunk c.
__device__ __forceinline__ void prmt_decode4(const uint4& q, int sh, const u32 (&tab)[8], u32 (&out)[4]) {
  const u32 u0 = (q.x >> sh) & 0x03030303u, u1 = (q.y >> sh) & 0x03030303u, u2 = (q.z >> sh) & 0x03030303u;
  const u32 sel = ((u0 * 0x09u) & 0x11111111u) | ((u1 * 0x12u) & 0x22222222u) | ((u2 * 0x24u) & 0x44444444u);
  const u32 x3 = q.w >> sh;
  const u32 y0 = x3 << 7, y1 = x3 << 6;
#pragma unroll
  for (int g = 0; g < 2; g++) {
    const u32 sg = g ? sel >> 16 : sel;
    const u32 m = prmt(y0, y1, g ? 0xFBEAu : 0xD9C8u);
    const u32 lo = (prmt(tab[0], tab[1], sg) & ~m) | (prmt(tab[2], tab[3], sg) & m);
    const u32 hi = (prmt(tab[4], tab[5], sg) & ~m) | (prmt(tab[6], tab[7], sg) & m);
    out[2 * g] = prmt(lo, hi, 0x5140u);
    out[2 * g + 1] = prmt(lo, hi, 0x7362u);
  }
}

// MMA / PL / LK / SC: see the module docstring; BAR: the per-tile block barrier.
// LK: 0 none (a PRMT of the key), 1 pair-table LDS lookups, 2 the register decode (prmt_decode4, no LDS).
// PL (planes): 0 none (a register LCG), 1 LDS.128 from the stage, 2 LDG.128 .ca (L1 hits after the first pass),
//   3 LDG.128 .nc no_allocate two tiles ahead into a register ring (from L2), 4 LDS.32 of plane t + 3 SHFL.
// SC (scales): 0 none, 1 absmax byte LDS.U8 + half2 table LDS, 2 both kb's bytes by one LDS.U16 a column + ALU
//   decode (as_half(code << 6), the x16 folded into the table).
// BAR: 1 the per-tile block barrier, 0 a warpgroup barrier, 3 two K tiles a wgmma group (8 x k16 a commit, the
// barrier every two tiles), 2 ping-pong -- the warpgroups' wgmma groups issued in
// turn (warpgroup w waits on named barrier 1 + w, which the other arrives at once it has issued its group), so one
// warpgroup dequantizes while the other's group runs (FlashAttention-3's warp scheduler barriers).
template <bool MMA, int PL, int LK, int SC, int BAR>
__global__ void __launch_bounds__(256, 1) probe(float* out, int iters, const uint4* __restrict__ gw) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 base = ((u32)__cvta_generic_to_shared(smem) + 1023u) & ~1023u;
  unsigned char* p = smem + (base - (u32)__cvta_generic_to_shared(smem));
  const u32 lut = base, s2 = base + 65536, st0 = base + 65536 + 1024;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  for (int i = tid; i < (65536 + 1024 + ROT * SB) / 4; i += 256) {
    u32 h = (u32)i * 2654435761u ^ (blockIdx.x * 40503u);
    h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    reinterpret_cast<u32*>(p)[i] = (h & 0x83FF83FFu) | 0x38003800u;  // halves in +-[0.5, 2)
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const u32 lane4 = 4u * (u32)lane;
  const int col = 16 * warp + g;
  u32 fa[4][4], fb[4][4];
#pragma unroll
  for (int j = 0; j < 4; j++)
#pragma unroll
    for (int r = 0; r < 4; r++) fa[j][r] = fb[j][r] = 0x3C003C00u ^ (u32)(tid * 7 + r);
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; i++) d[i] = 0.f;
  u32 salt = (u32)tid * 0x9E3779B9u;
  u32 ptab[8];
#pragma unroll
  for (int i = 0; i < 8; i++) ptab[i] = 0x3C383430u + 0x01010101u * (u32)(i * 3 + tid % 5);
  const uint4* gcta = gw + (long)blockIdx.x * ROT * 256;  // this CTA's ROT weight tiles of 4 KB in global memory
  uint4 ring[2][4];  // PL 3: the planes of tiles it + 1 and it + 2 (h, kb)
#pragma unroll
  for (int r = 0; r < 2; r++)
#pragma unroll
    for (int q = 0; q < 4; q++) ring[r][q] = make_uint4(0u, 0u, 0u, 0u);
  auto dequant = [&](int it, u32 (&fr)[4][4]) {
    const u32 st = st0 + (u32)((it % ROT) * SB);
    u32 ab[2];  // SC 2: absmax bytes (kb 0, 1) of columns col, col + 8
    if (SC == 2) {
#pragma unroll
      for (int h = 0; h < 2; h++) ab[h] = lds16(st + 16384 + 4096 + (u32)((col + 8 * h) * 2));
    }
#pragma unroll
    for (int kb = 0; kb < 2; kb++) {
      u32 kw[2], s2v[2];
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int c = col + 8 * h;
        const u32 widx = (u32)((c * 2 + kb) & 255);
        uint4 q = make_uint4(0u, 0u, 0u, 0u);
        if (PL == 1) q = lds128(st + 16384 + 16u * widx);
        if (PL == 2) q = ldg128_ca(gcta + (it % ROT) * 256 + widx);
        if (PL == 3) {  // consume the planes loaded two tiles ago, load tile it + 2's
          q = ring[it & 1][2 * h + kb];
          ring[it & 1][2 * h + kb] = ldg128_na(gcta + ((it + 2) % ROT) * 256 + widx);
        }
        if (PL == 5) {  // the planes of this tile were loaded one tile earlier (a register ring), the next tile's now
          q = ring[0][2 * h + kb];
          ring[0][2 * h + kb] = lds128(st0 + (u32)(((it + 1) % ROT) * SB) + 16384 + 16u * widx);
        }
        if (PL == 4) {  // lane t loads plane t, the 4 lanes of column c exchange them
          const u32 w = lds32(st + 16384 + 16u * widx + 4u * (u32)t);
          q.x = __shfl_sync(0xffffffffu, w, (lane & ~3) | 0);
          q.y = __shfl_sync(0xffffffffu, w, (lane & ~3) | 1);
          q.z = __shfl_sync(0xffffffffu, w, (lane & ~3) | 2);
          q.w = __shfl_sync(0xffffffffu, w, (lane & ~3) | 3);
        }
        if (LK == 2) {  // decode here: the 4 chunk pairs of block (c, kb) from its planes
          if (!PL) {
            salt = salt * 1664525u + 1013904223u;
            q = make_uint4(salt, salt ^ 0x5A5A5A5Au, salt * 3u, salt >> 3);
          }
          u32 v[4];
          prmt_decode4(q, 2 * t, ptab, v);
          const u32 sv = SC == 1 ? lds32(s2 + 4u * lds8(st + 16384 + 4096 + (u32)(c * 2 + kb)))
                         : SC == 2 ? prmt(ab[h] << 6, (ab[h] >> 2) & 0x3FC0u, kb ? 0x5454u : 0x1010u) & 0x3FC03FC0u : 0x3C003C00u;
#pragma unroll
          for (int cc = 0; cc < 4; cc++) fr[2 * kb + (cc >> 1)][2 * (cc & 1) + h] = hmul2(v[cc], sv);
          continue;
        }
        if (PL) {
          kw[h] = (((q.x >> (2 * t)) & 0x03030303u) | (((q.y >> (2 * t)) & 0x03030303u) << 2) |
                   (((q.z >> (2 * t)) & 0x03030303u) << 4) | (((q.w >> (2 * t)) & 0x03030303u) << 6));
        } else {
          salt = salt * 1664525u + 1013904223u;
          kw[h] = salt;
        }
        if (SC == 1) s2v[h] = lds32(s2 + 4u * lds8(st + 16384 + 4096 + (u32)(c * 2 + kb)));
        else if (SC == 2) s2v[h] = prmt(ab[h] << 6, (ab[h] >> 2) & 0x3FC0u, kb ? 0x5454u : 0x1010u) & 0x3FC03FC0u;
        else s2v[h] = 0x3C003C00u;
      }
      if (LK == 2) continue;
#pragma unroll
      for (int c = 0; c < 4; c++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const u32 v = LK ? lds32(lut + prmt(kw[h], lane4, 0x5504u | ((u32)c << 4))) : prmt(kw[h], lane4, 0x5504u | ((u32)c << 4)) & 0x3BFF3BFFu;
          fr[2 * kb + (c >> 1)][2 * (c & 1) + h] = hmul2(v, s2v[h]);
        }
    }
  };
  // PL 6: the dequantize software-pipelined over three tiles, so no shared-memory load is on the way from a tile's
  // wgmma to the next tile's fragments: the fragments of tile n (HMUL2 of pairs looked up one tile earlier), the
  // lookups of tile n + 1 (planes loaded one tile earlier), the planes and absmax bytes of tile n + 2.
  u32 praw[2][2][4], sring[2][2], abr[2];
  uint4 plr[2][2];
  auto ahead_lookups = [&](int n1) {  // lookups of tile n1 from plr / abr; planes of tile n1 + 1 into plr / abr
#pragma unroll
    for (int kb = 0; kb < 2; kb++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const uint4 q = plr[kb][h];
        const u32 kw = (((q.x >> (2 * t)) & 0x03030303u) | (((q.y >> (2 * t)) & 0x03030303u) << 2) |
                        (((q.z >> (2 * t)) & 0x03030303u) << 4) | (((q.w >> (2 * t)) & 0x03030303u) << 6));
        sring[kb][h] = prmt(abr[h] << 6, (abr[h] >> 2) & 0x3FC0u, kb ? 0x5454u : 0x1010u) & 0x3FC03FC0u;
#pragma unroll
        for (int c = 0; c < 4; c++) praw[kb][h][c] = lds32(lut + prmt(kw, lane4, 0x5504u | ((u32)c << 4)));
      }
    const u32 st = st0 + (u32)(((n1 + 1) % ROT) * SB);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      abr[h] = lds16(st + 16384 + 4096 + (u32)((col + 8 * h) * 2));
#pragma unroll
      for (int kb = 0; kb < 2; kb++) plr[kb][h] = lds128(st + 16384 + 16u * (u32)(((col + 8 * h) * 2 + kb) & 255));
    }
  };
  auto dequant_ahead = [&](int n, u32 (&fr)[4][4]) {
#pragma unroll
    for (int kb = 0; kb < 2; kb++)
#pragma unroll
      for (int c = 0; c < 4; c++)
#pragma unroll
        for (int h = 0; h < 2; h++) fr[2 * kb + (c >> 1)][2 * (c & 1) + h] = hmul2(praw[kb][h][c], sring[kb][h]);
    ahead_lookups(n + 1);
  };
  if (PL == 6) {  // prime: planes of tile 0, then lookups of tile 0 and planes of tile 1
#pragma unroll
    for (int h = 0; h < 2; h++) {
      abr[h] = lds16(st0 + 16384 + 4096 + (u32)((col + 8 * h) * 2));
#pragma unroll
      for (int kb = 0; kb < 2; kb++) plr[kb][h] = lds128(st0 + 16384 + 16u * (u32)(((col + 8 * h) * 2 + kb) & 255));
    }
    ahead_lookups(0);
  }
  if (PL == 5) {
#pragma unroll
    for (int q = 0; q < 4; q++) ring[0][q] = lds128(st0 + 16384 + 16u * (u32)(((col + 8 * (q >> 1)) * 2 + (q & 1)) & 255));
  }
  if (PL == 3) {  // the ring's first two tiles
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
      for (int q = 0; q < 4; q++) ring[(r + 1) & 1][q] = ldg128_na(gcta + ((r + 1) % ROT) * 256 + (u32)(((col + 8 * (q >> 1)) * 2 + (q & 1)) & 255));
  }
  const int wg = warp >> 2;
  if (BAR == 2 && wg == 1) asm volatile("bar.arrive 1, 256;\n" ::: "memory");  // warpgroup 0 issues first
  auto step = [&](int it, u32 (&cur)[4][4], u32 (&nxt)[4][4]) {
    if (BAR == 1) __syncthreads();
    else if (BAR == 0) asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
    else asm volatile("bar.sync %0, 256;\n" ::"r"(1 + wg) : "memory");
    if (MMA) {
      const u32 sb = st0 + (u32)((it % ROT) * SB);
      unsigned long long bd[4];
#pragma unroll
      for (int j = 0; j < 4; j++) bd[j] = sdesc(sb + 32u * j);
      tile(d, cur, bd);
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      if (BAR == 2) asm volatile("bar.arrive %0, 256;\n" ::"r"(2 - wg) : "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#pragma unroll
      for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
    } else {
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) d[4 * j + r] += __uint_as_float(cur[j][r] & 0x00010001u);
    }
    keep(nxt);
    if (PL == 6) dequant_ahead(it + 1, nxt);
    else dequant(it + 1, nxt);
  };
  // BAR 3: two tiles a group -- fragment sets (fa, fb) and (fc, fd) in turn
  u32 fc[4][4], fd[4][4];
#pragma unroll
  for (int j = 0; j < 4; j++)
#pragma unroll
    for (int r = 0; r < 4; r++) fc[j][r] = fd[j][r] = fa[j][r];
  auto step2 = [&](int it, u32 (&c0)[4][4], u32 (&c1)[4][4], u32 (&n0)[4][4], u32 (&n1)[4][4]) {
    __syncthreads();
    if (MMA) {
      unsigned long long b0[4], b1[4];
#pragma unroll
      for (int j = 0; j < 4; j++) {
        b0[j] = sdesc(st0 + (u32)((it % ROT) * SB) + 32u * j);
        b1[j] = sdesc(st0 + (u32)(((it + 1) % ROT) * SB) + 32u * j);
      }
      tile(d, c0, b0);
      tile(d, c1, b1);
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#pragma unroll
      for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
    }
    keep(n0);
    keep(n1);
    dequant(it + 2, n0);
    dequant(it + 3, n1);
  };
  if (PL == 6) dequant_ahead(0, fa);
  else dequant(0, fa);
  if (BAR == 3) {
    dequant(1, fb);
    for (int it = 0; it < iters; it += 4) {
      step2(it, fa, fb, fc, fd);
      step2(it + 2, fc, fd, fa, fb);
    }
  } else {
    for (int it = 0; it < iters; it += 2) {
      step(it, fa, fb);
      step(it + 1, fb, fa);
    }
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  if (BAR == 2 && wg == 0) asm volatile("bar.sync 1, 256;\n" ::: "memory");  // warpgroup 1's last arrival
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 64; i++) s += d[i];
  out[blockIdx.x * 256 + tid] = s;
}
'''

# (label, MMA, PL, LK, SC, BAR)
CASES = [
    ("MMA only", 1, 0, 0, 0, 1),
    ("dequantize only (planes, lookups, scales)", 0, 1, 1, 1, 1),
    ("MMA + dequantize (the kernel's loop)", 1, 1, 1, 1, 1),
    ("MMA + dequantize, warpgroup barrier only", 1, 1, 1, 1, 0),
    ("MMA + lookups + scales (planes from registers)", 1, 0, 1, 1, 1),
    ("MMA + planes + scales (no lookup LDS)", 1, 1, 0, 1, 1),
    ("MMA + planes + lookups (scales from registers)", 1, 1, 1, 0, 1),
    ("MMA + no shared-memory loads (ALU only)", 1, 0, 0, 0, 1),
    ("lookups + scales only (no MMA, no planes)", 0, 0, 1, 1, 1),
    ("ALU only (no MMA, no loads)", 0, 0, 0, 0, 1),
    ("MMA + planes LDS.128 + lookups + scales by LDS.U16 + ALU", 1, 1, 1, 2, 1),
    ("MMA + planes LDG .ca (L1 hits) + lookups + scales LDS.U16 + ALU", 1, 2, 1, 2, 1),
    ("MMA + planes LDG no_allocate, 2 tiles ahead + lookups + scales LDS.U16 + ALU", 1, 3, 1, 2, 1),
    ("MMA + planes LDS.32 + 3 SHFL + lookups + scales LDS.U16 + ALU", 1, 4, 1, 2, 1),
    ("MMA + planes LDG no_allocate + scales LDS.U16 + ALU (no lookups)", 1, 3, 0, 2, 1),
    ("MMA + planes LDS.128 one tile ahead + lookups + scales LDS.U16 + ALU", 1, 5, 1, 2, 1),
    ("MMA + dequantize pipelined: planes 2 tiles, lookups 1 tile ahead (no LDS before the next wgmma)", 1, 6, 1, 2, 1),
    ("the same, warpgroup barrier only", 1, 6, 1, 2, 0),
    ("dequantize pipelined only (no MMA)", 0, 6, 1, 2, 1),
    ("MMA + planes LDS.128 + register decode + scales LDS (prmt33's form)", 1, 1, 2, 1, 1),
    ("MMA + planes LDS.128 + register decode + scales LDS.U16 + ALU", 1, 1, 2, 2, 1),
    ("register decode + planes + scales LDS.U16, no MMA", 0, 1, 2, 2, 1),
    ("MMA + register decode only (planes from registers, no LDS)", 1, 0, 2, 0, 1),
    ("MMA only, ping-pong", 1, 0, 0, 0, 2),
    ("MMA + dequantize, ping-pong", 1, 1, 1, 1, 2),
    ("MMA + dequantize pipelined, ping-pong", 1, 6, 1, 2, 2),
    ("MMA + lookups + scales (planes from registers), ping-pong", 1, 0, 1, 1, 2),
    ("MMA only, two tiles a wgmma group", 1, 0, 0, 0, 3),
    ("MMA + dequantize, two tiles a wgmma group", 1, 1, 1, 1, 3),
]


def name(c):
    b = lambda x: "true" if x else "false"  # noqa: E731
    return f"probe<{b(c[1])}, {int(c[2])}, {int(c[3])}, {int(c[4])}, {int(c[5])}>"


def main():
    only = os.environ.get("ONLY")  # a substring of the variants to run (the compile of all takes ~2 minutes)
    cases = [c for c in CASES if not only or only in c[0]]
    names = [name(c) for c in cases]
    mod, lowered, log = build(SRC, "wgmma_lds_probe.cu", names, ("-Xptxas=-v",))
    if "C7513" in log or "spill" in log.replace("0 bytes spill", ""):
        print(log)
    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    clk = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrClockRate, 0) * 1e3
    out = cp.zeros(sms * 256, cp.float32)
    gw = (cp.random.randint(0, 2**31, size=sms * 6 * 1024, dtype=cp.int64).astype(cp.uint32))  # 6 x 4 KB a CTA
    iters = int(os.environ.get("ITERS", "4000"))
    smem = 65536 + 1024 + 6 * (16384 + 4096 + 1024) + 1024
    print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {sms} SMs, nominal clock {clk / 1e9:.2f} GHz; "
          f"one 256-thread CTA per SM, {iters} K tiles each (TOK = 128: 1M FMA a tile, 512 clk at 2048 FMA/clk)")
    print("| variant | ns / K tile | clk / K tile (nominal) |\n|---|---:|---:|")
    for c in cases:
        fn = mod.get_function(lowered[name(c)])
        fn.max_dynamic_shared_size_bytes = smem
        args = (out, cp.int32(iters), gw)
        fn((sms,), (256,), args, shared_mem=smem)
        cp.cuda.runtime.deviceSynchronize()
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        for _ in range(5):
            fn((sms,), (256,), args, shared_mem=smem)
        e1.record()
        e1.synchronize()
        t = cp.cuda.get_elapsed_time(e0, e1) / 5 * 1e-3
        print(f"| {c[0]} | {t / iters * 1e9:.0f} | {t / iters * clk:.0f} |")


if __name__ == "__main__":
    main()
