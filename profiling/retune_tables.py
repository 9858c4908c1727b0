"""The file lists behind kbitcupy.dispatch's measured tables, in one place: rebuild a table with
profiling/tune_dispatch.py's rules and compare it with the package's (or print the new one).
  python3 profiling/retune_tables.py [--check | --write] [--extra +TAG] [FAMILY ...]
--check: exit 1 if a rebuilt table differs from kbitcupy.dispatch.TABLES; --write: replace the differing
families' literals in kbitcupy/dispatch.py with the rebuilt tables; --extra +TAG (repeatable):
overlay the sweep <gpu>_<date>_TAG.json (or .json.gz) of each family's GPU last (replace measured columns only)."""
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tune_dispatch as T  # noqa: E402
from kbitcupy import dispatch as D  # noqa: E402

R = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
GPU = {"H200": "nvidia-h200", "H100": "nvidia-h100-80gb-hbm3"}
# earlier files first; "+" = overlay of the measured columns (tune_dispatch.py +file), "~" = the same, also adding the
# cells no earlier file measured (a GEMV / stream sweep over M = 9..15: the bands between the measured M)
FILES = {
    "H200": ["allm4", "m16-64", "m8-128-k4", "m8-128-k235", "m32-128", "stream-tune", "+dq-tune", "+stream-tune2",
             "+stream64", "+stream-tune3", "+stream-tune3b", "+lowm-tune", "+k5-gpb", "+wg-tune11", "+final18",
             "+wg-tune24", "+final38", "+final38b", "+wg-tune25", "+final40", "+wg-tune30", "+sweep42h", "+sweep42hb", "~sweep43h", "~sweep52h", "~disp52h", "~kvts53b", "~kvts53k5", "+allm57", "+disp57-1", "+disp57-2"],
    "H200+PDL": ["pdl-tune-k45", "pdl-tune-k23", "stream-tune", "+dq-tune", "+stream-tune2", "+stream64",
                 "+stream-tune3", "+stream-tune3b", "+lowm-tune", "+k5-gpb", "+k5-pdlplan", "+wg-tune11", "+wg-tune24",
                 "+wg-tune25", "+wg-tune30"],
    "H100": ["allm3", "m16-64", "m8-128", "m32-128", "stream-tune", "+dq-tune", "+stream-tune2", "+stream64",
             "+stream-tune3", "+stream-tune3b", "+lowm-tune", "+k5-gpb", "+wg-tune11", "+final18", "+final20",
             "+wg-tune15", "gap15", "+wg-tune24", "+final38", "+wg-tune25", "+final40", "+wg-tune25kv", "+final42",
             "+wg-tune30", "+sweep41", "+sweep41b", "+sweep42", "+sweep42b", "~sweep43"],
    "H100+PDL": ["pdl-tune-k45", "pdl-tune-k23", "stream-tune", "+dq-tune", "+stream-tune2", "+stream64",
                 "+stream-tune3", "+stream-tune3b", "+lowm-tune", "+k5-gpb", "+wg-tune11", "+wg-tune15", "+wg-tune24",
                 "+wg-tune25", "+wg-tune25kv", "+wg-tune30"],
}


def path(family, tag):
    mark = tag[0] if tag[0] in "+~" else ""  # "+" overlay, "~" overlay that also adds cells (tune_dispatch.timings)
    hits = sorted(glob.glob(os.path.join(R, f"{GPU[family.split('+')[0]]}_*_{tag.lstrip('+~')}.json*")))
    if len(hits) != 1:
        raise SystemExit(f"{family}: {len(hits)} files for {tag}")
    return mark + hits[0]


def build(family, extra=()):
    return T.table_from_files([path(family, t) for t in FILES[family] + list(extra)], family.endswith("+PDL"))


SHAPES_HEAD = '             "shapes": {  # (k, N, K): (gemv up to M, fused up to M[, wgmma from M, to M[, stream from M, to M]]; dq above)'


def literal(fam, entry):
    """The family's entry as kbitcupy/dispatch.py writes it (two shapes a line)."""
    lines = [f'    "{fam}": {{"gemv_max_m": {entry["gemv_max_m"]!r}, "gemm_max_m": {entry["gemm_max_m"]!r},', SHAPES_HEAD]
    items = [f"{s!r}: {v!r}" for s, v in sorted(entry["shapes"].items())]
    lines += ["                " + ", ".join(items[i:i + 2]) + "," for i in range(0, len(items), 2)]
    return "\n".join(lines + ["             }},"])


def write(fam, entry):
    """Replace the family's literal in kbitcupy/dispatch.py (from its first line to its closing '}},')."""
    src = os.path.join(os.path.dirname(R), "..", "kbitcupy", "dispatch.py")
    text = open(src).read().split("\n")
    start = next(i for i, ln in enumerate(text) if ln.startswith(f'    "{fam}": {{'))
    end = next(i for i in range(start, len(text)) if text[i] == "             }},")
    text[start:end + 1] = literal(fam, entry).split("\n")
    with open(src, "w") as f:
        f.write("\n".join(text))


def main(argv):
    check = "--check" in argv
    extra = [argv[i + 1] for i, a in enumerate(argv) if a == "--extra"]
    fams = [a for i, a in enumerate(argv) if not a.startswith("--") and (i == 0 or argv[i - 1] != "--extra")] or list(FILES)
    bad = 0
    for fam in fams:
        entry, t = build(fam, extra)
        cur = D.TABLES[fam]
        diff = {s: (cur["shapes"].get(s), v) for s, v in entry["shapes"].items() if cur["shapes"].get(s) != v}
        same = not diff and entry["gemm_max_m"] == cur["gemm_max_m"] and entry["gemv_max_m"] == cur["gemv_max_m"]
        print(f"{fam}: {'same as the package table' if same else 'differs'}")
        for s, (a, b) in sorted(diff.items()):
            print(f"  {s}: package {a} -> rebuilt {b}")
        if not same and "--write" in argv:
            write(fam, entry)
            print("  written to kbitcupy/dispatch.py")
        elif not same and not check:
            print("  entry:", repr(entry))
        bad += not same
    return 1 if check and bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
