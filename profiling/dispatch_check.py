"""How close the dispatched matmul column of a bench.py JSON is to the fastest kernel column per cell.
usage: python3 profiling/dispatch_check.py RESULT.json [RESULT.json ...]"""
import json
import sys

KERNELS = ("GEMV", "STREAM", "GEMM", "WGMMA", "dq+cuBLAS")


def main(paths):
    for p in paths:
        cells = json.load(open(p))["cells"]
        over = []
        for c in cells:
            cols = c["columns"]
            if "matmul" not in cols:
                continue
            ks = {k: v["us"] for k, v in cols.items() if k in KERNELS and v.get("check_ok", True) and "us" in v}
            if not ks:
                continue
            best = min(ks.values())
            over.append(((cols["matmul"]["us"] - best) / best * 100, c["shape"], c["k"], c["M"],
                         cols["matmul"]["us"], min(ks, key=ks.get), best))
        over.sort(reverse=True)
        print(f"{p}: {len(over)} cells; matmul over the fastest kernel: max {over[0][0]:.1f} %, "
              f"{sum(o[0] > 5 for o in over)} cells over 5 %")
        for o in over[:5]:
            print("  %5.1f %%  %-9s k=%d M=%-4d matmul %.2f us, %s %.2f" % o)


if __name__ == "__main__":
    main(sys.argv[1:])
