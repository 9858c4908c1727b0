"""Which default cubins a source change altered: every instantiation of the named families
compiled with NVRTC (no GPU) from cuda_src/ of a git revision and from the working tree,
cubins compared byte for byte, and with --sass, where the bytes differ, the SASS of the same
source built by nvcc: a change to a shared header (a template parameter with a default) can
change every including group's NVRTC cubin bytes while its code stays the same (sessions 25).  A review or probe-hook commit that claims "cubins unchanged" is checked
with this.

usage: python3 profiling/cubin_diff.py REV [--sass] [--skip REGEX] [family ...]   (default: every family; sm_90)
--sass: the groups whose bytes differ compared again as nvcc's SASS (slow: two nvcc builds a group).
--skip REGEX: instantiations whose name matches are left out of both builds (new kernels added to an existing
group, so the group's other kernels are still compared).
"""
import re
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


def nvcc_sass(text: str, names, arch: str, extra) -> str:
    """The SASS (nvdisasm -c) of the kernels `names` instantiate from source `text`, built with this
    machine's nvcc (its nvdisasm reads nvcc's cubins; the NVRTC 12 wheel's it does not)."""
    with tempfile.TemporaryDirectory() as d:
        src, cub = os.path.join(d, "k.cu"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(text + "\nvoid* kbit_instances[] = {" + ", ".join(f"(void*)&{n}" for n in names) + "};\n")
        r = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-o", cub, src] + list(C._options(extra)),
                           capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(r.stderr[-2000:])
        return subprocess.run([C.nvdisasm_path(), "-c", cub], capture_output=True, text=True, check=True).stdout


def main():
    rev, rest = sys.argv[1], sys.argv[2:]
    sass = "--sass" in rest
    skip = None
    if "--skip" in rest:
        i = rest.index("--skip")
        skip = re.compile(rest[i + 1])
        rest = rest[:i] + rest[i + 2:]
    wanted = [a for a in rest if a != "--sass"] or None
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
                names = [fam.instances[k] for k in keys if not (skip and skip.search(fam.instances[k]))]
                if names:
                    work.append((fname, names, old, new, fam))
        jobs = min(8, os.cpu_count() or 1)
        with ThreadPoolExecutor(jobs) as ex:
            futs = [(w, ex.submit(cubin, w[2], w[4].source, w[1], w[4].arch or arch, w[4].options),
                     ex.submit(cubin, w[3], w[4].source, w[1], w[4].arch or arch, w[4].options)) for w in work]
            changed = added = code_same = 0
            differ = []
            for (fname, names, old, new, fam), a, b in futs:
                try:
                    ca = a.result()
                except Exception:  # the group's kernels do not exist at REV
                    added += 1
                    print(f"NEW {fname}: {names[0]}" + (f" (+{len(names) - 1})" if len(names) > 1 else ""))
                    continue
                if ca != b.result():
                    differ.append((fname, names, old, new, fam))
            checks = [(w, ex.submit(nvcc_sass, w[2], w[1], w[4].arch or arch, w[4].options),
                       ex.submit(nvcc_sass, w[3], w[1], w[4].arch or arch, w[4].options)) if sass else (w, None, None)
                      for w in differ]
            for (fname, names, *_), a, b in checks:
                label = f"{fname}: {names[0]}" + (f" (+{len(names) - 1})" if len(names) > 1 else "")
                if a is not None and a.result() == b.result():
                    code_same += 1
                    print(f"SAME SASS {label}")
                else:
                    changed += 1
                    print(f"CHANGED {label}")
    print(f"{len(work) - changed - code_same - added} of {len(work) - added} groups byte-identical against {rev} "
          f"({arch})" + (f", {code_same} more with the same nvcc SASS" if sass else "") + f"; {added} new")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
