"""moe_forward's expert MLP timed as it runs, against the same in fp16: E active experts x M tokens each (k = 4), the
bench's cold-L2 expert rotation (profiling/bench.py MoE table), one CUDA graph of back-to-back steps.

- kbit: moe_forward's expert MLP for the given routing (kbitcupy.moe.expert_mlp), without the routing and the
  weighted combine: at decode sizes the grouped GEMV gate/up with the row gather fused in (right after the routing: it
  waits first) and / or the grouped GEMV down with SwiGLU fused in (moe._decode_fusions), else the gather_rows /
  silu_mul kernels around grouped_matmul calls (chained).
- fp16: torch.bmm gate/up on the contiguous slice of the fp16 bank (no gather: the best case), silu(gate) * up, bmm
  down (4 kernels).
The bench's "TOTAL as moe_forward launches them" line sums per-projection columns each timed in a graph of its own
launches; this times the pair as one chain (the gate/up -> down and down -> next gate/up transitions, the gather).
Env: MS (default 1,4,8,16,32,64), ES (8,10), REPS (15), PATHS (A/B paths of kbit_step: both, split, gu, dn; none).
usage (GPU machine): python3 profiling/moe_pair.py [--out DIR] [--tag TAG]"""
import argparse
import datetime
import functools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

from kbitcupy import bench as B  # noqa: E402
from kbitcupy.moe import MoeRouting, _decode_fusions, expert_mlp  # noqa: E402
from kbitcupy.quantize import dequantize  # noqa: E402


FUSIONS = {"auto": None, "both": (True, True), "split": (False, False), "gu": (True, False), "dn": (False, True)}


def kbit_step(x, bgu, bdn, rt, bufs, path="auto"):
    """moe_forward's expert MLP for routing rt (kbitcupy.moe.expert_mlp: path "auto" its own fusions; the A/B paths
    force them: "both" the row gather into gate/up and SwiGLU into down, "split" neither (gather and silu_mul
    kernels), "gu" the gather only, "dn" SwiGLU only)."""
    outs = dict(zip(("A", "h", "act", "y"), bufs))
    return expert_mlp(x, bgu, bdn, rt, rt.max_tokens, alloc=lambda name, n: outs[name], fusions=FUSIONS[path])


def fp16_step(torch, F, A, Wgu, Wdn, s, E, I, h, y):
    torch.bmm(A, Wgu[s:s + E].transpose(1, 2), out=h)
    a = F.silu(h[:, :, :I]) * h[:, :, I:]
    torch.bmm(a, Wdn[s:s + E].transpose(1, 2), out=y)


PATHS = []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--tag", default="moe-pair")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    env = lambda n, d: [int(v) for v in os.environ.get(n, d).split(",")]  # noqa: E731
    Ms, Es = env("MS", "1,4,8,16,32,64"), env("ES", "8,10")
    global PATHS
    PATHS = [p for p in os.environ.get("PATHS", "").split(",") if p]
    reps, k = int(os.environ.get("REPS", "15")), 4
    H, I, NB = B.MOE_HIDDEN, B.MOE_INTER, B.MOE_BANK
    name, l2, sms = B._device_info()
    Wgu = B.make_fp16_bank(NB, 2 * I, H, 1)
    Wdn = B.make_fp16_bank(NB, H, I, 2)
    bgu, bdn = B.make_kbit_bank(Wgu, k), B.make_kbit_bank(Wdn, k)
    Tgu, Tdn = torch.from_dlpack(Wgu), torch.from_dlpack(Wdn)  # zero-copy views of the same fp16 banks
    per_k = B.kbit_expert_bytes(2 * I, H, k) + B.kbit_expert_bytes(H, I, k)
    per_16 = 2 * (2 * I * H + H * I)
    cells = []
    for E in Es:
        for M in Ms:
            P = E * M
            x = B._rand((P, H), "fp16")
            ar = cp.arange(P, dtype=cp.int32)
            offs = cp.arange(0, (E + 1) * M, M, dtype=cp.int32)
            fus = _decode_fusions(x, bgu, bdn, M, E)
            bufs = (B._empty((P, H), "fp16"), B._empty((P, 2 * I), "fp16"), B._empty((P, I), "fp16"),
                    B._empty((P, H), "fp16"))
            n = B.moe_launches(E * per_k, l2)
            rts = [MoeRouting(ar, ar, cp.asarray(np.asarray(B.moe_launch_experts(r, E, NB), np.int32)), offs, P, 1, NB, M)
                   for r in range(n)]
            us = B.summarize(B.time_graph_cupy([functools.partial(kbit_step, x, bgu, bdn, rt, bufs)
                                                for rt in rts], reps))["us"]
            alt = {}
            for pa in PATHS:  # the A/B paths (env PATHS), each checked bit for bit against the default's launch 0
                alt[pa] = round(B.summarize(B.time_graph_cupy([functools.partial(
                    kbit_step, x, bgu, bdn, rt, bufs, pa) for rt in rts], reps))["us"], 3)
                y0 = kbit_step(x, bgu, bdn, rts[0], bufs).copy()
                alt[pa + "_bit_exact"] = bool(cp.array_equal(kbit_step(x, bgu, bdn, rts[0], bufs, pa)
                                                            .view(cp.uint16), y0.view(cp.uint16)))
            # check launch 0 against the fp16 path on the dequantized experts (float32 oracle)
            y = kbit_step(x, bgu, bdn, rts[0], bufs).astype(cp.float32)
            xs = x.astype(cp.float32).reshape(E, M, H)
            e0 = B.moe_launch_experts(0, E, NB)
            ref = []
            for i, e in enumerate(e0):
                g = xs[i] @ dequantize(bgu.expert(e), np.float32).T
                a = (g[:, :I] / (1 + cp.exp(-g[:, :I]))) * g[:, I:]
                ref.append(a @ dequantize(bdn.expert(e), np.float32).T)
            ref = cp.concatenate(ref)
            err = float(cp.abs(y - ref).max() / cp.abs(ref).max())
            n16 = B.moe_launches(E * per_16, l2)
            At = torch.from_dlpack(x).reshape(E, M, H)
            h16 = torch.empty((E, M, 2 * I), device=At.device, dtype=At.dtype)
            y16 = torch.empty((E, M, H), device=At.device, dtype=At.dtype)
            us16 = B.summarize(B.time_graph_torch([functools.partial(fp16_step, torch, F, At, Tgu, Tdn,
                                                                     B.moe_bmm_start(r, E, NB), E, I, h16, y16)
                                                   for r in range(n16)], reps))["us"]
            path = {(True, True): "gather + SwiGLU fused", (True, False): "gather fused, silu_mul",
                    (False, True): "gather kernel, SwiGLU fused", (False, False): "gather, silu_mul kernels"}[fus]
            cell = dict(E=E, M=M, path=path,
                        kbit_us=round(us, 3), fp16_us=round(us16, 3), vs_fp16=round(us16 / us, 3), max_rel_err=err,
                        check_ok=err < 2e-2, launches=n, launches_fp16=n16, paths=alt)
            cells.append(cell)
            ab = "".join(f"  {pa} {alt[pa]:.2f} ({'=' if alt[pa + '_bit_exact'] else '!='})" for pa in PATHS)
            print(f"E={E:>2} M={M:>2} {cell['path']:>30}: kbit {us:7.2f} us  fp16 {us16:7.2f} us  "
                  f"{us16 / us:5.2f}x  err {err:.1e}{ab}", flush=True)
            del x, bufs, rts, At, h16, y16
    rev = B._git_describe()
    head = [f"# moe_forward's expert MLP as it runs (gate/up, SwiGLU, down), k = 4: {name}, "
            f"{datetime.date.today().isoformat()}", "",
            f"- Command: `MS={','.join(map(str, Ms))} ES={','.join(map(str, Es))} python profiling/moe_pair.py "
            f"--tag {args.tag}`", f"- git: {rev}", f"- launch: {B._versions()['launch']}",
            "- " + " ".join(__doc__.split("\n\n")[0].split()),
            *(" ".join(("- " + b if not b.startswith("- ") else b).split())
              for b in __doc__.split("\n\n")[1].split("Env:")[0].replace("\n- ", "\n\n- ").split("\n\n") if b.strip()),
            ""]
    rows = [[str(c["E"]), str(c["M"]), c["path"], B.fmt_us(c["kbit_us"]), B.fmt_us(c["fp16_us"]),
             B.fmt_x(c["vs_fp16"]), f"{c['max_rel_err']:.1e}" + ("" if c["check_ok"] else " !")] for c in cells]
    md = "\n".join(head) + "\n" + B.md_table(["E", "M", "kbit path", "kbit (us)", "fp16 bmm (us)", "vs fp16", "max rel err"],
                                      rows) + "\n"
    print(md)
    if args.out:
        base = os.path.join(args.out, f"{B.slug(name)}_{datetime.date.today().isoformat()}_{args.tag}")
        with open(base + ".md", "w") as fh:
            fh.write(md)
        with open(base + ".json", "w") as fh:
            json.dump(dict(device=name, git=rev, cells=cells), fh, indent=1)


if __name__ == "__main__":
    main()
