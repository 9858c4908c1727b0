"""Benchmark harness: kbit kernels against cuBLAS and the speed of light (MEASURING.md).

Kernel time is the cold-L2 time of one launch: R copies of the weight (R x bytes >= 4 x
L2), one launch per copy (cycling), all captured into one CUDA graph; the median of >= 15
timed replays divided by the launches per graph.  fp16/bf16 cuBLAS (through torch: CuPy
refuses cuBLAS during stream capture) and a streaming-read speed-of-light kernel over
exactly the bytes the kbit kernel reads are timed the same way, in the same process.

    python profiling/bench.py --M 1,2,4,8 --k 2,3,4,5 --shapes dense --plot

Adding a kernel column is one line in COLUMNS; adding a shape is one line in SHAPES.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from .gemv import MAX_M as GEMV_MAX_M, gemv
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
# MoE shapes join here, e.g. SHAPES["moe_gu"] = Shape("moe_gu", 2048, 512, experts=8), together
# with a Column whose applies() accepts shape.experts.


# ============================================================================ columns
@dataclass
class Ctx:
    """What a column's launch gets.  Dense: A [M, K], qw a KbitWeight (tiled, on the GPU),
    out [M, N].  MoE (shape.experts = E): A [E, M, K], qw a tuple of E KbitWeight, out [E, M, N]."""
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


COLUMNS: List[Column] = [
    Column("GEMV", applies=lambda s, M: s.experts is None and M <= GEMV_MAX_M, launch=lambda c: gemv(c.A, c.qw, c.out)),
    Column("matmul", applies=lambda s, M: s.experts is None, launch=lambda c: matmul(c.A, c.qw, out=c.out)),
]

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
def time_graph_cupy(fns: Sequence[Callable[[], object]], reps: int, warmup: int = 3) -> List[float]:
    """Capture fns (one launch each) into one CUDA graph; per-launch us of each of reps replays."""
    import cupy as cp

    cp.cuda.Device().synchronize()  # the capture stream is non-blocking: inputs must be ready
    s = cp.cuda.Stream(non_blocking=True)
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


def host_overhead(qw, shape: Shape, dtype: str, calls: int = 200) -> dict:
    """Wall time of one Python kbitcupy.matmul call at M = 1, no graph (hot weight)."""
    import cupy as cp

    A, out = _rand((1, shape.K), dtype), _empty((1, shape.N), dtype)
    for _ in range(10):
        matmul(A, qw, out=out)
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        matmul(A, qw, out=out)
    t1 = time.perf_counter()
    cp.cuda.Device().synchronize()
    t2 = time.perf_counter()
    return dict(wall_us=(t2 - t0) / calls * 1e6, enqueue_us=(t1 - t0) / calls * 1e6, calls=calls)


# ============================================================================ derived numbers
def finish_cell(cell: dict, kbit_names: Sequence[str]) -> dict:
    """Best kbit column (columns failing the output check are not eligible), vs cuBLAS = cuBLAS / best,
    % of SOL = SOL / best."""
    times = {}
    for n in kbit_names:
        e = cell["columns"].get(n)
        if e and e.get("us") is not None and e.get("check_ok", True):
            times[n] = e["us"]
    best = min(times, key=times.get) if times else None
    best_us = times.get(best)
    cub = (cell.get("cublas") or {}).get("us")
    sol = (cell.get("sol") or {}).get("us")
    cell.update(best=best, best_us=best_us, vs_cublas=(cub / best_us) if cub and best_us else None,
                pct_sol=(100.0 * sol / best_us) if sol and best_us else None)
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
            out.append(dict(M=M, k=k, shapes=[c["shape"] for c in rows], best_us=best, cublas_us=cub, sol_us=sol,
                            columns=cols, vs_cublas=(cub / best) if cub and best else None,
                            pct_sol=(100.0 * sol / best) if sol and best else None))
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
    header = ["shape", "k", *names, cub, "SOL", "Best", f"vs {cub}", "% of SOL"]
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
                             fmt_pct(c.get("pct_sol"))])
        for t in res["totals"]:
            if t["M"] == M:
                rows.append(["TOTAL", str(t["k"]), *[fmt_us(t["columns"].get(n)) for n in names], fmt_us(t["cublas_us"]),
                             fmt_us(t["sol_us"]), fmt_us(t["best_us"]), fmt_x(t["vs_cublas"]), fmt_pct(t["pct_sol"])])
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
            rows.append([s] + [fmt_us((idx.get((s, k)) or {}).get("wall_us")) for k in ks])
    return md_table(["shape"] + [f"k={k}" for k in ks], rows)


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
        f"- Activations {cub}; kbit weights quantized from random normal * 0.02; A random normal.",
        f"- Method: cold L2 by rotating over R copies of the weight (R x bytes >= {COLD_FACTOR} x L2), one launch "
        f"per copy, R launches (cycled to >= {MIN_LAUNCHES}) captured in one CUDA graph; median of {m['reps']} "
        "timed replays (CUDA events) / launches per graph. Times in us per launch.",
        f"- {cub}: cuBLAS through torch (torch.mm; torch.bmm over the experts for MoE shapes), same method. "
        "SOL: streaming 16-byte read of exactly packed + absmax + A bytes, same method.",
        f"- Best = fastest kbit column; vs {cub} = {cub} / Best (> 1 means kbit wins); % of SOL = SOL / Best.",
        f"- '-' = kernel does not apply; 'err' = failed (see JSON); '!' = output check failed "
        f"(max rel err > {CHECK_TOL:g}), excluded from Best.",
        f"- TOTAL = sum over {', '.join(m['total_shapes']) or '(none in this run)'} (each once).",
    ]
    if m.get("notes"):
        lines += [f"- Note: {n}" for n in m["notes"]]
    lines += ["", "## Kernel time (us)", "", format_tables(res)]
    host = format_host_table(res)
    if host:
        lines += ["", "## Host overhead (us)", "",
                  "Wall time of one Python `kbitcupy.matmul(A, qw, out=out)` call at M = 1, no graph "
                  "(200 calls, synchronised at the end, divided by 200).", "", host]
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
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()


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
                            e["max_rel_err"] = check_output(col, Ctx(A, qw, out, shape, M), ref)
                            e["check_ok"] = e["max_rel_err"] is not None and e["max_rel_err"] <= CHECK_TOL
                            if not e["check_ok"]:
                                print(f"  ! {col.name} {sname} k={k} M={M}: output check failed, max rel err "
                                      f"{e['max_rel_err']}", file=sys.stderr)
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
    if want_plot:
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
    """Comma list of shape names (case-insensitive), 'dense' (the dense shapes) or 'all'."""
    lower = {n.lower(): n for n in SHAPES}
    out: List[str] = []
    for tok in [t.strip() for t in s.split(",") if t.strip()]:
        if tok.lower() == "all":
            out += list(SHAPES)
        elif tok.lower() == "dense":
            out += [n for n, sh in SHAPES.items() if sh.experts is None]
        elif tok.lower() in lower:
            out.append(lower[tok.lower()])
        else:
            raise ValueError(f"unknown shape {tok!r}; known: {', '.join(SHAPES)}, dense, all")
    return list(dict.fromkeys(out))


def parse_columns(s: Optional[str]) -> List[Column]:
    if not s:
        return list(COLUMNS)
    by = {c.name.lower(): c for c in COLUMNS}
    out = []
    for tok in [t.strip() for t in s.split(",") if t.strip()]:
        if tok.lower() not in by:
            raise ValueError(f"unknown column {tok!r}; known: {', '.join(c.name for c in COLUMNS)}")
        out.append(by[tok.lower()])
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="profiling/bench.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--M", default="1,2,4,8", help="comma-separated batch sizes")
    p.add_argument("--k", default="2,3,4,5", help="comma-separated bit widths")
    p.add_argument("--shapes", default="dense", help=f"comma list of {', '.join(SHAPES)}, or dense, or all")
    p.add_argument("--total-shapes", default=",".join(TOTAL_SHAPES), help="shapes TOTAL sums (each once)")
    p.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16", help="activations and cuBLAS baseline")
    p.add_argument("--columns", default=None, help=f"kbit columns (default all: {', '.join(c.name for c in COLUMNS)})")
    p.add_argument("--reps", type=int, default=20, help=f"timed graph replays (>= {MIN_REPS})")
    p.add_argument("--out", default=os.path.join("profiling", "results"), help="output directory")
    p.add_argument("--tag", default="bench", help="file name tag")
    p.add_argument("--plot", action="store_true", help="also write a PNG (needs matplotlib)")
    return p


def main(argv: Optional[Sequence[str]] = None, command: Optional[str] = None) -> dict:
    """Parse argv, run, write <out>/<gpu>_<date>_<tag>.{md,json[,png]}, print the tables; returns the results."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = build_parser()
    a = p.parse_args(argv)
    try:
        Ms, ks = parse_ints(a.M, "--M"), parse_ints(a.k, "--k")
        shapes, cols = parse_shapes(a.shapes), parse_columns(a.columns)
        total = parse_shapes(a.total_shapes)
    except ValueError as e:
        p.error(str(e))
    if any(M < 1 for M in Ms):
        p.error("--M values must be >= 1")
    if any(k not in (2, 3, 4, 5) for k in ks):
        p.error("--k values must be in 2..5")
    if a.reps < MIN_REPS:
        p.error(f"--reps must be >= {MIN_REPS}")
    command = command or shlex.join(["python", sys.argv[0] if sys.argv and sys.argv[0] else "-m kbitcupy.bench", *argv])
    res = run(shapes, Ms, ks, cols, a.dtype, a.reps, total, command)
    files = write_outputs(res, a.out, a.tag, a.plot)
    print(format_report(res))
    print("wrote " + ", ".join(files.values()), file=sys.stderr)
    return res


if __name__ == "__main__":
    main()
