"""Compile kernel families into the on-disk caches in parallel, before tests or benchmarks
(the GPU machine starts with empty caches, and a run compiles group after group).

    python profiling/warm_cache.py wgmma grouped gemv     # families (default: all for this GPU)

sm_90a families go to kbitcupy's cubin cache (_compile.build_arch_cubin), the others to
CuPy's kernel cache (the same RawModule arguments as Family.function, so later loads hit)."""
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cupy  # noqa: E402

from kbitcupy import _compile as C  # noqa: E402


def main(names):
    C._load_families()
    cc = cupy.cuda.Device().compute_capability
    arch = f"sm_{cc}"
    fams = C.applicable_families(arch)
    work = [(fam, [fam.instances[k] for k in keys]) for n, fam in fams.items() if not names or n in names
            for keys in fam.groups().values()]

    def build(item):
        fam, group = item
        if fam.arch:
            C.build_arch_cubin(fam.source, group, fam.arch, fam.options)
        else:
            cupy.RawModule(code=C.read_source(fam.source), options=C._options(fam.options), name_expressions=group,
                           backend="nvrtc").compile()

    t0 = time.time()
    with ThreadPoolExecutor(min(len(work), os.cpu_count() or 1) or 1) as ex:
        list(ex.map(build, work))
    print(f"warm_cache: {len(work)} groups of {sorted(n for n in fams if not names or n in names)} "
          f"in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
