"""What a call does when its arrays are on GPU 1 and GPU 0 is current (needs two GPUs).

Each case runs in its own process (a fault poisons the CUDA context), against the package on PYTHONPATH, and prints
one line: the case, then 'ok' (result on device 1 and equal to the same call made with device 1 current), 'WRONG'
(what differed), or the exception.  Run against this tree and an older one to see what the device guard changed:

    python3 profiling/device_probe.py            # every case
    python3 profiling/device_probe.py CASE       # one case, in this process
"""
import subprocess
import sys

import numpy as np

CASES = ["matmul_cupy", "matmul_cupy_out", "matmul_torch", "quantize", "dequantize", "repack", "gemv_lowlevel",
         "grouped", "linear_cuda1"]


def _run(case):
    import cupy as cp

    import kbitcupy as kb

    rng = np.random.default_rng(0)
    N, K = 512, 1024
    W = rng.standard_normal((N, K), dtype=np.float32) * 0.02
    x = rng.standard_normal((2, K), dtype=np.float32)
    with cp.cuda.Device(1):
        W1, A1 = cp.asarray(W), cp.asarray(x).astype(cp.float16)
        q1 = kb.quantize(W1, 4)
        ref = {"matmul": kb.matmul(A1, q1), "dq": kb.dequantize(q1, np.float16),
               "rp": kb.repack(kb.quantize(W1, 3, layout="flat")).packed}
        out1 = cp.zeros((2, N), cp.float16)
    cp.cuda.Device(1).synchronize()
    assert cp.cuda.runtime.getDevice() == 0
    if case == "matmul_cupy":
        got = kb.matmul(A1, q1)
        want = ref["matmul"]
    elif case == "matmul_cupy_out":
        kb.matmul(A1, q1, out=out1)
        got, want = out1, ref["matmul"]
    elif case == "matmul_torch":
        import torch

        got = cp.from_dlpack(kb.matmul(torch.from_dlpack(A1), q1))
        want = ref["matmul"]
    elif case == "quantize":
        got, want = kb.quantize(W1, 4).packed, q1.packed
    elif case == "dequantize":
        got, want = kb.dequantize(q1, np.float16), ref["dq"]
    elif case == "repack":
        got, want = kb.repack(kb.quantize(W1, 3, layout="flat")).packed, ref["rp"]
    elif case == "gemv_lowlevel":
        from kbitcupy.gemv import gemv

        gemv(A1, q1, out1)
        got, want = out1, ref["matmul"]
    elif case == "grouped":
        from kbitcupy.grouped import grouped_matmul, quantize_experts

        with cp.cuda.Device(1):
            bank = quantize_experts(cp.asarray(rng.standard_normal((4, 256, K), dtype=np.float32) * 0.02), 4)
            ids, offs = cp.asarray([2, 0], cp.int32), cp.asarray([0, 1, 2], cp.int32)
            want = grouped_matmul(A1, bank, ids, offs, 1)
        got = grouped_matmul(A1, bank, ids, offs, 1)
    elif case == "linear_cuda1":
        from kbitcupy.layers import KbitLinear

        lin = KbitLinear.from_float(W, device="cuda:1")
        got = lin.weight.packed
        want = q1.packed
    else:
        raise SystemExit(f"unknown case {case}")
    cp.cuda.Device(got.device.id).synchronize()
    dev = got.device.id
    with cp.cuda.Device(1):
        g1 = cp.asarray(got)
        same = bool((g1.view(cp.uint8) == want.view(cp.uint8)).all()) if g1.shape == want.shape else False
    print(f"{case}: {'ok' if dev == 1 and same else f'WRONG (result on device {dev}, equal {same})'}")


def main():
    if len(sys.argv) > 1:
        try:
            _run(sys.argv[1])
        except Exception as e:  # noqa: BLE001 - the probe reports what the call raised
            print(f"{sys.argv[1]}: raised {type(e).__name__}: {str(e)[:160]}")
        return
    for case in CASES:
        r = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True, timeout=300)
        line = (r.stdout.strip().splitlines() or [""])[-1]
        if r.returncode or not line.startswith(case):
            err = (r.stderr.strip().splitlines() or ["?"])[-1]
            line = f"{case}: process exit {r.returncode}: {err[:160]}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
