"""GPU: layer objects against the fp16 reference, stored weights straight to the GPU, the demo end to end."""
import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy import cli
from kbitcupy import layers as L
from kbitcupy.layers import KbitLinear, KbitMLP, KbitMoE, fuse

pytestmark = pytest.mark.gpu


@pytest.fixture
def cp():
    import cupy

    return cupy


def _rel(a, b):
    a, b = (np.asarray(v.get() if hasattr(v, "get") else v, dtype=np.float64) for v in (a, b))
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("lead", [(1,), (4,), (16,), (2, 8), (3, 1, 5)])
def test_linear_vs_fp16_reference(cp, rng, dtype, lead):
    dt = np.float16 if dtype == "float16" else kb.bfloat16
    W = cp.asarray(rng.standard_normal((1024, 2048)).astype(np.float32) * 0.02).astype(dt)
    b = cp.asarray(rng.standard_normal(1024).astype(np.float32))
    lin = KbitLinear.from_float(W, b, k=4)
    assert lin.on_gpu
    x = cp.asarray(rng.standard_normal(lead + (2048,)).astype(np.float32)).astype(dt)
    y = lin(x)
    assert isinstance(y, cp.ndarray) and y.shape == lead + (1024,) and y.dtype == dt
    # against the dequantized weight (kernel accuracy) and the float weight (quantization error)
    Wd = kb.dequantize(lin.weight, np.float32)
    x32 = x.astype(cp.float32)
    assert _rel(y, x32 @ Wd.T + b) < (1e-2 if dtype == "bfloat16" else 2e-3)
    assert _rel(y, x32 @ W.astype(cp.float32).T + b) < 0.15


def test_fused_separate_and_fuse_on_gpu(cp, rng):
    Ws = [rng.standard_normal((n, 2048)).astype(np.float32) * 0.02 for n in (4096, 512, 512)]
    qs_cpu = [kb.quantize(W, 3) for W in Ws]
    qs_gpu = [kb.quantize(cp.asarray(W), 3) for W in Ws]
    f_gpu, f_cpu = fuse(qs_gpu), fuse(qs_cpu)
    assert f_gpu.on_gpu and f_gpu.packed.get().tobytes() == f_cpu.packed.tobytes()
    assert f_gpu.absmax.get().tobytes() == f_cpu.absmax.tobytes()
    fused = KbitLinear.from_quantized(qs_gpu)
    x = cp.asarray(rng.standard_normal((4, 2048)).astype(np.float16))
    for part, q in zip(fused.split(fused(x)), qs_gpu):
        assert _rel(part, kb.matmul(x, q)) < 1e-3


def test_mlp_gpu(cp, rng):
    g, u, d = (cp.asarray(rng.standard_normal(s).astype(np.float32) * 0.03).astype(cp.float16)
               for s in ((512, 2048), (512, 2048), (2048, 512)))
    m = KbitMLP.from_float(g, u, d, k=4)
    ms = KbitMLP.from_float(g, u, d, k=4, fused=False)
    x = cp.asarray(rng.standard_normal((3, 2048)).astype(np.float16))
    y = m(x)
    # kernels: the same codes through the NumPy reference path (float32 matmuls rounded to fp16)
    m_cpu = KbitMLP(m.down.cpu(), gate_up=m.gate_up.cpu())
    assert _rel(y, m_cpu(x.get())) < 5e-3
    assert _rel(y, ms(x)) < 2e-3  # fused gate/up == separate gate, up
    # quantization: against the float weights.  Each 4-bit weight here has ~0.087 relative
    # error; silu(gate x) * (up x) and then down compound three of them, ~sqrt(3) * 0.087 =
    # 0.15.  The NumPy backend on this exact test (k=4, these shapes, weights * 0.03), 300
    # seeds: mean 0.153, std 0.006, max 0.173 -- 0.15 was the mean, not a bound (the H200
    # log's seed 1374986961 gives 0.15839 on the CPU, 0.15844 on the GPU).  0.20 = mean + 7 std.
    xf = x.astype(cp.float32)
    h = (xf @ g.astype(cp.float32).T)
    ref = (h / (1 + cp.exp(-h)) * (xf @ u.astype(cp.float32).T)) @ d.astype(cp.float32).T
    assert _rel(y, ref) < 0.20


def _moe_weights(cp, rng, E=16, H=2048, I=256):
    w = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float32) * 0.02).astype(cp.float16)  # noqa: E731
    return dict(router=cp.asarray(rng.standard_normal((E, H)).astype(np.float32) * 0.02), gate=w(E, I, H),
                up=w(E, I, H), down=w(E, H, I), shared=(w(I, H), w(I, H), w(H, I)),
                shared_gate=cp.asarray(rng.standard_normal((1, H)).astype(np.float32) * 0.02))


@pytest.mark.parametrize("M", [1, 4, 16])
def test_moe_gpu_vs_cpu_reference(cp, rng, M):
    Wt = _moe_weights(cp, rng)
    kw = dict(shared=Wt["shared"], shared_gate=Wt["shared_gate"])
    moe = KbitMoE.from_float(Wt["router"], Wt["gate"], Wt["up"], Wt["down"], 8, k=4, **kw)
    assert moe.gpu and moe.grouped_active() == (L._moe_api() is not None)
    # the same codes on the CPU (reference path)
    cpu = lambda ws: [w.cpu() for w in ws]  # noqa: E731
    moe_cpu = KbitMoE(moe.router.get(), cpu(moe.experts["down"]), 8, gate_up=cpu(moe.experts["gate_up"]),
                      shared=KbitMLP(moe.shared.down.cpu(), gate_up=moe.shared.gate_up.cpu()),
                      shared_gate=moe.shared_gate.get(), use_grouped=False)
    x = cp.asarray(rng.standard_normal((M, 2048)).astype(np.float16))
    y = moe(x)
    assert isinstance(y, cp.ndarray) and y.shape == (M, 2048) and y.dtype == cp.float16
    assert _rel(y, moe_cpu(x.get())) < 5e-3
    # against the float weights (same router, so the same routing): only the 4-bit quantization error
    f32 = lambda a: a.astype(cp.float32)  # noqa: E731

    def mlp(g, u, d, a):
        a = f32(a)
        h = a @ f32(g).T
        return (h / (1 + cp.exp(-h)) * (a @ f32(u).T)) @ f32(d).T

    experts = lambda x2, w, ids: L.loop_experts(  # noqa: E731
        x2, w, ids, lambda e, a: mlp(Wt["gate"][e], Wt["up"][e], Wt["down"][e], a))
    shared = lambda a: mlp(*Wt["shared"], a)  # noqa: E731
    ref = L.moe_block(x, moe.router, 8, experts, shared=shared, shared_gate=moe.shared_gate)
    assert _rel(y, ref) < 0.25  # two 4-bit layers per expert: ~15 % error
    loop = KbitMoE(moe.router, moe.experts["down"], 8, gate_up=moe.experts["gate_up"], shared=moe.shared,
                   shared_gate=moe.shared_gate, use_grouped=False)
    assert _rel(loop(x), y) < 2e-3  # grouped kernels (moe.moe_forward) == per-expert loop
    sep = KbitMoE.from_float(Wt["router"], Wt["gate"], Wt["up"], Wt["down"], 8, k=4, fused=False, **kw)
    assert _rel(sep(x), y) < 2e-3


def test_io_load_straight_to_gpu(cp, rng, tmp_path):
    from kbitcupy import io as kio

    pytest.importorskip("safetensors")
    qw = kb.quantize(cp.asarray(rng.standard_normal((640, 2048)).astype(np.float32) * 0.02), 5)
    p = str(tmp_path / "w.safetensors")
    kio.save(p, {"w": qw, "bias": cp.arange(640, dtype=cp.float16)})
    got = kio.load(p, device="cuda")
    assert got["w"].on_gpu and isinstance(got["bias"], cp.ndarray)
    for n in ("packed", "absmax", "codebook"):
        assert getattr(got["w"], n).get().tobytes() == getattr(qw, n).get().tobytes()
    lin = KbitLinear.from_quantized(got["w"], got["bias"])
    x = cp.asarray(rng.standard_normal((2, 2048)).astype(np.float16))
    assert cp.array_equal(lin(x), KbitLinear(qw, cp.arange(640, dtype=cp.float16))(x))


def test_demo_small_end_to_end(capsys):
    rows = cli.run_demo(ks=(2, 4), batches=(1, 4), reps=2, small=True)
    out = capsys.readouterr().out
    assert "GPU:" in out and "step vs fp16" in out
    assert len(rows) == 4
    for r in rows:
        assert r["fp16_dense_ms"] > 0 and r["fused_dense_ms"] > 0 and r["fused_moe_ms"] > 0 and r["speedup"] > 0
    err = {(r["k"], r["batch"]): r["err"] for r in rows}
    assert err[(4, 1)] < 0.15 and err[(2, 1)] > err[(4, 1)]


def test_info_on_gpu():
    text = "\n".join(cli.info_lines())
    assert "GPU: none" not in text and "CUDA runtime" in text


@pytest.mark.slow
def test_compile_command_and_latency_probe():
    res = cli.compile_kernels(families=["gemv"], probe=True, progress=False)
    assert not res["offline"] and res["groups"] > 0
    assert res["cold"]["first_ms"] > res["warm"]["first_ms"] > 0
