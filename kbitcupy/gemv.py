"""Launcher for the decode GEMV kernel (cuda_src/kbit_gemv.cu), M = 1..32 (k = 5: 1..16)."""
from __future__ import annotations

import functools
import os

import numpy as np

from ._checks import check_kernel_call, check_rows
from . import _pdl
from ._compile import GEMV_Q2, Family, register
from .dispatch import GEMV_MAX_M, GEMV_TS_MAX_GROUPS, gemv_max_rows, gemv_token_split_shape, gpu_family
from .quantize import CTYPE
from .reference import bfloat16

MAX_M = GEMV_MAX_M  # rows in the token tiles of one CTA (the token split takes more: max_rows)
DEPTHS = (2,)  # register ring depth (4 measured slower on H200, 2026-11-21)
TILES = (1, 2, 4)  # token tiles of 8 per MMA (M <= 8, 16, 32)

# The most rows of A the GEMV takes: max_rows(k, N=None, tiled=True) (kbitcupy.dispatch, importable without CuPy)
max_rows = gemv_max_rows

DUALS = (False, True)  # one or two mma accumulator chains
_VARIANTS = (("uint8", True), ("float32", False), ("uint8", False))
# The grouped GEMV with the default codebook compiled in (CBD; in safe PDL its pair table built
# before the wait): H100, 2026-11-25 (eighteenth session, fix20), same tree with and without it,
# 1..16 tokens: k = 5 faster (10 experts TOTAL 19.86 -> 19.30 us at 1 token, 8 experts equal),
# k = 2 / 4 slower in every cell (+0.2..+0.5 us per kernel, plain launches too; not understood).
GROUPED_CBD_KS = (5,)
# The several-wave grouped plans' 4-warp blocks run kbit_gemv_grouped_slw (96 registers, five blocks
# per SM) at k in SLW_KS; k = 5 measured slower capped (pfa27: down 242 experts 126.2 -> 128.0 us), k = 3's
# SwiGLU instantiation spills 4 bytes at 96.
SLW_KS = (2, 4)
# Warps per SM of the slices kernels at their 128-register cap (64K registers), and of the 96-register
# kbit_gemv_grouped_slw (65536 / (96 x 32) = 21: two 10-warp blocks, five 4-warp ones).
SL_WARPS_PER_SM = 16
SLW_WARPS_PER_SM = 20


def _slices_one_wave(n_slots: int, gx: int, gpb: int, warps: int, sms: int, per_sm: int = SL_WARPS_PER_SM) -> bool:
    """Whether n_slots x gx slice blocks of gpb x warps warps fit the SMs at once (per_sm warps an SM:
    the 128-register kernel's, or SLW_WARPS_PER_SM for the 96-register one)."""
    return max(1, n_slots) * gx <= max(1, per_sm // (gpb * warps)) * sms


def _is_slw(k: int, tiles: int, gpb: int, warps: int, n_slots: int, gx: int, sms: int) -> bool:
    """Whether a slices plan (gpb groups of warps warps, gx blocks a slot) runs kbit_gemv_grouped_slw (96
    registers, the pair table) at k in SLW_KS (grouped_kernel_key): where the 128-register kernel's blocks
    do not fit one wave -- several waves of 4-warp blocks, or blocks that fit one wave only at 96 registers
    (10 experts' down, grouped_plan)."""
    if tiles != 1 or k not in SLW_KS or _slices_one_wave(n_slots, gx, gpb, warps, sms):
        return False
    return gpb * warps <= 4 or _slices_one_wave(n_slots, gx, gpb, warps, sms, SLW_WARPS_PER_SM)


def _depth3(k: int, K: int, M: int, c8: bool, dual: bool, late: bool) -> bool:
    """A register ring of 3 steps: at M = 1 on the 8-column plans of down (k = 3 / 4) and O (k = 3), where a warp
    has 2.5 steps (down) or the step's compute is long (k = 3).  H100, 2026-11-27 (thirty-first session, run38.sh
    d3, two passes): k = 4 down 4.46 / 4.49 -> 4.36 / 4.37 us, k = 3 down 4.64 -> 4.45, O 3.96 -> 3.85; slower at M = 2
    / 4 (down k = 4 4.67 -> 5.00), at k = 2 / 5 and on k = 4 O (+0.02..+0.1).  Instantiated for that plan only
    (_instances)."""
    return M == 1 and c8 and dual and late and ((k == 4 and K >= 5120) or (k == 3 and K >= 4096))


def _instances():
    inst = {}
    b = lambda x: "true" if x else "false"  # noqa: E731
    for k in (2, 3, 4, 5):
        for t in ("float16", "bfloat16"):
            for a, tiled in _VARIANTS:
                for mt in TILES:
                    if 8 * mt > max_rows(k):
                        continue
                    for d in DEPTHS:
                        for du in DUALS if mt < 4 else (False,):  # (the second chain spills at four tiles)
                            for late in ((False, True) if mt == 1 else (False,)):
                                # slices (several column groups per block, plan's gpb > 1): where
                                # the plan uses them, k = 5 at one token tile with one chain
                                # (and at two token tiles, k <= 4: gate/up / Q / linear value's plans)
                                for sl in ((False, True) if ((k == 5 and mt == 1) or (k <= 4 and (mt == 2 or (mt == 4 and tiled)))) and not du
                                           else (False,)):
                                    # cbd: the default codebook's levels compiled in (the runtime
                                    # format only: tiled, E4M4)
                                    for cbd in ((False, True) if tiled else (False,)):
                                        # c8: 8-column groups (plan's c8; the runtime format, one
                                        # token tile, one group per block)
                                        for c8 in ((False, True) if mt == 1 and not sl and tiled else (False,)):
                                            inst[(k, t, a, tiled, d, mt, du, late, sl, cbd, c8)] = (
                                                f"kbit_gemv<{k}, {CTYPE[t]}, {CTYPE[a]}, {b(tiled)}, {d}, {mt}, "
                                                f"{b(du)}, {b(late)}"
                                                + (f", {b(sl)}, {b(cbd)}, true>" if c8 else
                                                   f", {b(sl)}, true>" if cbd else ", true>" if sl else ">"))
    # the depth-3 ring of _depth3's plans (one token tile, two chains, late fill, 8-column groups, runtime format)
    for k in (3, 4):
        for t in ("float16", "bfloat16"):
            for cbd in (False, True):
                inst[(k, t, "uint8", True, 3, 1, True, True, False, cbd, True)] = (
                    f"kbit_gemv<{k}, {CTYPE[t]}, unsigned char, true, 3, 1, true, true, false, {b(cbd)}, true>")
    # the token split (plan's ts): one token tile, the runtime format, late False, two chains but at k = 5
    for k in (2, 3, 4, 5):
        for t in ("float16", "bfloat16"):
            for cbd in (False, True):
                for c8 in (False, True):
                    inst[(k, t, "uint8", True, 2, 1, k != 5, False, False, cbd, c8, "ts")] = (
                        f"kbit_gemv<{k}, {CTYPE[t]}, unsigned char, true, 2, 1, {b(k != 5)}, false, false, {b(cbd)}, "
                        f"{b(c8)}, true>")
    for k in (2, 3, 4, 5):
        for t in ("float16", "bfloat16"):
            for mt in (1, 2):
                # cbd (last in each key): the default codebook compiled in (the bank's default_codebook),
                # where it measured faster (GROUPED_CBD_KS)
                for cbd in ((False, True) if k in GROUPED_CBD_KS else (False,)):
                    tail = ", true>" if cbd else ">"
                    inst[("grouped", k, t, mt, cbd)] = f"kbit_gemv_grouped<{k}, {CTYPE[t]}, {mt}, 0{tail}"
                    # the MoE steps fused into the A staging (1: row gather, 2: SwiGLU), kbitcupy.moe
                    for am in (1, 2):
                        inst[("grouped_fused", k, t, mt, am, cbd)] = (
                            f"kbit_gemv_grouped<{k}, {CTYPE[t]}, {mt}, {am}{tail}")
                    # slices (grouped_plan's gpb): column groups side by side instead of the group loop
                    for am in (0, 1, 2):
                        inst[("grouped_sl", k, t, mt, am, cbd)] = f"kbit_gemv_grouped_sl<{k}, {CTYPE[t]}, {mt}, {am}{tail}"
                        # 96 registers: the several-wave plans' 4-warp blocks (grouped_gemv; one token tile)
                        if k in SLW_KS and mt == 1:
                            inst[("grouped_slw", k, t, mt, am, cbd)] = (
                                f"kbit_gemv_grouped_slw<{k}, {CTYPE[t]}, {mt}, {am}{tail}")
    # each grouped kernel's LB instantiation: the one the wait-first launch runs (grouped_gemv)
    for key, name in list(inst.items()):
        if key[0] in GROUPED_KINDS:
            inst[lb_key(key)] = name[:-1].removesuffix(", true") + f", {b(key[-1])}, true>"
    return inst


# The grouped GEMV's kernel kinds (family keys (kind, k, dtype, ..., cbd)); kind + "_lb" is the same kernel's
# LB instantiation (kbit_gemv_grouped's LB: the wait and the ids read inside the first pass, after its
# expert-independent set-up), which the wait-first launch runs.
GROUPED_KINDS = ("grouped", "grouped_fused", "grouped_sl", "grouped_slw")


def lb_key(key: tuple) -> tuple:
    """The family key of grouped kernel ``key``'s LB instantiation."""
    return (key[0] + "_lb",) + tuple(key[1:])


# KBIT_GEMV_OPTS: extra NVRTC options, an experiment hook (e.g. -DKBIT_GEMV_STAGE_ROWS=1, see the .cu).
GEMV = register("gemv", Family("kbit_gemv.cu", _instances(),
                               group_of=lambda key: key[:3] if str(key[0]).startswith("grouped") else key[:2],
                               options=tuple(os.environ.get("KBIT_GEMV_OPTS", "").split())))

# Hopper has 132 SMs; the plan aims for enough warps to keep ~all weight bytes in flight.
TARGET_WARPS = 132 * 24


def lut_bytes(k: int) -> int:
    """Bytes of the replicated pair table (PairLut<K> in cuda_src/kbit_pairlut.cuh): 4**k
    entries x 32 copies (k = 5: 16) x 4 bytes.  Every kernel that builds it plans with this."""
    from ._compile import K5_LOG2_COPIES

    copies = 32 if k <= 4 else 1 << K5_LOG2_COPIES
    return (1 << (2 * k)) * copies * 4


# The k = 2 quad table (QuadLut in cuda_src/kbit_pairlut.cuh): 256 entries x 16 copies x 8 bytes.
QUAD_LUT_BYTES = 256 * 16 * 8


def layout_bytes(k: int, quad: bool) -> int:
    """Bytes of LutLayout<K, quad> (cuda_src/kbit_pairlut.cuh): k = 2's quad table where quad, else the pair table."""
    return QUAD_LUT_BYTES if k == 2 and quad else lut_bytes(k)


def table_bytes(k: int, tiles: int = 1, slw: bool = False) -> int:
    """Bytes of the table a decode GEMV family kernel builds (LutLayout, gemv_quad in cuda_src/kbit_gemv.cu): at
    k = 2 with one token tile the quad table (QUAD_LUT_BYTES), but not in the several-wave grouped kernel (slw:
    kbit_gemv_grouped_slw); else the pair table (lut_bytes)."""
    return layout_bytes(k, tiles == 1 and not slw and bool(GEMV_Q2))


def smem_bytes(k: int, rows: int, ks: int, warps: int, tiles: int, itemsize: int = 2, slw: bool = False) -> int:
    """Dynamic shared memory of one GEMV block: the table (table_bytes), `rows` staged rows of A (K
    padded to ks steps of 128), the warps' partial sums, the codebook."""
    return table_bytes(k, tiles, slw) + rows * ks * 128 * itemsize + warps * 128 * tiles * 4 + 32 * 4


def plan(N: int, K: int, M: int, k: int, itemsize: int = 2, warps: int | None = None, depth: int | None = None,
         dual: bool | None = None, late: bool | None = None, gpb: int | None = None, pdl: bool = False,
         c8: bool | None = None, tiled: bool = True, ts: bool | None = None):
    """(warps per group, register ring depth, dynamic smem bytes, grid, token tiles,
    two accumulator chains, ring filled once step 0 landed, groups per block, 8-column
    groups, token CTAs per group).  A block is warps x 32 by gpb threads: gpb column groups
    side by side over one pair table.  c8 (M <= 4, the tiled layout): groups of 8 columns,
    steps of 256 K (the kernel's C8); tiled: the weight's layout.  ts (token split, the tiled
    layout): each group's rows on ceil(M / R) CTAs (grid.y) of R = 4 (c8) or 8 rows, the plan
    that of R rows (the kernel's TS)."""
    ty = 1
    if ts is None:
        # Few column groups (KV: 32 on 132 SMs) from M = 5: the token split, 8-column groups of 4 rows on 8 warps at
        # M <= 8, else 8 rows a CTA.  H100, 2026-11-27 (thirty-fifth session, run42.sh ts, two passes): KV k = 4
        # M = 5 / 8 2.47 / 2.70 -> 2.19 / 2.22 us, M = 9 / 12 / 16 3.17 / 3.34 / 3.76 -> 2.68 / 2.67 / 2.70 (k = 2 / 3 /
        # 5 alike);
        # linear key and O (128 groups) slower every way.
        block_given = any(v is not None for v in (warps, depth, dual, late, gpb, c8))
        ts = M >= 5 and gemv_token_split_shape(N, tiled) and not block_given
        if ts:
            c8 = M <= 8
            warps = min(8, -(-K // 256)) if c8 else None
    if ts:
        if not tiled or (gpb or 1) != 1:
            raise ValueError("gemv plan: the token split (ts) needs the tiled layout and one group per block")
        c8 = bool(c8)
        if warps is None and not c8 and M > MAX_M:
            # past 32 rows (more than 128 CTAs for KV) 8 warps, two CTAs an SM: H200, 2026-11-29 (forty-sixth session,
            # run53.sh probe / ts8, KV k = 4): M = 48 / 64 / 96 5.67 / 6.10 / 9.07 us with 16 warps (one CTA an SM:
            # waves) -> 3.92 / 4.13 / 5.34 (the wgmma kernel 5.69 / 5.72 / 6.35); 4 warps no better (5.25 at 96)
            warps = min(8, -(-K // 128))
        R = 4 if c8 else 8
        ty, M, gpb = -(-M // R), min(M, R), 1
        dual, late, depth = k != 5, False, 2  # (the instantiated form: _instances)
    if M > MAX_M:  # (only the token split's CTAs take more rows than their token tiles)
        raise ValueError(f"gemv plan: M = {M} rows need the token split (the tiled layout, at most "
                         f"{GEMV_TS_MAX_GROUPS} 16-column groups, no block override); a CTA takes at most {MAX_M}")
    tiles = 1 if M <= 8 else 2 if M <= 16 else 4
    if c8 is None:
        # H100, 2026-11-25 (nineteenth session, run22 c8ab22, safe PDL, against 16-column groups):
        # few groups (KV's 32: on 32 of 132 SMs) at every k and M <= 4 (k = 4 M = 1 2.29 -> 1.96 us,
        # M = 4 2.55 -> 2.35; k = 5 M = 1 2.89 -> 2.22, M = 4 2.92 -> 2.49, c8ab22b); at M = 1 gate/up's 320 groups at k = 4 (4.80 -> 4.51: an SM's share
        # 2.5 groups instead of 3) and the 128-group shapes with K >= 4096 at k = 3 / 4 or any K at
        # k = 3 (O k = 4 4.13 -> 3.94, down 4.56 -> 4.50, k = 3 O 4.14 -> 3.99, down 4.76 -> 4.61,
        # linear key 2.89 -> 2.76).  Slower: Q / linear value (256 groups, two 8-warp blocks per SM
        # already), k = 2 but KV, and M = 4 but KV (4-warp blocks: the pair table built by fewer
        # threads, less occupancy), k = 5 but KV (its slices: gate/up 6.79 -> 9.23 us).
        # (gate/up at k = 3: on the H200 c8 equals the 16-column groups with the late ring fill at M = 1 and loses at
        # M = 2, 4.55 vs 4.37 us; run58.sh k3m2 -- the late fill below is what gains there.)
        g16 = -(-N // 16)
        c8 = (tiled and M <= 4 and warps is None and gpb is None
              and (g16 <= 64 or (M == 1 and ((g16 > 2 * 132 and k == 4)
                                             or (g16 <= 132 and (k == 3 or (k == 4 and K >= 4096)))))))
    c8 = bool(c8)
    if c8 and not (M <= 4 and tiled and (gpb or 1) == 1):
        raise ValueError("gemv plan: 8-column groups (c8) need M <= 4, the tiled layout and one group per block")
    groups = -(-N // (8 if c8 else 16))
    ks = -(-K // (256 if c8 else 128))  # steps
    warps_given = warps is not None
    if warps is None and c8:
        # an SM's share of the half-width groups resident at once (~80 registers a thread: three
        # 256-thread blocks per SM, six 128-thread ones)
        # M = 4 with at most one group per SM (KV): 16 warps though K has fewer steps -- the idle warps stage A and
        # build the table.  H100, 2026-11-27 (thirty-third session, run40.sh kv4, two passes): KV M = 4 k = 2 / 3 / 4
        # 2.20 / 2.27 / 2.22 -> 2.13 / 2.23 / 2.17 us; at M = 2 mixed (k = 2 faster, k = 4 slower), so not there.
        share = -(-groups // 132)
        warps = 16 if M == 4 and share <= 1 else min(16 if share <= 1 else 8 if share <= 2 else 4, ks)
    if warps is None:
        # Measured on H200 (profiling/results, 2026-11-21): 8 warps per block for the
        # wide shapes, 16 where one 512-thread block per SM (~80-96 registers) covers
        # every column group; ring depth 2 everywhere.
        # Two token tiles on <= 132 groups with <= 16 steps (linear key: one step a warp at 16 warps): 8 warps, two
        # steps each.  H200, 2026-11-29 (fifty-first session, run58.sh knobs2, two passes): linear key M = 16 k = 2 / 4
        # 3.65 / 3.84 -> 3.49 / 3.67 us, M = 12 k = 4 3.64 -> 3.53 (k = 2 -2 %); at one tile 8 warps were slower there,
        # and on down / O (40 / 32 steps) 8 warps +2..+4 % / -1 %.
        warps = min(8 if groups > 132 or (tiles == 2 and ks <= 16) else 16, ks)
        # k = 5 (~110-120 registers) fits only two 256-thread blocks per SM, a wave of
        # 264 column groups; wider shapes take 128-thread blocks where three of them fit
        # the shared memory (H200, 2026-11-22, gate/up: M = 1 8.95 vs 9.90 us, M = 2
        # 9.36 vs 10.36; at M = 4 the staged A leaves two: 13.5 vs 10.5)
        if k == 5 and groups > 2 * 132 and 3 * smem_bytes(k, M, ks, 4, tiles, itemsize) <= 227 * 1024:
            warps = min(4, ks)
    depth_given = depth is not None
    depth = 2 if depth is None else int(depth)  # (other depths: probes only, profiling/gemv_ab.py; 3: below)
    if dual is None:
        # H200, 2026-11-22: a second accumulator chain wins where a 512-thread block has
        # the SM to itself anyway (k = 2, 3: 3-6 %); its registers would cost the
        # 256-thread blocks of the wide shapes a third block per SM.  k = 5 (126 registers
        # with it): 0-5 % slower with it, so one chain (2026-11-22).
        # H100, 2026-11-25 (eighteenth session, safe PDL, plans21 / dual21 / plans22, M = 1..4): also
        # at k = 2 / 3 where two 256-thread blocks per SM hold every group (Q / linear value, 256
        # groups: k = 2 M = 1 3.82 -> 3.31 us, M = 4 4.52 -> 3.78; k = 3 -0.03; k = 4 equal); and at
        # k = 2 not in the 512-thread blocks (O M = 1 / 4 3.55 -> 3.50 / 4.04 -> 3.85, down M = 4
        # 4.53 -> 4.45, KV equal; replicated).
        if c8:  # (c8ab22: k = 2 gate/up 4.41 -> 4.15 us, Q 4.14 -> 3.77; k = 3 / 4 equal or faster)
            dual = k != 5
        elif k == 2 and tiles == 1:
            # With the quad table (GEMV_Q2) also in the 512-thread blocks where a warp has two or more steps:
            # H100, 2026-11-27 (thirty-first session, run38.sh dual, two passes): down M = 1 / 2 / 4 3.76 / 3.90 /
            # 4.39 -> 3.74 / 3.85 / 4.33 us, O 3.28 / 3.40 / 3.85 -> 3.23 / 3.33 / 3.71; linear key (one step a
            # warp) 2.43 -> 2.52, slower.
            dual = (warps <= 8 and groups <= 2 * 132) or (warps > 8 and ks > warps and bool(GEMV_Q2))
        else:
            dual = k != 5 and (warps > 8 or (k == 3 and tiles == 1 and groups <= 2 * 132))
        # four token tiles (M = 17..32): the second chain spills at the kernel's 128-register cap
        dual = dual and tiles < 4
    if late is None and c8:
        late = ks > warps  # (c8ab22: k = 4 gate/up 4.68 -> 4.51 us, down without it 4.54 -> 5.61)
    if late is None:
        # H200, 2026-11-22: 3-5 % faster where a warp has two or more steps, unless its
        # extra registers cost the 256-thread blocks their third block per SM (k = 5
        # has two either way)
        # k = 2 as well (H100, 2026-11-25, plans22: gate/up M = 1 4.25 -> 4.13 us; k = 3 / 4 slower)
        # and at M <= 4 whatever the blocks per SM: H200, 2026-11-29 (fifty-first session, run58.sh knobs / k3m2, two /
        # three passes): gate/up k = 4 M = 2 4.63 / 4.66 -> 4.41 / 4.41 us, M = 4 4.80 / 4.78 -> 4.61 / 4.61; k = 3
        # M = 1 4.42-4.44 -> 4.22-4.25, M = 2 4.50-4.52 -> 4.37-4.38, M = 4 -0.6 / -1.9 %.  Not at M = 8 (5.53 -> 5.65).
        late = ks > warps and (warps > 8 or groups <= 2 * 132 or k in (2, 5) or M <= 4)
    late = bool(late) and tiles == 1
    if not depth_given and _depth3(k, K, M, c8, dual, late):
        depth = 3
    if gpb is None and c8:
        gpb = 1
    if gpb is None:
        # k = 5, where a block's 64 KB pair table costs about what its group's weights take to
        # stream (gate/up M = 1: 1.5 of 9.1 us, profiling/gemv_stages.py): an SM's share of groups
        # side by side in one block over one table and one staged A.  H200, 2026-11-25
        # (profiling/gpb_ab10.sh): gate/up (320 groups) 3 x 4 warps 9.12 -> 8.17 us at M = 1,
        # 10.63 -> 8.28 at M = 4; Q / linear value (256) 2 x 8 warps 6.82 -> 6.58, 7.13 -> 6.61;
        # k = 4 (a 32 KB table) slower both ways (gate/up 6.06 -> 6.67, Q 4.90 -> 5.14).  Launched
        # with PDL at M <= 2, where the table build overlaps the previous kernel anyway, one group
        # per block stays faster (gate/up 7.05 vs 7.25 us, Q 5.58 vs 5.83 at M = 1; lowm-tune / k5-gpb).
        share = -(-groups // 132)
        gpb = share if (k == 5 and tiles == 1 and 2 <= share <= 3 and not warps_given
                        and not (pdl and M <= 2)) else 1
        # Two token tiles (M = 9..16, k <= 4) on the wide shapes: a block stages all of A (64 KB at K = 2048) for its
        # 16 columns, so groups side by side share it and the table -- 2 x 8 warps (Q / linear value: 256 groups), 3 x
        # 4 (gate/up: 640).  H200, 2026-11-27 (thirty-fifth session, run42.sh sl2, two passes): k = 4 M = 16 gate/up
        # 10.56 -> 6.66 us (the stream ~7.8), Q 6.27 -> 5.61, M = 9 gate/up 8.75 -> 5.94, Q 5.22 -> 4.93; k = 2 alike;
        # the 128-group shapes (down, O) 20-30 % slower.
        # Four token tiles (M = 17..32) the same way (H200, 2026-11-29, run52.sh mt4: k = 4 M = 32 gate/up 9.01 us, Q
        # 8.33, against the streaming GEMV / wgmma kernel's 9.68 / 8.49), the tiled layout only (the flat layout's
        # slices spill at the 128-register cap there).
        if tiles >= 2 and k <= 4 and share >= 2 and not warps_given and not dual and (tiled or tiles == 2):
            gpb = 2 if share <= 2 else 3
        if gpb > 1:
            warps = min(8 if gpb == 2 else 4, ks)
    if tiles == 4 and gpb == 1 and not warps_given:
        warps = min(warps, 8)  # (the kernel's 256-thread bound at four tiles, one group a block: KBIT_GEMV_BOUNDS)
    gpb = int(gpb)
    if not 1 <= gpb or warps * gpb > 16:
        raise ValueError(f"gemv plan: {gpb} groups of {warps} warps exceed the kernel's 512 threads")
    if tiles == 4 and ((gpb == 1 and warps > 8) or (gpb > 1 and not tiled) or dual):
        raise ValueError("gemv plan: four token tiles (M = 17..32) take one accumulator chain and at most 8 warps a "
                         "block, or column groups side by side on the tiled layout (the instantiated forms)")
    ks128 = 2 * ks if c8 else ks  # the staged A rows, in steps of 128
    return (warps, depth, smem_bytes(k, M, ks128, warps * gpb, tiles, itemsize), -(-groups // gpb), tiles, bool(dual),
            late, gpb, c8, ty)


def reads(qw) -> bool:
    """Whether the GEMV has an instantiation for the weight's absmax format (E4M4 tiled or flat, float32 flat)."""
    return (qw.absmax.dtype.name, qw.layout == "tiled") in _VARIANTS


@functools.lru_cache(maxsize=4096)
def fits(N: int, K: int, M: int, k: int, device_id: int, tiled: bool = True) -> bool:
    """Whether the GEMV runs M rows at bit width k (max_rows) and its shared memory (pair table + staged A) fits
    this device."""
    return 1 <= M <= max_rows(k, N, tiled) and plan(N, K, M, k, tiled=tiled)[2] <= _smem_limit(device_id)


def _smem_limit(device_id: int) -> int:
    """Opt-in shared memory per block of the device."""
    import cupy as cp

    return cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, device_id)


_LAUNCH: dict = {}
# The dense GEMV's blocks an SM capped at the even share (resident_cap_smem); KBITCUPY_GEMV_RESIDENT_CAP=0 (an A/B
# hook) launches them with the plan's shared memory only.
RESIDENT_CAP = os.environ.get("KBITCUPY_GEMV_RESIDENT_CAP", "1") != "0"


def resident_cap_smem(smem: int, blocks: int, per_sm: int, info: dict) -> int:
    """The dynamic shared memory that lets at most ceil(blocks / SMs) of a one-wave grid's blocks share an SM, given
    per_sm, the blocks an SM holds at smem (CUDA occupancy).

    The block scheduler places a programmatic dependent's blocks wherever the previous grid has left room, so where
    registers and shared memory let more blocks share an SM than an even spread needs (256 blocks of 8 warps at <= 80
    registers: three an SM), some SMs ran three blocks and the grid took their time: H200, 2026-11-28 (run46.sh ab2),
    Q k = 4 M = 1 3.54 us at 82 registers (two an SM) against 4.21 at 76, O 3.54 / 4.33, Q k = 2 2.97 / 3.38; with the
    cap (ab3) 3.5 / 3.5 / 3.0 at the fewer registers.  The padding (unused) makes the blocks an SM's shared memory
    holds the even share.  info: gemm.device_info."""
    cap = -(-blocks // info["sms"])
    if cap < 2 or per_sm <= cap:  # (at most one block an SM spreads by itself; padded, KV / linear key were slower)
        return smem
    padded = (info["smem_sm"] // (cap + 1) - info["smem_reserved"]) // 16 * 16 + 16
    return padded if padded <= info["smem_block"] else smem


def capped_smem(fn, smem: int, blocks: int, threads: int, dev: int) -> int:
    """The dynamic shared memory to launch `blocks` blocks of fn with: smem, padded by resident_cap_smem where
    RESIDENT_CAP; fn's max_dynamic_shared_size_bytes raised to it (first to smem: the occupancy query of more than
    the attribute allows reads 0)."""
    if fn.max_dynamic_shared_size_bytes < smem:
        fn.max_dynamic_shared_size_bytes = smem
    if RESIDENT_CAP:
        from .gemm import device_info

        smem = resident_cap_smem(smem, blocks, occupancy(fn, threads, smem), device_info(dev))
        if fn.max_dynamic_shared_size_bytes < smem:
            fn.max_dynamic_shared_size_bytes = smem
    return smem


def occupancy(fn, threads: int, smem: int) -> int:
    """Blocks of fn an SM holds at once (CUDA occupancy: registers, shared memory, threads); 0 where smem is more
    than fn's max_dynamic_shared_size_bytes allows."""
    from cupy.cuda import driver

    return int(driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, smem))


def safe_prefetch_steps(N: int, K: int, M: int, depth: int, family: str | None = None) -> int:
    """Ring steps the decode GEMV prefetches into L2 before its wait in safe PDL (the kernel's
    pdl argument PDL_SAFE: depth, PDL_SAFE_PF1: one).  The whole ring's prefetch delays the
    previous kernel's own loads (the graph's kernels run back to back) more than it saves,
    except on gate/up-wide shapes (>= 320 groups of 16 columns: 2.4 or more per SM).  H100,
    2026-11-25 (twentieth session, nvidia-h100-80gb-hbm3_2026-11-25_pf23c.log, M = 1, one ring
    step against two): k = 4 Q 3.86 -> 3.71 us, O 3.98 -> 3.74, linear value 3.89 -> 3.69,
    down 4.63 -> 4.55, but gate/up 4.69 -> 4.82 (k = 3 4.78 -> 5.01); k = 3 / 5 the rest within
    noise; none at all (pf0) slower at M = 1.  At M = 2..4 the same, except that down-like shapes
    (K >= 5120) keep the ring (pf23da, M = 2: Q k = 4 3.91 -> 3.71, O 4.20 -> 3.91, linear value
    3.89 -> 3.68, but down 4.65 -> 4.80 and gate/up 4.89 -> 5.31; pf23c, M = 4: O 4.42 -> 4.17,
    Q 4.24 -> 4.09, down k = 4 5.05 -> 5.18).
    family (kbitcupy.dispatch.gpu_family) "H200": one step at every M <= 8 (one token tile) but on gate/up-wide shapes.
    H200, 2026-11-29 (fifty-first session, run58.sh knobs / knobs2, two passes each, one step against the ring): down
    k = 4 M = 2 4.37 / 4.39 -> 4.26 / 4.28 us, k = 3 M = 2 / 4 -2..-3 %, k = 2..4 M = 6 / 8 -0.6..-1.1 %; Q / O / linear
    value k = 4 M = 6 -2..-3 %, M = 8 -1.5..-2.4 %, k = 2 -1 %; KV, linear key within +-1 %; gate/up +3..+5 % (kept on
    the ring); at M = 12 / 16 slower.  The H100 kept the ring on down at M = 2 (pf23da above)."""
    one_step = M == 1 or (M <= 4 and K < 5120) or (family == "H200" and M <= 8)
    return 1 if one_step and N < 320 * 16 else depth  # (gate/up-wide shapes keep the ring on every GPU)


def _launch_config(dev, M, N, K, qw, tname, plan_override, pdl=0, cbd=False):
    """(kernel, grid, block, smem, scalar args, the kernel's pdl argument) for one call shape,
    built once.  pdl: _pdl.dense_arg (in safe mode refined by safe_prefetch_steps); cbd: the
    instantiation with the default codebook compiled in.  plan_override may also hold pf
    (safe_prefetch_steps' choice: 1 or the ring depth)."""
    if qw.packed.size >= 2 ** 32:  # (kbit_gemv's woff_t)
        raise ValueError(f"gemv: qw holds {qw.packed.size} packed words, beyond the kernel's 32-bit word offsets "
                         "(2^32)")
    ov = dict(plan_override or ())
    pf = ov.pop("pf", None)
    p = plan(N, K, M, qw.k, **{"pdl": pdl == 1, "tiled": qw.layout == "tiled", **ov})
    warps, depth, smem, grid, tiles, dual, late, gpb, c8, ty = p
    if smem > _smem_limit(dev):  # (this plan's, overrides included)
        raise ValueError(f"gemv: M={M}, K={K} needs {smem} bytes of shared memory, more than this GPU has; "
                         "use kbitcupy.matmul (it dispatches to the GEMM)")
    fn = GEMV.function((qw.k, tname, qw.absmax.dtype.name, qw.layout == "tiled", depth, tiles, dual, late, gpb > 1,
                        cbd, c8) + (("ts",) if ty > 1 else ()))
    smem = capped_smem(fn, smem, grid * ty, warps * 32 * gpb, dev)
    pf = safe_prefetch_steps(N, K, M, depth, gpu_family(dev)) if pf is None else int(pf)
    if pdl == _pdl.PDL_SAFE and pf == 1 and depth > 1:
        pdl = _pdl.PDL_SAFE_PF1
    return fn, ((grid, ty) if ty > 1 else (grid,)), (warps * 32, gpb), smem, (np.int32(M), np.int32(N), np.int32(K)), \
        np.int32(pdl)


def _row_limit(qw) -> tuple:
    """(max_rows of this weight, what that limit depends on: a function giving the error message's words, so that a
    call within the limit formats nothing)."""
    return (max_rows(qw.k, qw.shape[0], qw.layout == "tiled"),
            lambda: f" at k = {qw.k} (N = {qw.shape[0]}, {qw.layout} layout)")


def launch_args(A, qw, out, plan_override=None):
    """(kernel, grid, block, dynamic smem, argument tuple) of one GEMV call: exactly what
    gemv() passes to the CuPy kernel.  kbitcupy._launch builds its cached cuLaunchKernel
    parameter block from this tuple (A and out found in it by identity), so a change of
    the kernel's arguments needs a change here only."""
    M, K = A.shape
    N = qw.shape[0]
    tname = "bfloat16" if A.dtype == bfloat16 else "float16"
    pdl = _pdl.dense_arg(A.data.device_id)  # 0, 1 (full PDL: its own plan) or safe
    cbd = qw.default_codebook and qw.layout == "tiled"  # instantiated for the runtime format only
    key = (A.data.device_id, M, N, K, qw.k, tname, qw.absmax.dtype.char, qw.layout, plan_override, pdl, cbd)
    cfg = _LAUNCH.get(key)
    if cfg is None:
        # the row limit depends on M, N, k and the layout only (all in the key): checked once a key, and a key
        # outside it is never cached, so every such call raises here
        check_rows("gemv", M, 1, *_row_limit(qw))
        cfg = _LAUNCH[key] = _launch_config(key[0], M, N, K, qw, tname, plan_override, pdl, cbd)
    fn, grid, block, smem, dims, pdl_arg = cfg
    return fn, grid, block, smem, ((A, qw.packed, qw.absmax, qw.codebook, out) + dims +
                                   (np.float32(qw.tensor_scale), pdl_arg))


def gemv(A, qw, out, plan_override=None, *, validate=True):
    """C[M, N] = A[M, K] @ W^T (M = 1..32; k = 5: 1..16; the staged A must fit the shared memory) on CuPy arrays;
    out given.

    No allocation, no host synchronisation: capturable in a CUDA graph.  The launch
    configuration is cached per (device, shape, k, dtype, layout), so a call is a dict
    lookup and the kernel launch.  (kbitcupy.matmul's repeated calls skip even this:
    kbitcupy._launch.)  validate=False skips the argument checks (kbitcupy._checks) for
    callers that made them already."""
    if validate:
        check_kernel_call(A, qw, out, "gemv", _row_limit, 1)
        if not reads(qw):
            raise ValueError(f"the GEMV reads E4M4 absmax, or float32 absmax in the flat layout; this weight's is "
                             f"{qw.absmax.dtype.name} ({qw.layout}): use kbitcupy.matmul (it dequantizes) or repack")
    fn, grid, block, smem, args = launch_args(A, qw, out, plan_override)
    _pdl.launch(fn, grid, block, args, smem, pdl=args[-1])  # the kernel's pdl argument
    return out


# ----------------------------------------------------------------------------- MoE
GROUPED_MAX_TOKENS = 16  # tokens per expert the grouped GEMV is planned for
_GLAUNCH: dict = {}


# Warps per column group when a block holds gpb of them side by side (H200, 2026-11-25,
# profiling/moe_sl10.sh: 16 warps per block, except 3 groups of 4 over 5 uneven ones).
_SL_WARPS = {2: 8, 3: 4, 4: 4, 5: 3, 6: 2, 7: 2, 8: 2}


def grouped_pass_rows(max_tokens: int) -> int:
    """A rows the grouped GEMV stages per pass: a slot's rows are computed in passes of at most max_tokens, at most
    16 (two token tiles; the kernel's grouped_chunk)."""
    return min(8 if max_tokens <= 8 else 16, max(1, max_tokens))


def grouped_plan(N: int, K: int, k: int, n_slots: int, max_tokens: int, itemsize: int = 2, warps: int | None = None,
                 per_block: int | None = None, resident: int = 2 * 132, gpb: int | None = None, sms: int = 132):
    """(warps, blocks per slot, smem, token tiles, gpb) for kbit_gemv_grouped: each block loops
    over per_block 16-column groups of one slot with one pair table (gpb = 0), or (gpb >= 1,
    kbit_gemv_grouped_sl / _slw, grouped_kernel_key) holds gpb groups side by side, warps each,
    over one table; resident = blocks the whole GPU holds at once (grouped_gemv measures it: CUDA
    occupancy x SMs).  At one token tile: an SM's share of all slots' groups side by side where
    that grid fits one wave, else small blocks several per SM (below).  smem stages at most
    max_tokens rows of A (the kernel's pass)."""
    groups = -(-N // 16)
    ks = -(-K // 128)
    tiles = 1 if max_tokens <= 8 else 2
    rows = grouped_pass_rows(max_tokens)
    share = -(-groups * max(1, n_slots) // sms)  # an SM's share of all slots' groups (the slices plans below)
    if gpb is None and per_block is None and warps is None and tiles == 2 and k <= 4:
        # Two token tiles (9..16 tokens an expert; the slices kernel is instantiated there for k <= 4): as at one
        # tile below, an SM's share of all slots' groups side by side in one block over one pair table and one
        # staged A, where that grid is one wave (the share, else one group more a block), with at least two K
        # steps a warp.  H200, 2026-11-28 (forty-second session, run49.sh moeplan / moeplan2, k = 4, 12 / 16 tokens,
        # default launch, against the group loop below): moe_dn 4 / 8 / 10 / 16 experts 4.58 / 6.79 / 8.59 / 10.72 ->
        # 3.87 / 5.47 / 6.37 / 7.76 us at 16 tokens, gate/up fused 6.12 / 9.70 / 12.86 / 16.35 -> 5.47 / 7.61 /
        # 8.98 / 11.93 (fp16 bmm: down 4.69 / 6.52 / 7.96 / 10.40, gate/up 7.06 / 10.54 / 12.77 / 18.50); the best
        # measured form in every cell but moe_dn 8 experts (8 x 2 warps 5.47 us, 4 x 2 5.41).  At least 8 warps a block:
        # moe_dn 2 experts (2 x 2 warps) 3.28 -> 3.36 us, the one cell slower than the loop (run49.sh moeval).
        if 2 <= share <= 16:
            for g_ in (share, share + 1):
                w_ = max(1, min(ks // 2, _SL_WARPS.get(g_, 1)))
                if (g_ <= 16 and g_ * w_ >= 8 and _slices_one_wave(n_slots, -(-groups // g_), g_, w_, sms)
                        and smem_bytes(k, rows, ks, w_ * g_, tiles, itemsize) <= 227 * 1024):
                    gpb, warps = g_, w_
                    break
    if gpb is None and per_block is None and warps is None and tiles == 1:
        # An SM's share of all slots' groups in one block over one pair table, as the dense k = 5
        # GEMV (H200, 2026-11-25, k = 4, 1..8 tokens: moe_gu_fused 8 / 10 experts 8.76 -> 7.95 /
        # 11.35 -> 9.27 us, moe_dn 6.36 -> 5.52 / 7.88 -> 6.65, gate/up alone 10 experts 8.51 ->
        # 6.84); a share of one block keeps the group loop.  More than 16 groups per SM (one-warp
        # slices in a 512-thread block): 16 x 1 warp, or 8 x 2 where K has 8 or more steps, and
        # several waves (moe_sl10d.sh, 1 token: down 32 / 74 experts 17.28 -> 14.05 / 37.16 ->
        # 32.63 us, gate/up fused 74 experts 62.74 -> 57.67).
        if 2 <= share <= 16:
            gpb = share
            warps = min(ks, _SL_WARPS.get(share, 1))
            per_sm = SL_WARPS_PER_SM
            if share == 10 and k == 4 and max_tokens <= 4 and ks <= 4:
                # 10 experts' down (K of 4 steps): two blocks of 5 groups x 2 warps per SM (2 steps a warp)
                # instead of one of 10 x 1 (4 steps a warp), at the 96-register cap (kbit_gemv_grouped_slw:
                # two 10-warp blocks exceed an SM's registers at 128).  H100, 2026-11-27 (thirty-second
                # session, run39.sh dn / confirm / h200, same run against the old plan, three calls): default
                # launch 1 / 4 tokens 5.52-5.56 / 5.65-5.68 -> 5.37-5.45 / 5.45-5.52 us, stable 5.08-5.11 ->
                # 4.76-4.81 at 1 token; 8 tokens no faster (6.12 -> 6.17); 8 experts keep their plan (5 x 2:
                # 4.55 -> 5.23).
                gpb, warps, per_sm = 5, min(ks, 2), SLW_WARPS_PER_SM
            elif share == 8 or (share == 4 and max_tokens <= 4):
                # half an SM's share per block, two blocks per SM (H100, 2026-11-25, nineteenth session,
                # safe PDL, 8 experts: moegpb22 k = 4 1 token gate/up fused 7.33 -> 7.08 us, down 4.73 ->
                # 4.61; moegpb22b k = 2..5, 1..8 tokens: 1 token gate/up + down k = 4 11.87 -> 11.53, k = 2
                # 9.82 -> 9.48, k = 5 16.68 -> 16.24, but gate/up (a share of 4) at 8 tokens 7.05 -> 7.48 at
                # k = 2; the shares of 5 and 10 (10 experts) lost that way)
                gpb = share // 2
            # The share rounds up per slot: ceil(groups / gpb) blocks a slot can overflow the SMs (14
            # experts' down: 10 x 14 = 140 blocks of 14 warps, one per SM): a second wave of whole
            # chains, ~2x the time (steady27c: gate/up fused 14 / 20 experts k = 4 19.67 / 27.81 us).
            if not _slices_one_wave(n_slots, -(-groups // gpb), gpb, warps, sms, per_sm):
                gpb = None
        if share > 16 or (share >= 2 and gpb is None):
            # Several waves: small blocks, several per SM, so one block's prologue and tail run beside
            # the others' loads (H100, 2026-11-26, steady27c, 1 token, 10..242 experts, k = 2..5, against
            # the one-block-per-SM plan of 16 warps: TOTAL gate/up fused + down k = 4 20 / 74 / 242
            # experts 40.85 / 80.99 / 237.40 -> ~26 / ~72 / ~208 us; deeper register rings were slower):
            # down (K < 1024: 4 steps) 4 one-warp groups a block (8 at k = 5, whose pair table caps the
            # blocks per SM); gate/up 4 groups of 2 warps, 8 of 1 warp from 48 groups per SM on; at
            # k = 2 (a small table) 4 of 1 warp, five blocks per SM at 96 registers (pfa27: 20 / 74 / 242
            # experts 16.04 / 40.52 / 113.87 -> 13.86 / 34.25 / 104.68 us; k = 3 at 128 registers and k = 4
            # at 4 tokens were slower that way, gu4_27).  The 4-warp blocks run the 96-register kernel at
            # k in SLW_KS (grouped_kernel_key).
            if ks >= 8:
                gpb, warps = (4, 1) if k == 2 else (4, 2) if share <= 48 else (8, 1)
            else:
                gpb, warps = (8, 1) if k == 5 else (4, 1)
            warps = min(ks, warps)
    warps = min(8, ks) if warps is None else int(warps)
    gpb = 0 if gpb is None else int(gpb)
    if gpb:
        if warps * gpb > 16:
            raise ValueError(f"grouped_plan: {gpb} groups of {warps} warps exceed the kernel's 512 threads")
        gx = -(-groups // gpb)
        return warps, gx, smem_bytes(k, rows, ks, warps * gpb, tiles, itemsize,
                                     _is_slw(k, tiles, gpb, warps, n_slots, gx, sms)), tiles, gpb
    if per_block is None:
        # The fewest groups per block that keep the grid in one wave (H200, 2026-11-22,
        # profiling/NOTES.md: down, 8 experts, 1 token: 512 blocks x 2 groups 6.30 us,
        # 256 x 4 7.91, 1024 x 1 (two waves) 8.04; gate/up 10 experts: 220 x 3 11.45,
        # 320 x 2 (1.2 waves) 14.54), and at most 4: slots are often empty (a routing that
        # passes every expert of the bank), and an active one must not be left to one block.
        per_block = next((p for p in (1, 2, 3) if max(1, n_slots) * -(-groups // p) <= resident), 4)
    gx = -(-groups // per_block)
    return warps, gx, smem_bytes(k, rows, ks, warps, tiles, itemsize), tiles, 0


@functools.lru_cache(maxsize=256)
def grouped_is_slices(N: int, K: int, k: int, n_slots: int, max_tokens: int, sms: int) -> bool:
    """Whether grouped_plan's default plan is a slices form (gpb > 0); cached, since grouped.choose_impl asks it on
    every call (the plan itself is ~5 us of Python)."""
    return grouped_plan(N, K, k, n_slots, max_tokens, sms=sms)[4] > 0


@functools.lru_cache(maxsize=256)
def grouped_swiglu_per_thread(N: int, K: int, k: int, n_slots: int, max_tokens: int, sms: int) -> float:
    """SwiGLU evaluations a thread of the grouped GEMV makes while staging one pass of A with SwiGLU fused in
    (AMODE 2: every block of a slot computes the pass's rows x K again): rows x K / threads of the default plan."""
    warps, _, _, _, gpb = grouped_plan(N, K, k, n_slots, max_tokens, sms=sms)
    return grouped_pass_rows(max_tokens) * K / (32 * warps * max(gpb, 1))


def grouped_kernel_key(k: int, tname: str, amode: int, cbd: bool, plan_, n_slots: int, sms: int = 132):
    """The GEMV family key of the grouped kernel for a grouped_plan result: the slices kernel (gpb),
    at 96 registers (grouped_slw) for several waves of 4-warp blocks at k in SLW_KS (five blocks
    per SM instead of four); the group loop (gpb = 0), with a fused MoE step (amode) or not."""
    warps, gx, _, tiles, gpb = plan_
    if gpb:
        slw = _is_slw(k, tiles, gpb, warps, n_slots, gx, sms)
        return ("grouped_slw" if slw else "grouped_sl", k, tname, tiles, amode, cbd)
    return ("grouped", k, tname, tiles, cbd) if amode == 0 else ("grouped_fused", k, tname, tiles, amode, cbd)


def _sm_count(device_id: int) -> int:
    from .gemm import device_info  # (gemm imports this module)

    return int(device_info(device_id)["sms"])


def resident_blocks(fn, threads: int, smem: int, device_id: int) -> int:
    """Blocks of fn the whole GPU runs at once (registers, shared memory, threads)."""
    return max(1, occupancy(fn, threads, smem)) * _sm_count(device_id)


def grouped_gemv(A, bank, ids, offs, out, max_tokens: int, err, plan_override=None, kernel=None,
                 ids_stable: bool = False, a_rows=None, a_silu: bool = False):
    """C_sorted = per-slot A_sorted @ W_e^T with the GEMV machinery (tokens per expert <=
    16 planned; more are computed in chunks and flag err bit 4).  Validated CuPy arrays;
    no allocation, no sync.  plan_override: grouped_plan keywords (tuple of pairs);
    kernel: f(key) -> RawKernel replacing GEMV.function (profiling/moe_ab.py).  ids_stable:
    see kbitcupy.grouped.grouped_matmul (PDL only).  Fused MoE steps (kbitcupy.moe):
    a_rows (int32 [out rows]): sorted row r is A[a_rows[r]] (the row gather); a_silu: A is
    [rows, 2K] = [gate | up] and the rows multiplied are silu(gate) * up."""
    N, K = bank.shape
    n_slots = int(ids.size)
    tname = "bfloat16" if A.dtype == bfloat16 else "float16"
    amode = 1 if a_rows is not None else 2 if a_silu else 0
    cbd = bank.default_codebook and bank.k in GROUPED_CBD_KS
    # max_tokens as grouped_plan sees it (<= 4: two blocks per SM; <= 8: one token tile): a key of
    # only "> 8" let a 1-token call's plan serve later 8-token calls (twentieth session)
    key = (A.data.device_id, N, K, bank.k, tname, n_slots, min(max_tokens, 17), plan_override, kernel, amode, cbd)
    cfg = _GLAUNCH.get(key)
    if cfg is None:
        ov = dict(plan_override or ())
        ov.setdefault("sms", _sm_count(key[0]))
        plan_ = grouped_plan(N, K, bank.k, n_slots, max_tokens, **ov)
        kkey = grouped_kernel_key(bank.k, tname, amode, cbd, plan_, n_slots, ov["sms"])
        fn, fn_lb = ((kernel or GEMV.function)(kk) for kk in (kkey, lb_key(kkey)))
        warps, _, smem, tiles, gpb = plan_
        for f in (fn, fn_lb):
            if f.max_dynamic_shared_size_bytes < smem:
                f.max_dynamic_shared_size_bytes = smem
        ov.setdefault("resident", resident_blocks(fn, warps * 32 * max(gpb, 1), smem, key[0]))
        warps, gx, smem, tiles, gpb = grouped_plan(N, K, bank.k, n_slots, max_tokens, **ov)
        one_wave = gx * n_slots <= ov["resident"]
        # the wait-first launch's kernel, where its grid is one wave as well (else PDL is off anyway)
        if not one_wave or resident_blocks(fn_lb, warps * 32 * max(gpb, 1), smem, key[0]) < gx * n_slots:
            fn_lb = fn
        cfg = _GLAUNCH[key] = (fn, fn_lb, (warps * 32, max(gpb, 1)), gx, smem, one_wave)
    fn, fn_lb, block, gx, smem, one_wave = cfg
    # PDL only where the grid is one wave: later waves cannot start early, and every block
    # would pay the PDL order (A staged after the table build instead of during it).  H200,
    # 2026-11-24 (MoE layer step, k = 4): T = 1 (10 experts, one wave) 25.2 -> 22.8 us,
    # T = 32 (242 experts, several waves) 319 -> 326 us.
    pdl = _pdl.grouped_mode(key[0], ids_stable, safe_early=True) if one_wave else _pdl.GROUPED_OFF
    if pdl == _pdl.GROUPED_WAIT:
        fn = fn_lb
    rows = int(out.shape[0])  # = A's rows unless the gather is fused in
    tail = (np.int32(N), np.int32(K), np.int32(bank.num_experts), np.int32(rows),
            np.int64(bank.words_per_expert), np.int64(bank.absmax_per_expert), np.int32(max_tokens), err,
            np.int32(pdl), np.uint64(0) if a_rows is None else a_rows, np.int32(A.shape[0]))
    for s0 in range(0, n_slots, 65535):  # grid.y limit
        ns = min(65535, n_slots - s0)
        # (a CuPy slice costs microseconds of host time: only where the grid needs it)
        i_, o_ = (ids, offs) if ns == n_slots else (ids[s0:s0 + ns], offs[s0:s0 + ns + 1])
        args = (A, bank.packed, bank.absmax, bank.codebook, bank.tensor_scale, i_, o_, out) + tail
        _pdl.launch(fn, (gx, ns), block, args, smem, pdl=pdl)
    return out
