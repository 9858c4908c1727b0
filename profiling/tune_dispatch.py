"""Dispatch table entry for kbitcupy.dispatch.TABLES from benchmark JSON (profiling/bench.py
output with the GEMV, STREAM, GEMM, WGMMA and dq+cuBLAS columns over M = 1..512).

usage: python profiling/tune_dispatch.py [--pdl] profiling/results/<gpu>_<date>_<tag>.json [more.json]
A later file replaces an earlier one's cells; a file named as +path.json only replaces the columns it
measured in cells an earlier file has (e.g. a sweep of the dq+cuBLAS column alone after a change to
the dequantize kernel).
--pdl: from the GEMV+PDL / GEMM+PDL / WGMMA+PDL columns (and dq+cuBLAS, which PDL does not
change), for the family's "+PDL" table (kbitcupy.dispatch.PDL_SUFFIX).
Prints the entry (size bands for unmeasured shapes, exact crossovers per measured
(k, N, K)) and, per cell, whether the entry's choice is within 5 % of the fastest kernel.
"""
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kbitcupy import dispatch as D  # noqa: E402

COLS = {"GEMV": "gemv", "STREAM": "stream", "GEMM": "gemm", "WGMMA": "wgmma", "dq+cuBLAS": "dq"}
PDL_COLS = {"GEMV+PDL": "gemv", "STREAM+PDL": "stream", "GEMM+PDL": "gemm", "WGMMA+PDL": "wgmma", "dq+cuBLAS": "dq"}


def load_results(path):
    """A bench.py JSON file, plain or gzip-compressed (.json.gz: the older sweeps in profiling/results/)."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def timings(paths, cols=COLS):
    t = {}
    for p in paths:
        update = p.startswith("+")
        merge = p.startswith("~")  # update the cells earlier files measured, add the ones they did not
        res = load_results(p[1:] if update or merge else p)
        dt = res["meta"].get("dtype", "fp16")
        dn = "bfloat16" if dt in ("bf16", "bfloat16") else "float16"
        for c in res["cells"]:
            if c.get("experts"):
                continue
            us = {cols[n]: e["us"] for n, e in c["columns"].items()
                  if n in cols and isinstance(e, dict) and e.get("us") and e.get("check_ok", True)}
            # the GEMV skipped as not fitting (bench.py's '-'): None, which dispatch.shapes_from_timings reads as the
            # end of its band
            if any(cols.get(n) == "gemv" and isinstance(e, dict) and e.get("skipped") for n, e in c["columns"].items()):
                us.setdefault("gemv", None)
            if us:
                key = (c["k"], dn, c["N"], c["K"], c["M"])
                if update:  # only cells an earlier file measured (an M swept by this file alone has no other kernel)
                    if key in t:
                        t[key].update(us)
                elif merge:  # a sweep of some kernels over M the earlier files skipped (shapes_from_timings: bands)
                    t.setdefault(key, {}).update(us)
                else:
                    t[key] = us
    return t


def table_from_files(paths, pdl=False):
    """(dispatch table entry, cell timings) from bench JSON files (earlier first, "+path" overlays)."""
    t = timings(paths, PDL_COLS if pdl else COLS)
    entry = D.entry_from_timings(t, gemv_max_m=8)
    entry["shapes"] = D.shapes_from_timings(t)
    # M below the smallest measured one (e.g. a sweep from M = 4) stays on the GEMV
    lo = {}
    for (k, _dn, N, K, M) in t:
        lo[(k, N, K)] = min(M, lo.get((k, N, K), M))
    entry["shapes"] = {s: (max(v[0], lo[s] - 1),) + tuple(v[1:]) for s, v in entry["shapes"].items()}
    # measured with fp16, used for bf16 too: plain k keys
    gm = entry["gemm_max_m"]
    if isinstance(gm, dict):
        entry["gemm_max_m"] = {(key[0] if isinstance(key, tuple) else key): v for key, v in gm.items()}
    return entry, t


def main():
    args = sys.argv[1:]
    entry, t = table_from_files([a for a in args if a != "--pdl"], "--pdl" in args)
    print(repr(entry))
    D.set_table("_tuned", entry)
    worst = 0.0
    for (k, dn, N, K, M), us in sorted(t.items()):
        kind = D.choose(M, N, K, k, dn, family="_tuned", pdl=False)
        over = us.get(kind, float("inf")) / min(us.values()) - 1
        worst = max(worst, over)
        if over > 0.05:
            print(f"  k={k} N={N} K={K} M={M}: {kind} {us.get(kind)} is {100 * over:.0f} % over the best {us}")
    print(f"worst dispatched cell: {100 * worst:.1f} % over the fastest kernel")


if __name__ == "__main__":
    main()
