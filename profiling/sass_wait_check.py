"""Which global loads a kernel issues before its first griddepcontrol.wait (ACQBULK in the SASS).

Data a programmatic dependent reads after the wait may come from the previous grid (A, expert ids
and offsets, row indices).  A load through a const __restrict__ pointer becomes ld.global.nc
(LDG.CONSTANT), which the compiler may treat as invariant and hoist above the wait's asm: then the
kernel reads it before the previous grid's writes are visible.  This lists, per kernel, the LDG
instructions that come before the first ACQBULK in the SASS's linear order (a hint, not a proof:
a branch may skip the wait), so the ones on the wait-first paths can be checked by hand.

usage: python3 profiling/sass_wait_check.py [family.cu ...]   (this machine's nvcc + nvdisasm, sm_90)
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kbitcupy import _compile as C  # noqa: E402

NVDISASM = shutil.which("nvdisasm") or os.environ.get("NVDISASM", "nvdisasm")


def sass_of(source, names, arch="sm_90", options=()):
    text = C.read_source(source) + "\nvoid* kbit_instances[] = {" + ", ".join(f"(void*)&{n}" for n in names) + "};\n"
    with tempfile.TemporaryDirectory() as d:
        src, cub = os.path.join(d, "k.cu"), os.path.join(d, "k.cubin")
        open(src, "w").write(text)
        r = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-o", cub, src] + list(C._options(tuple(options))),
                           capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(r.stderr[-3000:])
        return subprocess.run([NVDISASM, "-c", cub], capture_output=True, text=True, check=True).stdout


def early_loads(sass):
    """{mangled kernel: [LDG lines before its first ACQBULK]} for kernels that have an ACQBULK."""
    out = {}
    for m in re.finditer(r"\n(_Z\w+):\n(.*?)(?=\n\s*\.section|\Z)", sass, re.S):
        body = m.group(2)
        if "ACQBULK" not in body:
            continue
        pre = body.split("ACQBULK", 1)[0]
        out[m.group(1)] = [ln.split("*/", 1)[-1].strip() for ln in pre.splitlines()
                           if re.search(r"\bLDG\b|LDG\.", ln) and "LDGSTS" not in ln and "LDGDEPBAR" not in ln]
    return out


def main():
    wanted = sys.argv[1:]
    bad = 0
    for fam in C.applicable_families("sm_90").values():
        fname = fam.source
        if wanted and fname not in wanted:
            continue
        groups = {}
        for key, name in fam.instances.items():
            groups.setdefault(fam.group_of(key), []).append(name)
        for names in groups.values():
            for kern, loads in early_loads(sass_of(fname, names, fam.arch or "sm_90", fam.options)).items():
                if loads:
                    bad += 1
                    dem = subprocess.run(["c++filt"], input=kern, capture_output=True, text=True).stdout.strip()
                    print(f"{fname}: {dem.split('(')[0]}: {len(loads)} LDG before the first ACQBULK: "
                          + "; ".join(loads[:4]))
    print(f"{bad} kernels with loads before their first wait")


if __name__ == "__main__":
    main()
