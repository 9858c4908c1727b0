"""Foundation numbers: dequantize bandwidth, quantize time, SQNR per k (GPU machine).

Cold L2 by rotating over R weight copies, R launches captured in one CUDA graph,
median of replays / R (see ../shared/MEASURING.md).  Writes JSON + markdown.
"""
import argparse
import datetime
import json
import os
import sys
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

import kbitcupy as kb  # noqa: E402
from kbitcupy import reference as R  # noqa: E402

SHAPES = {"gateup": (5120, 2048), "down": (2048, 5120), "Q": (4096, 2048), "O": (2048, 4096),
          "KV": (512, 2048), "lin_key": (2048, 2048), "lin_value": (4096, 2048)}


def env_variants(var):
    """$var = "name:-DFLAG=1 -DOTHER;name2:..." -> [(name, (tokens...))] (A/B columns built with extra options)."""
    return [(v.split(":")[0], tuple(v.split(":", 1)[1].split())) for v in os.environ.get(var, "").split(";") if v]


def variant_parts(tokens, source):
    """A variant's tokens -> (plan override ((key, int), ...) or None, compiler options, source text):
    '+key=int' overrides the plan, 'src=FILE' builds FILE (e.g. a revision's source written by
    gemv_ab.py --make-baseline) instead of cuda_src/<source>, every other token is an option."""
    from kbitcupy._compile import read_source

    ov = tuple((t[1:].split("=")[0], int(t.split("=")[1])) for t in tokens if t.startswith("+")) or None
    opts = tuple(t for t in tokens if not t.startswith(("+", "src=")))
    src = [t[4:] for t in tokens if t.startswith("src=")]
    return ov, opts, open(src[0]).read() if src else read_source(source)


def env_plans(var):
    """$var = "name:key=1,other=2;..." -> [(name, ((key, 1), (other, 2)))] (A/B columns with a plan override)."""
    return [(v.split(":")[0], tuple((a.split("=")[0], int(a.split("=")[1])) for a in v.split(":")[1].split(",")))
            for v in os.environ.get(var, "").split(";") if v]


def dump_json(out_dir, name, obj):
    """obj as indented JSON into out_dir/name (the probes' --out; nothing when out_dir is None)."""
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, name), "w") as fh:
            json.dump(obj, fh, indent=1)


def rand_f16(rng, shape, scale=1.0):
    """fp16 CuPy array of standard-normal values times scale (weights: 0.02, activations: 1)."""
    return cp.asarray(rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(cp.float16)


def time_rotated(launches, reps=20):
    """launches: list of R callables (one per weight copy). Returns median us per launch."""
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        for f in launches[:2]:
            f()
        s.synchronize()
        s.begin_capture()
        for f in launches:
            f()
        g = s.end_capture()
        g.launch(s)
        s.synchronize()
        ts = []
        for _ in range(reps):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(s)
            g.launch(s)
            e1.record(s)
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / len(launches))
    return float(np.median(ts))


SOL_SRC = r"""
extern "C" __global__ void sol_read(const uint4* __restrict__ p, long n, unsigned* sink) {
    unsigned acc = 0;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        uint4 v = __ldcs(p + i); acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc;
}"""


def sol_time(nbytes):
    """Speed of light: a streaming 16-byte read of nbytes, rotated (cold L2) and timed
    like the kernels (us per launch)."""
    sol = cp.RawKernel(SOL_SRC, "sol_read")
    sink = cp.zeros(1, cp.uint32)
    n16 = -(-nbytes // 16)
    bufs = [cp.empty(n16 * 16, cp.uint8) for _ in range(copies_for(nbytes))]
    return time_rotated([lambda b=b: sol((132 * 8,), (256,), (b, np.int64(n16), sink)) for b in bufs])


def weight_copies(q):
    """(weight bytes, R copies of q for the cold-L2 rotation: R x bytes >= 4 x L2)."""
    nb = q.packed.nbytes + q.absmax.nbytes
    # KBIT_BENCH_COLD_CB=1: each copy its own codebook too, as each layer of a model has (the
    # default shares one, which then stays in L2)
    own_cb = os.environ.get("KBIT_BENCH_COLD_CB", "0") == "1"
    return nb, [replace(q, packed=q.packed.copy(), absmax=q.absmax.copy(),
                        **({"codebook": q.codebook.copy()} if own_cb else {})) for _ in range(copies_for(nb))]


def quantized_case(W, k):
    """(q, its float64 dequantized weight, weight bytes, rotation copies) of W at k bits."""
    q = kb.quantize(W, k)
    return (q, kb.dequantize(q, np.float32).astype(cp.float64)) + tuple(weight_copies(q))


def dense_cases(rng, names, ks, Ms):
    """The A/B scripts' case loop, yielding (name, N, K, k, M, q, Wd, nbytes, cps, A, ref, out): per shape
    one random fp16 weight (std 0.02), per k its quantized_case, per M fresh activations A (std 1), the
    float64 reference A @ Wd^T and an fp16 output."""
    for name in names:
        N, K = SHAPES[name]
        W = rand_f16(rng, (N, K), 0.02)
        for k in ks:
            q, Wd, nb, cps = quantized_case(W, k)
            for M in Ms:
                A = rand_f16(rng, (M, K))
                yield name, N, K, k, M, q, Wd, nb, cps, A, A.astype(cp.float64) @ Wd.T, cp.empty((M, N), cp.float16)
            del q, Wd, cps  # this k's weight copies go before the next k's are made


def copies_for(nbytes):
    l2 = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["l2CacheSize"]
    return max(2, int(np.ceil(4 * l2 / nbytes)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="profiling/results")
    args = ap.parse_args()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    gpu = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    res = {"gpu": gpu, "date": datetime.date.today().isoformat(), "command": " ".join(sys.argv),
           "dequant": [], "quantize": [], "sqnr": {}}
    rng = np.random.default_rng()
    # device copy bandwidth for reference
    buf = cp.empty(1 << 30, cp.uint8)
    dst = cp.empty_like(buf)
    t = time_rotated([lambda: cp.copyto(dst, buf)] * 2, reps=10)
    res["copy_GBps"] = 2 * buf.nbytes / (t * 1e-6) / 1e9
    buf = dst = None  # free the 2 GiB (the copy lambda is done with them)
    for k in (2, 3, 4, 5):
        for name, (N, K) in SHAPES.items():
            W = rand_f16(rng, (N, K), 0.02)
            q = kb.quantize(W, k)
            qf = kb.quantize(W, k, layout="flat")
            for layout, qq in (("tiled", q), ("flat", qf)):
                nb = qq.packed.nbytes + qq.absmax.nbytes + N * K * 2
                _, cps = weight_copies(qq)
                outs = [cp.empty((N, K), cp.float16) for _ in range(min(len(cps), 4))]
                fns = [lambda c=c, o=outs[i % len(outs)]: kb.dequantize(c, cp.float16, out=o) for i, c in enumerate(cps)]
                us = time_rotated(fns)
                res["dequant"].append(dict(shape=name, k=k, layout=layout, us=us, bytes=nb, GBps=nb / (us * 1e-6) / 1e9))
                del cps, outs
            if k == 4 and name == "gateup":
                for dt in (cp.float16, kb.bfloat16):
                    Wd = W.astype(dt)
                    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                    kb.quantize(Wd, k)
                    ts = []
                    for _ in range(5):
                        e0.record(); kb.quantize(Wd, k); e1.record(); e1.synchronize()
                        ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
                    res["quantize"].append(dict(shape=name, k=k, dtype=np.dtype(dt).name, us_wall_incl_sync=float(np.median(ts))))
        Wg = cp.asarray(rng.standard_normal((4096, 4096), dtype=np.float32))
        res["sqnr"][k] = R.sqnr_db(Wg.get(), kb.dequantize(kb.quantize(Wg, k), np.float32).get())
    lines = ["# Foundation: dequantize bandwidth, quantize time, SQNR", "",
             f"GPU: {gpu}  date: {res['date']}  command: `{res['command']}`", "",
             f"Device copy (read+write, 1 GiB, graph): {res['copy_GBps']:.0f} GB/s", "",
             "Dequantize to fp16 (cold L2, CUDA graph, median/R); GB/s counts packed+absmax read + fp16 written.", "",
             "| shape | k | layout | us | GB/s | % of copy |", "|---|---|---|---|---|---|"]
    for d in res["dequant"]:
        lines.append(f"| {d['shape']} | {d['k']} | {d['layout']} | {d['us']:.2f} | {d['GBps']:.0f} | "
                     f"{100 * d['GBps'] / res['copy_GBps']:.0f}% |")
    lines += ["", "Quantize gate/up 2048x5120 (k=4, GPU, wall incl. the tensor-scale reductions and their sync):", ""]
    for q in res["quantize"]:
        lines.append(f"- {q['dtype']}: {q['us_wall_incl_sync']:.0f} us")
    lines += ["", "SQNR of quantize-dequantize, Gaussian 4096x4096 (E4M4 absmax, default codebook):", ""]
    lines += [f"- k={k}: {v:.2f} dB" for k, v in res["sqnr"].items()]
    md = "\n".join(lines) + "\n"
    print(md)
    os.makedirs(args.out, exist_ok=True)
    slug = gpu.replace(" ", "_").replace("/", "_")
    base = os.path.join(args.out, f"{slug}_{res['date']}_foundation")
    with open(base + ".md", "w") as f:
        f.write(md)
    with open(base + ".json", "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
