"""torch interop: the kbitcupy::matmul custom op, KbitLinearModule, torch.compile, streams, CUDA graphs."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kbitcupy as kb  # noqa: E402
from kbitcupy import torch_ops as kt  # noqa: E402
from kbitcupy.layers import KbitLinear, KbitMoE  # noqa: E402

DTYPES = [torch.float16, torch.bfloat16]


class TinyBlock(torch.nn.Module):
    """A toy decoder MLP block: norm, fused-able projections, SiLU, residual."""

    def __init__(self, H=128, I=256):
        super().__init__()
        self.norm = torch.nn.LayerNorm(H)
        self.gate = torch.nn.Linear(H, I, bias=False)
        self.up = torch.nn.Linear(H, I, bias=True)
        self.down = torch.nn.Linear(I, H, bias=False)
        self.lm_head = torch.nn.Linear(H, 64, bias=False)

    def forward(self, x):
        h = self.norm(x)
        h = torch.nn.functional.silu(self.gate(h)) * self.up(h)
        return self.lm_head(x + self.down(h))


def _model(dtype, device="cpu", seed=0):
    torch.manual_seed(seed)
    m = TinyBlock().to(device=device, dtype=dtype).eval()
    for p in m.parameters():
        p.data.mul_(0.5)
    return m


# ----------------------------------------------------------------------------- CPU
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", [(1,), (3,), (2, 4), (0,)])
def test_op_matches_matmul_cpu(rng, dtype, lead):
    W = (rng.standard_normal((96, 64)) * 0.05).astype(np.float32)
    lin = KbitLinear.from_float(W, k=4)
    x = torch.randn(*lead, 64).to(dtype)
    y = kt.kbit_matmul(x, *lin.torch_tensors()[:6])
    assert y.shape == (*lead, 96) and y.dtype == dtype
    ref = kb.matmul(x, lin.weight)  # the CPU reference, via DLPack-free NumPy views
    assert torch.equal(y, ref)


def test_opcheck(rng):
    lin = KbitLinear.from_float((rng.standard_normal((64, 96)) * 0.05).astype(np.float32), k=3)
    args = (torch.randn(2, 96, dtype=torch.float16), *lin.torch_tensors()[:6])
    torch.library.opcheck(torch.ops.kbitcupy.matmul.default, args)


@pytest.mark.parametrize("dtype", DTYPES)
def test_module_and_replace_linear_cpu(dtype):
    m = _model(dtype)
    x = torch.randn(3, 5, 128, dtype=dtype)
    with torch.no_grad():
        ref = m(x).float()
        kt.replace_linear(m, k=5)
        assert isinstance(m.gate, kt.KbitLinearModule) and isinstance(m.lm_head, torch.nn.Linear)  # lm_head skipped
        y = m(x)
    assert y.dtype == dtype and y.shape == ref.shape
    assert ((y.float() - ref).norm() / ref.norm()) < 0.05  # 5-bit quantization error only
    assert {"gate.packed", "gate.absmax", "gate.codebook", "up.bias"} <= set(m.state_dict())
    assert "k=5" in repr(m.gate)


def test_half_leaves_codebook_alone(rng):
    mod = kt.KbitLinearModule.from_float((rng.standard_normal((32, 64)) * 0.05).astype(np.float32), k=4)
    x = torch.randn(2, 64, dtype=torch.float16)
    y = mod(x)
    mod.half()  # converts floating buffers; the codebook is stored as int32 bits
    assert mod.codebook.dtype == torch.int32 and torch.equal(mod(x), y)


@pytest.mark.parametrize("direct", [False, True])
def test_compile_fullgraph_cpu(direct):
    """No graph break: the model calls KbitLinearModule (or a KbitLinear object directly)."""
    m = _model(torch.float16)
    if direct:
        lin = KbitLinear.from_float(m.gate.weight.detach(), k=4)

        class Direct(torch.nn.Module):
            def forward(self, x):
                return lin(x) * 2

        m = Direct()
    else:
        kt.replace_linear(m, k=4)
    x = torch.randn(4, 128, dtype=torch.float16)
    with torch.no_grad():
        eager = m(x)
        torch._dynamo.reset()
        compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
        assert torch.equal(compiled(x), eager)
        x7 = torch.randn(2, 7, 128, dtype=torch.float16)  # another shape: recompiles, still one graph
        assert torch.equal(compiled(x7), m(x7))


def test_moe_with_torch_tensors_cpu(rng):
    E, H, I = 6, 128, 64
    w = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float16)  # noqa: E731
    moe = KbitMoE.from_float((rng.standard_normal((E, H)) * 0.1).astype(np.float32), w(E, I, H), w(E, I, H),
                             w(E, H, I), 2, k=4)
    x = rng.standard_normal((3, H)).astype(np.float16)
    y = moe(torch.from_numpy(x))
    assert isinstance(y, torch.Tensor) and torch.equal(y, torch.from_numpy(moe(x)))


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_op_cuda_zero_copy(dtype):
    from kbitcupy._arrays import cupy_to_torch, torch_to_cupy

    torch.manual_seed(0)
    W = torch.randn(512, 2048, device="cuda", dtype=dtype) * 0.02
    mod = kt.KbitLinearModule.from_float(W, k=4)
    assert mod.packed.is_cuda and mod.packed.data_ptr() == mod.layer.weight.packed.data.ptr  # a view, no copy
    for M in (1, 5, 32):
        x = torch.randn(M, 2048, device="cuda", dtype=dtype)
        y = mod(x)
        ref = kb.matmul(torch_to_cupy(x), mod.layer.weight)  # the same kernel on the CuPy view
        assert torch.equal(y, cupy_to_torch(ref))
        full = (x.float() @ W.float().T)
        assert ((y.float() - full).norm() / full.norm()) < 0.15


@pytest.mark.gpu
def test_runs_on_torch_current_stream(monkeypatch):
    import importlib

    import cupy as cp

    # the module, not the function: `from kbitcupy import matmul` gives kbitcupy.matmul the
    # function (re-exported in kbitcupy/__init__.py), which shadows the submodule attribute
    mm = importlib.import_module("kbitcupy.matmul")

    seen = []
    orig = mm._dispatch_gpu

    def spy(A, qw, out):
        seen.append(cp.cuda.get_current_stream().ptr)
        return orig(A, qw, out)

    monkeypatch.setattr(mm, "_dispatch_gpu", spy)
    mod = kt.KbitLinearModule.from_float(torch.randn(256, 512, device="cuda", dtype=torch.float16) * 0.02, k=3)
    s = torch.cuda.Stream()
    x = torch.randn(2, 512, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(10_000_000)  # keep s busy: a kernel on another stream would run first
        x2 = x * 2
        y = mod(x2)
        z = KbitLinear.from_quantized(mod.layer.weight)(x2)  # the plain KbitLinear path too
    s.synchronize()
    assert seen == [s.cuda_stream, s.cuda_stream]
    assert torch.equal(y, mod(x * 2)) and torch.equal(y, z)


@pytest.mark.gpu
def test_op_reuses_module_weight_fast_path():
    """The op finds the module's own KbitWeight (no wrapper per call), so repeated calls
    go through matmul's cached launch plan, on torch's current stream."""
    from kbitcupy import _launch as L

    mod = kt.KbitLinearModule.from_float(torch.randn(512, 2048, device="cuda", dtype=torch.float16) * 0.02, k=4)
    assert kt._known_weight(mod.packed, mod.absmax, mod.codebook.view(torch.float32), 4, 512, 2048,
                            mod.tensor_scale) is mod.layer.weight
    x = torch.randn(1, 2048, device="cuda", dtype=torch.float16)
    ys = [mod(x) for _ in range(4)]
    assert L.lookup(x, mod.layer.weight) is not None  # the plan of this weight object
    assert all(torch.equal(y, ys[0]) for y in ys)
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(10_000_000)  # keep s busy: a launch on another stream would run first
        x2 = x * 2
        y2 = mod(x2)
    s.synchronize()
    assert torch.equal(y2, mod(x * 2))
    # a weight the op does not know (other tensors) still works, through the general path
    other = kt.kbit_matmul(x, mod.packed.clone(), mod.absmax.clone(), mod.codebook.view(torch.float32).clone(), 4,
                           512, mod.tensor_scale)
    assert torch.equal(other, ys[0])


@pytest.mark.gpu
def test_cuda_graph_capture():
    m = _model(torch.float16, "cuda")
    kt.replace_linear(m, k=4)
    static_x = torch.randn(1, 128, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        for _ in range(3):  # warm-up: compiles kernels, sets smem attributes
            m(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        static_y = m(static_x)
    for _ in range(3):
        x = torch.randn(1, 128, device="cuda", dtype=torch.float16)
        static_x.copy_(x)
        g.replay()
        with torch.no_grad():
            assert torch.equal(static_y, m(x))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_compile_fullgraph_cuda(mode):
    m = _model(torch.float16, "cuda")
    kt.replace_linear(m, k=4)
    torch._dynamo.reset()
    c = torch.compile(m, fullgraph=True, mode=mode)
    for M in (1, 4):
        x = torch.randn(M, 128, device="cuda", dtype=torch.float16)
        with torch.no_grad():
            ref = m(x)
            for _ in range(3):
                y = c(x)
        torch.testing.assert_close(y, ref, rtol=1e-2, atol=1e-2)  # inductor fuses the elementwise parts


@pytest.mark.gpu
def test_moe_with_torch_cuda_tensors():
    import cupy as cp

    E, H, I = 16, 256, 128
    torch.manual_seed(0)
    w = lambda *s: torch.randn(*s, device="cuda", dtype=torch.float16) * 0.05  # noqa: E731
    moe = KbitMoE.from_float(torch.randn(E, H, device="cuda") * 0.1, w(E, I, H), w(E, I, H), w(E, H, I), 4, k=4,
                             shared=(w(I, H), w(I, H), w(H, I)), shared_gate=torch.randn(1, H, device="cuda"))
    x = torch.randn(3, H, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = moe(x)
    s.synchronize()
    assert isinstance(y, torch.Tensor) and y.is_cuda
    assert cp.array_equal(cp.from_dlpack(y), moe(cp.from_dlpack(x)))
