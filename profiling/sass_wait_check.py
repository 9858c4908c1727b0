"""Which global loads a kernel issues before its first griddepcontrol.wait (ACQBULK in the SASS).

Data a programmatic dependent reads after the wait may come from the previous grid (A, expert ids
and offsets, row indices; in safe PDL the weights too).  A load through a const __restrict__
pointer compiles to ld.global.nc (LDG.CONSTANT), which ptxas may treat as invariant and hoist above
the wait's asm: the kernel then reads it before the previous grid's writes are visible (the grouped
GEMV's expert ids did, eighteenth session).  Lists, per kernel of every family (or of the named
sources), the LDG instructions before its first ACQBULK in the SASS's linear order (a hint, not a
proof: a branch may skip the wait; the dense kernels' full-PDL paths load weights before theirs on
purpose).  tests/test_compile.py checks the grouped and kbit_gemm kernels the same way.

usage: python3 profiling/sass_wait_check.py [kbit_gemv.cu ...]   (nvcc + nvdisasm, no GPU; sm_90)
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kbitcupy import _compile as C  # noqa: E402


def main():
    wanted = sys.argv[1:]
    bad = 0
    for fam in C.applicable_families("sm_90").values():
        if wanted and fam.source not in wanted:
            continue
        for keys in fam.groups().values():
            names = [fam.instances[k] for k in keys]
            sass = C.sass_nvcc(fam.source, names, fam.arch or "sm_90", fam.options)
            for kern, loads in C.loads_before_wait(sass).items():
                if loads:
                    bad += 1
                    dem = subprocess.run(["c++filt"], input=kern, capture_output=True, text=True).stdout.strip()
                    print(f"{fam.source}: {dem.split('(')[0]}: {len(loads)} LDG before the first ACQBULK: "
                          + "; ".join(loads[:4]))
    print(f"{bad} kernels with loads before their first wait")


if __name__ == "__main__":
    main()
