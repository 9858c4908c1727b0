"""Layer objects on the CPU (NumPy reference backend): KbitLinear, fuse, KbitMLP, KbitMoE."""
import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy import layers as L
from kbitcupy.layers import KbitLinear, KbitMLP, KbitMoE, fuse, route
from kbitcupy.reference import bfloat16


def _deq(qw):
    return kb.dequantize(qw, np.float32).astype(np.float64)


def _w(rng, *shape, std=0.05, dtype=np.float16):
    return (rng.standard_normal(shape) * std).astype(dtype)


# ----------------------------------------------------------------------------- KbitLinear
@pytest.mark.parametrize("dtype", [np.float16, bfloat16])
@pytest.mark.parametrize("lead", [(), (1,), (3,), (2, 5)])
def test_linear_matches_dequantized_reference(rng, dtype, lead):
    W, b = _w(rng, 96, 128), rng.standard_normal(96).astype(np.float32)
    lin = KbitLinear.from_float(W, b, k=3)
    x = rng.standard_normal(lead + (128,)).astype(dtype)
    y = lin(x)
    assert y.shape == lead + (96,) and y.dtype == dtype and isinstance(y, np.ndarray)
    ref = x.astype(np.float64) @ _deq(lin.weight).T + b
    tol = 2e-2 if dtype == bfloat16 else 3e-3
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_linear_out_and_properties(rng):
    lin = KbitLinear.from_float(_w(rng, 64, 96), k=4)
    assert (lin.in_features, lin.out_features, lin.k, lin.on_gpu) == (96, 64, 4, False)
    assert lin.nbytes == lin.weight.nbytes and "KbitLinear" in repr(lin)
    x = rng.standard_normal((4, 96)).astype(np.float16)
    out = np.empty((4, 64), np.float16)
    assert lin(x, out=out) is out and np.array_equal(out, lin(x))
    with pytest.raises(ValueError, match="last dimension"):
        lin(np.zeros((2, 64), np.float16))
    with pytest.raises(ValueError, match="bias"):
        KbitLinear(lin.weight, np.zeros(3))


@pytest.mark.parametrize("k", [2, 5])
def test_fused_equals_separate(rng, k):
    Ws = [_w(rng, n, 128) for n in (256, 32, 32)]
    bs = [rng.standard_normal(n).astype(np.float32) for n in (256, 32, 32)]
    fused = KbitLinear.from_float(Ws, [bs[0], None, bs[2]], k=k)
    assert fused.splits == (256, 32, 32)
    x = rng.standard_normal((3, 128)).astype(np.float16)
    parts = fused.split(fused(x))
    for W, b, p in zip(Ws, [bs[0], None, bs[2]], parts):
        assert np.array_equal(p, KbitLinear.from_float(W, b, k=k)(x))


def test_fuse_is_bit_exact(rng):
    qs = [kb.quantize(_w(rng, n, 64), 4) for n in (130, 64, 7)]  # N not a multiple of the 128-row tile
    f = fuse(qs)
    assert f.shape == (201, 64) and f.layout == "tiled"
    assert np.array_equal(kb.dequantize(f, np.float32), np.concatenate([kb.dequantize(q, np.float32) for q in qs]))
    # from float in one go gives the same codes
    g = kb.quantize(np.concatenate([_w(np.random.default_rng(1), n, 64) for n in (130, 64, 7)]), 4)
    h = fuse([kb.quantize(w, 4) for w in np.split(np.concatenate(
        [_w(np.random.default_rng(1), n, 64) for n in (130, 64, 7)]), [130, 194])])
    assert g.packed.tobytes() == h.packed.tobytes() and g.absmax.tobytes() == h.absmax.tobytes()


def test_fuse_mixed_scales_and_layouts(rng):
    a = kb.quantize(_w(rng, 64, 64), 3)
    b = kb.quantize((rng.standard_normal((32, 64)) * 20).astype(np.float32), 3)  # tensor_scale 4 or 8
    c = kb.quantize(_w(rng, 40, 64), 3, layout="flat")
    assert b.tensor_scale != a.tensor_scale
    f = fuse([a, b, c])
    ref = np.concatenate([kb.dequantize(q, np.float32) for q in (a, b, c)])
    assert np.array_equal(kb.dequantize(f, np.float32), ref)
    # scales 10^4 apart do not fit one E4M4 range: it warns and rounds only the small blocks
    big = kb.quantize((rng.standard_normal((32, 64)) * 500).astype(np.float32), 3)
    with pytest.warns(UserWarning, match="E4M4"):
        f = fuse([a, big])
    ref = np.concatenate([kb.dequantize(q, np.float32) for q in (a, big)])
    got = kb.dequantize(f, np.float32)
    assert np.array_equal(got[64:], ref[64:]) and np.abs(got[:64] - ref[:64]).max() < 0.1 * np.abs(ref[:64]).max()
    with pytest.raises(ValueError, match="K and k"):
        fuse([a, kb.quantize(_w(rng, 64, 64), 4)])
    with pytest.raises(ValueError, match="codebook"):
        fuse([a, kb.quantize(_w(rng, 64, 64), 3, codebook=kb.create_codebook(3) * 0.5)])


def test_linear_save_load_and_from_quantized(rng, tmp_path):
    Ws = [_w(rng, 64, 96), _w(rng, 32, 96)]
    lin = KbitLinear.from_float(Ws, [None, np.arange(32, dtype=np.float32)], k=5)
    p = str(tmp_path / "lin.safetensors")
    lin.save(p)
    back = KbitLinear.load(p)
    x = rng.standard_normal((2, 96)).astype(np.float16)
    assert back.splits == (64, 32) and np.array_equal(back(x), lin(x))
    # stored separately (as a quantized checkpoint does), fused at load time
    sep = KbitLinear.from_quantized([kb.quantize(W, 5) for W in Ws], [None, np.arange(32, dtype=np.float32)])
    assert np.array_equal(sep(x), lin(x))


# ----------------------------------------------------------------------------- MLP / MoE
def _mlp_ref(x64, gu, down, I):
    h = x64 @ gu.T
    g, u = h[..., :I], h[..., I:]
    return (g / (1 + np.exp(-g)) * u) @ down.T


def test_mlp_fused_and_separate(rng):
    H, I = 128, 64
    g, u, d = _w(rng, I, H), _w(rng, I, H), _w(rng, H, I)
    m1 = KbitMLP.from_float(g, u, d, k=4)
    m2 = KbitMLP.from_float(g, u, d, k=4, fused=False)
    x = rng.standard_normal((3, H)).astype(np.float16)
    assert np.array_equal(m1(x), m2(x))
    ref = _mlp_ref(x.astype(np.float64), _deq(m1.gate_up.weight), _deq(m1.down.weight), I)
    np.testing.assert_allclose(m1(x).astype(np.float64), ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max())
    assert m1.nbytes == m1.gate_up.nbytes + m1.down.nbytes
    # gate / up widths must match down's input (a width-1 up broadcast into a wrong-shaped result)
    with pytest.raises(ValueError, match="gate / up widths"):
        KbitMLP(m2.down, gate=m2.gate, up=KbitLinear.from_float(u[:32], k=4))
    with pytest.raises(ValueError, match="gate / up widths"):
        KbitMLP(KbitLinear.from_float(np.ascontiguousarray(d[:, :32]), k=4), gate_up=m1.gate_up)


def test_route_matches_softmax_topk(rng):
    logits = rng.standard_normal((7, 32)).astype(np.float32)
    w, ids = route(logits, 5)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    for t in range(7):
        top = np.argsort(-p[t])[:5]
        assert set(ids[t]) == set(top)
        np.testing.assert_allclose(np.sort(w[t]), np.sort(p[t, top] / p[t, top].sum()), rtol=1e-6)
    w2, _ = route(logits, 5, norm_topk_prob=False)
    np.testing.assert_allclose(w2.sum(1), np.sort(p, 1)[:, -5:].sum(1), rtol=1e-6)


def _moe_case(rng, E=8, H=128, I=64, top=3):
    g, u, d = _w(rng, E, I, H), _w(rng, E, I, H), _w(rng, E, H, I)
    router = (rng.standard_normal((E, H)) * 0.1).astype(np.float32)
    shared = (_w(rng, I, H), _w(rng, I, H), _w(rng, H, I))
    sg = (rng.standard_normal((1, H)) * 0.1).astype(np.float32)
    return g, u, d, router, shared, sg, top


def _moe_ref(moe, x):
    """HF Qwen3-MoE semantics in float64 on the dequantized weights (per-token loop)."""
    x64 = x.reshape(-1, moe.hidden).astype(np.float64)
    I = moe.experts["down"][0].K
    logits = x64 @ moe.router.T.astype(np.float64)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    out = np.zeros((x64.shape[0], moe.experts["down"][0].N))
    for t in range(x64.shape[0]):
        ids = np.argsort(-p[t])[:moe.top_k]
        for e, we in zip(ids, p[t, ids] / p[t, ids].sum()):
            out[t] += we * _mlp_ref(x64[t], _deq(moe.experts["gate_up"][e]), _deq(moe.experts["down"][e]), I)
    if moe.shared is not None:
        s = _mlp_ref(x64, _deq(moe.shared.gate_up.weight), _deq(moe.shared.down.weight), I)
        out += s / (1 + np.exp(-(x64 @ moe.shared_gate.T.astype(np.float64))))
    return out.reshape(x.shape[:-1] + (out.shape[-1],))


@pytest.fixture(params=["banks", "loop", "no-grouped-module"])
def moe_path(request, monkeypatch):
    """banks: kbitcupy.moe.moe_forward over expert banks; loop: use_grouped=False;
    no-grouped-module: as if kbitcupy.grouped / kbitcupy.moe were not installed."""
    if request.param == "banks" and L._moe_api() is None:
        pytest.skip("kbitcupy.grouped / kbitcupy.moe not available")
    if request.param == "no-grouped-module":
        monkeypatch.setattr(L, "_moe_api", lambda: None)
    return {"use_grouped": False} if request.param == "loop" else {}


@pytest.mark.parametrize("lead", [(1,), (5,), (2, 3)])
def test_moe_matches_reference(rng, lead, moe_path):
    g, u, d, router, shared, sg, top = _moe_case(rng)
    moe = KbitMoE.from_float(router, g, u, d, top, k=4, shared=shared, shared_gate=sg, **moe_path)
    assert moe.grouped_active() == (moe_path == {} and L._moe_api() is not None)
    x = rng.standard_normal(lead + (128,)).astype(np.float16)
    y = moe(x)
    assert y.shape == lead + (128,) and y.dtype == np.float16
    ref = _moe_ref(moe, x)
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 5e-3
    sep = KbitMoE.from_float(router, g, u, d, top, k=4, shared=shared, shared_gate=sg, fused=False, **moe_path)
    assert np.abs(sep(x).astype(np.float32) - y).max() <= 1e-3 * np.abs(y).max()
    # the same quantized experts, whichever way they are stored
    a = KbitMoE.from_float(router, g, u, d, top, k=4, shared=shared, shared_gate=sg, use_grouped=False)
    for n in ("gate_up", "down"):
        for e in (0, 7):
            assert moe.experts[n][e].packed.tobytes() == a.experts[n][e].packed.tobytes()


def test_moe_without_shared_bf16(rng, moe_path):
    g, u, d, router, _, _, top = _moe_case(rng, E=6, top=6)  # top_k == E: every expert
    moe = KbitMoE.from_float(router, list(g), list(u), list(d), top, k=3, **moe_path)
    x = rng.standard_normal((4, 128)).astype(bfloat16)
    y = moe(x)
    assert y.dtype == bfloat16
    ref = _moe_ref(moe, x.astype(np.float32))
    assert np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref) < 2e-2


def test_moe_from_stored_checkpoint(rng, tmp_path, moe_path):
    """Quantized per-expert weights with HF names -> io -> KbitMoE.from_state_dict."""
    from kbitcupy import io as kio

    pytest.importorskip("safetensors")
    g, u, d, router, shared, sg, top = _moe_case(rng, E=4, top=2)
    pre = "model.layers.0.mlp."
    sd = {pre + "gate.weight": router, pre + "shared_expert_gate.weight": sg}
    for e in range(4):
        for n, w in (("gate", g[e]), ("up", u[e]), ("down", d[e])):
            sd[f"{pre}experts.{e}.{n}_proj.weight"] = kb.quantize(w, 4)
    for n, w in zip(("gate", "up", "down"), shared):
        sd[f"{pre}shared_expert.{n}_proj.weight"] = kb.quantize(w, 4)
    p = str(tmp_path / "moe.safetensors")
    kio.save(p, sd)
    moe = KbitMoE.from_state_dict(kio.load(p), pre, top_k=2, **moe_path)
    direct = KbitMoE.from_float(router, g, u, d, 2, k=4, shared=shared, shared_gate=sg, **moe_path)
    x = rng.standard_normal((3, 128)).astype(np.float16)
    assert np.array_equal(moe(x), direct(x))
    with pytest.raises(KeyError):
        KbitMoE.from_state_dict(sd, "model.layers.1.mlp.", top_k=2)


def test_moe_errors(rng):
    g, u, d, router, _, _, _ = _moe_case(rng, E=4)
    with pytest.raises(ValueError, match="top_k"):
        KbitMoE.from_float(router, g, u, d, 5, k=4)
    for top in (2.7, True):  # not truncated to 2 / taken as 1
        with pytest.raises(ValueError, match="top_k must be an int"):
            KbitMoE.from_float(router, g, u, d, top, k=4)
    moe = KbitMoE.from_float(router, g, u, d, 2, k=4)
    with pytest.raises(ValueError, match="hidden"):
        moe(np.zeros((1, 64), np.float16))
    assert moe(np.zeros((0, 128), np.float16)).shape == (0, 128)
    with pytest.raises(ValueError, match="experts"):
        KbitMoE(router, moe.experts["down"][:3], 2, gate_up=moe.experts["gate_up"][:3])


def test_from_float_and_from_quantized_bad_lists(rng):
    """Empty lists, weights that do not share K and non-KbitWeights are named, before any work."""
    W = (rng.standard_normal((64, 128)) * 0.02).astype(np.float16)
    with pytest.raises(ValueError, match="non-empty list"):
        kb.KbitLinear.from_float([], k=4)
    with pytest.raises(ValueError, match=r"share K to be fused, got shapes \[\(64, 128\), \(64, 96\)\]"):
        kb.KbitLinear.from_float([W, W[:, :96]], k=4)
    with pytest.raises(ValueError, match="2-D"):
        kb.KbitLinear.from_float(W[0], k=4)
    with pytest.raises(TypeError, match="KbitWeight or a non-empty list"):
        kb.KbitLinear.from_quantized([])
    with pytest.raises(TypeError, match="KbitWeight or a non-empty list"):
        kb.KbitLinear.from_quantized([kb.quantize(W, 4), W])
