"""Launcher for the Hopper fused dequant + wgmma GEMM (cuda_src/kbit_wgmma.cu, sm_90a).

``wgmma_gemm(A, qw, out)`` computes out[M, N] = A[M, K] @ W^T for a TILED k-bit weight on
an sm_90 GPU (H100/H200).  Like ``kbitcupy.gemm`` it allocates nothing on the hot path
(it shares gemm's per-stream split-K workspace), never synchronises with the host and
is capturable in a CUDA graph once a first call of the same shape has run (``reserve``).

Configuration (see the .cu header for the design):
  * TOK tokens per CTA (the wgmma n side): the smallest of TOK_CHOICES covering M, at
    most the largest; larger M runs ceil(M / TOK) token tiles.
  * one 128-column strip of the layout per CTA (2 warpgroups of 64 columns).
  * K tiles of 64 through a `stages`-deep cp.async pipeline (MIN_STAGES..MAX_STAGES), the most
    CTAs per SM first (at most 2), then the deepest pipeline that fits.
  * split-K over K tiles, >= MIN_TILES_PER_SPLIT tiles each.  With 2..8 splits (CLUSTER) a tile's
    splits run as one thread block cluster and sum their partials through distributed shared
    memory, each CTA a share of the tile (no workspace) where that keeps the grid resident
    (cluster_pays); otherwise per-split workspace slots, the last CTA sums, as in kbitcupy.gemm.
    The dense kernel fills one CTA per SM (dense_splits: a second CTA on an SM buys nothing) and
    takes a smaller split count whose launch sums over a cluster where the model says that pays;
    the grouped kernel fills one wave of resident CTAs, or one CTA per SM where that measured faster
    (grouped_splits).
"""
from __future__ import annotations

import os

import numpy as np

from ._checks import check_kernel_call
from . import _pdl
from ._compile import Family, register
from .gemm import MAX_CLUSTER, DoesNotFit, _workspace, best_stages, device_info, launch_fused, plan_workspace, set_smem
from .gemm import _LOCK as _SMEM_LOCK
from .gemv import lut_bytes
from .quantize import CTYPE
from .reference import TILE_K, TILE_N, bfloat16

THREADS = 256
TOK_CHOICES = (16, 32, 64, 128, 192)
# The grouped kernel's loop over extra token tiles (max_tokens too small) costs 15-50
# registers; at TOK = 192 it would spill, so the grouped kernel stops at 128.
GROUPED_TOK_CHOICES = (16, 32, 64, 128)
MAX_STAGES = 8
MIN_STAGES = 4  # the loop waits for tile it + 1 while tiles it - 1 and it are in use (kbit_wgmma.cu)
MIN_TILES_PER_SPLIT = 2   # K tiles of 64 per split-K slice (default heuristic)
# At most 8 splits by default: H100, 2026-11-25 (profiling/cluster_probe.py, k = 4): where "fill
# one wave" asked for 16 (down, O, KV at M = 16..128) 8 was faster in every cell, 6-39 %
# (O M = 64 17.71 -> 12.14 us, KV M = 128 16.15 -> 9.88 with the cluster sum).
MAX_SPLITS = 8
# Grouped kernel: at most 4 stages.  H200 (profiling/results/nvidia-h200_2026-11-22_moe_ab.log):
# 4 stages beat the deepest pipeline that fits in 16 of 18 MoE cells, by 1-6 %
# (10 experts, 32 tokens, gate/up + down 30.2 -> 28.4 us); a split holds 2-8 K tiles.  H100, 2026-11-26 (the kernel of
# today; profiling/run25.sh stages25, k = 4): 5 stages beat 4 on gate/up fused in all 6 MoE cells (16..64 tokens,
# 8 / 10 experts; 1-4 %, 10 experts 16 tokens 12.95 -> 12.48 us), down equal (-1.4..+0.4 %); 6 no better than 5.
GROUPED_MAX_STAGES = 5
MAX_OCCUPANCY = int(os.environ.get("KBIT_WG_MAXOCC", "2"))  # CTAs per SM the stage choice aims for (env: experiment)
# The grouped kernel at k = 5 also comes with 2**GROUPED_K5_LC copies of the pair table (32 KB instead of
# 64 KB: two CTAs per SM at TOK = 64 / 128, more bank conflicts in the lookups); grouped_plan takes it where
# fewer_copies_pays.  H100, 2026-11-26 (profiling/run28.sh k5sweep / k5copies, 8 / 10 / 12 experts, 16..64
# tokens): 10 experts at 64 tokens gate/up fused 24.30 -> 19.31 us, down 16.97 -> 12.83 (two waves at one CTA
# per SM -> one at two), but 8 experts' down 9.05 -> 10.51 and 16 tokens 4-9 % slower (the conflicts).
GROUPED_K5_LC = 3
GROUPED_K5_LC_TOKS = (64,)  # (TOK = 128 takes 182 registers: one CTA per SM whatever the table)


def _env_on(name: str) -> bool:
    """An on-by-default switch of this module's environment (0 / false / no / off turn it off)."""
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "no", "off")


# Split-K sum over a thread block cluster (DSMEM) where 2 <= k_splits <= MAX_CLUSTER (gemm.MAX_CLUSTER, the
# portable cluster size: KBIT_MAX_CLUSTER in kbit_common.cuh); env KBIT_WG_CLUSTER=0: the workspace sum
# everywhere (A/B).
CLUSTER = _env_on("KBIT_WG_CLUSTER")
# The kernels with the default codebook compiled in for weights that have it (env KBIT_WG_CBD=0: the runtime
# codebook everywhere, an A/B hook)
CBD = _env_on("KBIT_WG_CBD")
# The grouped kernel's safe-PDL early mode where the caller's ids are stable (_pdl.GROUPED_SAFE_EARLY: ids read
# and the first K tiles' weights L2-prefetched before the wait; grids of one wave only, grouped_wgmma); env
# KBIT_WG_SAFE_EARLY=0: wait at entry (A/B).
SAFE_EARLY = _env_on("KBIT_WG_SAFE_EARLY")
# The dense kernel's stages by TMA (kbit_wgmma_tma: per stage one tensor copy of the token tile and two bulk
# copies of the weight tile and absmax, by one thread, on an mbarrier; no cp.async).  H200 2026-11-27
# (run29.sh exp / exp2): k = 4 TOTAL M = 64 50.6 -> 49.0 us, M = 128 64.0 -> 59.4 (KV 0.1 us slower).
# Env KBIT_WG_TMA=0 or wgmma_gemm(..., tma=False): kbit_wgmma, the cp.async path (A/B).  The grouped
# kernel has the TMA path only (8 / 10 experts, 16..64 tokens: 2-5 % faster, run29.sh exp3).
TMA = _env_on("KBIT_WG_TMA")


def _instances():
    inst = {}
    for k in (2, 3, 4, 5):
        for t in ("float16", "bfloat16"):
            # "cbd": the default codebook compiled in (the weight's default_codebook; in safe PDL the
            # kernel builds its tables before the wait), a group of its own (a run compiles what it uses).
            # H100 2026-11-26 (run24.sh cbd / cbd2, k = 4): dense M = 16..128 -1.5..-5 % (Q M = 32 9.73 -> 9.23
            # us), all of it from the tables built before the wait (-DKBIT_WG_CBD_LATE: as the loaded codebook);
            # grouped ("grouped_cbd", tables after the wait: before it was 0.3-1.9 % slower) -0.6 % at 32 / 64
            # tokens per expert (8 experts), equal elsewhere
            for tok in TOK_CHOICES:
                inst[(k, t, tok)] = f"kbit_wgmma<{k}, {CTYPE[t]}, {tok}>"
                inst[("cbd", k, t, tok)] = f"kbit_wgmma<{k}, {CTYPE[t]}, {tok}, true>"
                inst[("tma", k, t, tok)] = f"kbit_wgmma_tma<{k}, {CTYPE[t]}, {tok}>"
                inst[("tma_cbd", k, t, tok)] = f"kbit_wgmma_tma<{k}, {CTYPE[t]}, {tok}, true>"
            for tok in GROUPED_TOK_CHOICES:
                inst[("grouped", k, t, tok)] = f"kbit_wgmma_grouped<{k}, {CTYPE[t]}, {tok}>"
                inst[("grouped_cbd", k, t, tok)] = f"kbit_wgmma_grouped<{k}, {CTYPE[t]}, {tok}, true>"
                # k = 5 with GROUPED_K5_LC copies of the pair table (grouped_plan's choice where the 16
                # copies leave one CTA per SM)
                if k == 5 and tok in GROUPED_K5_LC_TOKS:
                    for cbd in (False, True):
                        inst[("grouped_lc" + ("_cbd" if cbd else ""), k, t, tok)] = (
                            f"kbit_wgmma_grouped<{k}, {CTYPE[t]}, {tok}, {'true' if cbd else 'false'}, {GROUPED_K5_LC}>")
    return inst


def _group_of(key):
    return key[:3] if key[0] in ("grouped", "cbd", "grouped_cbd", "grouped_lc", "grouped_lc_cbd", "tma",
                                 "tma_cbd") else key[:2]


# wgmma exists on sm_90a only; one NVRTC call per (k, dtype) compiles its TOK variants
# (the dense and the grouped kernel are separate groups: a run compiles what it uses).
# KBIT_WGMMA_OPTS: extra NVRTC options, an experiment hook (e.g. -DKBIT_WG_NO_MMA, see the .cu).
WGMMA = register("wgmma", Family("kbit_wgmma.cu", _instances(), group_of=_group_of,
                                 options=tuple(os.environ.get("KBIT_WGMMA_OPTS", "").split()), arch="sm_90a"))


_SUPPORTED: dict = {}


def supported(dev_id: int) -> bool:
    """Whether the wgmma kernel runs on this device (compute capability 9.0)."""
    ok = _SUPPORTED.get(dev_id)
    if ok is None:
        import cupy as cp

        ok = _SUPPORTED[dev_id] = cp.cuda.Device(dev_id).compute_capability == "90"
    return ok


# ----------------------------------------------------------------------------- sizes
# The dense kernels' pair table at 64 copies (256-byte rows: one PRMT a lookup's offset) for k = 4 at TOK >= 128 and
# k = 2 / 3 at every TOK; -DKBIT_WG_K4_ROW256=0 / -DKBIT_WG_K23_ROW256=0 in KBIT_WGMMA_OPTS the 32-copy A/Bs.
K4_ROW256 = "-DKBIT_WG_K4_ROW256=0" not in WGMMA.options
K23_ROW256 = "-DKBIT_WG_K23_ROW256=0" not in WGMMA.options


def dense_lc(k: int, tok: int):
    """The dense kernel's pair-table copies (log2), None for PairLut's default: the host side of the .cu's
    KBIT_WG_DENSE_LC(K, TOK), which the plan's shared memory must match."""
    return 6 if (K4_ROW256 and k == 4 and tok >= 128) or (K23_ROW256 and k <= 3) else None


def stage_bytes(k: int, tok: int) -> int:
    return -(-(tok * 128 + 1024 * k + 256) // 1024) * 1024  # 1024-byte aligned stages (128-byte swizzle)


# The k = 4 pair table's copies (log2) when KBIT_WGMMA_OPTS sets the experiment hook -DKBIT_K4_LOG2_COPIES=n
# (the kernels then build 2**n copies instead of lut_bytes' 32); None otherwise.
_K4_LOG2_COPIES = next((int(o.split("=", 1)[1]) for o in WGMMA.options if o.startswith("-DKBIT_K4_LOG2_COPIES=")), None)


def smem_bytes(k: int, tok: int, stages: int, lc=None) -> int:
    """Dynamic shared memory of a CTA; lc: the pair table's copies (log2) where not lut_bytes' (the grouped
    kernel's GROUPED_K5_LC instantiation, the dense k = 4 kernels' 64 copies at TOK >= 128)."""
    if lc is not None:
        lut = (1 << (2 * k)) * (1 << lc) * 4
    else:
        lut = (1 << 8) * (1 << _K4_LOG2_COPIES) * 4 if k == 4 and _K4_LOG2_COPIES is not None else lut_bytes(k)
    # + 1024: the stages start at the first 1024-byte aligned address after the tables
    return lut + 1024 + 256 + 1024 + stages * stage_bytes(k, tok)


def fill_tok(tok: int, M: int, n_tiles: int, sms: int, choices=TOK_CHOICES) -> int:
    """The dense plan's token tile: the next smaller TOK where the covering one leaves at least half
    the SMs idle even at MAX_SPLITS splits (narrow weights: KV, 4 column strips, is 32 CTAs), so
    that twice the token tiles fill the machine.  H100 k = 4 (`tok25`, profiling/run25.sh): KV M =
    48 / 64 / 96 / 128 6.58 / 6.78 / 8.19 / 8.41 -> 6.14 / 6.31 / 6.70 / 6.84 us; the shapes with 16+
    strips keep their TOK (the smaller one was 0-60 % slower there)."""
    smaller = [t for t in choices if t < tok]
    if smaller and sms > 0 and -(-M // tok) * n_tiles * MAX_SPLITS <= sms // 2:
        return smaller[-1]
    return tok


def choose_tok(M: int, choices=TOK_CHOICES, n_tiles: int = 0, sms: int = 0, k_tiles: int = 0) -> int:
    """The smallest TOK covering M.  Above the largest (TOK >= 128 runs one CTA per SM), the one
    of 128 / 192 with the least waves x TOK x K tiles per split, the split count as the plan's
    default picks it (fill one wave, <= MAX_SPLITS, >= MIN_TILES_PER_SPLIT tiles each); ties
    to 128 (less padding).  H100 k = 4 (`run17_tok`, `run18_big2` tok_probe): it picks the faster
    of the two in all 12 cells of gate/up, down, Q, O x M = 256 / 384 / 512, e.g. gate/up
    M = 256 128 (26.7 vs 31.9 us), M = 512 192 (32.2 vs 50.8: four 128-token tiles x 40 strips
    are two waves), down M = 384 192 (29.9 vs 34.6: 4 splits instead of 2).  192 everywhere
    (the rule before) lost 8 of the 12 by 8-58 %.  Without the grid's size: 128."""
    tok = next((t for t in choices if M <= t), None)
    if tok is not None:
        return tok
    big = [t for t in (128, 192) if t in choices]
    if not big:
        return choices[-1]
    if n_tiles <= 0 or sms <= 0 or k_tiles <= 0:
        return big[0]

    def cost(t):
        tiles = -(-M // t) * n_tiles
        ks = default_splits(k_tiles, sms, tiles)  # TOK >= 128: one CTA per SM
        return -(-tiles * ks // sms) * t * -(-k_tiles // ks)

    return min(big, key=lambda t: (cost(t), t))


def default_splits(k_tiles: int, slots: int, tiles: int) -> int:
    """The plan's split-K count: fill one wave of `slots` resident CTAs over `tiles` work
    tiles, at most MAX_SPLITS, at least MIN_TILES_PER_SPLIT K tiles per split."""
    return max(1, min(MAX_SPLITS, k_tiles // MIN_TILES_PER_SPLIT, slots // max(1, tiles)))


# The grouped kernel's split count: fill one wave of resident CTAs (default_splits over sms x occupancy),
# except where the dense kernel's finding -- a second CTA on an SM does not overlap the first -- holds for it
# too: at k <= 4 and TOK >= 32, where TOK >= 64 or the fill would leave a split fewer than
# GROUPED_SPLIT_MIN_TILES K tiles, the split count whose grid is one CTA on each of at least
# GROUPED_ONE_PER_SM_FILL of the SMs, if one exists that leaves a CTA at most GROUPED_SPLIT_MAX_TILES K tiles.
# H100, 2026-11-27 (thirty-second session, run39.sh wg / confirm, default launch, same run against the fill):
# k = 4, 32 / 64 tokens: down 4 experts 7.76 -> 6.45 / 10.45 -> 7.22 us, 8 experts 7.63 -> 7.35 / 8.61 -> 8.12;
# gate/up (unfused, 32 K tiles on 4 strips) 8 experts 10.24 -> 9.49 / 13.66 -> 11.17, 10 experts 64 tokens 13.51
# -> 12.23, 16 experts 64 tokens 14.54 -> 13.47; gate/up fused 4 experts 10.14 -> 9.42 / 13.51 -> 11.11, 8
# experts 64 tokens 14.50 -> 13.41; k = 2 alike.  Not: at 16 tokens (TOK 16: the fill's short splits on two CTAs
# per SM were 0.2-0.7 us faster on gate/up at 8 / 10 experts), where one CTA would run the whole K (gate/up fused
# 16 experts 64 tokens, 32 K tiles a CTA: 17.54 -> 20.26), and at k = 5 (its table-copies plan; 10 experts gate/up
# 32 tokens 11.91 -> 12.90).
GROUPED_SPLIT_MIN_TILES = 8
GROUPED_SPLIT_MAX_TILES = 16
GROUPED_ONE_PER_SM_FILL = 0.9


def grouped_splits(k_tiles: int, sms: int, occ: int, tiles: int, tok: int, k: int = 4) -> int:
    """The grouped plan's split-K count (see above)."""
    fill = default_splits(k_tiles, sms * occ, tiles)
    if k <= 4 and tok >= 32 and (tok >= 64 or k_tiles < GROUPED_SPLIT_MIN_TILES * fill):
        one = [s for s in range(1, fill + 1) if GROUPED_ONE_PER_SM_FILL * sms <= tiles * s <= sms
               and -(-k_tiles // s) <= GROUPED_SPLIT_MAX_TILES]
        if one:
            return max(one)
    return fill


# The dense split-K model (H100, 2026-11-26, profiling/run25.sh ksweep: k = 2 / 4, six shapes, M = 16..128,
# every split count 1..8): a CTA's K tile costs TILE_US[TOK] us whatever the split count; a second CTA on
# an SM does not overlap the first (Q, M = 64: 8 splits on 256 CTAs 12.43 us, 4 on 128 CTAs 10.34), so the
# split count fills one CTA per SM; the workspace sum costs WS_SPLIT_US[TOK] per split more than the
# cluster sum (TOK = 128, 8 splits: ~4.2 us; down / O / linear key at M = 128 ran 9-25 % faster on 6
# clustered splits than on 8 through the workspace).
TILE_US = {16: 0.45, 32: 0.48, 64: 0.5, 128: 0.66, 192: 0.85}
WS_SPLIT_US = {16: 0.03, 32: 0.14, 64: 0.2, 128: 0.58, 192: 0.9}


def dense_splits(k_tiles: int, sms: int, tiles: int, tok: int, clustered) -> int:
    """The dense plan's split-K count: one CTA per SM (default_splits over `sms` slots), or the
    largest smaller count whose launch sums over a cluster (clustered(ks) -> bool) where the model
    above prices it lower (fewer splits: more K tiles per CTA; no workspace sum).  The sweep's 84
    cells (k = 2 / 4, M = 16..128): the rule's pick within 3.3 % of the fastest split count in every
    cell, the sum 6.8 % below the previous "fill sms x occupancy slots" rule's, which was up to 29 %
    over (linear key M = 96)."""
    fill = default_splits(k_tiles, sms, tiles)
    if fill == 1 or clustered(fill):
        return fill
    alt = next((s for s in range(fill - 1, 1, -1) if clustered(s)), None)
    if alt is None:
        return fill

    def cost(ks, cl):
        return TILE_US[tok] * -(-k_tiles // ks) + (0.0 if cl else WS_SPLIT_US[tok] * ks)

    return alt if cost(alt, True) < cost(fill, False) else fill


def choose_stages(info: dict, k: int, tok: int, regs: int, lc=None):
    """(stages, CTAs per SM): the most resident CTAs (up to MAX_OCCUPANCY), then the deepest pipeline."""
    return best_stages(info, range(MAX_STAGES, MIN_STAGES - 1, -1), lambda st: smem_bytes(k, tok, st, lc), regs,
                       MAX_OCCUPANCY, f"kbit_wgmma<k={k}, TOK={tok}>", THREADS)


# ----------------------------------------------------------------------------- plan
class Plan:
    __slots__ = ("fn", "grid", "smem", "tok", "m_tiles", "k_splits", "stages", "tiles", "ws_floats", "occ", "cluster",
                 "launch_smem", "one_wave", "lc")

    def __init__(self):
        self.lc = None  # the pair table's copies (log2) where not lut_bytes' (smem_bytes' lc)

    @property
    def cl_size(self) -> int:
        """CTAs per thread block cluster of the launch (1: no clusters)."""
        return self.k_splits if self.cluster else 1

    def __repr__(self):
        return (f"WgmmaPlan(TOK={self.tok}, m_tiles={self.m_tiles}, k_splits={self.k_splits}, stages={self.stages}, "
                f"grid={self.grid}, smem={self.smem}, occ={self.occ}, cluster={self.cluster}"
                + (f", lc={self.lc}" if self.lc is not None else "")
                + (f", launch_smem={self.launch_smem}" if self.launch_smem != self.smem else "") + ")")


_PLANS: dict = {}
_CAPACITY: dict = {}


def spread_smem(info: dict, per_sm: int = 1) -> int:
    """Dynamic shared memory that leaves room for at most `per_sm` CTAs per SM."""
    return info["smem_sm"] // (per_sm + 1) - info["smem_reserved"] + 1


def cluster_capacity(fn, smem: int, ks: int, info: dict):
    """(CTAs resident at once, CTAs resident one per SM) for clusters of ks CTAs of kernel fn
    launched with `smem` bytes: cuOccupancyMaxActiveClusters x ks, at smem and at spread_smem.
    The GPCs' granularity costs clusters capacity (H100: 117..248 of 264 CTAs at two per SM)."""
    key = (id(fn), smem, ks)
    cap = _CAPACITY.get(key)
    if cap is None:
        from ._pdl import max_active_clusters

        ptr = int(fn.kernel.ptr)
        set_smem(fn, smem)
        # the spread query needs the kernel's dynamic shared memory limit raised; it goes back
        # after (the limit the launches see stays the plans' own), under set_smem's lock so that
        # no other thread raises it in between and has it lowered under its launch
        with _SMEM_LOCK:
            old = fn.max_dynamic_shared_size_bytes
            fn.max_dynamic_shared_size_bytes = max(old, smem, spread_smem(info))
            try:
                cap = tuple(max_active_clusters(ptr, ks, THREADS, s, ks) * ks
                            for s in (smem, max(smem, spread_smem(info))))
            finally:
                fn.max_dynamic_shared_size_bytes = old
        _CAPACITY[key] = cap
        _CAPACITY[("keep", id(fn))] = fn  # keep fn alive so its id stays unique
    return cap


def cluster_pays(fn, smem: int, ks: int, grid: int, info: dict) -> bool:
    """Whether a grid of `grid` CTAs should sum its ks splits over clusters.  H100, 2026-11-25
    (profiling/cluster_probe.py, every dense shape, M = 16..128, 2..8 splits): the cluster sum
    is 0-29 % faster than the workspace sum, except where the clustered grid is less resident:
    a second wave the plain launch does not need (15-70 % slower), or, while the plain grid
    gives every CTA its own SM, two CTAs sharing an SM (g = 120 / 128 CTAs: 14-23 % slower)."""
    full, one_per_sm = cluster_capacity(fn, smem, ks, info)
    return grid <= full and (grid > info["sms"] or grid <= one_per_sm)


def _finish_plan(p: Plan, info: dict, k: int, K: int, tok: int, tiles: int, k_splits, stages, label: str,
                 max_stages: int = MAX_STAGES, cluster=None, spread=None, dense: bool = False) -> Plan:
    """Fill split-K count, pipeline depth, grid and workspace of a plan over `tiles`
    (token tile x column strip) work tiles (dense and grouped kernels alike; dense: the split
    count from dense_splits)."""
    st0, occ = choose_stages(info, k, tok, p.fn.num_regs, p.lc)
    st0 = min(st0, max_stages)
    k_tiles = -(-K // TILE_K)
    if k_tiles >= 1 << 16:  # the kernel splits K tiles in 32-bit arithmetic (k_tiles * k_splits < 2^32)
        raise DoesNotFit(f"{label}: K = {K} has {k_tiles} K tiles of 64, more than the kernel's 65535")
    if stages is not None:
        if not MIN_STAGES <= int(stages) <= MAX_STAGES:
            raise ValueError(f"stages must be in {MIN_STAGES}..{MAX_STAGES}, got {stages}")

    def stages_for(ks):
        return int(stages) if stages is not None else max(MIN_STAGES, min(st0, -(-k_tiles // ks) + 2))

    def smem_for(ks):
        return smem_bytes(k, tok, stages_for(ks), p.lc)

    def cl_smem_for(ks):
        # A clustered launch goes out with enough shared memory that an SM holds at most the plan's
        # `occ` CTAs: the kernels of 80 registers fit three, and clusters packed three to an SM (Q,
        # k = 2, M = 16: 8.6 -> 9.7 us, H100) where the plain grid has at most two.
        return max(smem_for(ks), spread_smem(info, occ))

    def clustered(ks):
        # cluster: None = CLUSTER where the split count fits a cluster and the launch keeps its CTAs as
        # resident as the plain one (cluster_pays); a given True needs the split count to fit.
        if cluster is not None:
            return bool(cluster) and 2 <= ks <= MAX_CLUSTER
        if smem_for(ks) > info["smem_block"]:
            return False  # does not fit (forced stages): DoesNotFit below, no occupancy query
        return CLUSTER and 2 <= ks <= MAX_CLUSTER and cluster_pays(p.fn, cl_smem_for(ks), ks, tiles * ks, info)

    if k_splits is None:
        if dense:
            ks = dense_splits(k_tiles, info["sms"], tiles, tok, clustered)
        else:
            ks = grouped_splits(k_tiles, info["sms"], occ, tiles, tok, k)
    else:
        ks = int(k_splits)
        if not 1 <= ks <= k_tiles:
            raise ValueError(f"k_splits must be in 1..{k_tiles} (K tiles of 64) for K = {K}, got {k_splits}")
    st = stages_for(ks)
    p.tok, p.k_splits, p.stages, p.tiles, p.occ = tok, ks, st, tiles, occ
    p.grid = tiles * ks
    p.one_wave = p.grid <= info["sms"] * occ  # every CTA resident at once
    if p.grid >= 2**31:
        raise DoesNotFit(f"{label}: {p.grid} CTAs exceed the grid limit")
    p.smem = smem_for(ks)
    if p.smem > info["smem_block"]:
        raise DoesNotFit(f"{label} with {st} stages needs {p.smem} bytes of shared memory")
    cl_smem = cl_smem_for(ks)
    p.cluster = clustered(ks)
    if cluster and not p.cluster and ks > 1:
        raise ValueError(f"cluster=True needs 2..{MAX_CLUSTER} splits, got k_splits={ks}")
    p.ws_floats = ks * tiles * 128 * tok if ks > 1 and not p.cluster else 0
    # spread: launched with enough (unused) dynamic shared memory that one CTA fills an SM's,
    # so a clustered grid cannot be packed two CTAs to an SM (experiment: profiling/cluster_probe.py)
    p.launch_smem = cl_smem if p.cluster else p.smem
    if spread:
        p.launch_smem = max(p.smem, spread_smem(info))
    return p


def _check_tok(tok, choices=TOK_CHOICES):
    if tok not in choices:
        raise ValueError(f"tok must be one of {choices}, got {tok}")
    return tok


def plan(M: int, N: int, K: int, k: int, dtype_name: str, dev_id: int, k_splits=None, tok=None,
         stages=None, cluster=None, spread=None, cbd: bool = False, tma=None) -> Plan:
    """cbd: the weight has the default codebook (KbitWeight.default_codebook): the kernel with its
    levels compiled in.  tma: kbit_wgmma_tma (the stages by TMA; its launch leads with
    tensor_map(A, plan.tok)); False: kbit_wgmma (cp.async); None: the module's TMA."""
    tma = TMA if tma is None else bool(tma)
    key = (dev_id, M, N, K, k, dtype_name, k_splits, tok, stages, cluster, CLUSTER, spread, bool(cbd), bool(tma))
    p = _PLANS.get(key)
    if p is not None:
        return p
    info = device_info(dev_id)
    if tok is None:
        n_tiles = -(-N // TILE_N)
        tok = fill_tok(choose_tok(M, TOK_CHOICES, n_tiles, info["sms"], -(-K // TILE_K)), M, n_tiles, info["sms"])
    tok = _check_tok(int(tok))
    p = Plan()
    variant = ("tma_" if tma else "") + ("cbd" if cbd else "")  # instance key prefix ("": the plain kernel)
    p.fn = WGMMA.function((variant.rstrip("_"), k, dtype_name, tok) if variant else (k, dtype_name, tok))
    p.m_tiles = -(-M // tok)
    p.lc = dense_lc(k, tok)
    p = _finish_plan(p, info, k, K, tok, p.m_tiles * -(-N // TILE_N), k_splits, stages,
                     f"kbit_wgmma<k={k}, TOK={tok}>", cluster=cluster, spread=spread, dense=True)
    _PLANS[key] = p
    return p


def grouped_plan(N: int, K: int, k: int, dtype_name: str, dev_id: int, n_slots: int, max_tokens: int,
                 k_splits=None, tok=None, stages=None, cluster=None, spread=None, cbd: bool = False,
                 fewer_copies=None) -> Plan:
    """Plan of the grouped kernel: every slot gets ceil(max_tokens / TOK) token tiles x
    the column strips of one expert; the split-K count from grouped_splits (one wave of resident
    CTAs, or one CTA per SM where that measured faster).  k = 5 at
    TOK in GROUPED_K5_LC_TOKS: the kernel with 2**GROUPED_K5_LC pair-table copies where
    fewer_copies_pays (None; k_splits or stages given: the default copies), or as fewer_copies says
    (True / False)."""
    key = ("grouped", dev_id, N, K, k, dtype_name, n_slots, max_tokens, k_splits, tok, stages, cluster, CLUSTER, spread,
           bool(cbd), fewer_copies)
    p = _PLANS.get(key)
    if p is not None:
        return p
    mt = max(1, int(max_tokens))
    tok = _check_tok(choose_tok(mt, GROUPED_TOK_CHOICES) if tok is None else int(tok), GROUPED_TOK_CHOICES)
    info = device_info(dev_id)

    def make(lc):
        q = Plan()
        q.lc = lc
        q.fn = WGMMA.function((("grouped_lc" if lc is not None else "grouped") + ("_cbd" if cbd else ""), k, dtype_name,
                               tok))
        q.m_tiles = -(-mt // tok)
        return _finish_plan(q, info, k, K, tok, n_slots * q.m_tiles * -(-N // TILE_N), k_splits, stages,
                            f"kbit_wgmma_grouped<k={k}, TOK={tok}>", GROUPED_MAX_STAGES, cluster, spread)

    lc_ok = k == 5 and tok in GROUPED_K5_LC_TOKS
    if fewer_copies and not lc_ok:
        raise ValueError(f"fewer_copies: the grouped kernel has fewer table copies at k = 5, TOK in {GROUPED_K5_LC_TOKS} "
                         f"only (k = {k}, TOK = {tok})")
    p = make(GROUPED_K5_LC if fewer_copies else None)
    if fewer_copies is None and lc_ok and k_splits is None and stages is None:
        q = make(GROUPED_K5_LC)
        if fewer_copies_pays(p.grid, p.occ, p.k_splits, q.grid, q.occ, q.k_splits, -(-K // TILE_K), info["sms"]):
            p = q
    _PLANS[key] = p
    return p


# The grouped plans' cost model for the choice of table copies (H100, 2026-11-26, k5sweep28 / k5copies28,
# k = 5, TOK = 64): a wave of CTAs costs ~5-7 us of fixed work (prologue, pipeline fill, epilogue) plus
# ~0.53 us per K tile of the SM's CTAs (gate/up fused, 8 experts: 32 K tiles a CTA 24.3 us, 16 tiles 16.0);
# the 8-copy table's bank conflicts cost ~5 % a tile (16 tokens: 12.70 -> 13.22 us at the same plan).
GROUPED_WAVE_US = 5.0
GROUPED_TILE_US = 0.55
GROUPED_LC_PENALTY = 1.05


def grouped_cost(grid: int, occ: int, k_splits: int, k_tiles: int, sms: int, penalty: float = 1.0) -> float:
    """Modelled time (us) of a grouped wgmma grid: its waves' fixed cost plus the K tiles of the
    busiest SM's CTAs."""
    waves = -(-grid // (sms * max(1, occ)))
    return waves * GROUPED_WAVE_US + -(-grid // sms) * -(-k_tiles // k_splits) * GROUPED_TILE_US * penalty


def fewer_copies_pays(grid: int, occ: int, ks: int, grid_lc: int, occ_lc: int, ks_lc: int, k_tiles: int,
                      sms: int) -> bool:
    """Whether the grouped plan at fewer pair-table copies (grid_lc CTAs, occ_lc per SM, ks_lc splits)
    beats the plan at the default copies (grid, occ, ks) in grouped_cost.  Measured (k5copies28): 10 / 12
    experts at 64 tokens (gate/up fused 80 / 96 tiles on one split at one CTA per SM, down 160 / 192
    tiles in two waves) faster with 8 copies; 8 experts and 16..32 tokens slower."""
    return occ_lc > occ and (grouped_cost(grid_lc, occ_lc, ks_lc, k_tiles, sms, GROUPED_LC_PENALTY)
                             < grouped_cost(grid, occ, ks, k_tiles, sms))


def reserve(M: int, N: int, K: int, k: int, dtype=np.float16, k_splits=None, tok=None, stream=None, cbd=False,
            tma=None):
    """Compile/load the kernel and size the stream's workspace for this call, so that a
    later capture of the same call allocates nothing."""
    import cupy as cp

    dev = cp.cuda.Device().id
    tname = "bfloat16" if np.dtype(dtype) == bfloat16 else "float16"
    p = plan(M, N, K, k, tname, dev, k_splits, tok, cbd=cbd, tma=tma)
    set_smem(p.fn, p.launch_smem)
    stream = stream or cp.cuda.get_current_stream()
    if p.ws_floats:
        _workspace(dev, stream, p.ws_floats, p.tiles)
    return p


# ----------------------------------------------------------------------------- launch
def wgmma_gemm(A, qw, out, k_splits=None, tok=None, stages=None, *, cluster=None, spread=None, validate=True,
               tma=None):
    """out[M, N] = A[M, K] @ W^T with the wgmma kernel (sm_90 only).

    A: contiguous CuPy float16/bfloat16 [M, K] (16-byte aligned); qw: KbitWeight, tiled,
    on A's device; out: contiguous [M, N] of A's dtype.  Runs on the current stream.
    k_splits / tok / stages override the heuristic; cluster: True / False forces the split-K
    sum over a thread block cluster or through the workspace (None: CLUSTER where it fits);
    spread: launch with one CTA per SM's worth of shared memory (experiment); tma: the stages by
    TMA (kbit_wgmma_tma), False: by cp.async (kbit_wgmma); None: the module's TMA (env KBIT_WG_TMA).
    validate=False skips the argument checks (kbitcupy._checks) for callers that made them.
    """
    if validate:
        check_kernel_call(A, qw, out, "wgmma_gemm")
    M, K = A.shape
    N = qw.shape[0]
    if qw.layout != "tiled" or qw.absmax.dtype != np.uint8:
        raise ValueError("wgmma_gemm needs a tiled weight with E4M4 absmax (kbitcupy.repack)")
    if A.data.ptr % 16 or qw.packed.data.ptr % 16 or qw.absmax.data.ptr % 16:
        raise ValueError("A, packed and absmax must be 16-byte aligned")
    dev = A.device.id
    if not supported(dev):
        raise RuntimeError("wgmma_gemm needs a compute capability 9.0 GPU (H100/H200)")
    if M == 0:
        return out
    tname = "bfloat16" if A.dtype == bfloat16 else "float16"
    tma = TMA if tma is None else bool(tma)
    p = plan(M, N, K, qw.k, tname, dev, k_splits, tok, stages, cluster, spread, CBD and qw.default_codebook, tma)
    lead = (tensor_map(A, p.tok),) if tma else ()
    return launch_fused(p, THREADS, A, qw, out, _vec8(out), _pdl.dense_arg(dev), lead)


# cuTensorMapEncodeTiled's enums (cuda.h)
_TMAP_DTYPE = {"float16": 6, "bfloat16": 9}  # CU_TENSOR_MAP_DATA_TYPE_FLOAT16 / _BFLOAT16
_TMAP_SWIZZLE_128B = 3
_TMAP_L2_PROMOTION_128B = 2
_TMAPS: dict = {}


def tensor_map(A, tok: int) -> "_pdl.TensorMap":
    """The 2-D tensor map kbit_wgmma_tma and kbit_wgmma_grouped copy A's token tiles through: A [M, K] row-major
    (K elements inner, row stride 2K bytes: K % 8 == 0, a 16-byte aligned base), boxes of 64
    elements x tok rows in the 128-byte swizzle (the kernel's token tile layout); rows past M
    and the upper half of a K % 64 == 32 tile read as zeros.  Cached per (pointer, shape,
    dtype, tok): encoding is host-only (no device call, capturable) but costs a driver call."""
    M, K = (int(x) for x in A.shape)
    tname = "bfloat16" if A.dtype == bfloat16 else "float16"
    key = (int(A.data.ptr), M, K, tname, int(tok))
    tm = _TMAPS.get(key)
    if tm is None:
        if K % 8 or A.data.ptr % 16:
            raise ValueError(f"A for the TMA kernel needs K % 8 == 0 and a 16-byte aligned base (K = {K})")
        if len(_TMAPS) > 4096:
            _TMAPS.clear()
        tm = _TMAPS[key] = _pdl.encode_tensor_map_2d(int(A.data.ptr), _TMAP_DTYPE[tname], K, M, 2 * K, 64, int(tok),
                                                     _TMAP_SWIZZLE_128B, _TMAP_L2_PROMOTION_128B)
    return tm


def _vec8(out) -> int:
    """1 if every output row may be stored in 16-byte pieces (N % 8 == 0, aligned base)."""
    return 1 if (out.shape[1] % 8 == 0 and out.data.ptr % 16 == 0) else 0


def grouped_wgmma(A, bank, ids, offs, out, max_tokens: int, err, k_splits=None, tok=None, stages=None,
                  ids_stable: bool = False, cluster=None, spread=None, fewer_copies=None, chained: bool = False):
    """C_sorted = per-slot A_sorted @ W_e^T (kbitcupy.grouped contract) with the grouped
    wgmma kernel, one launch.  Validated CuPy arrays (grouped.grouped_matmul checks them);
    err: the grouped kernels' int32 error flag.  No allocation after the first call of a
    shape on a stream (the split-K workspace is gemm's), no sync: capturable.  ids_stable
    and chained: see kbitcupy.grouped.grouped_matmul (PDL only); fewer_copies: grouped_plan's (k = 5)."""
    N, K = bank.shape
    dev = A.device.id
    if not supported(dev):
        raise RuntimeError("grouped_wgmma needs a compute capability 9.0 GPU (H100/H200)")
    if bank.packed.data.ptr % 16 or bank.absmax.data.ptr % 16:
        raise ValueError("the bank's packed and absmax arrays must be 16-byte aligned")
    n_slots = int(ids.size)
    if n_slots == 0 or A.shape[0] == 0:
        return out
    tname = "bfloat16" if A.dtype == bfloat16 else "float16"
    p = grouped_plan(N, K, bank.k, tname, dev, n_slots, max_tokens, k_splits, tok, stages, cluster, spread,
                     CBD and bank.default_codebook, fewer_copies)
    set_smem(p.fn, p.launch_smem)
    ws, cnt = plan_workspace(p, dev, out)
    # the safe early mode for grids of one wave: with several, every later CTA would prefetch what it
    # loads at once anyway (H100, 2026-11-26, layer26: moe_forward with 505-512 experts at 256 / 1024
    # tokens 2-4 % slower with it)
    pdl = _pdl.grouped_mode(dev, ids_stable, safe_early=SAFE_EARLY and p.one_wave, chained=chained)
    # the tensor map of A first (the kernel's __grid_constant__ parameter; _pdl.launch: cuLaunchKernelEx)
    args = (tensor_map(A, p.tok), A, bank.packed, bank.absmax, bank.codebook, bank.tensor_scale, ids, offs, out, ws,
            cnt, np.int32(N), np.int32(K), np.int32(bank.num_experts), np.int32(A.shape[0]),
            np.int64(bank.words_per_expert), np.int64(bank.absmax_per_expert), np.int32(p.m_tiles),
            np.int32(p.k_splits), np.int32(p.stages), np.int32(max_tokens), np.int32(_vec8(out)), err, np.int32(pdl),
            np.int32(p.cluster))
    _pdl.launch(p.fn, (p.grid,), (THREADS,), args, p.launch_smem, pdl=pdl, cluster=p.cl_size)
    return out
