"""NVRTC module system.

Each kernel family is one ``.cu`` file in ``cuda_src/``.  A family lists its template
instantiations as name expressions; instantiations are compiled in groups (one
``cupy.RawModule`` per group) lazily on first use, once per (source, group, GPU arch),
and CuPy's on-disk kernel cache makes the next process's first call cheap.  Local
``#include "..."`` lines are inlined into the source text so CuPy's cache key (the
source string) changes whenever a shared header does.

``compile_all(arch)`` compiles every instantiation of every family with NVRTC directly,
without a GPU, and reports registers, stack frame and spills per kernel.
"""
from __future__ import annotations

import functools
import os
import re
import threading
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Sequence, Tuple

CUDA_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cuda_src")
if not os.path.isdir(CUDA_SRC):  # installed wheel: sources are package data
    CUDA_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda_src")

_INCLUDE_RE = re.compile(r'^\s*#include\s+"([^"]+)"\s*$', re.M)
BASE_OPTIONS = ("--std=c++17", "-DNDEBUG")


@functools.lru_cache(maxsize=None)
def read_source(name: str) -> str:
    """Source text with local includes inlined (each header once)."""
    return inline_source(CUDA_SRC, name)


def inline_source(srcdir: str, name: str) -> str:
    """``name`` from ``srcdir`` with its local includes inlined (each header once)."""
    seen = set()

    def expand(fname: str) -> str:
        if fname in seen:
            return ""
        seen.add(fname)
        with open(os.path.join(srcdir, fname)) as f:
            text = f.read()
        return _INCLUDE_RE.sub(lambda m: expand(m.group(1)), text)

    return expand(name)


@functools.lru_cache(maxsize=None)
def cuda_include_dirs() -> Tuple[str, ...]:
    """Directories holding cuda_fp16.h / cuda_bf16.h: the pip CUDA runtime headers
    (cu12 or cu13 layout) or a toolkit's include folder."""
    dirs: List[str] = []
    try:
        import nvidia  # namespace package of the pip CUDA wheels

        for base in list(nvidia.__path__):
            for sub in ("cuda_runtime/include", "cu13/include", "cu12/include", "cuda_nvrtc/include"):
                d = os.path.join(base, sub)
                if os.path.isfile(os.path.join(d, "cuda_fp16.h")):
                    dirs.append(d)
    except ImportError:
        pass
    for env in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(env):
            dirs.append(os.path.join(os.environ[env], "include"))
    dirs.append("/usr/local/cuda/include")
    return tuple(d for d in dict.fromkeys(dirs) if os.path.isfile(os.path.join(d, "cuda_fp16.h")))


# Experiment hook: KBIT_K5_LOG2_COPIES=3 builds every kernel with 8 copies of the k = 5 pair
# table instead of 16 (kbitcupy.gemv.lut_bytes plans with the same number).
K5_LOG2_COPIES = int(os.environ.get("KBIT_K5_LOG2_COPIES", "4"))
# KBIT_GEMV_Q2=0 builds the decode GEMV family (kbit_gemv.cu) at k = 2 with the pair table instead of the quad
# table (kbitcupy.gemv.table_bytes plans with the same): the A/B of profiling/run38.sh.
GEMV_Q2 = int(os.environ.get("KBIT_GEMV_Q2", "1"))
# KBIT_STREAM_Q2=1: the streaming GEMV (kbit_gemv_stream.cu) at k = 2 with the quad table (kbitcupy.gemv_stream.table_bytes).
STREAM_Q2 = int(os.environ.get("KBIT_STREAM_Q2", "0"))


def _options(extra: Sequence[str] = ()) -> Tuple[str, ...]:
    hook = ("-DKBIT_K5_LOG2_COPIES=%d" % K5_LOG2_COPIES,) if K5_LOG2_COPIES != 4 else ()
    hook += ("-DKBIT_GEMV_Q2=0",) if not GEMV_Q2 else ()
    hook += ("-DKBIT_STREAM_Q2=%d" % STREAM_Q2,) if STREAM_Q2 else ()
    return BASE_OPTIONS + tuple("-I" + d for d in cuda_include_dirs()) + hook + tuple(extra)


@dataclass
class Family:
    """A kernel family: one source file and its instantiations.

    ``instances`` maps a key tuple to its name expression; ``group_of`` maps a key to
    the group compiled together (keys in one group share one NVRTC call).  ``arch``
    names an arch-specific target (e.g. 'sm_90a' for wgmma): such a family only exists
    on that GPU generation and is compiled for it alone (see ``load_arch_module``)."""

    source: str
    instances: Dict[tuple, str]
    group_of: Callable[[tuple], tuple]
    options: Tuple[str, ...] = ()
    arch: str | None = None
    _modules: Dict[tuple, tuple] = field(default_factory=dict, repr=False)  # (dev, group) -> (module, lowered names)
    _fns: Dict[tuple, object] = field(default_factory=dict, repr=False)     # (dev, name) -> RawKernel
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def groups(self) -> Dict[tuple, List[tuple]]:
        out: Dict[tuple, List[tuple]] = {}
        for key in self.instances:
            out.setdefault(self.group_of(key), []).append(key)
        return out

    def function(self, key: tuple):
        """The cupy.RawKernel for one instantiation (compiles its group on first use).

        One RawKernel object per (device, kernel), reused by every call: launchers set
        attributes on it (max dynamic shared memory) and key their bookkeeping by it, and
        a per-call lookup costs a dict access instead of a new RawKernel."""
        try:
            name = self.instances[key]
        except KeyError:
            raise ValueError(f"{self.source}: no kernel instantiation for {key}") from None
        import cupy

        dev = cupy.cuda.runtime.getDevice()
        fn = self._fns.get((dev, name))
        if fn is not None:
            return fn
        gkey = (dev, self.group_of(key))
        with self._lock:
            mod = self._modules.get(gkey)
            if mod is None:
                names = [self.instances[k] for k in self.groups()[gkey[1]]]
                if self.arch:
                    mod = load_arch_module(self.source, names, self.arch, self.options)
                else:  # name expressions resolve inside the module
                    mod = (cupy.RawModule(code=read_source(self.source), options=_options(self.options),
                                          name_expressions=names, backend="nvrtc"), {})
                self._modules[gkey] = mod
            return self._fns.setdefault((dev, name), mod[0].get_function(mod[1].get(name, name)))

    def available(self, cc: Tuple[int, int]) -> bool:
        """Whether this family runs on a GPU of compute capability ``cc``."""
        if not self.arch:
            return True
        return self.arch.rstrip("a") == f"sm_{cc[0]}{cc[1]}"

    def cached_groups(self) -> List[tuple]:
        return [g for (_, g) in self._modules]


FAMILIES: Dict[str, Family] = {}


def _cache_dir() -> str:
    """$KBITCUPY_CACHE_DIR, else ~/.cache/kbitcupy, else (read-only home) a folder in the temp dir."""
    d = os.environ.get("KBITCUPY_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kbitcupy")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError:
        import tempfile

        d = os.path.join(tempfile.gettempdir(), f"kbitcupy-cache-{os.getuid() if hasattr(os, 'getuid') else 0}")
        os.makedirs(d, exist_ok=True)
    return d


def whole_elf(cubin: bytes) -> bytes:
    """The cubin padded with zero bytes to the extent its ELF header declares (the end of its section and
    program header tables).  CuPy's nvrtc.getCUBIN returns the image one byte short (the last program
    header's p_align, a zero byte: the driver loads it, nvdisasm refuses it); anything else is returned as
    is."""
    import struct

    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2:  # ELF64 only
        return cubin
    phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", cubin, 0x36)
    end = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    return cubin + b"\0" * (end - len(cubin)) if len(cubin) < end <= len(cubin) + 16 else cubin


def build_arch_cubin(source: str, names: Sequence[str], arch: str, extra: Sequence[str] = ()):
    """(cubin path, {name expression: lowered name}) of ``names`` compiled by NVRTC for
    ``arch`` (no GPU needed), cached on disk under a key of the source text, options,
    names and NVRTC version; a cached cubin is reused without compiling."""
    import hashlib
    import json

    nvrtc = _nvrtc()
    opts = list(_options(extra)) + [f"-arch={arch}"]
    text = read_source(source)
    h = hashlib.sha256("\0".join([text, *opts, *names, repr(nvrtc.getVersion())]).encode()).hexdigest()[:32]
    base = os.path.join(_cache_dir(), f"{os.path.splitext(source)[0]}_{arch}_{h}")
    if not (os.path.exists(base + ".cubin") and os.path.exists(base + ".json")):
        prog = nvrtc.createProgram(text, source, [], [])
        try:
            for n in names:
                nvrtc.addNameExpression(prog, n)
            try:
                nvrtc.compileProgram(prog, opts)
            except Exception as e:
                raise RuntimeError(f"NVRTC failed for {source} ({arch}):\n{nvrtc.getProgramLog(prog)}") from e
            cubin = whole_elf(nvrtc.getCUBIN(prog))  # (the cached file readable by nvdisasm / cuobjdump)
            lowered = {n: nvrtc.getLoweredName(prog, n) for n in names}
        finally:
            nvrtc.destroyProgram(prog)
        tmp = f"{base}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(cubin)
        os.replace(tmp, base + ".cubin")
        with open(tmp, "w") as f:
            json.dump(lowered, f)
        os.replace(tmp, base + ".json")
    with open(base + ".json") as f:
        return base + ".cubin", json.load(f)


def load_arch_module(source: str, names: Sequence[str], arch: str, extra: Sequence[str] = ()):
    """(cupy.RawModule, {name expression: lowered name}) for an arch-specific target.

    CuPy's RawModule always appends ``-arch=sm_XY`` for the current device, which cannot
    express 'sm_90a'; so NVRTC is called here (build_arch_cubin) and the cubin loaded by path."""
    import cupy

    path, lowered = build_arch_cubin(source, names, arch, extra)
    return cupy.RawModule(path=path), lowered


def register(name: str, family: Family) -> Family:
    FAMILIES[name] = family
    return family


# ----------------------------------------------------------------------------- offline
_PTXAS_FN = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+a?)'")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
# ptxas's note that it serialized a kernel's wgmma (e.g. C7513: a non-wgmma instruction defining an input register of
# an in-flight wgmma): still correct, but every MMA then waits for the previous one -- a silent performance cliff
_PTXAS_WGMMA_SERIAL = re.compile(r"\((C\d+)\) Potential Performance Loss: wgmma\.mma_async instructions are "
                                 r"serialized.*in the function '([^']+)'")


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError:  # older layouts
        from cupy.cuda import nvrtc  # type: ignore
    return nvrtc


def compile_group(source: str, names: Sequence[str], arch: str, extra: Sequence[str] = ()) -> List[dict]:
    """Compile one group with NVRTC for ``arch`` (e.g. 'sm_90'), no GPU needed.
    Returns one record per kernel: name, registers, stack, spill stores/loads, smem."""
    nvrtc = _nvrtc()
    prog = nvrtc.createProgram(read_source(source), source, [], [])
    try:
        for n in names:
            nvrtc.addNameExpression(prog, n)
        opts = list(_options(extra)) + [f"--gpu-architecture={arch}", "-Xptxas=-v"]
        try:
            nvrtc.compileProgram(prog, opts)
        except Exception as e:
            raise RuntimeError(f"NVRTC failed for {source} ({arch}):\n{nvrtc.getProgramLog(prog)}") from e
        log = nvrtc.getProgramLog(prog)
        lowered = {nvrtc.getLoweredName(prog, n): n for n in names}
    finally:
        nvrtc.destroyProgram(prog)
    return _ptxas_records(log, lowered, source, arch, names)


def _ptxas_records(log: str, lowered: Dict[str, str], source: str, arch: str, names: Sequence[str] | None) -> List[dict]:
    """One record per kernel of ``names`` (None: every kernel) from a ``ptxas -v`` log; ``lowered``
    maps the log's (mangled) function names to name expressions."""
    records: Dict[str, dict] = {}
    current = None
    serialized: Dict[str, str] = {}
    for line in log.splitlines():
        m = _PTXAS_WGMMA_SERIAL.search(line)
        if m:
            serialized[m.group(2)] = m.group(1)
            continue
        m = _PTXAS_FN.search(line)
        if m:
            current = {"kernel": lowered.get(m.group(1), m.group(1)), "source": source, "arch": arch}
            records[m.group(1)] = current
            continue
        if current is None:
            continue
        m = _PTXAS_STACK.search(line)
        if m:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = _PTXAS_REGS.search(line)
        if m:
            current["registers"] = int(m.group(1))
            ms = _PTXAS_SMEM.search(line)
            current["smem"] = int(ms.group(1)) if ms else 0
    for fn, code in serialized.items():
        if fn in records:
            records[fn]["wgmma_serialized"] = code
    return [r for r in records.values() if names is None or r["kernel"] in names]


def compile_group_nvcc(source: str, names: Sequence[str], arch: str, extra: Sequence[str] = ()) -> List[dict]:
    """compile_group's records from this machine's nvcc instead of NVRTC (every kernel the names
    instantiate, named by their full template argument lists).  The GPU machine's CuPy
    compiles with its own NVRTC (CUDA 13 there), whose register allocation can differ from the
    NVRTC 12.9 wheel here: the grouped wgmma kernel took 126 registers under NVRTC 12.9 and 153
    under CUDA 13 after one change (fifteenth session), which cost it its second CTA per SM."""
    import shutil
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        log = _nvcc_cubin(source, names, arch, extra, d, ("-Xptxas", "-v"))[1]
    mangled = _PTXAS_FN.findall(log)
    cxxfilt = shutil.which("c++filt") or shutil.which("cu++filt")
    if cxxfilt is None:
        raise RuntimeError("c++filt not found")
    plain = subprocess.run([cxxfilt], input="\n".join(m[0] for m in mangled), capture_output=True,
                           text=True).stdout.splitlines()
    # "void kbit_x<4, __half, 64>(args)" -> "kbit_x<4, __half, 64>"; every kernel of the translation
    # unit, named with all its template arguments (defaulted ones too, so not always as in `names`)
    lowered = {m[0]: p.split(" ", 1)[-1].split("(", 1)[0] for m, p in zip(mangled, plain)}
    return _ptxas_records(log, lowered, source, arch, None)


def _nvcc_cubin(source: str, names: Sequence[str], arch: str, extra: Sequence[str], d: str,
                flags: Sequence[str] = ()) -> Tuple[str, str]:
    """(cubin path in folder d, nvcc's stderr): the kernels ``names`` instantiate, built with this
    machine's nvcc (the names referenced from a table, so each is instantiated)."""
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("nvcc not found")
    text = read_source(source) + "\nvoid* kbit_instances[] = {" + ", ".join(f"(void*)&{n}" for n in names) + "};\n"
    src, cub = os.path.join(d, "kernels.cu"), os.path.join(d, "kernels.cubin")
    with open(src, "w") as f:
        f.write(text)
    r = subprocess.run([nvcc, "-cubin", f"-arch={arch}", *flags, "-o", cub, src] + list(_options(extra)),
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"nvcc failed for {source} ({arch}):\n{r.stderr[-4000:]}")
    return cub, r.stderr


def compile_all(arch: str = "sm_90", families: Sequence[str] | None = None, jobs: int | None = None,
                nvcc: bool = False) -> List[dict]:
    """Compile every instantiation of every family for ``arch`` without a GPU (NVRTC, or this
    machine's nvcc: compile_group_nvcc)."""
    _load_families()
    from concurrent.futures import ThreadPoolExecutor

    work = []
    for fname, fam in applicable_families(arch).items():
        if families is not None and fname not in families:
            continue
        for gkey, keys in fam.groups().items():
            work.append((fname, fam, [fam.instances[k] for k in keys]))
    jobs = jobs or min(8, os.cpu_count() or 1)
    with ThreadPoolExecutor(jobs) as ex:
        group = compile_group_nvcc if nvcc else compile_group
        futs = [ex.submit(group, fam.source, names, fam.arch or arch, fam.options) for _, fam, names in work]
        results = []
        for (fname, _, _), f in zip(work, futs):
            for r in f.result():
                r["family"] = fname
                results.append(r)
    return results


def applicable_families(arch: str) -> Dict[str, Family]:
    """The families that exist for ``arch`` ('sm_90' includes the 'sm_90a' ones)."""
    _load_families()
    return {n: f for n, f in FAMILIES.items() if not f.arch or f.arch.rstrip("a") == arch.rstrip("a")}


# Launcher modules that register kernel families (imported by compile_all).
FAMILY_MODULES = ("quantize", "gemv", "gemv_stream", "gemm", "grouped", "wgmma")


def nvdisasm_path() -> str | None:
    """nvdisasm on PATH, else the pip wheel's (nvidia-cuda-nvdisasm: nvidia/cu*/bin/nvdisasm)."""
    import glob
    import importlib.util
    import shutil

    hit = shutil.which("nvdisasm")
    if hit:
        return hit
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(glob.glob(os.path.join(root, "*", "bin", "nvdisasm")))
        if found:
            return found[-1]
    return None


def sass_nvcc(source: str, names: Sequence[str], arch: str, extra: Sequence[str] = ()) -> str:
    """The SASS (nvdisasm -c) of the kernels ``names`` instantiate, built with this machine's nvcc."""
    import subprocess
    import tempfile

    dis = nvdisasm_path()
    if dis is None:
        raise RuntimeError("nvdisasm not found")
    with tempfile.TemporaryDirectory() as d:
        cub = _nvcc_cubin(source, names, arch, extra, d)[0]
        return subprocess.run([dis, "-c", cub], capture_output=True, text=True, check=True).stdout


def loads_before_wait(sass: str) -> Dict[str, List[str]]:
    """{mangled kernel: its global loads (LDG) before its first griddepcontrol.wait (ACQBULK)}, for
    the kernels of ``sass`` that wait.  A load of what the previous grid may write must come after
    the wait; one through a const __restrict__ pointer (ld.global.nc) ptxas may hoist above it
    (the grouped kernels' expert ids did, eighteenth session: kbit_common.cuh's ld_after_wait).
    Linear SASS order: a branch may skip the wait, so a hit is to be read, not a proof."""
    out: Dict[str, List[str]] = {}
    for m in re.finditer(r"\n(_Z\w+):\n(.*?)(?=\n\s*\.section|\Z)", sass, re.S):
        body = m.group(2)
        if "ACQBULK" in body:
            pre = body.split("ACQBULK", 1)[0]
            out[m.group(1)] = [ln.split("*/", 1)[-1].strip() for ln in pre.splitlines()
                               if re.search(r"\bLDG[.\s]", ln) and "LDGSTS" not in ln and "LDGDEPBAR" not in ln]
    return out


def _load_families():
    import importlib

    here = os.path.dirname(os.path.abspath(__file__))
    for m in FAMILY_MODULES:
        if os.path.exists(os.path.join(here, m + ".py")):
            importlib.import_module("kbitcupy." + m)


def format_report(records: List[dict]) -> str:
    lines = [f"{'family':<10} {'kernel':<70} {'regs':>4} {'stack':>5} {'spill':>5} {'smem':>6}"]
    for r in sorted(records, key=lambda r: (r["family"], r["kernel"])):
        lines.append(f"{r['family']:<10} {r['kernel']:<70} {r.get('registers', -1):>4} {r.get('stack', 0):>5} "
                     f"{r.get('spill_stores', 0) + r.get('spill_loads', 0):>5} {r.get('smem', 0):>6}")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m kbitcupy._compile [sm_90] [--nvcc]
    import sys

    # through the package module: the launcher modules register their families there, not in __main__
    from kbitcupy import _compile as _c

    args = [a for a in sys.argv[1:] if a != "--nvcc"]
    print(_c.format_report(_c.compile_all(args[0] if args else "sm_90", nvcc="--nvcc" in sys.argv)))
