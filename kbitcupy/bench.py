"""Benchmark harness: kbit kernels against cuBLAS and the speed of light (MEASURING.md).

Kernel time is the cold-L2 time of one launch: R copies of the weight (R x bytes >= 4 x
L2), one launch per copy (cycling), all captured into one CUDA graph; the median of >= 15
timed replays divided by the launches per graph.  fp16/bf16 cuBLAS (through torch: CuPy
refuses cuBLAS during stream capture) and a streaming-read speed-of-light kernel over
exactly the bytes the kbit kernel reads are timed the same way, in the same process.

    python profiling/bench.py --M 1,2,4,8 --k 2,3,4,5 --shapes dense --plot
    python profiling/bench.py --M 1,2,4,8,16,32,64,128,256,512 --tag dense_allM
    python profiling/bench.py --shapes moe --tag moe                 # grouped experts vs fp16
    python profiling/bench.py --shapes none --moe-layer --tag layer   # full MoE layer step

Dense columns: GEMV (M <= 16), GEMM (fused dequant + mma.sync), WGMMA (fused dequant +
Hopper wgmma, sm_90 only), dq+cuBLAS (dequantize into a buffer + cuBLAS), matmul (the
dispatched call).  Adding a kernel column is one line in
COLUMNS (MOE_COLUMNS for the expert shapes); adding a dense shape is one line in
DENSE_SHAPES.

MoE expert shapes (moe_gu, moe_gu_fused, moe_dn; --experts active experts, --moe-M tokens
per expert): ONE bank of 512 quantized experts per (shape, k); launch r of a graph reads
experts (r * E + i) % 512, so an expert comes back only after the whole bank has been
streamed (cold L2).  fp16: the same rotation over a 512-expert fp16 bank, as a loop of E
torch.mm on views W[e] ("loop") and as one torch.bmm on the contiguous slice
W[s:s+E] ("bmm", best case, no gather).

MoE layer (--moe-layer): route + gate/up + SiLU*up + down + weighted sum for a decode
batch of T tokens, top-k over 512 experts, rotating over R routing draws; see
run_moe_layer for what each column contains.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .gemv import fits as gemv_fits, gemv, max_rows as gemv_max_rows
from .grouped import GEMV_MAX_TOKENS
from .matmul import matmul
from .reference import bfloat16

# ============================================================================ shapes
# Qwen3-Coder-Next; W is [N, K] and C = A[M, K] @ W^T.  name -> (K, N)
DENSE_SHAPES = {
    "gateup": (2048, 5120), "down": (5120, 2048), "Q": (2048, 4096), "O": (4096, 2048),
    "KV": (2048, 512), "lin_key": (2048, 2048), "lin_value": (2048, 4096),
}
# What TOTAL sums (each shape once): the dense part of one decoder block, as in the seeds.
TOTAL_SHAPES = ("gateup", "down", "Q", "O", "KV")


@dataclass(frozen=True)
class Shape:
    name: str
    K: int
    N: int
    experts: Optional[int] = None  # MoE: E active experts per call (cuBLAS baseline = batched bmm)

    @property
    def E(self) -> int:
        return self.experts or 1


SHAPES: Dict[str, Shape] = {n: Shape(n, K, N) for n, (K, N) in DENSE_SHAPES.items()}

# MoE (Qwen3-Coder-Next): hidden 2048, expert intermediate 512, 512 experts, top-10.
MOE_HIDDEN, MOE_INTER, MOE_BANK, MOE_TOPK = 2048, 512, 512, 10
MOE_EXPERTS = (8, 10)                    # active experts per grouped call (--experts)
MOE_M = (1, 2, 4, 8, 16, 32, 64)         # tokens per expert (--moe-M)
LAYER_T = (1, 8, 32)                     # decode batch of the layer step (--layer-T)
MOE_TOTAL_SHAPES = ("moe_gu_fused", "moe_dn")  # MoE TOTAL: gate/up (fused) + down of one expert MLP


def moe_shapes(H: int = MOE_HIDDEN, I: int = MOE_INTER) -> Dict[str, Shape]:
    """Per-expert weights W[N, K] of one MoE layer; experts = default active count (--experts overrides)."""
    return {"moe_gu": Shape("moe_gu", H, I, experts=MOE_EXPERTS[0]),
            "moe_gu_fused": Shape("moe_gu_fused", H, 2 * I, experts=MOE_EXPERTS[0]),
            "moe_dn": Shape("moe_dn", I, H, experts=MOE_EXPERTS[0])}


SHAPES.update(moe_shapes())


# ============================================================================ columns
class NotApplicable(Exception):
    """Raised by a column's launch (in the eager pass, before any capture) when the kernel cannot
    run this configuration (e.g. GEMM: no pipeline depth fits in shared memory): the cell shows
    '-' (JSON: us None, skipped: reason), not 'err', and no other kernel is timed in its place."""


@dataclass
class Ctx:
    """What a dense column's launch gets: A [M, K], qw a KbitWeight (tiled, on the GPU), out [M, N]."""
    A: object
    qw: object
    out: object
    shape: Shape
    M: int


@dataclass(frozen=True)
class Column:
    name: str
    applies: Callable[[Shape, int], bool]  # (shape, M) -> can this kernel run it?
    launch: Callable[[Ctx], object]        # must be capturable: no allocation, no host sync


_GEMM_FIT: Dict[tuple, Optional[str]] = {}


def _gemm_launch(c: Ctx):
    """kbitcupy.gemm.gemm, but never its silent dequant + cuBLAS fallback: a configuration
    whose kernel does not fit raises NotApplicable (shown as '-')."""
    from . import gemm as G

    M, K = c.A.shape
    N = c.qw.shape[0]
    tname = "bfloat16" if c.A.dtype == bfloat16 else "float16"
    key = (c.A.device.id, M, N, K, c.qw.k, tname)
    if key not in _GEMM_FIT:
        try:
            G.plan(M, N, K, c.qw.k, tname, c.A.device.id)
            _GEMM_FIT[key] = None
        except G.DoesNotFit as e:
            _GEMM_FIT[key] = f"does not fit: {e}"
    if _GEMM_FIT[key]:
        raise NotApplicable(_GEMM_FIT[key])
    return G.gemm(c.A, c.qw, c.out)


def _gemv_launch(c: Ctx):
    """kbitcupy.gemv.gemv where its plan runs this call (k = 5 stops at M = 16; the staged A must fit the shared
    memory), else NotApplicable ('-')."""
    M, K = c.A.shape
    if not gemv_fits(c.qw.shape[0], K, M, c.qw.k, c.A.device.id, c.qw.layout == "tiled"):  # (as matmul asks it)
        raise NotApplicable("the GEMV's plan does not fit (staged A, or k = 5 past M = 16)")
    return gemv(c.A, c.qw, c.out)


def _sm90() -> bool:
    """Whether the current device runs the wgmma kernels (compute capability 9.0)."""
    try:
        import cupy as cp

        from .wgmma import supported

        return supported(cp.cuda.Device().id)
    except Exception:  # no GPU
        return False


def _wgmma_applies(s, M) -> bool:
    return s.experts is None and _sm90()


def _wgmma_launch(c: Ctx):
    from . import wgmma as WG

    try:
        return WG.wgmma_gemm(c.A, c.qw, c.out)
    except WG.DoesNotFit as e:
        raise NotApplicable(f"does not fit: {e}") from None


def _stream_applies(s, M) -> bool:
    from .gemv_stream import MAX_M

    return s.experts is None and M <= MAX_M and _sm90()


def _stream_launch(c: Ctx):
    from .gemv_stream import gemv_stream

    return gemv_stream(c.A, c.qw, c.out)


def _dq_launch(c: Ctx):
    from .dequant_matmul import dequant_matmul

    return dequant_matmul(c.A, c.qw, c.out)


def _with_pdl(launch, mode=True):
    """A column's launch with programmatic dependent launch on (kbitcupy.set_pdl; mode "safe":
    its safe mode): in a graph of back-to-back launches each one's prologue (safe: its launch)
    overlaps the previous one's tail."""
    def run(c):
        from ._pdl import pdl

        with pdl(mode):
            return launch(c)
    return run


_matmul_pdl_launch = _with_pdl(lambda c: matmul(c.A, c.qw, out=c.out))


# Not a kernel of its own: the dispatched matmul launched with PDL.  Kept out of Best
# (fp16 cuBLAS is not PDL-launched here) and compared separately ("vs fp16 (PDL)").
PDL_COLUMN = "matmul+PDL"
MOE_PDL_COLUMN = "Grouped+PDL"  # the same for the dispatched grouped_matmul
# forced grouped kernels launched with PDL (for tuning the choice under PDL)
MOE_PDL_FORCED = ("g-MMA+PDL", "g-WGMMA+PDL")
DENSE_PDL_FORCED = ("GEMV+PDL", "GEMM+PDL", "WGMMA+PDL", "STREAM+PDL")
# the dispatched calls launched plainly (set_pdl(False)), opt-in: every other column runs in the
# default mode, which on Hopper is PDL's safe mode (every kernel waits before touching memory)
# and the grouped call told its ids are stable (ids_stable=True: as moe_forward's down at decode sizes) or that
# the kernel right before is this package's (chained=True), opt-in too
PLAIN_COLUMNS = ("matmul:plain", "Grouped:plain", "Grouped:stable", "Grouped:chained")
STABLE_COLUMN = PLAIN_COLUMNS[2]
# grouped_matmul(chained=True), opt-in: the kernel right before is this package's (here the same call on the
# previous experts), as moe_forward's calls above the decode sizes (after the gather / silu_mul kernels)
CHAINED_COLUMN = PLAIN_COLUMNS[3]
NOT_IN_BEST = {PDL_COLUMN, MOE_PDL_COLUMN, *MOE_PDL_FORCED, *DENSE_PDL_FORCED, *PLAIN_COLUMNS}


def _pdl_us(cols: dict):
    """Time of the PDL column of a cell's or TOTAL's columns (us or {'us': ..})."""
    for n in (PDL_COLUMN, MOE_PDL_COLUMN):
        v = cols.get(n)
        if isinstance(v, dict):
            v = v.get("us")
        if v is not None:
            return v
    return None

COLUMNS: List[Column] = [
    Column("GEMV", applies=lambda s, M: s.experts is None and M <= gemv_max_rows(2, s.N), launch=_gemv_launch),
    Column("STREAM", applies=_stream_applies, launch=_stream_launch),
    Column("GEMM", applies=lambda s, M: s.experts is None and M >= 1, launch=_gemm_launch),
    Column("WGMMA", applies=_wgmma_applies, launch=_wgmma_launch),
    Column("dq+cuBLAS", applies=lambda s, M: s.experts is None, launch=_dq_launch),
    Column("matmul", applies=lambda s, M: s.experts is None, launch=lambda c: matmul(c.A, c.qw, out=c.out)),
    Column(PDL_COLUMN, applies=lambda s, M: s.experts is None, launch=_matmul_pdl_launch),
    Column(PLAIN_COLUMNS[0], applies=lambda s, M: s.experts is None,
           launch=_with_pdl(lambda c: matmul(c.A, c.qw, out=c.out), False)),
    # forced kernels with PDL, not in Best: what profiling/tune_dispatch.py --pdl reads
    Column("GEMV+PDL", applies=lambda s, M: s.experts is None and M <= gemv_max_rows(2, s.N),
           launch=_with_pdl(_gemv_launch)),
    Column("GEMM+PDL", applies=lambda s, M: s.experts is None and M >= 1, launch=_with_pdl(_gemm_launch)),
    Column("WGMMA+PDL", applies=_wgmma_applies, launch=_with_pdl(_wgmma_launch)),
    Column("STREAM+PDL", applies=_stream_applies, launch=_with_pdl(_stream_launch)),
]
COLUMN_ALIASES = {"mma": "GEMM", "dq": "dq+cuBLAS", "dequant": "dq+cuBLAS", "wg": "WGMMA"}

# ============================================================================ rotation math
COLD_FACTOR = 4     # the R copies together must span >= 4 x L2, so every launch reads DRAM
MIN_LAUNCHES = 32   # launches per graph, so the graph's own start latency is amortised
MIN_REPS = 15
CHECK_TOL = 1e-2    # max |kbit - reference| / max |reference|; fp16/bf16 output rounding is far below


def rotation_count(bytes_per_copy: int, l2_bytes: int, factor: int = COLD_FACTOR) -> int:
    """Number of copies R with R * bytes_per_copy >= factor * l2_bytes (at least 2)."""
    if bytes_per_copy <= 0:
        raise ValueError(f"bytes_per_copy must be positive, got {bytes_per_copy}")
    return max(2, -(-factor * int(l2_bytes) // int(bytes_per_copy)))


def launch_count(R: int, min_launches: int = MIN_LAUNCHES) -> int:
    """Launches per graph: whole passes over the R copies, at least min_launches."""
    return R * max(1, -(-min_launches // R))


def summarize(samples_us: Sequence[float], **info) -> dict:
    return dict(us=statistics.median(samples_us), min_us=min(samples_us), max_us=max(samples_us),
                samples_us=[round(float(x), 4) for x in samples_us], **info)


def _err(e: BaseException) -> dict:
    msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    print(f"  ! {msg}", file=sys.stderr)
    return {"us": None, "error": msg}


# ============================================================================ timers
_STREAMS: dict = {}


def _capture_stream(fresh: bool = False):
    """One non-blocking stream per device for all captures: kbitcupy keys its workspaces
    (gemm split-K, dequant buffer, cuBLAS workspace) by stream, so a new stream per timing
    would allocate new ones every time.  fresh=True replaces it (after a failed capture)."""
    import cupy as cp

    dev = cp.cuda.Device().id
    if fresh or dev not in _STREAMS:
        _STREAMS[dev] = cp.cuda.Stream(non_blocking=True)
    return _STREAMS[dev]


def time_graph_cupy(fns: Sequence[Callable[[], object]], reps: int, warmup: int = 3) -> List[float]:
    """Capture fns (one launch each) into one CUDA graph; per-launch us of each of reps replays."""
    import cupy as cp

    cp.cuda.Device().synchronize()  # the capture stream is non-blocking: inputs must be ready
    s = _capture_stream()
    with s:
        for f in fns:  # eager pass first: compiles, sets kernel attributes, fills host caches
            f()
        s.synchronize()
        s.begin_capture()
        try:
            for f in fns:
                f()
        except BaseException:
            try:  # leave the stream usable; the capture is invalid anyway
                s.end_capture()
            except Exception:
                pass
            raise
        g = s.end_capture()
        for _ in range(warmup):
            g.launch(stream=s)
        evs = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
        for a, b in evs:
            a.record(s)
            g.launch(stream=s)
            b.record(s)
        s.synchronize()
    return [cp.cuda.get_elapsed_time(a, b) * 1e3 / len(fns) for a, b in evs]


def time_graph_torch(fns: Sequence[Callable[[], object]], reps: int, warmup: int = 3) -> List[float]:
    """Same as time_graph_cupy with torch.cuda.CUDAGraph (torch may capture cuBLAS)."""
    import torch

    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # eager pass: cuBLAS handle, workspace, heuristics
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    for _ in range(warmup):
        g.replay()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in evs:
        a.record()
        g.replay()
        b.record()
    torch.cuda.synchronize()
    out = [a.elapsed_time(b) * 1e3 / len(fns) for a, b in evs]
    del g
    return out


# ============================================================================ arrays
def _rand(shape, dtype: str):
    """Random normal fp16/bf16 CuPy array (never zeros: timing zeros can flatter a kernel)."""
    import cupy as cp

    x = cp.random.standard_normal(shape, dtype=cp.float32)
    if dtype == "fp16":
        return x.astype(cp.float16)
    return (x.view(cp.uint32) >> 16).astype(cp.uint16).view(bfloat16)  # bf16 = top half of f32


def _empty(shape, dtype: str):
    import cupy as cp

    return cp.empty(shape, cp.float16) if dtype == "fp16" else cp.empty(shape, cp.uint16).view(bfloat16)


def _to_f32(x):
    import cupy as cp

    if x.dtype == np.float16:
        return x.astype(cp.float32)
    return (x.view(cp.uint16).astype(cp.uint32) << 16).view(cp.float32)


def kbit_weight_copies(shape: Shape, k: int, l2_bytes: int):
    """Quantize one random weight, then copy its packed words and absmax until the copies
    span COLD_FACTOR x L2 (quantizing R times would be slow).  Returns (qw, copies, bytes per copy)."""
    import cupy as cp

    from .quantize import quantize

    W = (cp.random.standard_normal((shape.N, shape.K), dtype=cp.float32) * 0.02).astype(cp.float16)
    qw = quantize(W, k)
    del W
    per = (qw.packed.nbytes + qw.absmax.nbytes) * shape.E
    R = rotation_count(per, l2_bytes)

    def dup():
        return replace(qw, packed=qw.packed.copy(), absmax=qw.absmax.copy())  # codebook shared

    if shape.experts is None:
        copies = [qw] + [dup() for _ in range(R - 1)]
    else:
        copies = [tuple(dup() for _ in range(shape.E)) for _ in range(R)]
    return qw, copies, per


# ============================================================================ cells
def time_kbit(col: Column, shape: Shape, M: int, copies, A, out, reps: int) -> dict:
    ctxs = [Ctx(A, q, out, shape, M) for q in copies]
    n = launch_count(len(ctxs))
    fns = [functools.partial(col.launch, ctxs[i % len(ctxs)]) for i in range(n)]
    return summarize(time_graph_cupy(fns, reps), R=len(ctxs), launches=n)


def check_output(col: Column, ctx: Ctx, ref) -> Optional[float]:
    """max |out - ref| / max |ref| for one eager launch; None when the output holds NaN/Inf
    (out is pre-filled with NaN, so unwritten elements count)."""
    import cupy as cp

    ctx.out.view(cp.uint16).fill(0x7E00 if ctx.out.dtype == np.float16 else 0x7FC0)
    col.launch(ctx)
    d = cp.abs(_to_f32(ctx.out) - ref)
    if not bool(cp.isfinite(d).all()):
        return None
    return float(d.max()) / max(float(cp.abs(ref).max()), 1e-30)


def record_check(e: dict, col: Column, ctx: Ctx, ref, label: str) -> None:
    """Store check_output's error and verdict in a timing entry; report a failure."""
    e["max_rel_err"] = check_output(col, ctx, ref)
    e["check_ok"] = e["max_rel_err"] is not None and e["max_rel_err"] <= CHECK_TOL
    if not e["check_ok"]:
        print(f"  ! {col.name} {label}: output check failed, max rel err {e['max_rel_err']}", file=sys.stderr)


SOL_SRC = r"""
extern "C" __global__ void __launch_bounds__(256)
kbit_sol_read(const uint4* __restrict__ src, unsigned long long n, unsigned int* __restrict__ sink) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int acc = 0;
    for (; i + 3 * stride < n; i += 4 * stride) {  // four independent 16-byte loads in flight
        const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        const uint4 a = src[i];
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x7FC00001u) sink[0] = acc;  // (practically) never true, but it keeps every load live
}
"""


@functools.lru_cache(maxsize=None)
def _sol_kernel(device_id: int):
    import cupy as cp

    return cp.RawKernel(SOL_SRC, "kbit_sol_read", options=("--std=c++17",))


def sol_blocks(n16: int, sm_count: int) -> int:
    """8 blocks of 256 threads per SM (full occupancy), fewer when there is less work."""
    return max(1, min(sm_count * 8, -(-n16 // 256)))


def time_sol(nbytes: int, l2_bytes: int, sm_count: int, reps: int) -> dict:
    """Streaming read of nbytes (rounded up to 16), same rotation + graph method."""
    import cupy as cp

    n16 = -(-int(nbytes) // 16)
    R = rotation_count(n16 * 16, l2_bytes)
    first = cp.random.random(n16 * 4, dtype=cp.float32).view(cp.uint32)  # random bits, not zeros
    bufs = [first] + [first.copy() for _ in range(R - 1)]
    sink = cp.zeros(1, cp.uint32)
    blocks = sol_blocks(n16, sm_count)
    kern = _sol_kernel(cp.cuda.Device().id)
    n = launch_count(R)
    fns = [functools.partial(kern, (blocks,), (256,), (bufs[i % R], np.uint64(n16), sink)) for i in range(n)]
    return summarize(time_graph_cupy(fns, reps), R=R, launches=n, bytes=n16 * 16, blocks=blocks)


def time_cublas_shape(shape: Shape, Ms: Sequence[int], dtype: str, l2_bytes: int, reps: int) -> Dict[int, dict]:
    """cuBLAS through torch (torch.mm, or torch.bmm over E experts) for every M; the weight
    copies are made once per shape since the weight does not depend on M."""
    try:
        import torch
    except ImportError:
        return {M: {"us": None, "error": "torch not installed"} for M in Ms}
    import cupy as cp

    dev = torch.device("cuda", cp.cuda.Device().id)
    dt = torch.float16 if dtype == "fp16" else torch.bfloat16
    E, K, N = shape.experts, shape.K, shape.N
    W0 = (torch.randn((N, K) if E is None else (E, N, K), device=dev) * 0.02).to(dt)
    per = W0.numel() * W0.element_size()
    R = rotation_count(per, l2_bytes)
    Ws = [W0] + [W0.clone() for _ in range(R - 1)]
    res = {}
    for M in Ms:
        try:
            A = torch.randn((M, K) if E is None else (E, M, K), device=dev).to(dt)
            out = torch.empty((M, N) if E is None else (E, M, N), device=dev, dtype=dt)
            if E is None:
                call = lambda W: torch.mm(A, W.t(), out=out)  # noqa: E731
            else:
                call = lambda W: torch.bmm(A, W.transpose(1, 2), out=out)  # noqa: E731
            n = launch_count(R)
            fns = [functools.partial(call, Ws[i % R]) for i in range(n)]
            res[M] = summarize(time_graph_torch(fns, reps), R=R, launches=n, bytes=per)
        except Exception as e:  # noqa: BLE001 - report the cell, keep the run going
            res[M] = _err(e)
    del Ws, W0
    torch.cuda.empty_cache()
    return res


def time_calls(fn, calls: int, warmup: int = 10, repeats: int = 1) -> dict:
    """Host time of a Python call without a graph: per repeat, warm-up calls, then `calls`
    calls timed with perf_counter (enqueue = before the device-wide sync, wall = after).
    Medians and minima over the repeats, in us per call."""
    import cupy as cp

    runs = []
    for _ in range(repeats):
        for _ in range(warmup):
            fn()
        cp.cuda.Device().synchronize()  # the whole device: CuPy's and torch's streams
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        cp.cuda.Device().synchronize()
        t2 = time.perf_counter()
        runs.append(((t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6))
    return dict(enqueue_us=statistics.median(r[0] for r in runs), wall_us=statistics.median(r[1] for r in runs),
                enqueue_min_us=min(r[0] for r in runs), wall_min_us=min(r[1] for r in runs))


HOST_CALLS, HOST_REPEATS = 200, 5


_EMPTY: list = []  # (kernel, its parameter block, the buffer it points at): the bare launch of host_overhead


def bare_launch():
    """A callable launching an empty kernel through CuPy's driver.launchKernel with a prebuilt parameter block on
    the current stream: the host's floor for any launch (host_overhead's reference)."""
    import cupy as cp
    from cupy_backends.cuda.api import driver

    from ._launch import ParamBlock

    if not _EMPTY:
        k = cp.RawKernel(r'extern "C" __global__ void kbit_empty(float* p, int n) { if (n < 0) p[0] = 0.f; }',
                         "kbit_empty")
        buf = cp.zeros(1, cp.float32)
        _EMPTY[:] = [k, ParamBlock((buf, np.int32(1))), buf]
    k, pb, _ = _EMPTY
    ptr = k.kernel.ptr
    return lambda: driver.launchKernel(ptr, 1, 1, 1, 32, 1, 1, 0, cp.cuda.get_current_stream().ptr, pb.address, 0)


def host_overhead(qw, shape: Shape, dtype: str, calls: int = HOST_CALLS, repeats: int = HOST_REPEATS) -> dict:
    """Wall time of one Python kbitcupy.matmul call at M = 1, no graph (hot weight): the median over
    `repeats` runs of `calls` calls (one run of 200 had read 5.6 or 9-11 us for the same code path,
    host noise, final61-m1), and the fastest run; launch_us / launch_min_us: the same for a bare launch of an
    empty kernel (bare_launch), run alternately with it, so a table shows how fast its host was (the same host read
    5.3 us for it one minute and 3.7 the next: profiling/host_probe.py, run53.sh)."""
    A, out = _rand((1, shape.K), dtype), _empty((1, shape.N), dtype)
    fn, bare = (lambda: matmul(A, qw, out=out)), bare_launch()
    t, b = [], []
    for _ in range(repeats):
        t.append(time_calls(fn, calls))
        b.append(time_calls(bare, calls))
    med = lambda xs, key: statistics.median(x[key] for x in xs)  # noqa: E731
    return dict(wall_us=med(t, "wall_us"), enqueue_us=med(t, "enqueue_us"), wall_min_us=min(x["wall_us"] for x in t),
                launch_us=med(b, "wall_us"), launch_min_us=min(x["wall_us"] for x in b), calls=calls, repeats=repeats)


# ============================================================================ derived numbers
def finish_cell(cell: dict, kbit_names: Sequence[str]) -> dict:
    """Best kbit column (columns failing the output check are not eligible), vs cuBLAS = cuBLAS / best,
    % of SOL = SOL / best."""
    times = {}
    for n in kbit_names:
        if n in NOT_IN_BEST:
            continue
        e = cell["columns"].get(n)
        if e and e.get("us") is not None and e.get("check_ok", True):
            times[n] = e["us"]
    best = min(times, key=times.get) if times else None
    best_us = times.get(best)
    cub = (cell.get("cublas") or {}).get("us")
    sol = (cell.get("sol") or {}).get("us")
    pdl_us = _pdl_us(cell["columns"])
    cell.update(best=best, best_us=best_us, vs_cublas=(cub / best_us) if cub and best_us else None,
                pct_sol=(100.0 * sol / best_us) if sol and best_us else None,
                vs_cublas_pdl=(cub / pdl_us) if cub and pdl_us else None)
    return cell


def _tsum(vals):
    return None if not vals or any(v is None for v in vals) else sum(vals)


def compute_totals(cells: Sequence[dict], total_shapes: Sequence[str], Ms, ks, kbit_names) -> List[dict]:
    """Per (M, k): sums over the TOTAL shapes present in the run of Best, cuBLAS, SOL and each
    kbit column (a sum is None when any shape lacks that number)."""
    out = []
    for M in Ms:
        for k in ks:
            rows = [c for c in cells if c["M"] == M and c["k"] == k and c["shape"] in total_shapes]
            if not rows:
                continue
            best = _tsum([c.get("best_us") for c in rows])
            cub = _tsum([(c.get("cublas") or {}).get("us") for c in rows])
            sol = _tsum([(c.get("sol") or {}).get("us") for c in rows])
            cols = {n: _tsum([(c["columns"].get(n) or {}).get("us") for c in rows]) for n in kbit_names}
            pdl_us = _pdl_us(cols)
            out.append(dict(M=M, k=k, shapes=[c["shape"] for c in rows], best_us=best, cublas_us=cub, sol_us=sol,
                            columns=cols, vs_cublas=(cub / best) if cub and best else None,
                            pct_sol=(100.0 * sol / best) if sol and best else None,
                            vs_cublas_pdl=(cub / pdl_us) if cub and pdl_us else None))
    return out


# ============================================================================ formatting
def fmt_us(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def fmt_entry(e) -> str:
    """'-' not applicable, 'err' failed, '12.34' time, '12.34!' output check failed."""
    if not e:
        return "-"
    if e.get("us") is None:
        return "err" if e.get("error") else "-"
    return fmt_us(e["us"]) + ("" if e.get("check_ok", True) else "!")


def fmt_x(x) -> str:
    return "-" if x is None else f"{x:.2f}x"


def fmt_pct(x) -> str:
    return "-" if x is None else f"{x:.0f}%"


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def format_tables(res: dict) -> str:
    """One markdown table per M: rows (shape, k), then TOTAL rows per k."""
    meta = res["meta"]
    names, cub = meta["columns"], meta["dtype"]
    idx = {(c["shape"], c["k"], c["M"]): c for c in res["cells"]}
    pdl = PDL_COLUMN in names
    header = ["shape", "k", *names, cub, "SOL", "Best", f"vs {cub}", "% of SOL"] + ([f"vs {cub} (PDL)"] if pdl else [])
    parts = []
    for M in meta["M"]:
        rows = []
        for s in meta["shapes"]:
            for k in meta["k"]:
                c = idx.get((s, k, M))
                if c is None:
                    continue
                rows.append([s, str(k), *[fmt_entry(c["columns"].get(n)) for n in names], fmt_entry(c.get("cublas")),
                             fmt_entry(c.get("sol")), c.get("best") or "-", fmt_x(c.get("vs_cublas")),
                             fmt_pct(c.get("pct_sol"))] + ([fmt_x(c.get("vs_cublas_pdl"))] if pdl else []))
        for t in res["totals"]:
            if t["M"] == M:
                rows.append(["TOTAL", str(t["k"]), *[fmt_us(t["columns"].get(n)) for n in names], fmt_us(t["cublas_us"]),
                             fmt_us(t["sol_us"]), fmt_us(t["best_us"]), fmt_x(t["vs_cublas"]), fmt_pct(t["pct_sol"])]
                            + ([fmt_x(t.get("vs_cublas_pdl"))] if pdl else []))
        parts.append(f"### M = {M}\n\n" + md_table(header, rows))
    return "\n\n".join(parts)


def format_host_table(res: dict) -> str:
    host = res.get("host_overhead") or []
    if not host:
        return ""
    ks = [k for k in res["meta"]["k"] if any(h["k"] == k for h in host)]
    idx = {(h["shape"], h["k"]): h for h in host}
    rows = []
    for s in res["meta"]["shapes"]:
        if any((s, k) in idx for k in ks):
            hs = [idx.get((s, k)) or {} for k in ks]
            rows.append([s] + [fmt_us(h.get(key)) for key in ("wall_us", "wall_min_us", "launch_us") for h in hs])
    return md_table(["shape"] + [f"k={k}" for k in ks] + [f"k={k} fastest run" for k in ks]
                    + [f"k={k} bare launch" for k in ks], rows)


def format_moe_tables(moe: dict) -> str:
    """One markdown table per tokens-per-expert M: rows (shape, E, k), then TOTAL rows per (E, k)."""
    m = moe["meta"]
    names, dt = m["columns"], m["dtype"]
    idx = {(c["shape"], c["experts"], c["k"], c["M"]): c for c in moe["cells"]}
    pdl = MOE_PDL_COLUMN in names
    header = (["shape", "E", "k", *names, f"{dt} loop", f"{dt} bmm", "SOL", "Best", f"vs {dt}", "% of SOL"]
              + ([f"vs {dt} (PDL)"] if pdl else []))
    parts = []
    for M in m["M"]:
        rows = []
        for s in m["shapes"]:
            for E in m["experts"]:
                for k in m["k"]:
                    c = idx.get((s, E, k, M))
                    if c is None:
                        continue
                    fp = c.get("fp16") or {}
                    rows.append([s, str(E), str(k), *[fmt_entry(c["columns"].get(n)) for n in names],
                                 fmt_entry(fp.get("loop")), fmt_entry(fp.get("bmm")), fmt_entry(c.get("sol")),
                                 c.get("best") or "-", fmt_x(c.get("vs_cublas")), fmt_pct(c.get("pct_sol"))]
                                + ([fmt_x(c.get("vs_cublas_pdl"))] if pdl else []))
        for t in moe.get("totals") or []:
            if t["M"] == M:
                rows.append(["TOTAL", str(t["experts"]), str(t["k"]), *[fmt_us(t["columns"].get(n)) for n in names],
                             fmt_us(t["fp16"].get("loop")), fmt_us(t["fp16"].get("bmm")), fmt_us(t["sol_us"]),
                             fmt_us(t["best_us"]), fmt_x(t["vs_cublas"]), fmt_pct(t["pct_sol"])]
                            + ([fmt_x(t.get("vs_cublas_pdl"))] if pdl else []))
        fw = [t for t in moe.get("totals") or [] if t["M"] == M and t.get("forward_us")]
        note = "".join(f"\n- TOTAL as moe_forward launches them (moe_gu_fused {_fw_cols(t, M)[0]} + moe_dn "
                       f"{_fw_cols(t, M)[1]}), "
                       f"E = {t['experts']}, k = {t['k']}: {fmt_us(t['forward_us'])} us, "
                       f"{fmt_x(t.get('vs_cublas_forward'))} {dt}" for t in fw)
        parts.append(f"### MoE, M = {M} token{'s' if M != 1 else ''} per expert\n\n" + md_table(header, rows)
                     + ("\n" + note if note else ""))
    return "\n\n".join(parts)


def _method_mark(e) -> str:
    return (e or {}).get("method") or "-"


def format_layer_table(layer: dict) -> str:
    """Rows (T, k).  The fp16 loop is independent of k (repeated); its eager column appears only
    when some kbit call had to be timed eagerly."""
    m = layer["meta"]
    dt = m["dtype"]
    rows_in = layer["rows"]
    any_eager = any((r.get("fp16") or {}).get("eager") for r in rows_in)
    header = ["T", "k", "experts/step", "moe_forward", "method", "kbit steps", "kbit steps+PDL", "moe_route",
              f"{dt} loop"]
    if any_eager:
        header.append(f"{dt} loop (eager)")
    header += ["SOL", f"vs {dt} (moe_forward)", f"vs {dt} (steps)", f"vs {dt} (steps+PDL)", "% of SOL (steps)"]
    rows = []
    for T in m["T"]:
        for k in m["k"]:
            r = next((x for x in rows_in if x["T"] == T and x["k"] == k), None)
            if r is None:
                continue
            fp = r.get("fp16") or {}
            steps = fmt_entry(r.get("steps"))
            if (r.get("steps") or {}).get("method") == "eager":
                steps += " (eager)"
            route = fmt_entry(r.get("route"))
            if (r.get("route") or {}).get("method") == "eager":
                route += " (eager)"
            ept = r.get("experts_per_step")
            row = [str(T), str(k), "-" if ept is None else f"{ept:.1f}", fmt_entry(r.get("moe_forward")),
                   _method_mark(r.get("moe_forward")), steps, fmt_entry(r.get("steps_pdl")), route,
                   fmt_entry(fp.get("graph"))]
            if any_eager:
                row.append(fmt_entry(fp.get("eager")))
            fwd_vs = fmt_x(r.get("vs_fp16_forward"))
            if r.get("vs_fp16_forward") is not None and r.get("vs_fp16_forward_method") == "eager":
                fwd_vs += " (eager)"
            row += [fmt_entry(r.get("sol")), fwd_vs, fmt_x(r.get("vs_fp16_steps")), fmt_x(r.get("vs_fp16_steps_pdl")),
                    fmt_pct(r.get("pct_sol_steps"))]
            rows.append(row)
    return md_table(header, rows)


def format_layer_setups(layer: dict) -> str:
    rows = [[str(s["T"]), str(s["R"]), str(s["window"]), str(s["launches"]),
             f"{s['distinct_mean']:.1f} ({s['distinct_min']}-{s['distinct_max']})"] for s in layer["meta"]["setups"]]
    return md_table(["T", "routing draws R", "no-reuse window (steps)", "steps per graph", "experts per step"], rows)


def _moe_section(moe: dict) -> List[str]:
    m = moe["meta"]
    dt = m["dtype"]
    bb = list((m.get("bank_bytes") or {}).values())
    span = f"{min(bb) / 2**20:.0f}-{max(bb) / 2**20:.0f} MiB kbit" if bb else "the whole bank"
    lines = [
        "## MoE expert matmuls (us per call over E active experts)", "",
        f"- One bank of {m['bank_experts']} experts per (shape, k) (hidden {m['hidden']}, expert intermediate "
        f"{m['inter']}), quantized from random normal * 0.02 fp16; the torch baseline reads the same fp16 bank "
        f"(DLPack view). M = tokens per expert, E = active experts; A = [E x M, K] sorted by expert.",
        f"- Cold L2: launch r of a graph reads experts (r x E + i) mod {m['bank_experts']}, so an expert is "
        f"read again only after the whole bank ({span}) has been streamed; launches per graph as for dense "
        f"(>= {COLD_FACTOR} x L2 of weight reads, >= {MIN_LAUNCHES}); median of replays / launches.",
        "- Grouped = kbitcupy.grouped.grouped_matmul(A, bank, expert_ids, offsets, max_tokens=M, out, "
        "method='kernel') with device int32 ids/offsets, one launch (its dispatch: grouped.choose_impl); "
        "g-GEMV / g-MMA / g-WGMMA = the same call with impl= forcing one grouped kernel (GEMV design, "
        "mma.sync kbit_grouped, Hopper wgmma); matmul loop = E dispatched "
        "kbitcupy.matmul calls on views of the bank; Grouped+PDL = Grouped launched as a programmatic dependent "
        "(kbitcupy.set_pdl, ids_stable=True: the ids are fixed setup data; the weight requests and table build overlap the "
        f"previous launch's tail in this graph of back-to-back launches; full PDL is off by default), not in Best; vs {dt} "
        f"(PDL) = best {dt} / Grouped+PDL; g-MMA+PDL / g-WGMMA+PDL = those kernels forced, with PDL (not in Best); "
        "Grouped:plain (when named) = Grouped launched without PDL (set_pdl(False), not in Best); Grouped:stable "
        "(when named) = Grouped with ids_stable=True in the default mode (the ids read and the first weights "
        "L2-prefetched before the PDL wait, as moe_forward's down at decode sizes; not in Best); "
        "Grouped:chained (when named) = Grouped with chained=True in the default mode (the kernel right before "
        "is this package's -- here the same call on the previous experts -- so the wgmma kernel requests its "
        "weights before the wait, as moe_forward's gate/up and down above the decode sizes; not in Best); every other "
        "column runs in the default mode (on Hopper PDL's safe mode: a programmatic dependent that waits for the "
        "previous grid before touching memory).",
        f"- {dt} loop = E torch.mm on the views W[e] of the fp16 bank (same rotation), one cuBLAS call per "
        f"expert; {dt} bmm = one torch.bmm on the contiguous slice W[s:s+E] (no gather: the best case for "
        f"{dt}, real routing would need a gather copy or the loop). Both captured in a torch CUDA graph.",
        f"- Best = fastest kbit column; vs {dt} = min({dt} loop, {dt} bmm) / Best; SOL = streaming read of "
        "E x (packed + absmax) + A bytes; % of SOL = SOL / Best.",
        f"- TOTAL = {' + '.join(m['total_shapes']) or '(needs moe_gu_fused and moe_dn in the run)'} "
        "(gate/up + down of the same active experts).",
    ]
    lines += [f"- Note: {n}" for n in m.get("notes") or []]
    return lines + ["", format_moe_tables(moe)]


def _layer_section(layer: dict) -> List[str]:
    m = layer["meta"]
    dt = m["dtype"]
    B, H, I, topk = m["bank_experts"], m["hidden"], m["inter"], m["topk"]
    lines = [
        "## MoE layer step (us per step)", "",
        f"- Decode batch of T tokens, top-{topk} of {B} experts (random normal router logits, weights = softmax "
        f"over the chosen {topk}), hidden {H}, expert intermediate {I}: gate/up fused bank [{B}, {2 * I}, {H}], "
        f"down bank [{B}, {H}, {I}], fp16 random normal * 0.02, quantized per k.",
        "- Rotation: R routing draws per T (the same for every k and for the fp16 baseline); draws closer "
        "than the window share no expert when one step reads less than L2, so every step reads cold weights.",
        "- moe_forward = kbitcupy.moe.moe_forward(x, bank_gu, bank_dn, topk_ids, topk_weights): the full call "
        "with device routing (moe_route: argsort, cumsum, scatter) and CuPy-pool allocations. kbit steps = "
        "the same steps with the routing precomputed (moe_route at setup, not timed) into preallocated "
        "buffers: gather_rows, grouped_matmul gate/up, silu_mul, grouped_matmul down, moe_combine; where "
        "moe_forward runs the grouped GEMV (decode sizes) the gather and silu_mul are fused into it, as in "
        "moe_forward (grouped_gemv_fused). kbit steps+PDL = the same with the kernels launched as programmatic "
        "dependents (kbitcupy.set_pdl; ids_stable / chained as in moe_forward). moe_route = the routing alone.",
        f"- {dt} loop = torch with the routing given (sorted on the host when the graph is built, not timed): "
        "index_select of the rows, one torch.mm per active expert for gate/up on the view W_gu[e] (no copy, no "
        "weight gather) into slices of one buffer, SiLU(gate) * up over all rows, one torch.mm per active "
        "expert for down, fp32 weighted sum. Like-for-like with 'kbit steps'; moe_forward also pays the "
        "device routing.",
        f"- method: graph = CUDA graph of the steps-per-graph steps, median of {layer['meta'].get('reps', '?')} "
        f"replays / steps; eager = CUDA events around >= {m['eager_min_calls']} back-to-back Python calls (host "
        "overhead included), used only when a capture fails (the capture error is in the JSON). vs fp16 "
        "divides only numbers of the same method.",
        "- SOL = streaming read of the kbit bytes of one step (mean distinct experts x (gate/up + down) + x); "
        "% of SOL = SOL / kbit steps.",
        f"- Output check on draw 0 against a float32 expert-by-expert oracle (dequantized experts for kbit, the "
        f"fp16 weights for torch), max rel err <= {m['check_tol']:g}; '!' marks a failure.",
    ]
    lines += [f"- Note: {n}" for n in m.get("notes") or []]
    return lines + ["", format_layer_setups(layer), "", format_layer_table(layer)]


def format_report(res: dict) -> str:
    m = res["meta"]
    cub = m["dtype"]
    lines = [
        f"# kbitcupy kernel benchmark: {m['gpu']}, {m['date']}",
        "",
        f"- Command: `{m['command']}`",
        f"- git: {m.get('git') or 'unknown'}",
        f"- {m['gpu']}: {m['sm_count']} SMs, L2 {m['l2_bytes'] / 2**20:.1f} MiB; " + ", ".join(
            f"{k} {v}" for k, v in m["versions"].items()),
    ]
    dense = bool(m.get("shapes"))
    if dense:
        lines += [
            f"- Activations {cub}; kbit weights quantized from random normal * 0.02; A random normal.",
            f"- Method: cold L2 by rotating over R copies of the weight (R x bytes >= {COLD_FACTOR} x L2), one "
            f"launch per copy, R launches (cycled to >= {MIN_LAUNCHES}) captured in one CUDA graph; median of "
            f"{m['reps']} timed replays (CUDA events) / launches per graph. Times in us per launch.",
            "- Columns: GEMV = kbitcupy.gemv (M <= 16); GEMM = kbitcupy.gemm.gemm (fused dequant + MMA, '-' where "
            "its configuration does not fit); WGMMA = kbitcupy.wgmma.wgmma_gemm (fused dequant + Hopper wgmma, "
            "sm_90 only); dq+cuBLAS = kbitcupy.dequant_matmul (dequantize into a reused "
            "buffer + cuBLAS GEMM); matmul = the dispatched kbitcupy.matmul; matmul+PDL = the same launched as a "
            "programmatic dependent (kbitcupy.set_pdl: the GEMV's and the fused GEMMs' prologue overlaps the previous "
            "launch's tail in this graph of back-to-back launches; full PDL is off by default; dispatch from the family's +PDL "
            f"table where there is one), not in Best; vs {cub} (PDL) = {cub} / matmul+PDL ({cub} itself is not "
            "PDL-launched); GEMV+PDL / GEMM+PDL / WGMMA+PDL = those kernels forced, with PDL (not in Best); "
            "matmul:plain (when named) = matmul launched without PDL (set_pdl(False), not in Best); every other "
            "kbit column runs in the default mode (on Hopper PDL's safe mode: a programmatic dependent that waits "
            "for the previous grid before touching memory, so only the launch overlaps).",
            f"- {cub}: cuBLAS through torch (torch.mm), same method. "
            "SOL: streaming 16-byte read of exactly packed + absmax + A bytes, same method.",
            f"- Best = fastest kbit column; vs {cub} = {cub} / Best (> 1 means kbit wins); % of SOL = SOL / Best.",
            f"- '-' = kernel does not apply; 'err' = failed (see JSON); '!' = output check failed "
            f"(max rel err > {CHECK_TOL:g}), excluded from Best.",
            f"- TOTAL = sum over {', '.join(m['total_shapes']) or '(none in this run)'} (each once).",
        ]
    if m.get("notes"):
        lines += [f"- Note: {n}" for n in m["notes"]]
    if dense:
        lines += ["", "## Kernel time (us)", "", format_tables(res)]
        host = format_host_table(res)
        if host:
            lines += ["", "## Host overhead (us)", "",
                      "Wall time of one Python `kbitcupy.matmul(A, qw, out=out)` call at M = 1, no graph "
                      f"({HOST_CALLS} calls, synchronised at the end, divided by {HOST_CALLS}; the median of "
                      f"{HOST_REPEATS} such runs, and the fastest run).  Bare launch: the same for an empty kernel "
                      "launched through CuPy's `driver.launchKernel` with a prebuilt parameter block, run alternately "
                      "with it: this host's floor for any launch (it moves with the host's load).", "", host]
    if res.get("moe"):
        lines += [""] + _moe_section(res["moe"])
    if res.get("layer"):
        lines += [""] + _layer_section(res["layer"])
    return "\n".join(lines) + "\n"


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def output_paths(out_dir: str, gpu: str, date: str, tag: str) -> Dict[str, str]:
    """<gpu-slug>_<date>_<tag>.{md,json,png}; a numeric suffix keeps an earlier run's files."""
    base = f"{slug(gpu)}_{date}_{slug(tag)}"
    stem, i = base, 2
    while any(os.path.exists(os.path.join(out_dir, f"{stem}.{e}")) for e in ("md", "json")):
        stem, i = f"{base}-{i}", i + 1
    return {e: os.path.join(out_dir, f"{stem}.{e}") for e in ("md", "json", "png")}


def plot(res: dict, path: str) -> bool:
    """Time vs M, one subplot per shape, k = 4 (or the first k): each kbit column, cuBLAS, SOL."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    m = res["meta"]
    kp = 4 if 4 in m["k"] else m["k"][0]
    idx = {(c["shape"], c["k"], c["M"]): c for c in res["cells"]}
    shapes = m["shapes"]
    ncol = min(4, len(shapes))
    nrow = -(-len(shapes) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.2 * nrow), squeeze=False)
    for ax, s in zip(axes.flat, shapes):
        series = [(n, lambda c, n=n: c["columns"].get(n), {"marker": "o"}) for n in m["columns"]]
        series += [(m["dtype"], lambda c: c.get("cublas"), {"color": "black", "marker": "s"}),
                   ("SOL", lambda c: c.get("sol"), {"color": "gray", "linestyle": "--"})]
        for label, get, style in series:
            pts = [(M, get(idx[(s, kp, M)])["us"]) for M in m["M"]
                   if (s, kp, M) in idx and (get(idx[(s, kp, M)]) or {}).get("us") is not None]
            if pts:
                ax.plot(*zip(*pts), label=label, **style)
        d = m["shape_dims"][s]
        ax.set_title(f"{s} (K={d['K']}, N={d['N']}), k={kp}", fontsize=9)
        ax.set_xlabel("M")
        ax.set_ylabel("us")
        ax.set_xticks(m["M"])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(shapes):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"{m['gpu']} {m['date']}: cold-L2 kernel time", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ============================================================================ run
def _git_describe() -> Optional[str]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rev = os.path.join(root, ".git_rev")  # written at commit time and carried to the GPU machine, whose
    if os.path.isfile(rev):              # copy of the tree sits on an older commit plus changes
        with open(rev) as f:
            r = f.read().strip()
        if r:
            return f"{r[:12]} (.git_rev)"
    try:
        r = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root, capture_output=True, text=True,
                           timeout=10)
        return r.stdout.strip() or None
    except Exception:  # noqa: BLE001 - not a git checkout
        return None


def _versions() -> Dict[str, str]:
    import cupy as cp

    v = {"CuPy": cp.__version__, "CUDA runtime": str(cp.cuda.runtime.runtimeGetVersion()),
         "driver": str(cp.cuda.runtime.driverGetVersion())}
    try:
        import torch

        v["torch"] = f"{torch.__version__} (CUDA {torch.version.cuda})"
    except ImportError:
        v["torch"] = "not installed"
    from . import _pdl

    # the launch mode of the columns without +PDL / :plain in their name (kbitcupy/_pdl.py)
    v["launch"] = "full PDL" if _pdl.ENABLED else ("safe PDL (default)" if _pdl.SAFE else "plain (PDL off)")
    return v


def _device_info():
    """(GPU name, L2 bytes, SM count) of the current CuPy device."""
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return name, int(props["l2CacheSize"]), int(props["multiProcessorCount"])


def _reference_weight(qw):
    from .quantize import dequantize

    return dequantize(qw, np.float32)  # [N, K] float32 on the GPU, for the output check


def _reference_output(A, Wd):
    return _to_f32(A) @ Wd.T


def _free_pool():
    """Between shapes (no graph alive): drop kbitcupy's reused buffers and CuPy's / torch's cached blocks."""
    import cupy as cp

    cp.cuda.Device().synchronize()
    for mod, fn in (("gemm", "release_workspaces"), ("dequant_matmul", "release_buffers")):
        try:
            getattr(__import__(f"{__package__}.{mod}", fromlist=[fn]), fn)()
        except Exception:  # noqa: BLE001
            pass
    cp.get_default_memory_pool().free_all_blocks()
    if "torch" in sys.modules:
        try:
            sys.modules["torch"].cuda.empty_cache()
        except Exception:  # noqa: BLE001
            pass


def run(shapes: Sequence[str], Ms: Sequence[int], ks: Sequence[int], columns: Sequence[Column], dtype: str = "fp16",
        reps: int = 20, total_shapes: Sequence[str] = TOTAL_SHAPES, command: str = "") -> dict:
    gpu, l2, sms = _device_info()
    now = _dt.datetime.now(_dt.timezone.utc)
    names = [c.name for c in columns]
    meta = dict(gpu=gpu, date=now.strftime("%Y-%m-%d"), timestamp=now.isoformat(timespec="seconds"), command=command,
                git=_git_describe(), versions=_versions(), l2_bytes=l2, sm_count=sms, dtype=dtype, reps=reps,
                columns=names, M=list(Ms), k=list(ks), shapes=list(shapes),
                total_shapes=[s for s in total_shapes if s in shapes],
                shape_dims={s: dict(K=SHAPES[s].K, N=SHAPES[s].N, experts=SHAPES[s].experts) for s in shapes},
                method=dict(cold_factor=COLD_FACTOR, min_launches=MIN_LAUNCHES, statistic="median", unit="us/launch",
                            check_tol=CHECK_TOL), notes=[])
    if meta["versions"]["torch"] == "not installed":
        meta["notes"].append(f"torch is not installed: no cuBLAS {dtype} column (reported as None).")
    missing = [s for s in total_shapes if s not in shapes]
    if missing and meta["total_shapes"]:
        meta["notes"].append(f"TOTAL covers only the shapes run; missing: {', '.join(missing)}.")
    print(f"{gpu}: {sms} SMs, L2 {l2 / 2**20:.1f} MiB", file=sys.stderr)
    cells, host = [], []
    for sname in shapes:
        shape = SHAPES[sname]
        print(f"{sname} (K={shape.K}, N={shape.N}{', E=%d' % shape.E if shape.experts else ''}): cuBLAS {dtype}",
              file=sys.stderr)
        try:
            cublas = time_cublas_shape(shape, Ms, dtype, l2, reps)
        except Exception as e:  # noqa: BLE001 - e.g. torch without CUDA: the kbit columns still run
            cublas = dict.fromkeys(Ms, _err(e))
        for k in ks:
            qw, copies, wbytes = kbit_weight_copies(shape, k, l2)
            Wd = None
            if shape.experts is None:
                Wd = _reference_weight(qw)
                try:
                    host.append(dict(shape=sname, k=k, M=1, **host_overhead(qw, shape, dtype)))
                except Exception as e:  # noqa: BLE001
                    host.append(dict(shape=sname, k=k, M=1, wall_us=None, error=_err(e)["error"]))
            for M in Ms:
                cell = dict(shape=sname, K=shape.K, N=shape.N, experts=shape.experts, k=k, M=M, weight_bytes=wbytes,
                            columns={}, cublas=cublas[M])
                a_shape = (M, shape.K) if shape.experts is None else (shape.E, M, shape.K)
                A = _rand(a_shape, dtype)
                out = _empty(a_shape[:-1] + (shape.N,), dtype)
                ref = _reference_output(A, Wd) if Wd is not None else None
                for col in columns:
                    if not col.applies(shape, M):
                        continue
                    try:
                        e = time_kbit(col, shape, M, copies, A, out, reps)
                        e["bytes"] = wbytes
                        if ref is not None:
                            record_check(e, col, Ctx(A, qw, out, shape, M), ref, f"{sname} k={k} M={M}")
                    except NotApplicable as ex:
                        e = {"us": None, "skipped": str(ex)}
                    except Exception as ex:  # noqa: BLE001 - report the cell, keep the run going
                        e = _err(ex)
                    cell["columns"][col.name] = e
                try:
                    cell["sol"] = time_sol(wbytes + A.nbytes, l2, sms, reps)
                except Exception as ex:  # noqa: BLE001
                    cell["sol"] = _err(ex)
                finish_cell(cell, names)
                cells.append(cell)
                print(f"  k={k} M={M}: " + "  ".join(f"{n} {fmt_entry(cell['columns'].get(n))}" for n in names)
                      + f"  {dtype} {fmt_entry(cell['cublas'])}  SOL {fmt_entry(cell['sol'])}", file=sys.stderr)
                del A, out, ref
            del qw, copies, Wd
            _free_pool()
    totals = compute_totals(cells, meta["total_shapes"], Ms, ks, names)
    return dict(meta=meta, cells=cells, totals=totals, host_overhead=host)


def write_outputs(res: dict, out_dir: str, tag: str, want_plot: bool) -> Dict[str, str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = output_paths(out_dir, res["meta"]["gpu"], res["meta"]["date"], tag)
    files = {"md": paths["md"], "json": paths["json"]}
    if want_plot and not res.get("cells"):
        res["meta"]["notes"].append("--plot: no dense cells in this run, no PNG written.")
    elif want_plot:
        if plot(res, paths["png"]):
            files["png"] = paths["png"]
        else:
            res["meta"]["notes"].append("--plot: matplotlib is not installed, no PNG written.")
    res["meta"]["files"] = files
    with open(paths["md"], "w") as f:
        f.write(format_report(res))
    with open(paths["json"], "w") as f:
        json.dump(res, f, indent=1, default=float)
    return files


# ============================================================================ MoE: expert matmuls
@dataclass
class MoeCtx:
    """What a MoE column's launch gets: A [E*M, K] (tokens sorted by expert, M per expert),
    out [E*M, N], the bank of B quantized experts, this launch's E expert ids (device int32
    [E] and the same on the host), uniform offsets (device int32 [E + 1]), M = max_tokens."""
    A: object
    out: object
    bank: object
    ids: object
    ids_host: tuple
    offsets: object
    M: int
    E: int


@dataclass(frozen=True)
class MoeColumn:
    name: str
    launch: Callable[[MoeCtx], object]  # capturable: no allocation, no host sync
    applies: Callable[[Shape, int], bool] = lambda s, M: True


def _grouped_launch(c: MoeCtx, impl=None, ids_stable=False, chained=False):
    from .grouped import grouped_matmul

    return grouped_matmul(c.A, c.bank, c.ids, c.offsets, c.M, out=c.out, method="kernel", impl=impl,
                          ids_stable=ids_stable, chained=chained)


def _grouped_pdl_launch(impl=None):
    """grouped_matmul launched as a programmatic dependent (kbitcupy.set_pdl); the ids and
    offsets are fixed setup data here, so ids_stable."""
    return _with_pdl(lambda c: _grouped_launch(c, impl, ids_stable=True))


def _matmul_loop_launch(c: MoeCtx):
    """E dispatched kbitcupy.matmul calls on views of the bank (no copy)."""
    M = c.M
    for i, e in enumerate(c.ids_host):
        matmul(c.A[i * M:(i + 1) * M], c.bank.expert(e), out=c.out[i * M:(i + 1) * M])
    return c.out


MOE_COLUMNS: List[MoeColumn] = [
    MoeColumn("Grouped", _grouped_launch),  # what grouped_matmul dispatches to
    # each grouped kernel forced, where it is a candidate
    MoeColumn("g-GEMV", lambda c: _grouped_launch(c, "gemv"), lambda s, M: M <= 16),
    MoeColumn("g-MMA", lambda c: _grouped_launch(c, "mma"), lambda s, M: M >= 8),
    MoeColumn("g-WGMMA", lambda c: _grouped_launch(c, "wgmma"), lambda s, M: M >= 8 and _sm90()),
    MoeColumn("matmul loop", _matmul_loop_launch),
    # not a kernel of its own: Grouped launched with PDL, kept out of Best (fp16 is not PDL-launched)
    MoeColumn(MOE_PDL_COLUMN, _grouped_pdl_launch()),
    MoeColumn(PLAIN_COLUMNS[1], _with_pdl(lambda c: _grouped_launch(c), False)),
    MoeColumn(PLAIN_COLUMNS[2], lambda c: _grouped_launch(c, ids_stable=True)),
    MoeColumn(CHAINED_COLUMN, lambda c: _grouped_launch(c, chained=True)),
    MoeColumn(MOE_PDL_FORCED[0], _grouped_pdl_launch("mma"), lambda s, M: M >= 8),
    MoeColumn(MOE_PDL_FORCED[1], _grouped_pdl_launch("wgmma"), lambda s, M: M >= 8 and _sm90()),
]


def kbit_expert_bytes(N: int, K: int, k: int) -> int:
    """Bytes a kernel reads for one tiled k-bit expert W[N, K]: packed words + E4M4 absmax."""
    from .reference import tiled_sizes

    nw, na = tiled_sizes(N, K, k)
    return int(nw) * 4 + int(na)


def moe_launch_experts(r: int, E: int, B: int) -> List[int]:
    """Experts of launch r: (r * E + i) % B, i < E -- consecutive launches walk through the
    whole bank, so an expert is read again only after all B have been read."""
    if not 1 <= E <= B:
        raise ValueError(f"active experts E = {E} must be in 1..{B} (the bank)")
    return [(r * E + i) % B for i in range(E)]


def moe_bmm_start(r: int, E: int, B: int) -> int:
    """First expert of launch r's contiguous slice W[s:s+E] (fp16 bmm): s = (r mod floor(B/E)) * E."""
    if not 1 <= E <= B:
        raise ValueError(f"active experts E = {E} must be in 1..{B} (the bank)")
    return (r % (B // E)) * E


def moe_launches(step_bytes: int, l2_bytes: int) -> int:
    """Launches per graph for a MoE cell: as for dense (>= COLD_FACTOR x L2 of weight reads, >=
    MIN_LAUNCHES).  Reuse distance is the whole bank, whatever the count."""
    return launch_count(rotation_count(step_bytes, l2_bytes))


def make_fp16_bank(B: int, N: int, K: int, seed: int = 0):
    """CuPy float16 [B, N, K] = random normal * 0.02, generated in ~256 MB float32 chunks."""
    import cupy as cp

    rs = cp.random.RandomState(seed)
    W = cp.empty((B, N, K), cp.float16)
    step = max(1, (64 << 20) // (N * K))
    for e0 in range(0, B, step):
        n = min(step, B - e0)
        x = rs.standard_normal((n, N, K), dtype=cp.float32)
        x *= 0.02
        W[e0:e0 + n] = x.astype(cp.float16)
        del x
    return W


def _have_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def make_kbit_bank(W, k: int):
    """KbitExpertBank quantized on the GPU from the CuPy fp16 bank W [B, N, K]."""
    from .grouped import quantize_experts

    return quantize_experts(W, k)


def _torch_bank(W, dtype: str):
    """Zero-copy torch view of a CuPy fp16 array (bf16: a converted copy)."""
    import torch

    from ._arrays import cupy_to_torch

    t = cupy_to_torch(W)
    return t.to(torch.bfloat16) if dtype == "bf16" else t


def _fp16_loop_launch(A, out, W, ids):
    import torch

    for i, e in enumerate(ids):
        torch.mm(A[i], W[e].t(), out=out[i])


def _fp16_bmm_launch(A, out, W, s, E):
    import torch

    torch.bmm(A, W[s:s + E].transpose(1, 2), out=out)


def _rel_err(d, ref) -> Optional[float]:
    """max |d| / max |ref| (CuPy float32 arrays); None when d holds NaN/Inf."""
    import cupy as cp

    if not bool(cp.isfinite(d).all()):
        return None
    return float(cp.abs(d).max()) / max(float(cp.abs(ref).max()), 1e-30)


def time_fp16_moe(Wt, E: int, Ms: Sequence[int], l2_bytes: int, reps: int) -> Dict[int, dict]:
    """fp16/bf16 cuBLAS (torch graph) over E active experts of the torch bank Wt [B, N, K], same
    rotation as the kbit columns: {M: {"loop": entry, "bmm": entry}}.  loop = E torch.mm on the
    views W[e] (experts (r*E+i) % B); bmm = one torch.bmm on the contiguous slice W[s:s+E]
    (no gather, best case).  Launch 0 of both reads experts 0..E-1: checked against fp32."""
    import torch

    from ._arrays import torch_to_cupy

    B, N, K = (int(x) for x in Wt.shape)
    per = N * K * Wt.element_size()
    n = moe_launches(E * per, l2_bytes)
    ids = [moe_launch_experts(r, E, B) for r in range(n)]
    starts = [moe_bmm_start(r, E, B) for r in range(n)]
    res: Dict[int, dict] = {}
    for M in Ms:
        cell = {}
        try:
            A = torch.randn((E, M, K), device=Wt.device).to(Wt.dtype)
            out = torch.empty((E, M, N), device=Wt.device, dtype=Wt.dtype)
            ref = torch.bmm(A.float(), Wt[:E].float().transpose(1, 2))
        except Exception as e:  # noqa: BLE001
            res[M] = {"loop": _err(e), "bmm": _err(e)}
            continue
        variants = (("loop", [functools.partial(_fp16_loop_launch, A, out, Wt, ids[r]) for r in range(n)]),
                    ("bmm", [functools.partial(_fp16_bmm_launch, A, out, Wt, starts[r], E) for r in range(n)]))
        for name, fns in variants:
            try:
                e = summarize(time_graph_torch(fns, reps), R=n, launches=n, bytes=E * per, reuse_experts=B)
                out.fill_(float("nan"))
                fns[0]()
                torch.cuda.synchronize()
                err = _rel_err(torch_to_cupy((out.float() - ref).contiguous()), torch_to_cupy(ref))
                e["max_rel_err"] = err
                e["check_ok"] = err is not None and err <= CHECK_TOL
            except Exception as ex:  # noqa: BLE001
                e = _err(ex)
            cell[name] = e
        res[M] = cell
        del A, out, ref
    return res


def _moe_reference(A, bank, ids, M: int):
    """float32 [E*M, N]: slot i's M rows times expert ids[i] dequantized (GPU)."""
    import cupy as cp

    from .quantize import dequantize

    Af = _to_f32(A)
    ref = cp.empty((A.shape[0], bank.N), cp.float32)
    for i, e in enumerate(ids):
        Wd = dequantize(bank.expert(int(e)), np.float32)
        ref[i * M:(i + 1) * M] = Af[i * M:(i + 1) * M] @ Wd.T
    return ref


def time_moe_cell(cols: Sequence[MoeColumn], shape: Shape, E: int, M: int, bank, dtype: str, l2_bytes: int,
                  reps: int) -> Dict[str, dict]:
    """Every MoE kbit column for E active experts x M tokens each: graph of n launches, launch r
    on experts moe_launch_experts(r, E, B); launch 0 checked against the dequantized experts."""
    import cupy as cp

    N, K, B = shape.N, shape.K, bank.num_experts
    per = kbit_expert_bytes(N, K, bank.k)
    n = moe_launches(E * per, l2_bytes)
    A = _rand((E * M, K), dtype)
    out = _empty((E * M, N), dtype)
    offs = cp.arange(0, (E + 1) * M, M, dtype=cp.int32)
    ctxs = []
    for r in range(n):
        ids = moe_launch_experts(r, E, B)
        ctxs.append(MoeCtx(A, out, bank, cp.asarray(np.asarray(ids, np.int32)), tuple(ids), offs, M, E))
    ref = _moe_reference(A, bank, ctxs[0].ids_host, M)
    res = {}
    for col in cols:
        if not col.applies(shape, M):
            continue
        try:
            fns = [functools.partial(col.launch, c) for c in ctxs]
            e = summarize(time_graph_cupy(fns, reps), R=n, launches=n, bytes=E * per, reuse_experts=B)
            record_check(e, col, ctxs[0], ref, f"{shape.name} E={E} M={M}")
        except NotApplicable as ex:
            e = {"us": None, "skipped": str(ex)}
        except Exception as ex:  # noqa: BLE001
            e = _err(ex)
        res[col.name] = e
    return res


def best_fp16(f: Optional[dict]) -> dict:
    """The faster of the fp16 variants that ran and passed their check: {us, variant}."""
    ok = {n: e for n, e in (f or {}).items() if e and e.get("us") is not None and e.get("check_ok", True)}
    if not ok:
        errs = [e.get("error") for e in (f or {}).values() if e and e.get("error")]
        return {"us": None, "error": errs[0] if errs else "no fp16 timing"}
    n = min(ok, key=lambda x: ok[x]["us"])
    return {"us": ok[n]["us"], "variant": n}


def finish_moe_cell(cell: dict, kbit_names: Sequence[str]) -> dict:
    """finish_cell with cuBLAS = the best fp16 variant (loop or bmm)."""
    cell["cublas"] = best_fp16(cell.get("fp16"))
    return finish_cell(cell, kbit_names)


def _fw_cols(t: dict, M: int) -> Tuple[str, str]:
    """A TOTAL's forward columns (results before the forty-third session: gate/up Grouped:stable above
    GEMV_MAX_TOKENS, else Grouped; down Grouped:stable)."""
    return tuple(t.get("forward_columns") or (STABLE_COLUMN if M > GEMV_MAX_TOKENS else "Grouped", STABLE_COLUMN))


def _forward_columns(fuse_gather: bool, fuse_swiglu: bool) -> Tuple[str, str]:
    """The columns moe_forward's gate/up and down launches are timed by: gate/up Grouped where the row gather is fused
    into it (right after the routing: it waits first), else Grouped:chained (right after the gather kernel); down
    Grouped:stable where SwiGLU is fused into it (right after gate/up), else Grouped:chained (after silu_mul)."""
    return ("Grouped" if fuse_gather else CHAINED_COLUMN), (STABLE_COLUMN if fuse_swiglu else CHAINED_COLUMN)


def compute_moe_totals(cells: Sequence[dict], total_shapes: Sequence[str], Ms, Es, ks, kbit_names) -> List[dict]:
    """Per (M, E, k): sums over the MoE TOTAL shapes (all of them must be in the run)."""
    out = []
    if not total_shapes:
        return out
    for M in Ms:
        for E in Es:
            for k in ks:
                rows = [c for c in cells if c["M"] == M and c["experts"] == E and c["k"] == k
                        and c["shape"] in total_shapes]
                if len(rows) != len(total_shapes):
                    continue
                best = _tsum([c.get("best_us") for c in rows])
                cub = _tsum([(c.get("cublas") or {}).get("us") for c in rows])
                sol = _tsum([(c.get("sol") or {}).get("us") for c in rows])
                fp = {v: _tsum([((c.get("fp16") or {}).get(v) or {}).get("us") for c in rows]) for v in ("loop", "bmm")}
                cols = {n: _tsum([(c["columns"].get(n) or {}).get("us") for c in rows]) for n in kbit_names}
                pdl_us = _pdl_us(cols)
                t = dict(M=M, experts=E, k=k, shapes=[c["shape"] for c in rows], best_us=best, cublas_us=cub,
                         sol_us=sol, fp16=fp, columns=cols, vs_cublas=(cub / best) if cub and best else None,
                         pct_sol=(100.0 * sol / best) if sol and best else None,
                         vs_cublas_pdl=(cub / pdl_us) if cub and pdl_us else None)
                # as moe_forward launches them (_forward_columns; its path as the cells' forward_decode says)
                fused = {c["shape"]: M <= GEMV_MAX_TOKENS if c.get("forward_decode") is None else c["forward_decode"]
                         for c in rows}
                gu, dn = _forward_columns(fused.get("moe_gu_fused", False), fused.get("moe_dn", False))
                fw = _tsum([(c["columns"].get(dn if c["shape"] == "moe_dn" else gu) or {}).get("us")
                            for c in rows]) if "moe_dn" in total_shapes and {gu, dn} <= set(kbit_names) else None
                if fw:
                    t.update(forward_us=fw, vs_cublas_forward=(cub / fw) if cub else None, forward_columns=[gu, dn])
                out.append(t)
    return out


def _forward_decode(sname: str, bank, M: int, E: int) -> bool:
    """Whether moe_forward fuses its decode step into this shape's matmul at M tokens for E experts (the row gather
    into gate/up, SwiGLU into down: kbitcupy.moe._fuse_gather / _fuse_swiglu); None without a device."""
    import cupy as cp

    from .moe import _fuse_gather, _fuse_swiglu

    try:
        probe = cp.empty((1, bank.shape[1]), cp.float16)  # (read for its device and alignment only)
        return (_fuse_swiglu if sname == "moe_dn" else _fuse_gather)(probe, bank, M, E)
    except Exception:  # noqa: BLE001 - no device (tests' fakes): compute_moe_totals' fallback
        return None


def run_moe(shape_names: Sequence[str], Ms: Sequence[int], Es: Sequence[int], ks: Sequence[int],
            cols: Sequence[MoeColumn], dtype: str, reps: int, l2: int, sms: int, B: int = MOE_BANK,
            H: int = MOE_HIDDEN, I: int = MOE_INTER, seed: int = 0) -> dict:
    """MoE expert-matmul tables: per shape one fp16 bank of B experts (shared by the torch
    baseline through DLPack, freed after the shape), per k one quantized bank."""
    shapes = moe_shapes(H, I)
    names = [c.name for c in cols]
    Es = [E for E in Es if E <= B] or [B]
    meta = dict(M=list(Ms), experts=list(Es), k=list(ks), shapes=list(shape_names), columns=names, dtype=dtype,
                bank_experts=B, hidden=H, inter=I,
                total_shapes=list(MOE_TOTAL_SHAPES) if all(s in shape_names for s in MOE_TOTAL_SHAPES) else [],
                shape_dims={s: dict(K=shapes[s].K, N=shapes[s].N) for s in shape_names},
                bank_bytes={}, notes=[])
    have_torch = _have_torch()
    if not have_torch:
        meta["notes"].append(f"torch is not installed: no {dtype} columns.")
    cells = []
    for si, sname in enumerate(shape_names):
        shape = shapes[sname]
        N, K = shape.N, shape.K
        print(f"{sname} (K={K}, N={N}, bank {B} experts): {dtype} bank", file=sys.stderr)
        W = make_fp16_bank(B, N, K, seed + si + 1)
        fp16: Dict[int, Dict[int, dict]] = {}
        Wt, wt_err = None, None
        if have_torch:
            try:
                Wt = _torch_bank(W, dtype)
            except Exception as e:  # noqa: BLE001
                wt_err = _err(e)
        for E in Es:
            if Wt is None:
                fp16[E] = {M: {"loop": dict(wt_err or {"us": None, "error": "torch not installed"})} for M in Ms}
                continue
            try:
                fp16[E] = time_fp16_moe(Wt, E, Ms, l2, reps)
            except Exception as e:  # noqa: BLE001
                fp16[E] = {M: {"loop": _err(e)} for M in Ms}
        Wt = None
        _free_pool()
        for k in ks:
            try:
                bank = make_kbit_bank(W, k)
            except Exception as e:  # noqa: BLE001
                err = _err(e)
                for E in Es:
                    for M in Ms:
                        cells.append(finish_moe_cell(dict(shape=sname, K=K, N=N, experts=E, k=k, M=M, columns={
                            n: dict(err) for n in names}, fp16=fp16[E][M], sol={"us": None}), names))
                continue
            per = kbit_expert_bytes(N, K, k)
            meta["bank_bytes"][f"{sname},k={k}"] = per * B
            for E in Es:
                for M in Ms:
                    cell = dict(shape=sname, K=K, N=N, experts=E, k=k, M=M, weight_bytes=E * per, columns={},
                                fp16=fp16[E][M], forward_decode=_forward_decode(sname, bank, M, E))
                    try:
                        cell["columns"] = time_moe_cell(cols, replace(shape, experts=E), E, M, bank, dtype, l2, reps)
                    except Exception as ex:  # noqa: BLE001
                        cell["columns"] = {n: _err(ex) for n in names}
                    try:
                        cell["sol"] = time_sol(E * per + E * M * K * 2, l2, sms, reps)
                    except Exception as ex:  # noqa: BLE001
                        cell["sol"] = _err(ex)
                    finish_moe_cell(cell, names)
                    cells.append(cell)
                    print(f"  k={k} E={E} M={M}: " + "  ".join(f"{n} {fmt_entry(cell['columns'].get(n))}"
                                                              for n in names)
                          + f"  {dtype} loop {fmt_entry(cell['fp16'].get('loop'))} bmm "
                          f"{fmt_entry(cell['fp16'].get('bmm'))}  SOL {fmt_entry(cell['sol'])}", file=sys.stderr)
            del bank
            _free_pool()
        del W
        _free_pool()
    totals = compute_moe_totals(cells, meta["total_shapes"], Ms, Es, ks, names)
    return dict(meta=meta, cells=cells, totals=totals)


# ============================================================================ MoE: layer step
LAYER_MIN_LAUNCHES = 8   # layer steps per graph (a step is >= ~20 us: 8 amortise the graph start)
EAGER_MIN_CALLS = 32     # eager timing: calls per timed sample
LAYER_CHECK_TOL = 2e-2   # fp16 intermediates (h, SiLU*up, down) add a few 1e-3


def expected_distinct(T: int, topk: int, B: int) -> float:
    """Expected distinct experts of T tokens x top-k over B experts (uniform routing)."""
    return B * (1.0 - (1.0 - topk / B) ** T)


def layer_plan(T: int, topk: int, B: int, expert_bytes: int, l2_bytes: int):
    """(R draws, window w, launches n): R draws whose weight reads span COLD_FACTOR x L2;
    draws closer than w steps (cyclically) share no expert when one draw reads less than L2."""
    step = max(1, int(expected_distinct(T, topk, B) * expert_bytes))
    w = 0 if step >= l2_bytes else int(math.ceil(l2_bytes / step))
    R = max(rotation_count(step, l2_bytes), 2 * w + 2)
    return R, w, launch_count(R, LAYER_MIN_LAUNCHES)


def routing_draws(T: int, topk: int, B: int, R: int, window: int, seed: int = 0):
    """R routing draws [(ids int32 [T, topk], weights float32 [T, topk])] from random normal
    router logits: top-k per token, weights = softmax over the k chosen logits.  Cold L2:
    experts of draws within cyclic distance <= window get logit -inf (no reuse between
    nearby steps), as long as that masks at most min(B/2, B - topk) experts."""
    rng = np.random.default_rng(seed)
    max_mask = max(0, min(B // 2, B - topk))
    sets: List[Optional[set]] = [None] * R
    draws = []
    for r in range(R):
        mask: set = set()
        for d in range(1, window + 1):
            cand = set(mask)
            for nb in {(r - d) % R, (r + d) % R} - {r}:
                if sets[nb] is not None:
                    cand |= sets[nb]
            if len(cand) > max_mask:
                break
            mask = cand
        logits = rng.standard_normal((T, B))
        if mask:
            logits[:, sorted(mask)] = -np.inf
        ids = np.argsort(-logits, axis=1, kind="stable")[:, :topk]
        top = np.take_along_axis(logits, ids, axis=1)
        wts = np.exp(top - top.max(axis=1, keepdims=True))
        wts /= wts.sum(axis=1, keepdims=True)
        draws.append((ids.astype(np.int32), wts.astype(np.float32)))
        sets[r] = set(int(e) for e in ids.reshape(-1))
    return draws


def fp16_layer_plan(ids: np.ndarray):
    """Host routing for the torch baseline: (sorted_token [P], pos [P], segments [(e, r0, r1)])
    with the P = T * topk pairs sorted by expert (stable), pos = inverse permutation."""
    T, topk = ids.shape
    flat = ids.reshape(-1).astype(np.int64)
    order = np.argsort(flat, kind="stable")
    pos = np.empty(flat.size, np.int64)
    pos[order] = np.arange(flat.size)
    uniq, start, cnt = np.unique(flat[order], return_index=True, return_counts=True)
    segs = [(int(e), int(s0), int(s0 + c)) for e, s0, c in zip(uniq, start, cnt)]
    return order // topk, pos, segs


def _fp16_layer_step(x, Wgu, Wdn, plan, bufs, I: int, T: int, topk: int):
    """torch fp16 layer step, routing given (sorted on the host when the graph is built):
    gather rows, per active expert torch.mm gate/up (fused W[2I, H]) into a slice of h,
    SiLU(gate) * up over all rows, per expert torch.mm down, fp32 weighted sum."""
    import torch

    sorted_tok, pos, segs, w = plan
    A, h, y, o = bufs
    torch.index_select(x, 0, sorted_tok, out=A)
    for e, r0, r1 in segs:
        torch.mm(A[r0:r1], Wgu[e].t(), out=h[r0:r1])
    act = torch.nn.functional.silu(h[:, :I]) * h[:, I:]
    for e, r0, r1 in segs:
        torch.mm(act[r0:r1], Wdn[e].t(), out=y[r0:r1])
    o.copy_((y.index_select(0, pos).view(T, topk, -1).float() * w[:, :, None]).sum(1))


def _kbit_layer_step(x, bgu, bdn, rt, w, bufs, pdl: bool = False):
    """kbitcupy layer step, routing given (moe_route run at setup): the steps of moe_forward
    with preallocated outputs (gather, grouped gate/up, SiLU*up, grouped down, combine).
    pdl: the grouped matmuls launched as programmatic dependents, ids_stable / chained as moe_forward."""
    from ._pdl import pdl as pdl_ctx
    from .moe import expert_mlp, moe_combine, plan_tokens

    A, h, act, y, o = bufs
    with pdl_ctx(pdl):
        outs = dict(A=A, h=h, act=act, y=y)
        expert_mlp(x, bgu, bdn, rt, plan_tokens(rt), alloc=lambda name, n: outs[name])  # moe_forward's steps
        moe_combine(y, rt, w, out=o)


def layer_reference(x32, ids: np.ndarray, wts: np.ndarray, Wgu_of, Wdn_of, I: int):
    """CuPy float32 oracle of one layer step, expert by expert from the host ids (independent of
    moe_route and of the torch sorting): x32 [T, H] float32, W*_of(e) float32 [N, K]."""
    import cupy as cp

    out = cp.zeros(x32.shape, cp.float32)  # down maps back to the hidden size
    for e in np.unique(ids):
        tok, j = np.nonzero(ids == e)  # a token picks an expert at most once: tok unique
        td = cp.asarray(tok)
        h = x32[td] @ Wgu_of(int(e)).T
        g, u = h[:, :I], h[:, I:]
        y = (g / (1.0 + cp.exp(-g)) * u) @ Wdn_of(int(e)).T
        out[td] += cp.asarray(wts[tok, j])[:, None] * y
    return out


def _from_host(x32: np.ndarray, dtype: str):
    import cupy as cp

    x = cp.asarray(np.ascontiguousarray(x32, dtype=np.float32))
    if dtype == "fp16":
        return x.astype(cp.float16)
    return (x.view(cp.uint32) >> 16).astype(cp.uint16).view(bfloat16)


def time_eager_cupy(fns: Sequence[Callable[[], object]], reps: int, min_calls: int = EAGER_MIN_CALLS) -> List[float]:
    """Eager fallback (for calls that cannot be captured): per call us of reps samples, each CUDA
    events around >= min_calls back-to-back calls (cycling fns) on one stream.  Includes the host
    (Python) launch overhead whenever that exceeds the GPU time."""
    import cupy as cp

    calls = len(fns) * max(1, -(-min_calls // len(fns)))
    cp.cuda.Device().synchronize()
    s = _capture_stream()
    out = []
    with s:
        for f in fns:
            f()
        s.synchronize()
        for _ in range(reps):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record(s)
            for i in range(calls):
                fns[i % len(fns)]()
            b.record(s)
            b.synchronize()
            out.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / calls)
    return out


def time_eager_torch(fns: Sequence[Callable[[], object]], reps: int, min_calls: int = EAGER_MIN_CALLS) -> List[float]:
    import torch

    calls = len(fns) * max(1, -(-min_calls // len(fns)))
    torch.cuda.synchronize()
    for f in fns:
        f()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(calls):
            fns[i % len(fns)]()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / calls)
    return out


def time_graph_or_eager(fns, reps: int, skip_graph: Optional[str] = None, **info) -> dict:
    """CUDA graph timing; if the capture fails (or skip_graph gives a reason not to try), eager
    timing, with the method and the capture error recorded in the entry (never silently)."""
    cap_err = f"not attempted: {skip_graph}" if skip_graph else None
    if not skip_graph:
        try:
            return summarize(time_graph_cupy(fns, reps), method="graph", **info)
        except Exception as e:  # noqa: BLE001
            cap_err = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            print(f"  ! capture failed ({cap_err}); timing eagerly", file=sys.stderr)
            _capture_stream(fresh=True)
    return summarize(time_eager_cupy(fns, reps), method="eager", capture_error=cap_err, **info)


def layer_fp16(Wgu, Wdn, st: dict, I: int, dtype: str, reps: int, eager: bool = False) -> dict:
    """The torch layer step over R draws (graph of n steps, or eager); checked on draw 0."""
    import torch

    from ._arrays import torch_to_cupy

    T, topk, R, n = st["T"], st["topk"], st["R"], st["launches"]
    Wg, Wd = _torch_bank(Wgu, dtype), _torch_bank(Wdn, dtype)
    dev, dt = Wg.device, Wg.dtype
    H = Wd.shape[1]
    P = T * topk
    x = torch.from_numpy(st["x"]).to(dev).to(dt)
    plans = []
    for ids, w in st["draws"]:
        tok, pos, segs = fp16_layer_plan(ids)
        plans.append((torch.as_tensor(tok, device=dev), torch.as_tensor(pos, device=dev), segs,
                      torch.as_tensor(w, device=dev)))
    bufs = (torch.empty((P, H), device=dev, dtype=dt), torch.empty((P, 2 * I), device=dev, dtype=dt),
            torch.empty((P, H), device=dev, dtype=dt), torch.empty((T, H), device=dev, dtype=dt))
    fns = [functools.partial(_fp16_layer_step, x, Wg, Wd, plans[r % R], bufs, I, T, topk) for r in range(n)]
    if eager:
        e = summarize(time_eager_torch(fns, reps), method="eager", R=R, launches=n)
    else:
        e = summarize(time_graph_torch(fns, reps), method="graph", R=R, launches=n)
    o = bufs[3]
    o.fill_(float("nan"))
    fns[0]()
    torch.cuda.synchronize()
    ids0, w0 = st["draws"][0]
    ref = layer_reference(torch_to_cupy(x.float().contiguous()), ids0, w0,
                          lambda q: torch_to_cupy(Wg[q].float().contiguous()),
                          lambda q: torch_to_cupy(Wd[q].float().contiguous()), I)
    err = _rel_err(torch_to_cupy(o.float().contiguous()) - ref, ref)
    e.update(max_rel_err=err, check_ok=err is not None and err <= LAYER_CHECK_TOL)
    return e


def layer_kbit(bgu, bdn, st: dict, I: int, dtype: str, reps: int, state: dict) -> Dict[str, dict]:
    """kbit layer step over R draws: 'moe_forward' (the full API call, routing included),
    'steps' (moe_route run at setup, then the steps into preallocated buffers) and 'route'
    (moe_route alone); graph, else eager (recorded).  Outputs checked on draw 0 against the
    dequantized experts.  state['forward_eager'] remembers a failed moe_forward capture."""
    import cupy as cp

    from .moe import moe_forward, moe_route
    from .quantize import dequantize

    T, topk, R, n = st["T"], st["topk"], st["R"], st["launches"]
    B, H = bgu.num_experts, bgu.K
    P = T * topk
    x = _from_host(st["x"], dtype)
    ids = [cp.asarray(d[0]) for d in st["draws"]]
    ws = [cp.asarray(d[1]) for d in st["draws"]]
    routes = [moe_route(i, B) for i in ids]
    bufs = (_empty((P, H), dtype), _empty((P, 2 * I), dtype), _empty((P, I), dtype), _empty((P, H), dtype),
            _empty((T, H), dtype))
    info = dict(R=R, launches=n)
    ids0, w0 = st["draws"][0]
    ref = layer_reference(_to_f32(x), ids0, w0, lambda q: dequantize(bgu.expert(q), np.float32),
                          lambda q: dequantize(bdn.expert(q), np.float32), I)

    def check(e, out):
        err = _rel_err(_to_f32(out) - ref, ref)
        e.update(max_rel_err=err, check_ok=err is not None and err <= LAYER_CHECK_TOL)
        if not e["check_ok"]:
            print(f"  ! layer T={T} k={bgu.k}: output check failed, max rel err {err}", file=sys.stderr)

    res = {}
    # the steps, then the same with the kernels as programmatic dependents (kbitcupy.set_pdl)
    for name, pdl in (("steps", False), ("steps_pdl", True)):
        try:
            fns = [functools.partial(_kbit_layer_step, x, bgu, bdn, routes[r % R], ws[r % R], bufs, pdl)
                   for r in range(n)]
            e = time_graph_or_eager(fns, reps, skip_graph=state.get("steps_eager"), **info)
            if e["method"] == "eager" and not pdl:
                state["steps_eager"] = "an earlier capture of the kbit steps failed"
            bufs[4].view(cp.uint16).fill(0x7E00 if dtype == "fp16" else 0x7FC0)
            fns[0]()
            check(e, bufs[4])
            res[name] = e
        except Exception as ex:  # noqa: BLE001
            res[name] = _err(ex)
    try:
        fns = [functools.partial(moe_route, ids[r % R], B) for r in range(n)]
        e = time_graph_or_eager(fns, reps, skip_graph=state.get("route_eager"), **info)
        if e["method"] == "eager":
            state["route_eager"] = "an earlier capture of moe_route failed"
        res["route"] = e
    except Exception as ex:  # noqa: BLE001
        res["route"] = _err(ex)
    try:
        fns = [functools.partial(moe_forward, x, bgu, bdn, ids[r % R], ws[r % R]) for r in range(n)]
        skip = state.get("forward_eager") or state.get("route_eager")  # moe_forward contains moe_route
        e = time_graph_or_eager(fns, reps, skip_graph=skip, **info)
        if e["method"] == "eager":
            state["forward_eager"] = "an earlier capture of moe_forward failed"
        check(e, moe_forward(x, bgu, bdn, ids[0], ws[0]))
        res["moe_forward"] = e
    except Exception as ex:  # noqa: BLE001
        res["moe_forward"] = _err(ex)
    return res


def finish_layer_row(row: dict) -> dict:
    """vs fp16 only between numbers of one method: steps (graph) vs fp16 loop (graph);
    moe_forward vs the fp16 loop timed with moe_forward's method (graph or eager)."""
    fp = row.get("fp16") or {}

    def ok(e):
        return e.get("us") if e and e.get("us") is not None and e.get("check_ok", True) else None

    st, mf, sol = ok(row.get("steps")), ok(row.get("moe_forward")), (row.get("sol") or {}).get("us")
    sp = ok(row.get("steps_pdl"))
    sp_m = (row.get("steps_pdl") or {}).get("method", "graph")
    f_sp = ok(fp.get(sp_m))
    st_m = (row.get("steps") or {}).get("method", "graph")
    mf_m = (row.get("moe_forward") or {}).get("method", "graph")
    f_st, f_mf = ok(fp.get(st_m)), ok(fp.get(mf_m))
    row.update(vs_fp16_steps=(f_st / st) if f_st and st else None, vs_fp16_steps_method=st_m,
               vs_fp16_steps_pdl=(f_sp / sp) if f_sp and sp else None,
               vs_fp16_forward=(f_mf / mf) if f_mf and mf else None, vs_fp16_forward_method=mf_m,
               pct_sol_steps=(100.0 * sol / st) if sol and st and st_m == "graph" else None)
    return row


def layer_setups(Ts: Sequence[int], ks: Sequence[int], topk: int, B: int, H: int, I: int, l2: int,
                 seed: int = 0) -> Dict[int, dict]:
    """Host-side per T: draws (shared by every k and by fp16), R, window, launches, x (float32)."""
    per_min = min(kbit_expert_bytes(2 * I, H, k) + kbit_expert_bytes(H, I, k) for k in ks)
    out = {}
    for T in Ts:
        R, w, n = layer_plan(T, topk, B, per_min, l2)
        draws = routing_draws(T, topk, B, R, w, seed=seed + 1000 + T)
        x = np.random.default_rng(seed + 2000 + T).standard_normal((T, H)).astype(np.float32)
        out[T] = dict(T=T, topk=topk, R=R, window=w, launches=n, draws=draws, x=x,
                      distinct=[int(np.unique(d[0]).size) for d in draws])
    return out


def run_moe_layer(Ts: Sequence[int], ks: Sequence[int], dtype: str, reps: int, l2: int, sms: int,
                  B: int = MOE_BANK, H: int = MOE_HIDDEN, I: int = MOE_INTER, topk: int = MOE_TOPK,
                  seed: int = 0) -> dict:
    """Full MoE layer step per decode batch T and k.  kbit: moe_forward (route included) and its
    steps with routing given; fp16: the torch loop over the active experts (routing given).
    Banks: gate/up fused [B, 2I, H], down [B, H, I], fp16 random * 0.02, quantized per k."""
    topk = min(topk, B)
    setups = layer_setups(Ts, ks, topk, B, H, I, l2, seed)
    meta = dict(T=list(Ts), k=list(ks), dtype=dtype, bank_experts=B, hidden=H, inter=I, topk=topk,
                setups=[dict(T=T, R=s["R"], window=s["window"], launches=s["launches"],
                             distinct_mean=float(np.mean(s["distinct"])), distinct_min=min(s["distinct"]),
                             distinct_max=max(s["distinct"])) for T, s in setups.items()],
                eager_min_calls=EAGER_MIN_CALLS, check_tol=LAYER_CHECK_TOL, notes=[])
    print(f"MoE layer: banks {B} x ([{2 * I}, {H}] + [{H}, {I}]), top-{topk}", file=sys.stderr)
    Wgu = make_fp16_bank(B, 2 * I, H, seed + 101)
    Wdn = make_fp16_bank(B, H, I, seed + 102)
    fp16: Dict[int, dict] = {}
    have_torch = _have_torch()
    if not have_torch:
        meta["notes"].append(f"torch is not installed: no {dtype} layer column.")

    def fp16_entry(T, method):
        if T not in fp16:
            fp16[T] = {}
        if method not in fp16[T]:
            if not have_torch:
                fp16[T][method] = {"us": None, "error": "torch not installed"}
            else:
                try:
                    fp16[T][method] = layer_fp16(Wgu, Wdn, setups[T], I, dtype, reps, eager=method == "eager")
                except Exception as e:  # noqa: BLE001
                    fp16[T][method] = _err(e)
            print(f"  T={T}: {dtype} loop ({method}) {fmt_entry(fp16[T][method])}", file=sys.stderr)
        return fp16[T][method]

    for T in Ts:
        fp16_entry(T, "graph")
    rows, state = [], {}
    for k in ks:
        try:
            bgu, bdn = make_kbit_bank(Wgu, k), make_kbit_bank(Wdn, k)
        except Exception as e:  # noqa: BLE001
            err = _err(e)
            rows += [finish_layer_row(dict(T=T, k=k, moe_forward=dict(err), steps=dict(err), route=dict(err),
                                           fp16=dict(fp16.get(T, {})), sol={"us": None})) for T in Ts]
            continue
        per = kbit_expert_bytes(2 * I, H, k) + kbit_expert_bytes(H, I, k)
        for T in Ts:
            st = setups[T]
            row = dict(T=T, k=k, experts_per_step=float(np.mean(st["distinct"])), R=st["R"], launches=st["launches"])
            try:
                row.update(layer_kbit(bgu, bdn, st, I, dtype, reps, state))
            except Exception as e:  # noqa: BLE001
                err = _err(e)
                row.update(moe_forward=dict(err), steps=dict(err), route=dict(err))
            row["kbit_bytes"] = int(row["experts_per_step"] * per + T * H * 2)
            row["fp16_bytes"] = int(row["experts_per_step"] * 3 * H * I * 2 + T * H * 2)
            try:
                row["sol"] = time_sol(row["kbit_bytes"], l2, sms, reps)
            except Exception as e:  # noqa: BLE001
                row["sol"] = _err(e)
            methods = {(row.get(c) or {}).get("method") for c in ("steps", "moe_forward")} - {None}
            for m in sorted(methods):
                fp16_entry(T, m)
            row["fp16"] = dict(fp16.get(T, {}))
            finish_layer_row(row)
            rows.append(row)
            print(f"  k={k} T={T}: moe_forward {fmt_entry(row.get('moe_forward'))} "
                  f"({(row.get('moe_forward') or {}).get('method', '-')})  steps {fmt_entry(row.get('steps'))}  "
                  f"route {fmt_entry(row.get('route'))}  {dtype} loop {fmt_entry(row['fp16'].get('graph'))}  "
                  f"SOL {fmt_entry(row['sol'])}", file=sys.stderr)
        del bgu, bdn
        _free_pool()
    Wgu = Wdn = None  # the fp16 banks (fp16_entry is not called after this)
    _free_pool()
    if state.get("forward_eager") or state.get("steps_eager") or state.get("route_eager"):
        meta["notes"].append("some kbit layer calls could not be captured in a CUDA graph and were timed EAGERLY "
                             "(CUDA events around back-to-back calls, host overhead included); their method is "
                             "in the 'method' column / JSON, and vs fp16 compares them only with the fp16 loop "
                             "timed the same way.")
    return dict(meta=meta, rows=rows)


# ============================================================================ CLI
def parse_ints(s: str, name: str) -> List[int]:
    try:
        vals = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name}: expected comma-separated integers, got {s!r}") from None
    if not vals:
        raise ValueError(f"{name}: empty list")
    return vals


def parse_shapes(s: str) -> List[str]:
    """Comma list of shape names (case-insensitive), 'dense' (the dense shapes), 'moe' (the MoE
    expert shapes), 'all', 'none' (nothing: e.g. with --moe-layer alone), or KxN (a dense shape
    of K inputs and N outputs that is not one of the model's, e.g. 4096x14336: added to SHAPES
    under that name; not in TOTAL)."""
    lower = {n.lower(): n for n in SHAPES}
    out: List[str] = []
    for tok in [t.strip() for t in s.split(",") if t.strip()]:
        kn = tok.lower().split("x")
        if len(kn) == 2 and all(x.isdigit() and int(x) > 0 for x in kn):
            if int(kn[0]) % 32:
                raise ValueError(f"shape {tok!r}: K = {int(kn[0])} must be a multiple of 32 (the quantization block)")
            name = f"{int(kn[0])}x{int(kn[1])}"
            SHAPES.setdefault(name, Shape(name, int(kn[0]), int(kn[1])))
            out.append(name)
        elif tok.lower() == "all":
            out += list(SHAPES)
        elif tok.lower() == "dense":
            out += [n for n, sh in SHAPES.items() if sh.experts is None]
        elif tok.lower() == "moe":
            out += [n for n, sh in SHAPES.items() if sh.experts is not None]
        elif tok.lower() == "none":
            continue
        elif tok.lower() in lower:
            out.append(lower[tok.lower()])
        else:
            raise ValueError(f"unknown shape {tok!r}; known: {', '.join(SHAPES)}, dense, moe, all, none")
    return list(dict.fromkeys(out))


def _column_names(s: Optional[str]) -> Optional[List[str]]:
    """Canonical names of a --columns list (aliases resolved), checked against both registries."""
    if not s:
        return None
    known = {c.name.lower(): c.name for c in COLUMNS}
    known.update({c.name.lower(): c.name for c in MOE_COLUMNS})
    known.update({a: n for a, n in COLUMN_ALIASES.items()})
    out = []
    for tok in [t.strip() for t in s.split(",") if t.strip()]:
        if tok.lower() not in known:
            raise ValueError(f"unknown column {tok!r}; known: {', '.join(c.name for c in COLUMNS)} (dense), "
                             f"{', '.join(c.name for c in MOE_COLUMNS)} (MoE)")
        out.append(known[tok.lower()])
    return list(dict.fromkeys(out))


def parse_columns(s: Optional[str]) -> List[Column]:
    """Dense kbit columns named in s (when s is empty or names only MoE columns: all but the
    opt-in PLAIN_COLUMNS)."""
    names = _column_names(s)
    sel = [c for c in COLUMNS if names and c.name in names]
    if names and sel:  # keep the order given
        sel = [next(c for c in COLUMNS if c.name == n) for n in names if any(c.name == n for c in COLUMNS)]
    return sel or [c for c in COLUMNS if c.name not in PLAIN_COLUMNS]


def parse_moe_columns(s: Optional[str]) -> List[MoeColumn]:
    """MoE kbit columns named in s (all when s is empty or names only dense columns)."""
    names = _column_names(s)
    sel = [next(c for c in MOE_COLUMNS if c.name == n) for n in (names or []) if any(c.name == n for c in MOE_COLUMNS)]
    return sel or [c for c in MOE_COLUMNS if c.name not in PLAIN_COLUMNS]


DEFAULTS = dict(M="1,2,4,8", k="2,3,4,5", moe_M=",".join(map(str, MOE_M)), experts=",".join(map(str, MOE_EXPERTS)),
                layer_T=",".join(map(str, LAYER_T)), reps=20)
# --quick: fewer points, each still measured the same way (explicit options win)
QUICK = dict(M="1,4,16,64,256", k="2,4", moe_M="1,4,16,64", experts="8", layer_T="1,8,32", reps=15)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="profiling/bench.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--M", default=argparse.SUPPRESS, help=f"comma-separated batch sizes of the dense shapes (default "
                   f"{DEFAULTS['M']}; e.g. 1,2,4,8,16,32,64,128,256,512)")
    p.add_argument("--k", default=argparse.SUPPRESS, help=f"comma-separated bit widths (default {DEFAULTS['k']})")
    p.add_argument("--shapes", default="dense",
                   help=f"comma list of {', '.join(SHAPES)}, or dense, moe, all, none, or KxN (any dense shape)")
    p.add_argument("--total-shapes", default=",".join(TOTAL_SHAPES), help="dense shapes TOTAL sums (each once)")
    p.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16", help="activations and cuBLAS baseline")
    p.add_argument("--columns", default=None,
                   help=f"kbit columns (default all: {', '.join(c.name for c in COLUMNS)}; MoE: "
                        f"{', '.join(c.name for c in MOE_COLUMNS)}); a registry none of whose columns is named "
                        "runs all of its columns")
    p.add_argument("--moe-M", default=argparse.SUPPRESS, help=f"MoE shapes: tokens per expert (default {DEFAULTS['moe_M']})")
    p.add_argument("--experts", default=argparse.SUPPRESS, help=f"MoE shapes: active experts per call (default "
                   f"{DEFAULTS['experts']})")
    p.add_argument("--moe-layer", action="store_true", help="also time the full MoE layer step (route, gate/up, "
                   "SiLU*up, down, weighted sum) against torch fp16")
    p.add_argument("--layer-T", default=argparse.SUPPRESS, help=f"MoE layer: decode batch sizes (default {DEFAULTS['layer_T']})")
    p.add_argument("--topk", type=int, default=MOE_TOPK, help="MoE layer: experts per token")
    p.add_argument("--quick", action="store_true",
                   help="fewer points: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in QUICK.items()))
    p.add_argument("--reps", type=int, default=argparse.SUPPRESS, help=f"timed graph replays (>= {MIN_REPS}; default "
                   f"{DEFAULTS['reps']})")
    p.add_argument("--out", default=os.path.join("profiling", "results"), help="output directory")
    p.add_argument("--tag", default="bench", help="file name tag")
    p.add_argument("--plot", action="store_true", help="also write a PNG of the dense cells (needs matplotlib)")
    # hidden: small MoE configurations for the GPU smoke test
    p.add_argument("--bank-experts", type=int, default=MOE_BANK, help=argparse.SUPPRESS)
    p.add_argument("--moe-hidden", type=int, default=MOE_HIDDEN, help=argparse.SUPPRESS)
    p.add_argument("--moe-inter", type=int, default=MOE_INTER, help=argparse.SUPPRESS)
    return p


def resolve_args(a: argparse.Namespace) -> argparse.Namespace:
    """Fill unset list options from QUICK (with --quick) or DEFAULTS."""
    base = QUICK if a.quick else DEFAULTS
    for key, v in base.items():
        if getattr(a, key, None) is None:  # options without a value given have no attribute (SUPPRESS)
            setattr(a, key, v)
    return a


def main(argv: Optional[Sequence[str]] = None, command: Optional[str] = None) -> dict:
    """Parse argv, run, write <out>/<gpu>_<date>_<tag>.{md,json[,png]}, print the tables; returns the results."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = build_parser()
    a = resolve_args(p.parse_args(argv))
    try:
        Ms, ks = parse_ints(a.M, "--M"), parse_ints(a.k, "--k")
        shapes, cols = parse_shapes(a.shapes), parse_columns(a.columns)
        moe_cols = parse_moe_columns(a.columns)
        total = parse_shapes(a.total_shapes)
        moe_Ms, Es, Ts = parse_ints(a.moe_M, "--moe-M"), parse_ints(a.experts, "--experts"), parse_ints(a.layer_T,
                                                                                                      "--layer-T")
    except ValueError as e:
        p.error(str(e))
    if any(M < 1 for M in Ms) or any(M < 1 for M in moe_Ms) or any(T < 1 for T in Ts):
        p.error("--M, --moe-M and --layer-T values must be >= 1")
    if any(k not in (2, 3, 4, 5) for k in ks):
        p.error("--k values must be in 2..5")
    if a.reps < MIN_REPS:
        p.error(f"--reps must be >= {MIN_REPS}")
    if any(E < 1 or E > a.bank_experts for E in Es):
        p.error(f"--experts values must be in 1..{a.bank_experts}")
    if not 1 <= a.topk <= a.bank_experts:
        p.error(f"--topk must be in 1..{a.bank_experts}")
    if a.moe_hidden % 32 or a.moe_inter % 32 or min(a.moe_hidden, a.moe_inter) < 32:
        p.error("--moe-hidden and --moe-inter must be positive multiples of 32 (the quantization block)")
    dense = [s for s in shapes if SHAPES[s].experts is None]
    moe = [s for s in shapes if SHAPES[s].experts is not None]
    if not dense and not moe and not a.moe_layer:
        p.error("nothing to run: --shapes selects no shape and --moe-layer is not given")
    command = command or shlex.join(["python", sys.argv[0] if sys.argv and sys.argv[0] else "-m kbitcupy.bench", *argv])
    res = run(dense, Ms, ks, cols, a.dtype, a.reps, [s for s in total if s in DENSE_SHAPES], command)
    l2, sms = res["meta"]["l2_bytes"], res["meta"]["sm_count"]
    if moe:
        res["moe"] = run_moe(moe, moe_Ms, Es, ks, moe_cols, a.dtype, a.reps, l2, sms, a.bank_experts, a.moe_hidden,
                             a.moe_inter)
        res["moe"]["meta"]["reps"] = a.reps
    if a.moe_layer:
        res["layer"] = run_moe_layer(Ts, ks, a.dtype, a.reps, l2, sms, a.bank_experts, a.moe_hidden, a.moe_inter,
                                     a.topk)
        res["layer"]["meta"]["reps"] = a.reps
    files = write_outputs(res, a.out, a.tag, a.plot)
    print(format_report(res))
    print("wrote " + ", ".join(files.values()), file=sys.stderr)
    return res


if __name__ == "__main__":
    main()
