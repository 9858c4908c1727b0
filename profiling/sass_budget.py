"""Instruction budget of one kernel launch from an ncu SourceCounters CSV (profiling/ncu_src.sh):
warp-level instructions executed, grouped by how many times each SASS instruction ran (a loop
body shows up as one count: e.g. units x consumer warps), with the opcode mix of each group.

    python profiling/sass_budget.py src_STREAM_gateup_k4_M1.csv
"""
import collections
import csv
import signal
import sys


def load(path):
    rows = list(csv.reader(open(path)))
    hdr = next(r for r in rows if "Address" in r and "Source" in r)
    isrc, ie = hdr.index("Source"), hdr.index("Instructions Executed")
    iss = hdr.index("Warp Stall Sampling (All Samples)")
    return [(r[isrc].strip(), int(r[ie] or 0), int(r[iss] or 0)) for r in rows[rows.index(hdr) + 1:]
            if len(r) == len(hdr)]


def opcode(src):
    tok = src.split()
    op = tok[1] if tok and tok[0].startswith("@") and len(tok) > 1 else (tok[0] if tok else "?")
    return op.split(".")[0]


def main(path):
    data = load(path)
    total = sum(e for _, e, _ in data)
    samples = sum(s for _, _, s in data) or 1
    groups = collections.defaultdict(list)
    for src, e, s in data:
        if e:
            groups[e].append((src, s))
    print(f"# {path}: {total} warp instructions executed, {samples} stall samples")
    for count, items in sorted(groups.items(), key=lambda kv: -kv[0] * len(kv[1]))[:8]:
        mix = collections.Counter(opcode(src) for src, _ in items)
        smp = sum(s for _, s in items)
        print(f"  x{count:<6} {len(items):4} instructions ({100 * count * len(items) / total:4.1f} % of executed, "
              f"{100 * smp / samples:4.1f} % of samples): " + " ".join(f"{o}:{n}" for o, n in mix.most_common(10)))


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped into head
    for p in sys.argv[1:]:
        main(p)
