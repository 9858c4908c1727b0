"""compute-sanitizer driver for moe_forward's decode paths: pair_route's one-row slots (T = 1 / 3 / 4 at top-10,
experts repeated across tokens; fp16 / bf16; PDL safe and full), the sorted routing beside them, ids outside the bank
(slots skipped, the flag raised: no access outside any array), int64 ids that would wrap, a hand-made routing with rows
outside x / C_sorted (zeros, the ERR_ROWS flag), and a CUDA-graph replay with
arrays allocated after the capture.  Each output against moe_forward_reference, one line per check.

usage (GPU machine): compute-sanitizer --tool memcheck python3 profiling/sanitize_moe.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sanitize_common import check, finish, rng  # noqa: E402  (puts the package on the path)
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy.grouped import ERR_EXPERT_ID, quantize_experts, read_errors  # noqa: E402
from kbitcupy.moe import moe_forward, moe_forward_reference, moe_route  # noqa: E402
from kbitcupy.reference import bfloat16  # noqa: E402

E, H, I = 16, 256, 128
bgu = quantize_experts(cp.asarray(rng.standard_normal((E, 2 * I, H), dtype=np.float32) * 0.05), 4)
bdn = quantize_experts(cp.asarray(rng.standard_normal((E, H, I), dtype=np.float32) * 0.05), 4)


def host(a):
    return (a.view(cp.uint16).get().view(bfloat16) if a.dtype == bfloat16 else a.get()).astype(np.float64)


for T in (1, 3, 4):
    ids = np.array([rng.choice(E, 10, replace=False) for _ in range(T)], np.int32)  # 16 experts: repeats across tokens
    w = rng.random((T, 10)).astype(np.float32)
    for dt in (np.float16, bfloat16):
        xh = rng.standard_normal((T, H)).astype(dt)
        x = cp.asarray(xh.view(np.uint16)).view(dt) if dt == bfloat16 else cp.asarray(xh)
        ref = cp.asarray(moe_forward_reference(xh, bgu, bdn, ids, w, round=True))
        name = f"moe_forward T={T} {np.dtype(dt).name}"
        for mode in ("safe", True):
            with kb.pdl(mode):
                check(f"{name} pair_route, PDL {mode}", cp.asarray(host(moe_forward(x, bgu, bdn, cp.asarray(ids),
                                                                                     cp.asarray(w)))), ref, tol=2e-2)
        check(f"{name} sorted", cp.asarray(host(moe_forward(x, bgu, bdn, cp.asarray(ids), cp.asarray(w),
                                                            routing=moe_route(cp.asarray(ids), E)))), ref, tol=2e-2)
x = cp.asarray(rng.standard_normal((3, H), dtype=np.float32)).astype(cp.float16)
w = cp.asarray(rng.random((3, 10)).astype(np.float32))
bad = np.array([rng.choice(E, 10, replace=False) for _ in range(3)], np.int32)
bad[0, 2], bad[2, 9] = E, -1
for ids in (cp.asarray(bad), cp.asarray(bad).astype(cp.int64) + cp.asarray(np.int64(2**32) * (np.arange(30) == 4)
                                                                               ).reshape(3, 10)):
    read_errors(reset=True)
    moe_forward(x, bgu, bdn, ids, w)
    cp.cuda.Device().synchronize()
    print(f"moe_forward ids outside the bank ({ids.dtype}): flag {'raised' if read_errors(reset=True) & ERR_EXPERT_ID else 'MISSING'}")
# a hand-made routing whose sorted_token / pos point outside x / C_sorted (huge both ways): the gather kernel and
# the combine read nothing there (zeros, ERR_ROWS), under moe_forward and alone
from dataclasses import replace  # noqa: E402

from kbitcupy.grouped import ERR_ROWS  # noqa: E402
from kbitcupy.moe import MoeRouting, gather_rows, moe_combine  # noqa: E402

r = moe_route(cp.asarray(ids_h := np.array([rng.choice(E, 10, replace=False) for _ in range(3)], np.int32)), E)
st, pos = r.sorted_token.copy(), r.pos.copy()
st[[1, 17]] = cp.asarray([2**31 - 1, -2**31], dtype=cp.int32)
pos[[0, 29]] = cp.asarray([30, -2**31], dtype=cp.int32)
hand = MoeRouting(st, pos, r.expert_ids, r.offsets, 3, 10, E, r.max_tokens)
for what, call in (("moe_forward", lambda: moe_forward(x, bgu, bdn, cp.asarray(ids_h), w, routing=hand)),
                   ("gather_rows", lambda: gather_rows(x, hand)),
                   ("moe_combine", lambda: moe_combine(cp.ones((30, H), cp.float16), hand, w))):
    read_errors(reset=True)
    o = call()
    cp.cuda.Device().synchronize()
    print(f"{what} hand-made routing rows outside: flag {'raised' if read_errors(reset=True) & ERR_ROWS else 'MISSING'}"
          f", output {'finite' if bool(cp.isfinite(o).all()) else 'NOT FINITE'}")
# a graph replay with arrays allocated after the capture (the capture's temporaries kept out of the pool)
ids_h = np.array([rng.choice(E, 10, replace=False) for _ in range(3)], np.int32)
ids, w = cp.asarray(ids_h), cp.asarray(rng.random((3, 10)).astype(np.float32))
s = cp.cuda.Stream(non_blocking=True)
with s:
    moe_forward(x, bgu, bdn, ids, w)
    s.synchronize()
    s.begin_capture()
    out = moe_forward(x, bgu, bdn, ids, w)
    g = s.end_capture()
    ids_h2 = np.array([rng.choice(E, 10, replace=False) for _ in range(3)], np.int32)
    ids2, w2 = cp.asarray(ids_h2), cp.asarray(rng.random((3, 10)).astype(np.float32))
    ids[...] = ids2
    w[...] = w2
    g.launch(stream=s)
    s.synchronize()
    ref = cp.asarray(moe_forward_reference(x.get(), bgu, bdn, ids2.get(), w2.get(), round=True))
    check("moe_forward graph replay, arrays allocated after the capture", out, ref, tol=2e-2)
    check("moe_forward eager after the replay", moe_forward(x, bgu, bdn, ids2, w2), ref, tol=2e-2)
finish()
