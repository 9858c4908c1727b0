"""Which GPU a call runs on (kbitcupy._arrays.stream_ctx): the device holding its inputs, whatever CuPy's current
device is, as torch ops do; inputs on two devices, and the low-level kernels called off the current device, raise.

The one-GPU tests pretend the current device is another one (so the switch and torch's stream on the switched-to
device are exercised on any machine with a GPU); the two-GPU tests put everything on device 1 with device 0 current
and compare with the same calls made on device 1 (CuPy's and torch's arrays, quantize / dequantize / repack, matmul
through its general path and its cached launch plan, grouped_matmul, moe_forward)."""
import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy import _arrays

pytestmark = pytest.mark.gpu


def _cp():
    import cupy

    return cupy


def _two_gpus() -> bool:
    try:
        return _cp().cuda.runtime.getDeviceCount() >= 2
    except Exception:
        return False


two_gpus = pytest.mark.skipif(not _two_gpus(), reason="needs two CUDA GPUs")


@pytest.fixture(autouse=True)
def _no_peer_access():
    """CuPy warns (PerformanceWarning) when it turns peer access on for a kernel that touches another device's
    array: here that is an error -- every kernel must run on the device of its arrays."""
    import warnings

    from cupy._util import PerformanceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        yield


def _weight(rng, N=256, K=512, k=4):
    cp = _cp()
    return kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k)


# ----------------------------------------------------------------------------- one GPU
def test_stream_ctx_switches_when_the_current_device_is_another(rng, monkeypatch):
    """With the current device reported as another one, a CuPy array's context is the switch to its device, and a
    torch tensor's the switch plus torch's current stream there (made after the switch); inside, matmul runs right."""
    cp = _cp()
    q = _weight(rng)
    A = cp.asarray(rng.standard_normal((2, 512), dtype=np.float32)).astype(cp.float16)
    ref = kb.matmul(A, q)
    real = cp.cuda.runtime.getDevice()
    with monkeypatch.context() as m:
        m.setattr(_arrays, "current_device", lambda: real + 1)
        ctx = _arrays.stream_ctx(A)
    assert isinstance(ctx, _arrays._OnDevice) and ctx.dev == real and ctx.torch_x is None
    with ctx:
        assert cp.cuda.runtime.getDevice() == real
        out = cp.full((2, 256), np.nan, cp.float16)
        kb.matmul(A, q, out=out)
    cp.testing.assert_array_equal(out, ref)
    assert _arrays.stream_ctx(A).__class__ is not _arrays._OnDevice  # on the current device: no switch

    torch = pytest.importorskip("torch")
    At = torch.from_dlpack(A)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with monkeypatch.context() as m:
            m.setattr(_arrays, "current_device", lambda: real + 1)
            tctx = _arrays.stream_ctx(At)
        assert isinstance(tctx, _arrays._OnDevice) and tctx.torch_x is At
        with tctx:
            assert cp.cuda.get_current_stream().ptr == s.cuda_stream  # torch's current stream, on the device
            o = torch.full((2, 256), float("nan"), dtype=torch.float16, device=At.device)
            kb.matmul(At, q, out=o)
        s.synchronize()
    cp.testing.assert_array_equal(cp.from_dlpack(o), ref)


def test_low_level_kernels_refuse_another_current_device(rng, monkeypatch):
    """gemv / gemm / ... take the current device's kernel and plan: called with their arrays elsewhere they raise,
    naming both devices (kbitcupy.matmul switches instead)."""
    from kbitcupy import _checks
    from test_checks import FNS

    cp = _cp()
    q = _weight(rng)
    A = cp.asarray(rng.standard_normal((2, 512), dtype=np.float32)).astype(cp.float16)
    out = cp.full((2, 256), np.nan, cp.float16)
    real = cp.cuda.runtime.getDevice()
    monkeypatch.setattr(_checks, "current_device", lambda: real + 1)
    for fn, name, _ in FNS:
        with pytest.raises(ValueError, match=rf"{name}: A, out and the weight are on device {real} but the current "
                                             rf"CuPy device is {real + 1}"):
            fn(A, q, out)
    assert bool(cp.isnan(out).all())  # nothing ran


def test_grouped_gemv_fused_refuses_arrays_off_the_current_device(rng, monkeypatch):
    """grouped_gemv_fused (moe_forward's fused step, also callable alone) checks its own arrays: a CPU bank, or
    arrays on a device that is not the current one, raise before any launch."""
    from kbitcupy.grouped import grouped_gemv_fused, quantize_experts

    cp = _cp()
    bank = quantize_experts(cp.asarray(rng.standard_normal((4, 64, 128), dtype=np.float32) * 0.02), 4)
    A = cp.asarray(rng.standard_normal((3, 128), dtype=np.float32)).astype(cp.float16)
    ids, offs = cp.asarray([2, 0], cp.int32), cp.asarray([0, 1, 3], cp.int32)
    out = cp.full((3, 64), np.nan, cp.float16)
    with pytest.raises(ValueError, match=r"bank is on the CPU"):
        grouped_gemv_fused(A, bank.cpu(), ids, offs, 3, 2, out=out)
    real = cp.cuda.runtime.getDevice()
    with monkeypatch.context() as m:
        m.setattr(_arrays, "current_device", lambda: real + 1)
        with pytest.raises(ValueError, match=rf"arrays are on device {real} but the current CuPy device is {real + 1}"):
            grouped_gemv_fused(A, bank, ids, offs, 3, 2, out=out)
    assert bool(cp.isnan(out).all())  # nothing ran
    grouped_gemv_fused(A, bank, ids, offs, 3, 2, out=out)  # on the current device: runs
    assert not bool(cp.isnan(out).any())


# ----------------------------------------------------------------------------- two GPUs
@two_gpus
def test_cupy_calls_run_on_their_inputs_device(rng):
    """Everything on device 1, device 0 current: quantize / repack / dequantize / matmul (general path, then its
    cached plan) run on device 1, give device-1 results equal to the same calls made there, and leave device 0
    current."""
    cp = _cp()
    N, K = 512, 1024
    W = rng.standard_normal((N, K), dtype=np.float32) * 0.02
    x = rng.standard_normal((3, K), dtype=np.float32)
    with cp.cuda.Device(1):
        W1, A1 = cp.asarray(W), cp.asarray(x).astype(cp.float16)
        q_ref = kb.quantize(W1, 4)
        ref = kb.matmul(A1, q_ref)
        dq_ref = kb.dequantize(q_ref, np.float16)
        flat_ref = kb.quantize(W1, 3, layout="flat")
        rp_ref = kb.repack(flat_ref)
    cp.cuda.Device(1).synchronize()
    with cp.cuda.Device(0):
        q = kb.quantize(W1, 4)
        assert q.packed.device.id == 1 and cp.cuda.runtime.getDevice() == 0
        cp.testing.assert_array_equal(q.packed, q_ref.packed)
        cp.testing.assert_array_equal(q.absmax, q_ref.absmax)
        dq = kb.dequantize(q, np.float16)
        assert dq.device.id == 1
        cp.testing.assert_array_equal(dq, dq_ref)
        rp = kb.repack(kb.quantize(W1, 3, layout="flat"))
        assert rp.packed.device.id == 1
        cp.testing.assert_array_equal(rp.packed, rp_ref.packed)
        from kbitcupy import _launch

        for i in range(4):  # the first calls take the general path, later ones the cached plan (built on device 1,
            C = kb.matmul(A1, q)  # launched with device 1 made current around it)
            assert C.device.id == 1 and cp.cuda.runtime.getDevice() == 0
            cp.testing.assert_array_equal(C, ref)
            if i == 2 and _launch.ENABLED:
                assert _launch.lookup(A1, q) is not None and _launch.lookup(A1, q).dev == 1
        with cp.cuda.Device(1):
            out1 = cp.full(ref.shape, np.nan, cp.float16)
        for _ in range(3):
            with cp.cuda.Device(1):
                out1.fill(np.nan)
            kb.matmul(A1, q, out=out1)
            cp.testing.assert_array_equal(out1, ref)
        out0 = cp.empty(ref.shape, cp.float16)  # on device 0
        with pytest.raises(ValueError, match="out is on device 0, the call runs on device 1"):
            kb.matmul(A1, q, out=out0)
        A0 = cp.asarray(x).astype(cp.float16)
        with pytest.raises(ValueError, match="A is on device 0 but the weight on device 1"):
            kb.matmul(A0, q)
        with pytest.raises(ValueError, match="out is on device 0 but the weight on device 1|out is on device 0, the "
                                             "call runs on device 1"):
            kb.dequantize(q, np.float16, out=cp.empty((N, K), cp.float16))


@two_gpus
def test_torch_calls_run_on_their_tensors_device(rng):
    """CUDA torch tensors on cuda:1 with device 0 current (no torch.cuda.set_device): matmul's result is on cuda:1,
    equal to the call made with device 1 current, and device 0 stays current.  (torch.cuda.stream(s) of a cuda:1
    stream would make device 1 current itself, so the default stream is used here.)"""
    torch = pytest.importorskip("torch")
    cp = _cp()
    N, K = 512, 1024
    W = torch.from_numpy(rng.standard_normal((N, K), dtype=np.float32) * 0.02).to("cuda:1")
    x = torch.from_numpy(rng.standard_normal((2, K), dtype=np.float32)).to("cuda:1", torch.bfloat16)
    with cp.cuda.Device(1):
        q = kb.quantize(W, 4)
        ref = cp.from_dlpack(kb.matmul(x, q).view(torch.int16)).copy()
    torch.cuda.synchronize(1)
    assert torch.cuda.current_device() == 0 and q.packed.device.id == 1
    outs = []
    for _ in range(3):  # general path, then the cached plan
        C = kb.matmul(x, q)
        assert isinstance(C, torch.Tensor) and C.device == torch.device("cuda", 1)
        o = torch.full_like(C, float("nan"))
        kb.matmul(x, q, out=o)
        outs += [C, o]
    torch.cuda.synchronize(1)
    assert torch.cuda.current_device() == 0 and cp.cuda.runtime.getDevice() == 0
    for t in outs:
        cp.testing.assert_array_equal(cp.from_dlpack(t.view(torch.int16)), ref)
    q0 = kb.quantize(W.to("cuda:0"), 4)
    with pytest.raises(ValueError, match="A is on device 1 but the weight on device 0"):
        kb.matmul(x, q0)


@two_gpus
def test_grouped_and_moe_run_on_their_inputs_device(rng):
    """grouped_matmul and moe_forward with the bank, rows, ids and routing on device 1 and device 0 current equal the
    same calls with device 1 current; routing left on device 0 is refused by name."""
    from kbitcupy.grouped import grouped_matmul, quantize_experts
    from kbitcupy.moe import moe_forward, moe_route

    cp = _cp()
    E, H, I, T, topk = 16, 256, 128, 4, 4
    Wgu = rng.standard_normal((E, 2 * I, H), dtype=np.float32) * 0.02
    Wd = rng.standard_normal((E, H, I), dtype=np.float32) * 0.02
    x = rng.standard_normal((T, H), dtype=np.float32).astype(np.float16)
    ids = np.stack([rng.choice(E, topk, replace=False) for _ in range(T)]).astype(np.int32)
    w = rng.random((T, topk), dtype=np.float32)
    with cp.cuda.Device(1):
        bgu, bd = quantize_experts(cp.asarray(Wgu), 4), quantize_experts(cp.asarray(Wd), 4)
        x1, ids1, w1 = cp.asarray(x), cp.asarray(ids), cp.asarray(w)
        ref = moe_forward(x1, bgu, bd, ids1, w1)
        A1 = cp.asarray(rng.standard_normal((10, H), dtype=np.float32)).astype(cp.float16)
        e1, off1 = cp.asarray([3, 7, 1], cp.int32), cp.asarray([0, 4, 6, 10], cp.int32)
        gref = grouped_matmul(A1, bgu, e1, off1, 4)
    cp.cuda.Device(1).synchronize()
    with cp.cuda.Device(0):
        for _ in range(2):
            out = moe_forward(x1, bgu, bd, ids1, w1)
            assert out.device.id == 1 and cp.cuda.runtime.getDevice() == 0
            cp.testing.assert_array_equal(out, ref)
        g = grouped_matmul(A1, bgu, e1, off1, 4)
        assert g.device.id == 1
        cp.testing.assert_array_equal(g, gref)
        g_host_idx = grouped_matmul(A1, bgu, np.array([3, 7, 1], np.int32), np.array([0, 4, 6, 10], np.int32), 4)
        cp.testing.assert_array_equal(g_host_idx, gref)
        r0 = moe_route(cp.asarray(ids), E)  # routing made on device 0
        with pytest.raises(ValueError, match=r"moe_forward: x is on device 1 but \{'routing\.sorted_token': 0"):
            moe_forward(x1, bgu, bd, ids1, w1, routing=r0)
        with pytest.raises(ValueError, match="on different devices|on device 0 but"):
            grouped_matmul(A1, bgu, cp.asarray([3, 7, 1], cp.int32), cp.asarray([0, 4, 6, 10], cp.int32), 4)


@two_gpus
def test_weights_and_layers_go_to_the_named_device(rng):
    """.cuda(device) moves a weight / bank between GPUs (itself where it is already); KbitLinear / KbitMLP / KbitMoE
    built with device='cuda:1' (or from device-1 arrays) live on device 1 whatever the current device, and their
    calls from device 0 equal the same layers built and called with device 1 current."""
    from kbitcupy.grouped import quantize_experts
    from kbitcupy.layers import KbitLinear, KbitMLP, KbitMoE

    cp = _cp()
    H, I, E = 256, 128, 8
    W = rng.standard_normal((I, H), dtype=np.float32) * 0.02
    b = rng.standard_normal(I, dtype=np.float32)
    g, u, d = (rng.standard_normal(s, dtype=np.float32) * 0.02 for s in ((I, H), (I, H), (H, I)))
    router = rng.standard_normal((E, H), dtype=np.float32)
    eg, eu, ed = (rng.standard_normal(s, dtype=np.float32) * 0.02 for s in ((E, I, H), (E, I, H), (E, H, I)))
    x = rng.standard_normal((3, H), dtype=np.float32).astype(np.float16)

    q0 = kb.quantize(cp.asarray(W), 4)  # on device 0
    q1 = q0.cuda("cuda:1")
    assert q1.packed.device.id == 1 and q1.cuda(1) is q1 and q0.cuda() is q0 and q1.default_codebook
    with cp.cuda.Device(1):
        cp.testing.assert_array_equal(q1.packed, cp.asarray(q0.packed))
    bank1 = quantize_experts(cp.asarray(ed), 4).cuda(1)
    assert bank1.packed.device.id == 1 and bank1.tensor_scale.device.id == 1 and bank1.cuda("cuda:1") is bank1

    def build(dev):
        return (KbitLinear.from_float(W, b, device=dev), KbitMLP.from_float(g, u, d, device=dev),
                KbitMoE.from_float(router, eg, eu, ed, top_k=2, device=dev))

    with cp.cuda.Device(1):
        refs = build("cuda")
        x1 = cp.asarray(x)
        want = [layer(x1) for layer in refs]
    cp.cuda.Device(1).synchronize()
    assert cp.cuda.runtime.getDevice() == 0
    layers = build("cuda:1")
    lin, mlp, moe = layers
    assert lin.weight.packed.device.id == 1 and lin.bias.device.id == 1
    assert mlp.down.weight.packed.device.id == 1 and moe.router.device.id == 1
    assert all(bk.packed.device.id == 1 for bk in moe.banks.values())
    for layer, w in zip(layers, want):
        got = layer(x1)
        assert got.device.id == 1 and cp.cuda.runtime.getDevice() == 0
        cp.testing.assert_array_equal(got, w)
    lin_from_dev1 = KbitLinear.from_float(_dev1(W), b)  # device None: where the array is
    assert lin_from_dev1.weight.packed.device.id == 1
    assert KbitLinear(q1, b).bias.device.id == 1  # the constructor puts the bias with the weight
    moved = KbitLinear.from_quantized(q0, b, device="cuda:1")
    assert moved.weight.packed.device.id == 1
    cp.testing.assert_array_equal(moved(x1), lin(x1))


def _dev1(a):
    cp = _cp()
    with cp.cuda.Device(1):
        return cp.asarray(a)


@two_gpus
def test_torch_modules_on_the_second_gpu(rng):
    """kbitcupy.torch_ops: a KbitLinearModule quantized from an nn.Linear on cuda:1, and one made on cuda:0 then
    moved with .to('cuda:1'), run on cuda:1 with device 0 current and equal the module's cuda:0 output."""
    torch = pytest.importorskip("torch")
    from kbitcupy import torch_ops as kt

    H, N = 512, 256
    lin = torch.nn.Linear(H, N, bias=True).half()
    x = torch.from_numpy(rng.standard_normal((2, H), dtype=np.float32)).half()
    m0 = kt.KbitLinearModule.from_linear(lin.to("cuda:0"))
    y0 = m0(x.to("cuda:0"))
    m1 = kt.KbitLinearModule.from_linear(lin.to("cuda:1"))
    assert m1.packed.device == torch.device("cuda", 1) and torch.cuda.current_device() == 0
    moved = m0.to("cuda:1")
    for mod in (m1, moved):
        for _ in range(3):
            y = mod(x.to("cuda:1"))
            assert y.device == torch.device("cuda", 1)
        torch.cuda.synchronize(1)
        assert torch.equal(y.cpu(), y0.cpu())
    assert torch.cuda.current_device() == 0
