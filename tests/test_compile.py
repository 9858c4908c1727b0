"""Every instantiation of every kernel family compiles with NVRTC (no GPU needed), without spills."""
import struct

import pytest

from kbitcupy._compile import compile_all, format_report


@pytest.mark.parametrize("arch", ["sm_90", "sm_89", "sm_80"])
def test_compile_all(arch):
    records = compile_all(arch)
    print(format_report(records))
    assert records, "no kernels compiled"
    from kbitcupy._compile import applicable_families

    expected = sum(len(f.instances) for f in applicable_families(arch).values())
    assert len(records) == expected, f"{len(records)} reports for {expected} instantiations"
    spills = [r for r in records if r.get("spill_stores", 0) or r.get("spill_loads", 0)]
    assert not spills, "spills:\n" + format_report(spills)
    serial = [r for r in records if r.get("wgmma_serialized")]
    assert not serial, "ptxas serialized the wgmma of:\n" + format_report(serial)
    assert all(r.get("registers", 0) > 0 for r in records)


def test_ptxas_records_note_serialized_wgmma():
    """The compile reports flag a kernel whose wgmma ptxas serialized (checked in test_compile_all); the line
    as NVRTC 12.9 and nvcc 13 print it (seen with a fragment register redefined between a wgmma and its wait)."""
    from kbitcupy._compile import _ptxas_records

    fn = "_Z14kbit_wgmma_tmaILi4E6__halfLi64ELb1EEvv"
    log = (f"ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async instructions are serialized due "
           f"to non wgmma instructions defining input registers of a wgmma between start and end of the pipeline "
           f"stage in the function '{fn}'\n"
           f"ptxas info    : Compiling entry function '{fn}' for 'sm_90a'\n"
           f"ptxas info    : Used 120 registers, 0 bytes smem\n"
           f"ptxas info    : Compiling entry function '_Z5otherv' for 'sm_90a'\n"
           f"ptxas info    : Used 40 registers\n")
    recs = {r["kernel"]: r for r in _ptxas_records(log, {fn: "k64", "_Z5otherv": "other"}, "x.cu", "sm_90a", None)}
    assert recs["k64"]["wgmma_serialized"] == "C7513" and recs["k64"]["registers"] == 120
    assert "wgmma_serialized" not in recs["other"]


def test_wgmma_two_ctas_per_sm_under_cuda13_nvcc():
    """The wgmma kernels' plans at <= 64 tokens per tile count on two 256-thread CTAs per SM, i.e. at
    most 128 registers.  Checked with this machine's nvcc (the CUDA 13 the GPU machine's CuPy compiles
    with), because the NVRTC 12.9 wheel allocates differently: one change took the grouped kernel to 153
    registers under CUDA 13 while NVRTC 12.9 still said 126 (fifteenth session)."""
    import shutil

    from kbitcupy import wgmma as WG
    from kbitcupy._compile import compile_group_nvcc, format_report

    if shutil.which("nvcc") is None or shutil.which("c++filt") is None:
        pytest.skip("no nvcc / c++filt")
    names = [WG.WGMMA.instances[key] for key in WG.WGMMA.instances
             if key[-1] <= 64 and key[-2] in ("float16", "bfloat16")]
    recs = compile_group_nvcc("kbit_wgmma.cu", names, "sm_90a")
    for r in recs:
        r["family"] = "wgmma"
    print(format_report(recs))
    # nvcc names every template argument, the defaulted CBD = false and the grouped kernel's LC = -1 too
    assert sorted(r["kernel"].replace(", -1>", ">").replace(", false>", ">") for r in recs) == sorted(names)
    over = [r for r in recs if r["registers"] > 128 or r.get("spill_stores", 0) or r.get("spill_loads", 0)]
    assert not over, "over 128 registers or spilling:\n" + format_report(over)
    serial = [r for r in recs if r.get("wgmma_serialized")]  # (test_compile_all checks NVRTC 12.9 for all TOK)
    assert not serial, "ptxas (CUDA 13) serialized the wgmma of:\n" + format_report(serial)


def test_no_load_before_wait_in_wait_first_kernels():
    """Kernels that wait for the previous grid first (safe PDL; the grouped kernels' wait mode) issue
    no global load before griddepcontrol.wait in their SASS: ptxas had hoisted the grouped GEMV's and
    the mma grouped kernel's expert-id / offset loads and kbit_gemm's codebook load above it (a race
    with the previous grid's writes; eighteenth session).  nvcc + nvdisasm (the test extra
    nvidia-cuda-nvdisasm), no GPU."""
    import shutil

    from kbitcupy import gemm as GM
    from kbitcupy import gemv as G
    from kbitcupy import grouped as GR
    from kbitcupy._compile import loads_before_wait, nvdisasm_path, sass_nvcc

    if shutil.which("nvcc") is None or nvdisasm_path() is None:
        pytest.skip("no nvcc / nvdisasm")
    checks = [
        ("kbit_gemv.cu", [n for key, n in G.GEMV.instances.items()
                          if str(key[0]).startswith("grouped") and key[1] in (2, 5) and key[2] == "float16"]),
        ("kbit_grouped.cu", [n for key, n in GR.GROUPED.instances.items()
                             if key[0] == "mm" and key[1] == 4 or key in (("route",), ("route", "warp"))
                             or key[0] == "combine"]),
        ("kbit_gemm.cu", [n for key, n in GM.GEMM.instances.items() if key[0] == 4][:4]),
    ]
    for source, names in checks:
        assert names, source
        found = loads_before_wait(sass_nvcc(source, names, "sm_90"))
        assert len(found) >= len(names), f"{source}: {len(found)} waiting kernels for {len(names)} names"
        early = {k: v for k, v in found.items() if v}
        assert not early, f"{source}: global loads before griddepcontrol.wait: {early}"


def test_memory_loads_in_inline_asm_are_volatile():
    """An inline asm without `volatile` (and no memory clobber) is a pure function of its operands to the
    compiler, which may move it above a barrier or an mbarrier / cp.async wait, or hoist it out of a loop.
    The one such load, lds_u32, is for tables that are constant once built (its callers pass a table
    address: lut*, s2*); everything else that reads memory is `asm volatile`.  Through lds_u32, the
    wgmma kernel's k = 3 / 5 plane words of a wgmma_cta inlined in a loop were hoisted above the TMA wait
    (the stream-K experiment's fault, fifty-fifth session)."""
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "cuda_src"
    plain, calls = [], []
    for f in sorted(src.glob("*.cu*")):
        text = f.read_text()
        for m in re.finditer(r"\basm\s*(volatile\s*)?\(\s*\"([^\"]*)", text):
            if not m.group(1) and re.search(r"\b(ld|cp\.async|mbarrier|red|atom)\.", m.group(2)):
                line = text.count("\n", 0, m.start()) + 1
                plain.append(f"{f.name}:{line}: {m.group(2)[:40]}")
        calls += [(f.name, a.strip()) for a in re.findall(r"\blds_u32\(([^;]*?)\)[;,)]", text)]
    assert len(plain) == 1 and plain[0].startswith("kbit_common.cuh:"), plain  # lds_u32's own
    assert calls, "no lds_u32 call found"
    not_tables = [c for c in calls if not re.match(r"(lut|s2)", c[1])]
    assert not not_tables, f"lds_u32 on something other than a table: {not_tables}"


def test_arch_specific_cubin_cache(tmp_path, monkeypatch):
    """The sm_90a family (wgmma) is built by our own NVRTC call into an on-disk cubin cache:
    a second request reuses the file (no recompile), a different option set gets its own."""
    import os

    from kbitcupy._compile import build_arch_cubin

    monkeypatch.setenv("KBITCUPY_CACHE_DIR", str(tmp_path))
    names = ["kbit_wgmma<4, __half, 16>"]
    path, lowered = build_arch_cubin("kbit_wgmma.cu", names, "sm_90a")
    assert os.path.getsize(path) > 1000 and set(lowered) == set(names)
    assert lowered[names[0]].startswith("_Z")  # a mangled kernel name to load by
    mtime = os.path.getmtime(path)
    assert build_arch_cubin("kbit_wgmma.cu", names, "sm_90a") == (path, lowered)
    assert os.path.getmtime(path) == mtime
    other, _ = build_arch_cubin("kbit_wgmma.cu", names, "sm_90a", ("-DKBIT_SERIAL_FIXUP",))
    assert other != path and len(os.listdir(tmp_path)) == 4
    # the cached file holds the whole ELF image its header declares (getCUBIN's copy is a byte short)
    data = open(path, "rb").read()
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    assert len(data) == max(phoff + phentsize * phnum, shoff + shentsize * shnum)


def test_whole_elf_pads_a_short_image_only():
    from kbitcupy._compile import whole_elf

    hdr = bytearray(64)
    hdr[:5] = b"\x7fELF\x02"
    struct.pack_into("<QQ", hdr, 0x20, 100, 64)  # program headers at 100, sections at 64
    struct.pack_into("<HHHH", hdr, 0x36, 56, 1, 0, 0)  # one 56-byte program header: the image is 156 bytes
    img = bytes(hdr) + bytes(range(1, 92))  # 155 bytes, one short
    assert whole_elf(img) == img + b"\0"
    assert whole_elf(img + b"\0") == img + b"\0"  # whole: unchanged
    assert whole_elf(img[:130]) == img[:130]  # far short (not getCUBIN's one byte): left alone
    assert whole_elf(b"not an elf" * 10) == b"not an elf" * 10


def test_family_function_one_kernel_object_per_device(monkeypatch):
    """Family.function hands out one RawKernel object per (device, kernel): launchers set the
    shared-memory attribute on it and key their bookkeeping by it.  (CuPy's get_function
    makes a new object per call; two plans of one kernel holding two objects could lower
    each other's shared-memory limit.)  Module and device calls are faked: no GPU needed."""
    import cupy

    from kbitcupy._compile import Family

    made = []

    class FakeModule:
        def __init__(self, **kw):
            self.names = kw["name_expressions"]

        def get_function(self, name):
            made.append(name)
            return object()

    dev = [0]
    monkeypatch.setattr(cupy, "RawModule", FakeModule)
    monkeypatch.setattr(cupy.cuda.runtime, "getDevice", lambda: dev[0])
    fam = Family("kbit_gemm.cu", {(1,): "f<1>", (2,): "f<2>"}, group_of=lambda key: ())
    a = fam.function((1,))
    assert fam.function((1,)) is a and fam.function((2,)) is not a
    dev[0] = 1
    b = fam.function((1,))
    assert b is not a and fam.function((1,)) is b
    assert made == ["f<1>", "f<2>", "f<1>"] and len(fam.cached_groups()) == 2


def test_default_codebook_immediates_match_reference():
    """cuda_src/kbit_common.cuh's kbit_default_level holds create_codebook(k) bit for bit, for
    every k and every level in order (the decode GEMV uses it instead of the weight's codebook
    when KbitWeight.default_codebook is true)."""
    import os
    import re

    import numpy as np

    from kbitcupy import reference as R

    src = open(os.path.join(os.path.dirname(__file__), "..", "cuda_src", "kbit_common.cuh")).read()
    body = src[src.index("kbit_default_level(unsigned t)"):]
    body = body[:body.index("return __uint_as_float")]
    for k in (2, 3, 4, 5):
        blk = body[body.index(f"if constexpr (K == {k})"):]
        blk = blk[:blk.index("}")]
        pairs = re.findall(r"t == (\d+)u \? 0x([0-9a-f]{8})u", blk)
        assert [int(i) for i, _ in pairs] == list(range(1 << k))
        bits = np.array([int(h, 16) for _, h in pairs], dtype=np.uint32)
        np.testing.assert_array_equal(bits, R.create_codebook(k).astype(np.float32).view(np.uint32))
