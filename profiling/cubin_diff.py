"""Which default cubins a source change altered: every instantiation of the named families
compiled with NVRTC (no GPU) from cuda_src/ of a git revision and from the working tree,
cubins compared byte for byte.  A review or probe-hook commit that claims "cubins
unchanged" is checked with this.

usage: python3 profiling/cubin_diff.py REV [family ...]   (default: every family; sm_90)
"""
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kbitcupy import _compile as C  # noqa: E402


def cubin(text, source, names, arch, extra):
    nvrtc = C._nvrtc()
    prog = nvrtc.createProgram(text, source, [], [])
    try:
        for n in names:
            nvrtc.addNameExpression(prog, n)
        nvrtc.compileProgram(prog, list(C._options(extra)) + [f"-arch={arch}"])
        return nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)


def main():
    rev, wanted = sys.argv[1], sys.argv[2:] or None
    arch = "sm_90"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as d:
        tar = subprocess.run(["git", "-C", root, "archive", rev, "cuda_src"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", d], input=tar, check=True)
        work = []
        for fname, fam in C.applicable_families(arch).items():
            if wanted and fname not in wanted:
                continue
            old, new = C.inline_source(os.path.join(d, "cuda_src"), fam.source), C.read_source(fam.source)
            for keys in fam.groups().values():
                names = [fam.instances[k] for k in keys]
                work.append((fname, names, old, new, fam))
        jobs = min(8, os.cpu_count() or 1)
        with ThreadPoolExecutor(jobs) as ex:
            futs = [(w, ex.submit(cubin, w[2], w[4].source, w[1], w[4].arch or arch, w[4].options),
                     ex.submit(cubin, w[3], w[4].source, w[1], w[4].arch or arch, w[4].options)) for w in work]
            changed = added = 0
            for (fname, names, old, new, _), a, b in futs:
                try:
                    ca = a.result()
                except Exception:  # the group's kernels do not exist at REV
                    added += 1
                    print(f"NEW {fname}: {names[0]}" + (f" (+{len(names) - 1})" if len(names) > 1 else ""))
                    continue
                same = ca == b.result()
                changed += not same
                if not same:
                    print(f"CHANGED {fname}: {names[0]}" + (f" (+{len(names) - 1})" if len(names) > 1 else ""))
    print(f"{len(work) - changed - added} of {len(work) - added} groups byte-identical against {rev} ({arch}); "
          f"{added} new")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
