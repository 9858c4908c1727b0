"""Command line: python -m kbitcupy {demo,bench,quantize,info,compile} (also the `kbitcupy` script)."""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

USAGE = """examples:
  python -m kbitcupy demo                       # one Qwen3-Coder-Next block, k=2..5, batch 1/4/16
  python -m kbitcupy quantize in.safetensors out.safetensors -k 4
  python -m kbitcupy info
  python -m kbitcupy compile                    # ahead-of-time NVRTC compile for this GPU
  python -m kbitcupy bench --help               # the profiling harness
"""


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit status 1."""


def gpu_status():
    """(True, 'NVIDIA H100 ... (sm_90)') or (False, reason)."""
    try:
        import cupy as cp

        n = cp.cuda.runtime.getDeviceCount()
        if n == 0:
            return False, "no CUDA device"
        p = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
        return True, f"{name} (sm_{p['major']}{p['minor']}, {p['totalGlobalMem'] / 2**30:.0f} GiB)"
    except Exception as e:  # ImportError, driver errors, ...
        return False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip()


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.2f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000.0
    return f"{n:.2f} TB"


class Progress:
    """Plain-text progress bar on stderr (redrawn in place on a terminal, a line per ~10 % otherwise)."""

    def __init__(self, total: int, enabled: bool = True, width: int = 30):
        self.total, self.enabled, self.width = max(total, 1), enabled, width
        self.tty = sys.stderr.isatty()
        self._last_decile, self.t0 = -1, time.time()

    def update(self, i: int, label: str = "") -> None:
        if not self.enabled:
            return
        sys.stdout.flush()
        frac = i / self.total
        bar = "#" * int(frac * self.width) + "-" * (self.width - int(frac * self.width))
        line = f"[{bar}] {i}/{self.total} {time.time() - self.t0:6.1f}s {label[:60]}"
        if self.tty:
            sys.stderr.write("\r" + line.ljust(120)[:120] + ("\n" if i >= self.total else ""))
        elif int(frac * 10) != self._last_decile or i >= self.total:
            self._last_decile = int(frac * 10)
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


# ============================================================================ quantize
DEFAULT_SKIP = (r"embed", r"(^|\.)(wte|wpe)\.", r"norm", r"lm_head", r"(^|\.)gate\.weight$", r"shared_expert_gate",
                r"router")
_FLOAT_ST = {"F16", "BF16", "F32", "F64"}


def plan_tensor(name: str, shape: Sequence[int], st_dtype: str, skip: Sequence[re.Pattern],
                include: Sequence[re.Pattern]) -> Optional[str]:
    """None to quantize the tensor, else why it is kept as it is."""
    if len(shape) != 2 or st_dtype not in _FLOAT_ST:
        return "not a 2-D float weight"
    if shape[0] == 0 or shape[1] % 32:
        return "K not a multiple of 32"
    if any(p.search(name) for p in include):
        return None
    if any(p.search(name) for p in skip):
        return "skip rule"
    return None


def quantize_checkpoint(inp: str, out: str, k: int = 4, skip: Sequence[str] = (), include: Sequence[str] = (),
                        default_skip: bool = True, device: str = "auto", progress: bool = True,
                        log=print) -> Dict:
    """Quantize every 2-D linear weight of a safetensors checkpoint, tensor by tensor.

    Streams (safe_open, one tensor in memory) so a checkpoint larger than GPU memory
    works.  Returns a summary dict (bytes in/out, counts, mean SQNR)."""
    from safetensors import safe_open

    from .io import SafetensorsWriter
    from .quantize import dequantize, quantize
    from .reference import check_k

    k = check_k(k)
    if os.path.abspath(inp) == os.path.abspath(out):
        raise CLIError("the output must be a different file from the input")
    if not os.path.isfile(inp):
        raise CLIError(f"no such file: {inp}")
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        raise CLIError(f"the output folder does not exist: {os.path.dirname(os.path.abspath(out))}")
    try:
        skip_re = [re.compile(p) for p in ((DEFAULT_SKIP if default_skip else ()) + tuple(skip))]
        include_re = [re.compile(p) for p in include]
    except re.error as e:
        raise CLIError(f"bad regular expression: {e}") from None
    if device == "auto":
        gpu = gpu_status()[0]
    elif device in ("cuda", "gpu"):
        ok, why = gpu_status()
        if not ok:
            raise CLIError(f"--device cuda but no usable GPU ({why})")
        gpu = True
    else:
        gpu = False
    if gpu:
        import cupy as cp
    try:
        f = safe_open(inp, framework="numpy")
    except Exception as e:
        raise CLIError(f"{inp}: not a readable safetensors file: {e}") from None
    with f:
        names = list(f.keys())
        meta = dict(f.metadata() or {})
        meta = {k_: v for k_, v in meta.items() if not k_.startswith("kbitcupy.")}
        meta.update(kbitcupy_source=os.path.basename(inp), kbitcupy_k=str(k))
        log(f"quantizing {inp} -> {out} at k={k} on {'the GPU' if gpu else 'the CPU (NumPy reference)'}: "
            f"{len(names)} tensors")
        bar = Progress(len(names), progress)
        s = {"tensors": len(names), "quantized": 0, "kept": {}, "bytes_in": 0, "bytes_out": 0, "params_q": 0,
             "sqnr": {}}
        with SafetensorsWriter(out, meta) as w:
            for i, name in enumerate(names):
                sl = f.get_slice(name)
                shape, st = list(sl.get_shape()), sl.get_dtype()
                why = plan_tensor(name, shape, st, skip_re, include_re)
                t = f.get_tensor(name)
                s["bytes_in"] += t.nbytes
                if why is not None:
                    s["kept"][why] = s["kept"].get(why, 0) + 1
                    w.add(name, t)
                    s["bytes_out"] += t.nbytes
                else:
                    W = cp.asarray(t) if gpu else t
                    qw = quantize(W, k)
                    Wd = dequantize(qw, np.float32)
                    W32 = W.astype(np.float32)
                    err, ref = float(((W32 - Wd) ** 2).sum()), float((W32 ** 2).sum())
                    s["sqnr"][name] = 10 * np.log10(ref / err) if err > 0 else float("inf")
                    w.add(name, qw)
                    s["bytes_out"] += qw.nbytes
                    s["quantized"] += 1
                    s["params_q"] += shape[0] * shape[1]
                    del W, Wd, W32, qw
                bar.update(i + 1, name)
    s["file_bytes"] = os.path.getsize(out)
    finite = [v for v in s["sqnr"].values() if np.isfinite(v)]
    s["mean_sqnr_db"] = float(np.mean(finite)) if finite else float("nan")
    kept = ", ".join(f"{n} {why}" for why, n in s["kept"].items()) or "none"
    log(f"quantized {s['quantized']} weights ({s['params_q'] / 1e6:.1f} M params); kept as is: {kept}")
    ratio = s["bytes_in"] / max(s["bytes_out"], 1)
    log(f"bytes: {_fmt_bytes(s['bytes_in'])} -> {_fmt_bytes(s['bytes_out'])} ({ratio:.2f}x smaller; file "
        f"{_fmt_bytes(s['file_bytes'])})")
    if s["sqnr"]:
        worst = min(s["sqnr"], key=s["sqnr"].get)
        log(f"mean SQNR {s['mean_sqnr_db']:.2f} dB (lowest {s['sqnr'][worst]:.2f} dB: {worst})")
    return s


# ============================================================================ demo
# One Qwen3-Coder-Next decoder block's linear layers (output rows N, input K).
FULL = dict(hidden=2048, q=4096, kv=512, attn=4096, o=2048, lin_k=2048, lin_v=4096, inter=512, shared=512,
            experts=512, top_k=10, out=2048)
# The CPU slice: every K kept, few output rows (not the MoE's: its output is the hidden state), 16 experts.
SLICE = dict(hidden=2048, q=128, kv=64, attn=4096, o=128, lin_k=128, lin_v=128, inter=32, shared=32,
             experts=16, top_k=10, out=2048)


def synthetic_block(spec: Dict, xp, seed: int, dtype) -> Dict:
    """Float weights with a fixed seed (N(0, 0.02^2), like trained LLM weights)."""
    rs = np.random.default_rng(seed) if xp is np else xp.random.RandomState(seed)
    H, I, E = spec["hidden"], spec["inter"], spec["experts"]

    def w(*shape, std=0.02):
        return (rs.standard_normal(shape, dtype=np.float32) * std).astype(dtype)

    return dict(
        qkv=w(spec["q"] + 2 * spec["kv"], H), o=w(spec["o"], spec["attn"]), lin=w(spec["lin_k"] + spec["lin_v"], H),
        router=w(E, H).astype(np.float32), shared_gu=w(2 * spec["shared"], H), shared_down=w(spec["out"], spec["shared"]),
        shared_gate=w(1, H).astype(np.float32), experts_gu=w(E, 2 * I, H), experts_down=w(E, spec["out"], I))


def _matmul_f(x, W):
    return x @ W.T


def _fp16_mlp(Wgu, Wd):
    from .layers import _silu_mul

    def f(x):
        gu = _matmul_f(x, Wgu)
        I = gu.shape[-1] // 2
        return _matmul_f(_silu_mul(gu[..., :I], gu[..., I:]), Wd)

    return f


def fp16_block(Wt: Dict, spec: Dict):
    """The float block: fused QKV / linear-attention K,V; MoE as a loop over the active
    experts (rows sorted by expert, cuBLAS per expert and projection)."""
    from .layers import loop_experts, moe_block

    gu, dn = Wt["experts_gu"], Wt["experts_down"]
    experts = lambda x2, w, ids: loop_experts(x2, w, ids, lambda e, a: _fp16_mlp(gu[e], dn[e])(a))  # noqa: E731
    dense = lambda x, a: {"qkv": _matmul_f(x, Wt["qkv"]), "o": _matmul_f(a, Wt["o"]),  # noqa: E731
                          "lin": _matmul_f(x, Wt["lin"])}
    moe = lambda x: {"moe": moe_block(x, Wt["router"], spec["top_k"], experts,  # noqa: E731
                                      shared=_fp16_mlp(Wt["shared_gu"], Wt["shared_down"]),
                                      shared_gate=Wt["shared_gate"])}
    return dense, moe


def kbit_blocks(Wt: Dict, spec: Dict, k: int, gpu: bool):
    """(fused, separate) kbit blocks: each (dense(x, a) -> outputs, moe(x) -> outputs)."""
    from .layers import KbitLinear, KbitMoE

    dev = "cuda" if gpu else "cpu"
    q, kv, I, S, lk = spec["q"], spec["kv"], spec["inter"], spec["shared"], spec["lin_k"]
    qkv, lin = Wt["qkv"], Wt["lin"]
    gu, dn = Wt["experts_gu"], Wt["experts_down"]
    lay = lambda w: KbitLinear.from_float(w, k=k, device=dev)  # noqa: E731
    moe = lambda fused: KbitMoE.from_float(  # noqa: E731
        Wt["router"], gu[:, :I], gu[:, I:], dn, spec["top_k"], k=k,
        shared=(Wt["shared_gu"][:S], Wt["shared_gu"][S:], Wt["shared_down"]), shared_gate=Wt["shared_gate"],
        device=dev, fused=fused)
    o = lay(Wt["o"])
    L_qkv, L_lin = lay([qkv[:q], qkv[q:q + kv], qkv[q + kv:]]), lay([lin[:lk], lin[lk:]])
    sep = [lay(w) for w in (qkv[:q], qkv[q:q + kv], qkv[q + kv:], lin[:lk], lin[lk:])]
    xp = np if not gpu else __import__("cupy")
    cat = lambda ys: xp.concatenate(ys, axis=-1)  # noqa: E731 (for comparing only; not timed as part of a layer)
    moe_f, moe_s = moe(True), moe(False)
    fused = (lambda x, a: {"qkv": L_qkv(x), "o": o(a), "lin": L_lin(x)}, lambda x: {"moe": moe_f(x)})
    separate = (lambda x, a: {"qkv": [L(x) for L in sep[:3]], "o": o(a), "lin": [L(x) for L in sep[3:]]},
                lambda x: {"moe": moe_s(x)})
    nbytes = L_qkv.nbytes + L_lin.nbytes + o.nbytes + moe_f.nbytes
    return fused, separate, cat, nbytes, moe_f.grouped_active()


def _rel_err(outs: Dict, refs: Dict, cat) -> float:
    num = den = 0.0
    for n, r in refs.items():
        y = outs[n]
        y = cat(y) if isinstance(y, list) else y
        y, r = (np.asarray(a.get() if hasattr(a, "get") else a, dtype=np.float64) for a in (y, r))
        num += float(((y - r) ** 2).sum())
        den += float((r ** 2).sum())
    return (num / den) ** 0.5


def _time_ms(fn, reps: int, warmup: int = 2) -> float:
    """Median of `reps` CUDA-event-timed calls (no CUDA graph: includes launch overhead)."""
    import cupy as cp

    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b))
    return statistics.median(ts)


def run_demo(ks: Sequence[int] = (2, 3, 4, 5), batches: Sequence[int] = (1, 4, 16), reps: int = 10,
             seed: int = 0, small: bool = False, force_cpu: bool = False, dtype: str = "fp16", log=print) -> List[Dict]:
    from .reference import bfloat16

    ok, why = gpu_status()
    gpu = ok and not force_cpu
    dt = np.dtype(np.float16) if dtype == "fp16" else bfloat16
    if gpu:
        import cupy as xp

        spec = SLICE if small else FULL
        log(f"GPU: {why}; {'small slice' if small else 'full Qwen3-Coder-Next block'}, {dtype}")
    else:
        xp, spec = np, SLICE
        log(f"no GPU ({'--cpu' if ok else why}): running the NumPy reference path on a small slice "
            "(every K kept, few output rows, 16 experts); errors only, CPU times are not speed results")
    log("layers: Q {q}x{h}, K/V {kv}x{h}, O {o}x{a}, lin-attn key {lk}x{h} value {lv}x{h}, shared expert {s}, "
        "{E} experts (gate/up {i}x{h}, down {out}x{i}), top-{t}".format(
            q=spec["q"], h=spec["hidden"], kv=spec["kv"], o=spec["o"], a=spec["attn"], lk=spec["lin_k"],
            lv=spec["lin_v"], s=spec["shared"], E=spec["experts"], i=spec["inter"], out=spec["out"], t=spec["top_k"]))
    Wt = synthetic_block(spec, xp, seed, dt)
    ref_dense, ref_moe = fp16_block(Wt, spec)
    rs = np.random.default_rng(seed + 1)
    inputs = {B: tuple(xp.asarray(rs.standard_normal((B, n), dtype=np.float32).astype(dt))
                       for n in (spec["hidden"], spec["attn"])) for B in batches}
    refs = {B: {**ref_dense(x, a), **ref_moe(x)} for B, (x, a) in inputs.items()}
    rows = []
    fp16_t = {}
    if gpu:
        for B, (x, a) in inputs.items():
            fp16_t[B] = (_time_ms(lambda: ref_dense(x, a), reps), _time_ms(lambda: ref_moe(x), reps))
    hdr = f"{'k':>2} {'B':>3} {'err %':>6}"
    if gpu:
        hdr += (f" | {'dense ms: fp16':>14} {'fused':>7} {'sep':>7} | {'MoE ms: fp16':>12} {'fused':>7} {'sep':>7}"
                f" | {'step vs fp16':>12}")
    lines = []
    for k in ks:
        t0 = time.time()
        fused, sep, cat, nbytes, grouped = kbit_blocks(Wt, spec, k, gpu)
        how = ("grouped kernels" if gpu else "expert banks (host path)") if grouped else "per-expert loop"
        log(f"k={k}: quantized block {nbytes / 2**20:.1f} MiB in {time.time() - t0:.1f} s; MoE experts via {how}")
        for i, (B, (x, a)) in enumerate(inputs.items()):
            outs_f = {**fused[0](x, a), **fused[1](x)}
            r = {"k": k, "batch": B, "err": _rel_err(outs_f, refs[B], cat)}
            if gpu or i == 0:  # the CPU reference checks separate == fused once per k (it is slow)
                r["err_sep"] = _rel_err({**sep[0](x, a), **sep[1](x)}, refs[B], cat)
            line = f"{k:>2} {B:>3} {100 * r['err']:>6.2f}"
            if gpu:
                r["fp16_dense_ms"], r["fp16_moe_ms"] = fp16_t[B]
                r["fused_dense_ms"] = _time_ms(lambda: fused[0](x, a), reps)
                r["sep_dense_ms"] = _time_ms(lambda: sep[0](x, a), reps)
                r["fused_moe_ms"] = _time_ms(lambda: fused[1](x), reps)
                r["sep_moe_ms"] = _time_ms(lambda: sep[1](x), reps)
                speed = (r["fp16_dense_ms"] + r["fp16_moe_ms"]) / (r["fused_dense_ms"] + r["fused_moe_ms"])
                r["speedup"] = speed
                line += (f" | {r['fp16_dense_ms']:>14.3f} {r['fused_dense_ms']:>7.3f} {r['sep_dense_ms']:>7.3f}"
                         f" | {r['fp16_moe_ms']:>12.3f} {r['fused_moe_ms']:>7.3f} {r['sep_moe_ms']:>7.3f}"
                         f" | {speed:>11.2f}x")
            rows.append(r)
            lines.append(line)
        fused = sep = None  # free this k's weights before quantizing the next
    log("")
    log(hdr)
    for line in lines:
        log(line)
    dsep = max((abs(r["err"] - r["err_sep"]) for r in rows if "err_sep" in r), default=0.0)
    log(f"err: relative L2 error of all block outputs (QKV, O, linear-attn K/V, MoE) vs the {dtype} block "
        f"(same routing); separate weights' error differs by at most {100 * dsep:.3f} points")
    if gpu:
        log(f"time: median of {reps} CUDA-event-timed steps per cell, no CUDA graph (Python launch overhead "
            "included); fp16 MoE = cuBLAS loop over the active experts; 'step vs fp16' = fp16 time / fused kbit time")
    return rows


# ============================================================================ info / compile
def cupy_cache_dir() -> str:
    try:
        from cupy.cuda import compiler

        d = getattr(getattr(compiler, "_kernel_cache_backend", None), "_cache_dir", None)
        if d:
            return d
    except Exception:
        pass
    return os.environ.get("CUPY_CACHE_DIR", os.path.expanduser("~/.cupy/kernel_cache"))


def info_lines() -> List[str]:
    from . import __version__
    from ._compile import FAMILIES, _load_families, cuda_include_dirs

    out = [f"kbitcupy {__version__} (python {sys.version.split()[0]}, numpy {np.__version__})"]
    ok, why = gpu_status()
    out.append(f"GPU: {why if ok else 'none (' + why + ')'}")
    try:
        import cupy as cp

        out.append(f"CuPy {cp.__version__}")
        try:
            rt = cp.cuda.runtime.runtimeGetVersion()
            out.append(f"CUDA runtime {rt // 1000}.{rt % 1000 // 10}")
            drv = cp.cuda.runtime.driverGetVersion()
            out.append(f"CUDA driver API {drv // 1000}.{drv % 1000 // 10}" if drv else "CUDA driver: none")
        except Exception as e:
            out.append(f"CUDA runtime/driver: unavailable ({type(e).__name__})")
        try:
            from ._compile import _nvrtc

            v = _nvrtc().getVersion()
            out.append(f"NVRTC {v[0]}.{v[1]}")
        except Exception as e:
            out.append(f"NVRTC: unavailable ({type(e).__name__})")
    except ImportError:
        out.append("CuPy: not installed (pip install kbitcupy[cuda12])")
    inc = cuda_include_dirs()
    out.append(f"CUDA headers (cuda_fp16.h): {inc[0] if inc else 'not found'}")
    for mod in ("torch", "safetensors"):
        try:
            m = __import__(mod)
            extra = f", CUDA {m.version.cuda}, cuda available: {m.cuda.is_available()}" if mod == "torch" else ""
            out.append(f"{mod} {m.__version__}{extra}")
        except ImportError:
            out.append(f"{mod}: not installed")
    _load_families()
    out.append("kernel families (groups compiled in this process / groups):")
    for name, fam in FAMILIES.items():
        out.append(f"  {name:<10} {fam.source:<18} {len(fam.cached_groups()):>3} / {len(fam.groups()):<3} "
                   f"({len(fam.instances)} kernels)")
    d = cupy_cache_dir()
    n = len([f for f in os.listdir(d) if f.endswith(".cubin")]) if os.path.isdir(d) else 0
    out.append(f"CuPy kernel cache: {d} ({n} cached modules)")
    out.append("dispatch: " + dispatch_description())
    return out


def dispatch_description() -> str:
    try:
        from . import dispatch  # written separately; may be absent
    except ImportError:
        from .gemv import MAX_M

        return f"built-in (kbitcupy.matmul): M <= {MAX_M} GEMV, larger M dequantize + cuBLAS"
    try:
        if hasattr(dispatch, "gpu_family") and hasattr(dispatch, "entry"):
            fam = dispatch.gpu_family()
            line = f"kbitcupy.dispatch, table {fam!r}: {dispatch.entry(fam)}"
            if hasattr(dispatch, "choose"):  # what it picks for a 4096x2048 4-bit fp16 weight
                picks = ", ".join(f"M={m}: {dispatch.choose(m, 4096, 2048, 4, 'float16', fam)}"
                                  for m in (1, 8, 16, 64, 128, 512))
                line += f"\n  e.g. 4096x2048 k=4 fp16 -> {picks}"
            return line
        for attr in ("describe", "TABLES", "TABLE"):
            v = getattr(dispatch, attr, None)
            if v is not None:
                return f"kbitcupy.dispatch.{attr}: {v() if callable(v) else v!r}"
    except Exception as e:  # never let info fail on it
        return f"kbitcupy.dispatch (could not describe: {type(e).__name__}: {e})"
    return "kbitcupy.dispatch"


_PROBE = """
import json, time, numpy as np, cupy as cp, kbitcupy as kb
W = cp.asarray(np.random.default_rng(0).standard_normal((4096, 2048), dtype=np.float32) * 0.02).astype(cp.float16)
qw = kb.quantize(W, 4); x = cp.ones((1, 2048), cp.float16); cp.cuda.Device().synchronize()
t = [];
for _ in range(3):
    t0 = time.perf_counter(); kb.matmul(x, qw); cp.cuda.Device().synchronize(); t.append(time.perf_counter() - t0)
print(json.dumps({"first_ms": 1e3 * t[0], "next_ms": 1e3 * min(t[1:])}))
"""


def _probe(cache_dir: Optional[str]) -> Dict:
    env = dict(os.environ)
    if cache_dir:
        env["CUPY_CACHE_DIR"] = cache_dir
    r = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode:
        raise CLIError(f"latency probe failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def compile_kernels(families: Optional[Sequence[str]] = None, arch: Optional[str] = None, probe: bool = True,
                    progress: bool = True, log=print) -> Dict:
    """Compile every kernel group for this GPU (filling CuPy's on-disk cache), then report
    the cold (empty cache: NVRTC) and warm (cache filled) first-call latency of a matmul.
    Without a GPU, or with ``arch`` given: compile offline for ``arch`` (default sm_90) with
    NVRTC to check every kernel builds and report registers/spills (caches nothing)."""
    from ._compile import FAMILIES, _load_families, compile_all, format_report

    _load_families()
    names = [n for n in FAMILIES if families is None or n in families]
    unknown = set(families or ()) - set(FAMILIES)
    if unknown:
        raise CLIError(f"unknown kernel families {sorted(unknown)}; known: {sorted(FAMILIES)}")
    ok, why = gpu_status()
    if not ok or arch:
        arch = arch or "sm_90"
        log(f"{'no GPU (' + why + ')' if not ok else 'GPU ignored (--arch)'}: compiling offline with NVRTC for "
            f"{arch} (checks every kernel builds; caches nothing)")
        try:
            recs = compile_all(arch, names)
        except Exception as e:
            raise CLIError(f"offline compile failed: {type(e).__name__}: {e}") from None
        log(format_report(recs))
        return {"offline": True, "kernels": len(recs)}
    import cupy as cp

    cc = cp.cuda.Device().compute_capability
    names = [n for n in names if FAMILIES[n].available((int(cc[:-1]), int(cc[-1])))]  # e.g. wgmma: sm_90 only
    log(f"GPU: {why}; compiling {sum(len(FAMILIES[n].groups()) for n in names)} kernel groups "
        f"({sum(len(FAMILIES[n].instances) for n in names)} kernels) into {cupy_cache_dir()}")
    work = [(n, g, keys[0]) for n in names for g, keys in FAMILIES[n].groups().items()]
    bar = Progress(len(work), progress)
    t0 = time.time()
    for i, (n, g, key) in enumerate(work):
        FAMILIES[n].function(key)  # compiles (or loads from the disk cache) the whole group
        bar.update(i + 1, f"{n} {g}")
    res = {"offline": False, "groups": len(work), "seconds": time.time() - t0}
    log(f"compiled {len(work)} groups in {res['seconds']:.1f} s")
    if probe:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            res["cold"] = _probe(tmp)
        res["warm"] = _probe(None)
        log("first matmul call (M=1, 4096x2048, k=4, fp16) in a new process: "
            f"cold cache {res['cold']['first_ms']:.0f} ms, warm cache {res['warm']['first_ms']:.1f} ms "
            f"(later calls {res['warm']['next_ms']:.3f} ms, host wall time)")
    return res


# ============================================================================ argument parsing
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kbitcupy", description="k-bit (k=2..5) quantized LLM kernels for CuPy",
                                epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    d = sub.add_parser("demo", help="one Qwen3-Coder-Next decoder block: error and time per step vs fp16")
    d.add_argument("-k", type=int, nargs="+", default=[2, 3, 4, 5], choices=[2, 3, 4, 5], help="bit widths")
    d.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16], help="decode batch sizes")
    d.add_argument("--reps", type=int, default=10, help="timed steps per cell (median)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    d.add_argument("--small", action="store_true", help="the small slice even on a GPU")
    d.add_argument("--cpu", action="store_true", help="the NumPy reference path even with a GPU")

    sub.add_parser("bench", help="the profiling harness (kbitcupy.bench); arguments are passed on", add_help=False)

    q = sub.add_parser("quantize", help="quantize a safetensors checkpoint's linear weights")
    q.add_argument("input", metavar="IN.safetensors")
    q.add_argument("output", metavar="OUT.safetensors")
    q.add_argument("-k", type=int, default=4, choices=[2, 3, 4, 5], help="bits per weight (default 4)")
    q.add_argument("--skip", action="append", default=[], metavar="REGEX",
                   help="also keep tensors whose name matches (repeatable)")
    q.add_argument("--include", action="append", default=[], metavar="REGEX",
                   help="quantize matching 2-D weights even if a skip rule matches (e.g. lm_head)")
    q.add_argument("--no-default-skip", action="store_true",
                   help=f"drop the default skip rules {list(DEFAULT_SKIP)}")
    q.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    q.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    sub.add_parser("info", help="GPU, CuPy/CUDA versions, compiled kernels, dispatch table")

    c = sub.add_parser("compile", help="compile every kernel for this GPU ahead of time")
    c.add_argument("--family", action="append", default=None, help="only these kernel families (comma-separated or repeated)")
    c.add_argument("--arch", default=None, help="compile offline for this target (e.g. sm_90) instead of the GPU; "
                   "the default without a GPU")
    c.add_argument("--no-probe", action="store_true", help="skip the cold/warm first-call latency probe")
    c.add_argument("-q", "--quiet", action="store_true")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # forwarded untouched, --help included
        try:
            from . import bench
        except ImportError as e:
            print(f"kbitcupy: error: the profiling harness (kbitcupy.bench) is not available: {e}", file=sys.stderr)
            return 1
        if not {"-h", "--help"} & set(argv[1:]):
            ok, why = gpu_status()
            if not ok:  # it times kernels: nothing to do without a GPU (its --help still works)
                print(f"kbitcupy: error: bench times the GPU kernels and needs a CUDA GPU ({why})", file=sys.stderr)
                return 1
        r = bench.main(argv[1:])
        return int(r) if isinstance(r, int) else 0
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            if any(b < 1 for b in args.batch) or args.reps < 1:
                build_parser().error("--batch and --reps must be positive")
            run_demo(args.k, args.batch, args.reps, args.seed, args.small, args.cpu, args.dtype)
        elif args.command == "quantize":
            quantize_checkpoint(args.input, args.output, args.k, args.skip, args.include, not args.no_default_skip,
                                args.device, not args.quiet)
        elif args.command == "info":
            print("\n".join(info_lines()))
        elif args.command == "compile":
            fams = [f for arg in args.family for f in arg.split(",") if f] if args.family else None  # a,b or repeated
            compile_kernels(fams, args.arch, not args.no_probe, not args.quiet)
    except CLIError as e:
        print(f"kbitcupy: error: {e}", file=sys.stderr)
        return 1
    return 0
