"""Launcher for the fused dequant + MMA GEMM (cuda_src/kbit_gemm.cu), M = 9..~256.

``gemm(A, qw, out)`` computes out[M, N] = A[M, K] @ W^T for a TILED k-bit weight on the
GPU (any M >= 1; meant for M = 9..~256).  It allocates nothing on the hot path (the
split-K workspace is allocated once per (device, stream), about 17 MB on an H100 --
enough for every default plan -- and only grows for larger forced k_splits), never
synchronises with the host and is capturable in a CUDA graph once a first call of the
same shape has run outside the capture (that call compiles/loads the kernel, sets its
shared-memory attribute and sizes the workspace; ``reserve`` does the same without
computing).

Kernel configuration (see the .cu header for the design):
  * M_BLOCKS (1..4) m16 blocks per CTA, m_tiles CTAs along M: M is cut into
    ceil(M / 64) tiles of the fewest m16 blocks that cover it (M = 80 -> 2 x 48).
  * TILE_N = 64 or 128 columns per CTA (4 warps of TILE_N / 4 columns).
  * K steps of 128 (two layout tiles) through a `stages`-deep cp.async pipeline,
    stages in 2..4 chosen from the shared memory per SM (most CTAs per SM first,
    then the deepest pipeline), never deeper than the steps a CTA owns + 1.
  * split-K: k_splits CTAs per output tile, each a contiguous range of K steps;
    default: as many as one wave of resident CTAs allows, but >= MIN_STEPS_PER_SPLIT
    steps each as long as that still gives every SM a CTA (on sm_90 at M <= 16:
    small_m_plan).  Partials go to per-split fp32 slots of the workspace, the last
    CTA of a tile (atomic counter) sums them in split order (deterministic) and
    resets the counter, so counters never need a host memset.  Or (sm_90, M <= 64,
    2..8 splits; plan's `cluster`) the splits are one thread block cluster and sum
    over distributed shared memory in the same order: no workspace.

Stream safety: the workspace (fp32 slots + int32 counters) is keyed by
(device id, current stream pointer).  Kernels on one stream run in order, so they
can share it; two streams get two workspaces and can run concurrently.  A CUDA
graph captured on stream S bakes in S's workspace: do not replay it concurrently
with other work that uses S's workspace (eager calls on S, or another replay of a
graph captured on S on a different stream).  A workspace that has to grow is
replaced, and the old one is kept alive (a graph may still use it);
``release_workspaces()`` drops them all (only when no pending kernel or live graph
uses them).
"""
from __future__ import annotations

import os
import threading

import numpy as np

from ._checks import check_kernel_call
from . import _pdl
from ._compile import Family, register
from .gemv import lut_bytes
from .quantize import CTYPE
from .reference import TILE_K, bfloat16

THREADS = 128
M_BLOCK_CHOICES = (1, 2, 3, 4)
TILE_N_CHOICES = (64, 128)
MAX_TILE_M = 64
MIN_STEPS_PER_SPLIT = 2   # K steps of 128 per split-K slice (default heuristic)
MAX_OCCUPANCY = 4         # CTAs per SM the stage choice aims for at most
MAX_CLUSTER = 8           # portable thread block cluster size (KBIT_MAX_CLUSTER in kbit_common.cuh)
MAX_STAGES = 8            # pipeline depth limit (cp_async_wait_dyn in the .cu)


def _instances():
    inst = {}
    for k in (2, 3, 4, 5):
        for t in ("float16", "bfloat16"):
            for mb in M_BLOCK_CHOICES:
                for tn in TILE_N_CHOICES:
                    inst[(k, t, mb, tn)] = f"kbit_gemm<{k}, {CTYPE[t]}, {mb}, {tn}>"
    return inst


# One NVRTC call compiles the 4 M_BLOCKS variants of one (k, dtype, TILE_N).  KBIT_GEMM_OPTS: extra
# NVRTC options, an experiment hook (e.g. -DKBIT_GEMM_PF=2, see the .cu).
GEMM = register("gemm", Family("kbit_gemm.cu", _instances(), group_of=lambda key: (key[0], key[1], key[3]),
                               options=tuple(os.environ.get("KBIT_GEMM_OPTS", "").split())))


# ----------------------------------------------------------------------------- sizes
def stage_bytes(k: int, m_blocks: int, tile_n: int) -> int:
    """One pipeline stage: the A tile, two B tiles and their absmax, in 128-byte multiples."""
    a = 16 * m_blocks * 256
    b = 2 * (tile_n * 2 * k + 16) * 4
    absb = 2 * (tile_n * 2 + 16)
    return -(-(a + b + absb) // 128) * 128


def smem_bytes(k: int, m_blocks: int, tile_n: int, stages: int) -> int:
    return lut_bytes(k) + 1024 + 256 + stages * stage_bytes(k, m_blocks, tile_n)


def m_blocking(M: int):
    """(m_blocks, m_tiles): fewest m16 blocks per tile (<= 4) covering M in ceil(M/64) tiles."""
    m_tiles = max(1, -(-M // MAX_TILE_M))
    blocks16 = max(1, -(-M // 16))
    return -(-blocks16 // m_tiles), m_tiles


def k_steps(K: int) -> int:
    return -(-(-(-K // TILE_K)) // 2)


# ----------------------------------------------------------------------------- device
_DEV: dict = {}


def device_info(dev_id: int) -> dict:
    info = _DEV.get(dev_id)
    if info is None:
        import cupy as cp

        a = cp.cuda.Device(dev_id).attributes
        info = {
            "sms": a["MultiProcessorCount"],
            "smem_sm": a.get("MaxSharedMemoryPerMultiprocessor", 228 * 1024),
            "smem_block": a.get("MaxSharedMemoryPerBlockOptin", a.get("MaxSharedMemoryPerBlock", 48 * 1024)),
            "smem_reserved": a.get("ReservedSharedMemoryPerBlock", 1024),
            "regs_sm": a.get("MaxRegistersPerMultiprocessor", 65536),
            "threads_sm": a.get("MaxThreadsPerMultiProcessor", 2048),
            "blocks_sm": a.get("MaxBlocksPerMultiprocessor", 32),
            "cc": int(cp.cuda.Device(dev_id).compute_capability),
        }
        _DEV[dev_id] = info
    return info


def occupancy(info: dict, smem: int, regs: int, threads: int = THREADS) -> int:
    """Resident CTAs per SM for `threads`-thread CTAs using `smem` dynamic bytes and `regs` registers."""
    if smem > info["smem_block"]:
        return 0
    by_smem = info["smem_sm"] // (smem + info["smem_reserved"])
    warp_regs = -(-max(regs, 1) // 8) * 8 * 32          # allocation unit: 256 registers per warp
    by_regs = info["regs_sm"] // (warp_regs * (threads // 32))
    by_threads = info["threads_sm"] // threads
    return int(max(0, min(by_smem, by_regs, by_threads, info["blocks_sm"])))


class DoesNotFit(RuntimeError):
    """No pipeline depth of this configuration fits the device's shared memory per block."""


def best_stages(info: dict, depths, smem_of, regs: int, max_occupancy: int, what: str, threads: int = THREADS):
    """(stages, CTAs per SM) over the pipeline depths `depths` (deepest first): the most resident
    CTAs (up to max_occupancy), then the deepest pipeline.  smem_of(stages) -> dynamic bytes."""
    best = None
    for st in depths:
        occ = min(occupancy(info, smem_of(st), regs, threads), max_occupancy)
        if occ and (best is None or occ > best[1]):
            best = (st, occ)
    if best is None:
        raise DoesNotFit(f"{what} does not fit in shared memory ({smem_of(min(depths))} bytes > {info['smem_block']})")
    return best


def choose_stages(info: dict, k: int, m_blocks: int, tile_n: int, regs: int):
    """(stages, CTAs per SM): the most resident CTAs (up to MAX_OCCUPANCY), then the deepest pipeline."""
    return best_stages(info, (4, 3, 2), lambda st: smem_bytes(k, m_blocks, tile_n, st), regs, MAX_OCCUPANCY,
                       f"kbit_gemm<k={k}, M_BLOCKS={m_blocks}, TILE_N={tile_n}>")


# ----------------------------------------------------------------------------- plan
class Plan:
    __slots__ = ("fn", "grid", "smem", "m_tiles", "k_splits", "stages", "tile_n", "m_blocks", "ws_floats", "tiles",
                 "cluster")

    @property
    def cl_size(self) -> int:
        """CTAs per thread block cluster of the launch (1: no clusters)."""
        return self.k_splits if self.cluster else 1

    def __repr__(self):
        return (f"Plan(M_BLOCKS={self.m_blocks}, TILE_N={self.tile_n}, m_tiles={self.m_tiles}, k_splits={self.k_splits}, "
                f"stages={self.stages}, grid={self.grid}, smem={self.smem}, cluster={self.cluster})")


_PLANS: dict = {}
_SMEM_SET: dict = {}
_LOCK = threading.Lock()


def cluster_fits(m_tiles: int, ks: int, m_blocks: int, tile_n: int, stages: int, k: int) -> bool:
    """Whether a plan can sum its splits over a thread block cluster: sm_90 only (the caller's
    check), one m tile (a tile's splits are then consecutive blocks), 2..MAX_CLUSTER splits,
    and the partial (TILE_M rows of TILE_N + 8 floats) fits the stage buffers."""
    return (m_tiles == 1 and 2 <= ks <= MAX_CLUSTER
            and 16 * m_blocks * (tile_n + 8) * 4 <= stages * stage_bytes(k, m_blocks, tile_n))


def small_m_plan(info: dict, tiles: int, KS: int) -> tuple:
    """(k_splits, cluster) of the Hopper rule for one m16 block (M <= 16) at TILE_N = 128: at most
    MAX_CLUSTER splits, summed over a thread block cluster where the grid is far from one CTA an SM
    (>= 1.9 or <= 0.5 an SM), else through the workspace.  H100 M = 8 / 16, k = 4, every dense shape
    (profiling/run44.sh kg / fix): gate/up (40 tiles) 320 CTAs on clusters 6.24 us against 7.14 at 160
    and 6.37 through the workspace; down / O / linear key (16 tiles) 128 CTAs through the workspace
    (clusters +0.6..+1 us there: a clustered grid of one CTA an SM sits less evenly); KV (4 tiles) 32
    CTAs on clusters 3.53 against 4.15."""
    ks = max(1, min(MAX_CLUSTER, KS))
    grid = tiles * ks
    return ks, ks > 1 and (grid >= 1.9 * info["sms"] or 2 * grid <= info["sms"])


def plan(M: int, N: int, K: int, k: int, dtype_name: str, dev_id: int, k_splits=None, tile_n=None,
         cluster=None, stages=None) -> Plan:
    """cluster: None = the default, True = the splits' sum over a thread block cluster (sm_90;
    ValueError where cluster_fits says no), False = the workspace sum.  stages: the pipeline depth
    (2..MAX_STAGES; default: the most resident CTAs an SM, then the deepest, at most a split's steps
    + 1; deeper measured slower at one CTA an SM: profiling/run44.sh deep).  Defaults: on sm_90 at
    M <= 16 small_m_plan (TILE_N = 128); elsewhere the occupancy rules below, the workspace sum."""
    key = (dev_id, M, N, K, k, dtype_name, k_splits, tile_n, cluster, stages)
    p = _PLANS.get(key)
    if p is not None:
        return p
    info = device_info(dev_id)
    mb, m_tiles = m_blocking(M)
    KS = k_steps(K)
    hopper_small = info["cc"] >= 90 and mb == 1

    def regs_of(tn):
        return GEMM.function((k, dtype_name, mb, tn)).num_regs

    if tile_n is None and hopper_small:
        tile_n = 128
    elif tile_n is None:
        # TILE_N = 128 (half the A reads from shared memory per weight) when it keeps
        # >= 2 CTAs per SM (or as many as 64 would) and split-K can still fill one wave.
        try:
            occ128 = choose_stages(info, k, mb, 128, regs_of(128))[1]
        except DoesNotFit:
            occ128 = 0
        try:
            occ64 = choose_stages(info, k, mb, 64, regs_of(64))[1]
        except DoesNotFit:
            occ64 = 0
        tiles128 = m_tiles * -(-N // 128)
        if occ128 == 0 or occ128 < min(occ64, 2):
            tile_n = 64
        else:
            tile_n = 128 if tiles128 * KS >= info["sms"] * occ128 else 64
    if tile_n not in TILE_N_CHOICES:
        raise ValueError(f"tile_n must be one of {TILE_N_CHOICES}, got {tile_n}")
    fn = GEMM.function((k, dtype_name, mb, tile_n))
    forced_stages = stages
    stages, occ = choose_stages(info, k, mb, tile_n, fn.num_regs)
    n_blocks = -(-N // tile_n)
    tiles = m_tiles * n_blocks
    auto_cluster = False
    if k_splits is None and hopper_small:
        ks, auto_cluster = small_m_plan(info, tiles, KS)
    elif k_splits is None:
        # one wave of resident CTAs; >= MIN_STEPS_PER_SPLIT steps per split unless that
        # would leave SMs without a CTA
        capacity = info["sms"] * occ
        ks = max(1, min(KS, capacity // tiles))
        ks_min_steps = max(1, KS // MIN_STEPS_PER_SPLIT)
        if ks > ks_min_steps and tiles * ks_min_steps >= info["sms"]:
            ks = ks_min_steps
    else:
        ks = int(k_splits)
        if not 1 <= ks <= KS:
            raise ValueError(f"k_splits must be in 1..{KS} (K steps of 128) for K = {K}, got {k_splits}")
    steps_per_split = -(-KS // ks)
    stages = max(2, min(stages, steps_per_split + 1))
    if forced_stages is not None:
        if not 2 <= int(forced_stages) <= MAX_STAGES:
            raise ValueError(f"stages must be in 2..{MAX_STAGES}, got {forced_stages}")
        stages = int(forced_stages)
        if occupancy(info, smem_bytes(k, mb, tile_n, stages), fn.num_regs) < 1:
            raise DoesNotFit(f"kbit_gemm with {stages} stages does not fit in shared memory")
    fits = info["cc"] >= 90 and cluster_fits(m_tiles, ks, mb, tile_n, stages, k)
    if cluster and not fits:
        raise ValueError(f"cluster=True needs sm_90, M <= {MAX_TILE_M} and 2..{MAX_CLUSTER} splits "
                         f"(got M={M}, k_splits={ks})")
    p = Plan()
    p.fn, p.m_blocks, p.tile_n, p.m_tiles, p.k_splits, p.stages, p.tiles = fn, mb, tile_n, m_tiles, ks, stages, tiles
    p.cluster = bool(cluster) if cluster is not None else auto_cluster and fits
    p.grid = tiles * ks
    p.smem = smem_bytes(k, mb, tile_n, stages)
    p.ws_floats = ks * tiles * 16 * mb * tile_n if ks > 1 and not p.cluster else 0
    _PLANS[key] = p
    return p


# ----------------------------------------------------------------------------- workspace
_WS: dict = {}
_RETIRED: list = []  # replaced workspaces: a CUDA graph captured earlier may still use them


def _workspace(dev_id: int, stream, floats: int, counters: int):
    """(ws float32, counters int32) of at least the given sizes for this (device, stream)."""
    key = (dev_id, stream.ptr)
    cur = _WS.get(key)
    if cur is not None and cur[0].size >= floats and cur[1].size >= counters:
        return cur
    if stream.is_capturing():
        raise RuntimeError("kbitcupy.gemm: the split-K workspace must grow during CUDA graph capture; run the same "
                           "call once before capturing, or call kbitcupy.gemm.reserve(...) first")
    import cupy as cp

    # first allocation: the largest workspace a default plan can ask for (one wave of
    # CTAs, each a 64 x 128 fp32 partial; about 17 MB on an H100), so that later calls
    # (and captures) rarely need to grow it
    sms = device_info(dev_id)["sms"]
    f0 = cur[0].size if cur else sms * MAX_OCCUPANCY * MAX_TILE_M * 128
    c0 = cur[1].size if cur else sms * MAX_OCCUPANCY
    f = f0 if floats <= f0 else floats + floats // 4  # grow with some slack
    c = c0 if counters <= c0 else counters + counters // 4
    f = -(-f // 4096) * 4096
    c = -(-c // 256) * 256
    if cur is not None:
        _RETIRED.append(cur)
    ws = cp.empty(f, dtype=cp.float32)
    cnt = cp.zeros(c, dtype=cp.int32)  # zeroed once; every launch leaves them zero again
    cur = (ws, cnt)
    _WS[key] = cur
    return cur


def reserve(M: int, N: int, K: int, k: int, dtype=np.float16, k_splits=None, tile_n=None, stream=None, cluster=None):
    """Size the current (or given) stream's workspace for this call, and compile/load its
    kernel, so that a later capture of the same call allocates nothing."""
    import cupy as cp

    dev = cp.cuda.Device().id
    tname = "bfloat16" if np.dtype(dtype) == bfloat16 else "float16"
    p = plan(M, N, K, k, tname, dev, k_splits, tile_n, cluster)
    set_smem(p.fn, p.smem)
    stream = stream or cp.cuda.get_current_stream()
    if p.ws_floats:
        _workspace(dev, stream, p.ws_floats, p.tiles)
    return p


def release_workspaces():
    """Drop every cached workspace (only when no pending kernel or live CUDA graph uses them)."""
    _WS.clear()
    _RETIRED.clear()


def set_smem(fn, smem: int) -> None:
    """Raise a kernel's dynamic shared-memory limit to `smem` (never lower it: plans of one
    kernel share the CUfunction) and ask for the largest carveout, so several CTAs fit per SM."""
    if _SMEM_SET.get(id(fn), 0) < smem:
        with _LOCK:
            if _SMEM_SET.get(id(fn), 0) < smem:
                fn.max_dynamic_shared_size_bytes = max(smem, 48 * 1024)
                fn.preferred_shared_memory_carveout = 100
                _SMEM_SET[id(fn)] = smem
                _SMEM_SET[("keep", id(fn))] = fn  # keep fn alive so its id stays unique



# ----------------------------------------------------------------------------- launch
def gemm(A, qw, out, k_splits=None, tile_n=None, cluster=None, *, validate=True):
    """out[M, N] = A[M, K] @ W^T with the fused kernel.

    A: contiguous CuPy float16/bfloat16 [M, K] (16-byte aligned); qw: KbitWeight, tiled,
    on A's device; out: contiguous [M, N] of A's dtype.  Runs on the current stream.
    k_splits / tile_n override the heuristic (k_splits in 1..ceil(K/128), tile_n 64/128);
    cluster=True / False: the splits' sum over a thread block cluster (sm_90, M <= 64, 2..8 splits) /
    through the workspace (None: the plan's choice).
    validate=False skips the argument checks (kbitcupy._checks) for callers that made them.
    """
    if validate:
        check_kernel_call(A, qw, out, "gemm")
    M, K = A.shape
    N = qw.shape[0]
    if qw.layout != "tiled" or qw.absmax.dtype != np.uint8:
        raise ValueError("gemm needs a tiled weight with E4M4 absmax (kbitcupy.repack)")
    if A.data.ptr % 16 or qw.packed.data.ptr % 16 or qw.absmax.data.ptr % 16:
        raise ValueError("A, packed and absmax must be 16-byte aligned")
    if M == 0:
        return out
    tname = "bfloat16" if A.dtype == bfloat16 else "float16"
    dev = A.device.id
    try:
        p = plan(M, N, K, qw.k, tname, dev, k_splits, tile_n, cluster)
    except DoesNotFit:
        if k_splits is not None or tile_n is not None or cluster:
            raise
        # e.g. k = 5 (64 KB pair table) on a GPU with < 110 KB of shared memory per block
        from .dequant_matmul import dequant_matmul

        return dequant_matmul(A, qw, out, validate=False)
    # flags: bit 0 = 4-byte C stores, bit 1 = the default codebook (immediates in the kernel)
    flags = (1 if (N % 2 == 0 and out.data.ptr % 4 == 0) else 0) | (2 if qw.default_codebook else 0)
    return launch_fused(p, THREADS, A, qw, out, flags, _pdl.dense_arg(dev))


def plan_workspace(p, dev_id: int, out):
    """(ws, counters) for launching fused plan p on the current stream: the stream's
    split-K workspace, or where the plan needs none (no split-K, or the wgmma kernel's sum
    over a cluster) `out` as a placeholder the kernel never reads."""
    if not p.ws_floats:
        return out, out
    import cupy as cp

    return _workspace(dev_id, cp.cuda.get_current_stream(), p.ws_floats, p.tiles)


def launch_fused(p, threads: int, A, qw, out, vec: int, pdl: int = 0, lead=()):
    """Launch a fused-GEMM plan (kbit_gemm or kbit_wgmma: the same argument list, and a wgmma
    plan's `cluster` flag after it) on the current stream, with this stream's split-K
    workspace; pdl: the kernel's pdl argument (_pdl.dense_arg; nonzero: launched as a
    programmatic dependent, kbitcupy/_pdl.py); a wgmma plan with
    `cluster` set: in thread block clusters of its k_splits CTAs (the split-K sum over DSMEM); lead:
    arguments before the common list (kbit_wgmma_tma's tensor map)."""
    M, K = A.shape
    N = out.shape[1]
    cluster = getattr(p, "cluster", None)  # wgmma plans only
    smem = getattr(p, "launch_smem", p.smem)  # a wgmma plan may launch with more than it uses
    set_smem(p.fn, smem)
    ws, cnt = plan_workspace(p, A.device.id, out)
    args = lead + (A, qw.packed, qw.absmax, qw.codebook, out, ws, cnt, np.int32(M), np.int32(N), np.int32(K),
            np.int32(p.m_tiles), np.int32(p.k_splits), np.int32(p.stages), np.float32(qw.tensor_scale), np.int32(vec),
            np.int32(int(pdl)))
    if cluster is not None:
        args += (np.int32(bool(cluster)),)
    _pdl.launch(p.fn, (p.grid,), (threads,), args, smem, pdl=bool(pdl), cluster=getattr(p, "cl_size", 1))
    return out
