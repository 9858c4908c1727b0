"""How close the dispatched matmul column of a bench.py JSON is to the fastest kernel column per cell.
usage: python3 profiling/dispatch_check.py [--family FAMILY] RESULT.json [RESULT.json ...]
--family: instead of the measured matmul column, the kernel column the package's current table for FAMILY
(kbitcupy.dispatch, e.g. H200) picks per cell (the table's choice on that run's timings)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tune_dispatch import COLS, load_results  # noqa: E402  (kernel column -> dispatch kind)

COLUMN = {kind: col for col, kind in COLS.items()}  # dispatch kind -> kernel column


def main(argv):
    fam = argv[argv.index("--family") + 1] if "--family" in argv else None
    paths = [a for i, a in enumerate(argv) if a != "--family" and (i == 0 or argv[i - 1] != "--family")]
    if fam:
        from kbitcupy import dispatch as D
    for p in paths:
        cells = load_results(p)["cells"]
        over = []
        for c in cells:
            cols = c["columns"]
            if "matmul" not in cols:
                continue
            ks = {k: v["us"] for k, v in cols.items() if k in COLS and v.get("check_ok", True) and "us" in v}
            if not ks:
                continue
            best = min(ks.values())
            if fam:
                pick = COLUMN[D.choose(c["M"], c["N"], c["K"], c["k"], "float16", family=fam)]
                t = ks.get(pick, float("inf"))
            else:
                t = cols["matmul"]["us"]
            over.append(((t - best) / best * 100, c["shape"], c["k"], c["M"], t, min(ks, key=ks.get), best))
        over.sort(reverse=True)
        print(f"{p}: {len(over)} cells; dispatched over the fastest kernel: max {over[0][0]:.1f} %, "
              f"{sum(o[0] > 5 for o in over)} cells over 5 %")
        for o in over[:5]:
            print("  %5.1f %%  %-9s k=%d M=%-4d dispatched %.2f us, %s %.2f" % o)


if __name__ == "__main__":
    main(sys.argv[1:])
