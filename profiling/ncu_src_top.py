"""Summary of an ncu source page (ncu -i REP --page source --print-source sass --csv, see ncu_src16.sh):
the stall reasons over all warp samples, the SASS instructions with the most samples, and the samples
between consecutive synchronisation / MMA / copy / branch instructions (where in the kernel the warps wait).
usage: python3 profiling/ncu_src_top.py src.csv [TOP]"""
import csv
import sys

KEYS = ("BAR.SYNC", "HGMMA", "DEPBAR", "EXIT", "MEMBAR", "UCGABAR", "ATOMG", "LDGSTS", "LDGDEPBAR")


def main(path, top=25):
    rows = list(csv.reader(open(path)))
    head = rows[1]
    data = [r for r in rows[2:] if len(r) == len(head)]
    ia, isrc = head.index("Address"), head.index("Source")
    isamp, iex = head.index("Warp Stall Sampling (All Samples)"), head.index("Instructions Executed")
    stalls = [h for h in head if h.startswith("stall_") and "Not Issued" not in h]
    tot = sum(int(r[isamp]) for r in data) or 1
    base = int(data[0][ia], 16)
    agg = {s[6:]: sum(int(r[head.index(s)]) for r in data) for s in stalls}
    print(f"# {rows[0][1][:110]}\n# warp samples {tot}; by stall reason (%):")
    print("  " + ", ".join(f"{k} {100 * v / tot:.1f}" for k, v in sorted(agg.items(), key=lambda x: -x[1]) if v))
    print(f"# top {top} instructions (offset, samples, % of all, SASS, top reasons)")
    for r in sorted(data, key=lambda r: -int(r[isamp]))[:top]:
        d = {s[6:]: int(r[head.index(s)]) for s in stalls if int(r[head.index(s)])}
        d = dict(sorted(d.items(), key=lambda x: -x[1])[:3])
        print(f"  {int(r[ia], 16) - base:6x} {int(r[isamp]):5d} {100 * int(r[isamp]) / tot:5.1f}% {r[isrc].strip()[:58]:58s} {d}")
    print("# samples since the previous listed instruction (block) and cumulative %, at sync / MMA / copy instructions")
    acc = blk = 0
    for r in data:
        s, n = r[isrc].strip(), int(r[isamp])
        acc += n
        blk += n
        if any(k in s for k in KEYS) and (int(r[iex]) or blk):
            print(f"  {int(r[ia], 16) - base:6x} exec {int(r[iex]):6d} block {blk:5d} cum {100 * acc / tot:5.1f}% {s[:60]}")
            blk = 0


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25)
