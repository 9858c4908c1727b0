"""Layer objects: KbitLinear, KbitMLP (SwiGLU) and KbitMoE (Qwen3-MoE routing).

Each holds tiled k-bit weights on one device (NumPy = reference/CPU, CuPy = GPU) and is
called per token: ``layer(x)`` for any leading batch shape, fp16 or bf16, on NumPy,
CuPy or torch (CUDA torch tensors are viewed zero-copy through DLPack and run on
torch's current stream; KbitLinear goes through the ``kbitcupy::matmul`` torch custom
op so torch.compile(fullgraph=True) sees no graph break).

Weights that share an input are fused along N (Q/K/V, gate/up): one launch instead of
three or two.  ``fuse`` does it on already-quantized weights, bit-exactly.

KbitMoE keeps its experts in ``kbitcupy.grouped`` expert banks and runs
``kbitcupy.moe.moe_forward`` (grouped kernels) when those modules are importable;
otherwise it loops over the active experts with ``kbitcupy.matmul``.
"""
from __future__ import annotations

import contextlib
import json
import sys
import warnings
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from . import reference as R
from ._arrays import cuda_index, from_backend, gpu_index_of, is_cupy, is_int, on_gpu_device, stream_ctx, to_backend
from ._capture import gpu_call
from .matmul import matmul
from .quantize import quantize, repack
from .weight import KbitWeight

_F32 = np.float32


def _xp(a):
    if is_cupy(a):
        import cupy

        return cupy
    return np


def _is_torch(x) -> bool:
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def _target(device, src) -> tuple:
    """(on the GPU?, the context to build in) for a layer made on ``device`` from ``src`` (an array, a KbitWeight or
    an expert bank): None -> where src lives (its own GPU, or the CPU); 'cpu'; 'cuda' (CuPy's current GPU); 'cuda:N', N
    or a torch.device -> that GPU.  Inside the context arrays land on that GPU (cupy.asarray copies there)."""
    dev = gpu_index_of(getattr(src, "packed", src)) if device is None else cuda_index(device)
    return dev is not None, on_gpu_device(dev)


def _array(a, gpu: bool, dtype=None):
    """Any array (NumPy, CuPy, torch) as NumPy (gpu=False) or CuPy (gpu=True)."""
    if a is None:
        return None
    a, _ = to_backend(a, "array") if not isinstance(a, (list, tuple)) else (np.asarray(a), "numpy")
    if gpu:
        import cupy as cp

        a = cp.asarray(a)
    elif is_cupy(a):
        a = a.get()
    return a if dtype is None else a.astype(dtype)


def _move(qw: KbitWeight, gpu: bool) -> KbitWeight:
    return qw.cuda() if gpu else qw.cpu()


# ----------------------------------------------------------------------------- fusing
def fuse(weights: Sequence[KbitWeight]) -> KbitWeight:
    """Stack quantized weights that share an input (same K, k, codebook) along N.

    Works on the flat layout (tiles are N-interleaved, flat rows are not), then repacks.
    Bit-exact when the tensor scales agree (the usual case, 1.0); otherwise the block
    scales are re-encoded against one common power-of-two tensor scale, exact unless
    they span more than E4M4's range (then it warns).
    """
    ws = [w.validate() for w in weights]
    if not ws:
        raise ValueError("fuse needs at least one weight")
    if len(ws) == 1:
        return ws[0] if ws[0].layout == "tiled" else repack(ws[0])
    w0 = ws[0]
    for w in ws[1:]:
        if w.K != w0.K or w.k != w0.k:
            raise ValueError(f"cannot fuse weights of shapes/bits {[(w.shape, w.k) for w in ws]}: K and k must agree")
        if w.on_gpu != w0.on_gpu:
            raise ValueError("cannot fuse weights on different devices")
        if not np.array_equal(np.asarray(_array(w.codebook, False)), np.asarray(_array(w0.codebook, False))):
            raise ValueError("cannot fuse weights with different codebooks")
    xp = _xp(w0.packed)
    packed, absmax = [], []
    # keep the E4M4 codes when every weight has them under one tensor scale, else real scales
    reencode = len({float(w.tensor_scale) for w in ws}) != 1 or any(w.absmax.dtype != np.uint8 for w in ws)
    for w in ws:
        if w.layout == "tiled":  # tiled -> flat: gather every block from its tile slot
            slot = xp.asarray(R._tile_maps(w.N, w.K, w.k))
            p, a = w.packed.reshape(-1, w.k)[slot].reshape(-1), w.absmax[slot]
        else:
            p, a = w.packed, w.absmax
        if reencode:  # real scales, re-encoded by repack
            a = xp.asarray(R.block_scales(_array(a, False), w.tensor_scale))
        packed.append(p)
        absmax.append(a)
    N = sum(w.N for w in ws)
    ts = 1.0 if reencode else w0.tensor_scale
    flat = KbitWeight(xp.concatenate(packed), xp.concatenate(absmax), w0.codebook, w0.k, (N, w0.K), "flat", ts,
                      w0.dtype)
    if flat.absmax.dtype != np.uint8:  # re-encoded: E4M4 may not span the scales of both weights
        sc = _array(flat.absmax, False)
        t = R.choose_tensor_scale(sc)
        if not np.array_equal(R.e4m4_decode(R.e4m4_encode(sc / np.float32(t))) * np.float32(t), sc):
            warnings.warn("fuse: the block scales of these weights span more than E4M4's range; the fused "
                          "weight rounds the smallest ones (keep the weights separate to avoid it)")
    return repack(flat)


# ----------------------------------------------------------------------------- elementwise
def _silu_mul(g, u):
    """silu(g) * u in float32, rounded to g's dtype (torch: its own fused ops)."""
    if _is_torch(g):
        import torch.nn.functional as F

        return (F.silu(g.float()) * u.float()).to(g.dtype)
    xp = _xp(g)
    g32 = g.astype(_F32)
    return xp.ascontiguousarray((g32 / (1 + xp.exp(-g32)) * u.astype(_F32)).astype(g.dtype))


def _add_bias(y, b32):
    """y + bias computed in float32, rounded to y's dtype (same on every backend)."""
    if b32 is None:
        return y
    y[...] = (y.astype(_F32) + b32).astype(y.dtype)
    return y


# ----------------------------------------------------------------------------- KbitLinear
class KbitLinear:
    """y = x @ W^T (+ bias) with W k-bit quantized (tiled), for any leading batch shape.

    Build it from float weights (``from_float``) or stored ones (``from_quantized``,
    ``load``).  A list of weights is fused along N; ``split(y)`` returns the parts.
    """

    def __init__(self, weight: KbitWeight, bias=None, splits: Optional[Sequence[int]] = None):
        weight.validate()
        self.weight = weight if weight.layout == "tiled" else repack(weight)
        self.splits = tuple(int(s) for s in splits) if splits else (weight.N,)
        if sum(self.splits) != weight.N:
            raise ValueError(f"splits {self.splits} must add up to N = {weight.N}")
        with on_gpu_device(gpu_index_of(weight.packed)):  # the bias on the weight's GPU
            self.bias = _array(bias, weight.on_gpu, _F32)
        if self.bias is not None and self.bias.shape != (weight.N,):
            raise ValueError(f"bias must have shape ({weight.N},), got {tuple(self.bias.shape)}")
        self._torch: Optional[tuple] = None
        if sys.modules.get("torch") is not None:  # views made now, so a torch.compile trace of __call__ only reads them
            try:
                self.torch_tensors()
            except Exception:  # e.g. a CPU-only torch next to GPU weights: made (and raising) on first torch use
                self._torch = None

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_float(cls, weight, bias=None, k: int = 4, codebook=None, device=None) -> "KbitLinear":
        """Quantize W[N, K] (or a list of weights sharing K, fused) on ``device``
        (default: where the weight lives; NumPy -> reference, CuPy/CUDA torch -> GPU)."""
        ws = list(weight) if isinstance(weight, (list, tuple)) else [weight]
        if not ws:
            raise ValueError("weight must be an array [N, K] or a non-empty list of them")
        arrs = [to_backend(w, "weight")[0] for w in ws]
        if any(a.ndim != 2 for a in arrs) or len({a.shape[1] for a in arrs}) != 1:
            raise ValueError(f"weights must be 2-D [N, K] and share K to be fused, got shapes "
                             f"{[tuple(a.shape) for a in arrs]}")
        gpu, on = _target(device, arrs[0])
        with on:
            arrs = [_array(a, gpu) for a in arrs]
            xp = _xp(arrs[0])
            W = arrs[0] if len(arrs) == 1 else xp.concatenate([xp.asarray(a, dtype=arrs[0].dtype) for a in arrs])
            qw = quantize(xp.ascontiguousarray(W), k, codebook)
            return cls(qw, _fuse_bias(bias, [a.shape[0] for a in arrs], gpu), [a.shape[0] for a in arrs])

    @classmethod
    def from_quantized(cls, weight, bias=None, device=None) -> "KbitLinear":
        """From stored KbitWeight(s) (e.g. ``kbitcupy.io.load``); a list is fused."""
        ws = list(weight) if isinstance(weight, (list, tuple)) else [weight]
        if not ws or not all(isinstance(w, KbitWeight) for w in ws):
            raise TypeError("weight must be a KbitWeight or a non-empty list of them")
        gpu, on = _target(device, ws[0])
        with on:
            ws = [_move(w, gpu) for w in ws]
            return cls(fuse(ws), _fuse_bias(bias, [w.N for w in ws], gpu), [w.N for w in ws])

    @classmethod
    def load(cls, path: str, prefix: str = "", device=None) -> "KbitLinear":
        """Load a layer written by ``save`` (or any file with ``{prefix}weight``[/bias])."""
        from .io import KbitFile

        with KbitFile(path) as f:
            qw = f.get(prefix + "weight", device)
            bias = f.get(prefix + "bias", device) if prefix + "bias" in f else None
            splits = json.loads(f.metadata.get("kbitcupy_layer_splits", "null"))
        return cls(qw, bias, splits)

    def save(self, path: str, prefix: str = "") -> str:
        from .io import save

        return save(path, self.state_dict(prefix), {"kbitcupy_layer_splits": json.dumps(list(self.splits))})

    def state_dict(self, prefix: str = "") -> dict:
        sd = {prefix + "weight": self.weight}
        if self.bias is not None:
            sd[prefix + "bias"] = self.bias
        return sd

    # ------------------------------------------------------------------ properties / moves
    in_features = property(lambda self: self.weight.K)
    out_features = property(lambda self: self.weight.N)
    k = property(lambda self: self.weight.k)
    on_gpu = property(lambda self: self.weight.on_gpu)

    @property
    def nbytes(self) -> int:
        return self.weight.nbytes + (0 if self.bias is None else int(self.bias.nbytes))

    def cuda(self) -> "KbitLinear":
        return self if self.on_gpu else KbitLinear(self.weight.cuda(), self.bias, self.splits)

    def cpu(self) -> "KbitLinear":
        return self if not self.on_gpu else KbitLinear(self.weight.cpu(), self.bias, self.splits)

    def __repr__(self) -> str:
        return (f"KbitLinear(in={self.in_features}, out={self.out_features}, k={self.k}, splits={self.splits}, "
                f"bias={self.bias is not None}, {'cuda' if self.on_gpu else 'cpu'})")

    # ------------------------------------------------------------------ call
    def __call__(self, x, out=None):
        """y[..., N] = x[..., K] @ W^T (+ bias), in x's dtype and array type."""
        if _is_torch(x):
            if out is not None:
                raise ValueError("out= is not supported for torch tensors (the custom op allocates)")
            from .torch_ops import kbit_linear

            return kbit_linear(x, *self.torch_tensors())
        if self.bias is None:
            return matmul(x, self.weight, out=out)  # (matmul runs on x's device by itself)
        with gpu_call(x):  # the bias add on x's device too
            return _add_bias(matmul(x, self.weight, out=out), self.bias)

    def split(self, y) -> tuple:
        """The parts of a fused output (e.g. q, k, v) as views along the last axis."""
        outs, s = [], 0
        for n in self.splits:
            outs.append(y[..., s:s + n])
            s += n
        return tuple(outs)

    def torch_tensors(self) -> tuple:
        """(packed int32, absmax uint8, codebook f32, k, N, tensor_scale, bias f32 or None), the
        arrays as zero-copy torch views on the weight's device: the kbitcupy::matmul arguments."""
        if self._torch is None:
            kd = "torch" if self.on_gpu else "torch_cpu"
            w = self.weight
            with stream_ctx(w.packed):  # (handed over on the weight's device)
                arrs = [from_backend(a, kd) for a in (w.packed.view(np.int32), w.absmax, w.codebook)]
                b = from_backend(self.bias, kd) if self.bias is not None else None
            self._torch = (*arrs, w.k, w.N, float(w.tensor_scale), b)
        return self._torch


def _fuse_bias(bias, sizes: List[int], gpu: bool):
    if bias is None:
        return None
    if not isinstance(bias, (list, tuple)):
        return _array(bias, gpu, _F32)
    if len(bias) != len(sizes):
        raise ValueError(f"got {len(bias)} biases for {len(sizes)} fused weights")
    if all(b is None for b in bias):
        return None
    parts = [np.zeros(n, _F32) if b is None else _array(b, False, _F32).reshape(-1) for b, n in zip(bias, sizes)]
    return _array(np.concatenate(parts), gpu)


# ----------------------------------------------------------------------------- KbitMLP
class KbitMLP:
    """SwiGLU MLP (Qwen3 expert / shared expert): down(silu(gate(x)) * up(x)).

    fused=True stores gate and up as one weight (one launch); fused=False keeps them apart.
    """

    def __init__(self, down: KbitLinear, gate_up: Optional[KbitLinear] = None, gate: Optional[KbitLinear] = None,
                 up: Optional[KbitLinear] = None):
        if (gate_up is None) == (gate is None or up is None):
            raise ValueError("give either gate_up (fused) or both gate and up")
        # the SwiGLU pairs gate and up column by column into down's input (a width-1 up would broadcast)
        I = down.in_features
        widths = (gate_up.out_features,) if gate_up is not None else (gate.out_features, up.out_features)
        if widths != ((2 * I,) if gate_up is not None else (I, I)):
            raise ValueError(f"gate / up widths {widths} must equal down's in_features {I} (gate_up holds both: 2x)")
        self.down, self.gate_up, self.gate, self.up = down, gate_up, gate, up
        self.intermediate = down.in_features

    @classmethod
    def from_float(cls, gate, up, down, k: int = 4, codebook=None, device=None, fused: bool = True) -> "KbitMLP":
        mk = lambda w: KbitLinear.from_float(w, k=k, codebook=codebook, device=device)  # noqa: E731
        if fused:
            return cls(mk(down), gate_up=mk([gate, up]))
        return cls(mk(down), gate=mk(gate), up=mk(up))

    @classmethod
    def from_quantized(cls, gate, up, down, device=None, fused: bool = True) -> "KbitMLP":
        mk = lambda w: KbitLinear.from_quantized(w, device=device)  # noqa: E731
        if fused:
            return cls(mk(down), gate_up=mk([gate, up]))
        return cls(mk(down), gate=mk(gate), up=mk(up))

    @property
    def nbytes(self) -> int:
        return sum(l.nbytes for l in (self.down, self.gate_up, self.gate, self.up) if l is not None)

    def __call__(self, x):
        # CuPy: on x's device; torch tensors: torch ops and the custom op, which follow their tensors by themselves
        with contextlib.nullcontext() if _is_torch(x) else gpu_call(x):
            if self.gate_up is not None:
                g, u = self.gate_up.split(self.gate_up(x))
            else:
                g, u = self.gate(x), self.up(x)
            return self.down(_silu_mul(g, u))


# ----------------------------------------------------------------------------- routing
def route(logits, top_k: int, norm_topk_prob: bool = True):
    """Qwen3-MoE routing: softmax over all experts in float32, top-k, renormalised.

    Returns (weights float32 [M, top_k], expert ids int32 [M, top_k]); order inside
    the top k is unspecified (the weighted sum does not depend on it).
    """
    xp = _xp(logits)
    p = logits.astype(_F32)
    p = xp.exp(p - p.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    ids = xp.argpartition(-p, top_k - 1, axis=-1)[..., :top_k]
    w = xp.take_along_axis(p, ids, axis=-1)
    if norm_topk_prob:
        w = w / w.sum(axis=-1, keepdims=True)
    return w.astype(_F32), ids.astype(np.int32)


def moe_block(x2, router, top_k: int, experts: Callable, norm_topk_prob: bool = True, shared=None,
              shared_gate=None):
    """The MoE block around any routed-expert implementation (NumPy or CuPy x2 [T, H]).

    Routing in float32 (``route``); ``experts(x2, weights, ids)`` returns the weighted sum
    of the chosen experts' outputs [T, H_out]; then the shared expert (times
    sigmoid(shared_gate x)) is added in float32 and the result rounded to x2's dtype.
    """
    xp = _xp(x2)
    x32 = x2.astype(_F32)
    w, ids = route(x32 @ router.T, top_k, norm_topk_prob)
    out = experts(x2, xp.ascontiguousarray(w), xp.ascontiguousarray(ids)).astype(_F32)
    if shared is not None:
        s = shared(x2).astype(_F32)
        if shared_gate is not None:
            s *= 1 / (1 + xp.exp(-(x32 @ shared_gate.T)))
        out += s
    return out.astype(x2.dtype)


def loop_experts(x2, w, ids, expert_mlp: Callable):
    """Routed experts as a loop over the active experts: rows sorted by expert, one
    ``expert_mlp(e, rows)`` call per expert, weighted, un-sorted and summed in float32."""
    xp = _xp(x2)
    T, top_k = ids.shape
    flat = ids.reshape(-1)
    order = xp.argsort(flat, kind="stable") if xp is np else xp.argsort(flat)
    A = x2[order // top_k]
    wo = w.reshape(-1)[order][:, None]
    off = np.concatenate([[0], np.cumsum(np.bincount(_array(flat, False)))])  # host: one sync
    ys = None
    for e in np.flatnonzero(np.diff(off)):
        r = slice(int(off[e]), int(off[e + 1]))
        y = expert_mlp(int(e), A[r]).astype(_F32) * wo[r]
        if ys is None:
            ys = xp.zeros((T * top_k, y.shape[1]), _F32)
        ys[order[r]] = y
    return ys.reshape(T, top_k, -1).sum(axis=1)


# ----------------------------------------------------------------------------- grouped API (optional)
def _moe_api():
    """(kbitcupy.grouped, kbitcupy.moe) when both are importable (written separately), else None."""
    try:
        from . import grouped, moe
    except ImportError:
        return None
    if not all(hasattr(grouped, n) for n in ("stack_experts", "quantize_experts")) or \
            not hasattr(moe, "moe_forward"):
        return None
    return grouped, moe


# ----------------------------------------------------------------------------- KbitMoE
class KbitMoE:
    """Qwen3(-Next) sparse MoE block with k-bit experts.

    router: float [E, H] (kept in float32: routing is sensitive and the router small);
    experts: gate_up [2I, H] fused per expert (or separate gate/up [I, H]) and down
    [H, I]; top-k routing with softmax + renormalisation; optional shared expert
    (a KbitMLP) scaled by sigmoid(shared_gate x).

    With kbitcupy.grouped / kbitcupy.moe present the experts live in expert banks (one
    allocation per projection) and a call is ``moe.moe_forward``: grouped kernels, no
    host sync.  ``self.experts[name][e]`` are then zero-copy views into the banks.
    Without them (or use_grouped=False) a call loops over the active experts.
    """

    def __init__(self, router, down, top_k: int, gate_up=None, gate=None, up=None,
                 shared: Optional[KbitMLP] = None, shared_gate=None, norm_topk_prob: bool = True,
                 use_grouped: Optional[bool] = None):
        """down / gate_up / gate / up: each a list of per-expert KbitWeights or a
        KbitExpertBank (give gate_up, fused per expert, or both gate and up)."""
        first = down if not isinstance(down, (list, tuple)) else (down[0] if down else None)
        dev = gpu_index_of(getattr(first, "packed", None))
        with on_gpu_device(dev):  # the banks and router on the experts' GPU
            if (gate_up is None) == (gate is None or up is None):
                raise ValueError("give either gate_up (fused per expert) or both gate and up")
            api = _moe_api()
            self.banks: Dict[str, object] = {}
            self.experts: Dict[str, List[KbitWeight]] = {}
            for n, v in (("gate_up", gate_up), ("gate", gate), ("up", up), ("down", down)):
                if v is None:
                    continue
                if isinstance(v, (list, tuple)):
                    v = list(v)
                    if api is not None and use_grouped is not False and v:  # one bank, the weights as views into it
                        self.banks[n] = api[0].stack_experts(v)
                        v = None
                else:  # a KbitExpertBank
                    self.banks[n] = v
                    v = None
                self.experts[n] = v if v is not None else [self.banks[n].expert(e) for e in range(len(self.banks[n]))]
            self.gpu = self.experts["down"][0].on_gpu
            self.router = _array(router, self.gpu, _F32)
            self.E, self.hidden = self.router.shape
            if not is_int(top_k):
                raise ValueError(f"top_k must be an int, got {top_k!r}")
            self.top_k = int(top_k)
            if not 1 <= self.top_k <= self.E:
                raise ValueError(f"top_k must be in 1..{self.E}, got {top_k}")
            for n, v in self.experts.items():
                if len(v) != self.E:
                    raise ValueError(f"{n}: {len(v)} experts, router has {self.E}")
                if any(w.on_gpu != self.gpu or (dev is not None and w.packed.data.device_id != dev) for w in v):
                    raise ValueError(f"{n}: experts must all be on the device of down's first expert")
            self.shared, self.norm_topk_prob = shared, norm_topk_prob
            self.shared_gate = _array(shared_gate, self.gpu, _F32)
            if self.shared_gate is not None:
                self.shared_gate = self.shared_gate.reshape(1, -1)
            self.use_grouped = use_grouped

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_float(cls, router, gate, up, down, top_k: int, k: int = 4, shared=None, shared_gate=None,
                   codebook=None, device=None, fused: bool = True, norm_topk_prob: bool = True,
                   use_grouped: Optional[bool] = None) -> "KbitMoE":
        """gate, up: [E, I, H]; down: [E, H, I] (stacked arrays or lists of per-expert
        weights); shared: (gate [I_s, H], up, down) float weights or None."""
        gpu, on = _target(device, to_backend(down[0], "down")[0])
        with on:
            return cls._from_float(router, gate, up, down, top_k, k, shared, shared_gate, codebook, gpu, fused,
                                   norm_topk_prob, use_grouped)

    @classmethod
    def _from_float(cls, router, gate, up, down, top_k, k, shared, shared_gate, codebook, gpu, fused, norm_topk_prob,
                    use_grouped) -> "KbitMoE":
        xp = _xp(_array(np.zeros(1), gpu))
        api = _moe_api() if use_grouped is not False else None

        def stack(ws):
            if not isinstance(ws, (list, tuple)) and to_backend(ws, "w")[0].ndim == 3:
                return xp.ascontiguousarray(_array(ws, gpu))
            return xp.stack([_array(w, gpu) for w in ws])

        if api is not None:  # straight into banks: one quantize launch pair per expert, one sync
            q = lambda ws: api[0].quantize_experts(ws, k, codebook)  # noqa: E731
        else:
            q = lambda ws: [quantize(_array(w, gpu), k, codebook) for w in ws]  # noqa: E731
        kw = {}
        if fused:
            kw["gate_up"] = q(xp.concatenate([stack(gate), stack(up)], axis=1))
        else:
            kw["gate"], kw["up"] = q(stack(gate)), q(stack(up))
        kw["down"] = q(stack(down))
        sh = KbitMLP.from_float(*shared, k=k, codebook=codebook, device="cuda" if gpu else "cpu",
                                fused=fused) if shared is not None else None
        return cls(router, top_k=top_k, shared=sh, shared_gate=shared_gate, norm_topk_prob=norm_topk_prob,
                   use_grouped=use_grouped, **kw)

    @classmethod
    def from_quantized(cls, router, gate, up, down, top_k: int, shared=None, shared_gate=None, device=None,
                       fused: bool = True, norm_topk_prob: bool = True,
                       use_grouped: Optional[bool] = None) -> "KbitMoE":
        """gate, up, down: lists of per-expert KbitWeights (fused into gate_up per expert
        when fused=True); shared: (gate, up, down) KbitWeights or None."""
        gpu, on = _target(device, down[0])
        with on:
            mv = lambda ws: [_move(w, gpu) for w in ws]  # noqa: E731
            kw = {"gate_up": [fuse([g, u]) for g, u in zip(mv(gate), mv(up))]} if fused else \
                {"gate": mv(gate), "up": mv(up)}
            sh = KbitMLP.from_quantized(*shared, device="cuda" if gpu else "cpu", fused=fused) if shared else None
            return cls(router, mv(down), top_k, shared=sh, shared_gate=shared_gate, norm_topk_prob=norm_topk_prob,
                       use_grouped=use_grouped, **kw)

    @classmethod
    def from_state_dict(cls, sd: dict, prefix: str, top_k: int, device=None, fused: bool = True,
                        norm_topk_prob: bool = True, use_grouped: Optional[bool] = None) -> "KbitMoE":
        """From a loaded checkpoint with Hugging Face Qwen3-MoE names under ``prefix``
        (e.g. 'model.layers.0.mlp.'): gate.weight (router), experts.{e}.{gate,up,down}_proj.weight,
        optional shared_expert.{gate,up,down}_proj.weight and shared_expert_gate.weight."""
        E = 0
        while f"{prefix}experts.{E}.down_proj.weight" in sd:
            E += 1
        if E == 0:
            raise KeyError(f"no '{prefix}experts.0.down_proj.weight' in the state dict")
        ex = lambda e, n: sd[f"{prefix}experts.{e}.{n}_proj.weight"]  # noqa: E731
        shared = None
        if f"{prefix}shared_expert.down_proj.weight" in sd:
            shared = tuple(sd[f"{prefix}shared_expert.{n}_proj.weight"] for n in ("gate", "up", "down"))
        return cls.from_quantized(sd[prefix + "gate.weight"], [ex(e, "gate") for e in range(E)],
                                  [ex(e, "up") for e in range(E)], [ex(e, "down") for e in range(E)], top_k,
                                  shared, sd.get(prefix + "shared_expert_gate.weight"), device, fused,
                                  norm_topk_prob, use_grouped)

    @property
    def nbytes(self) -> int:
        if self.banks:
            n = sum(b.nbytes for b in self.banks.values())
        else:
            n = sum(w.nbytes for v in self.experts.values() for w in v)
        n += int(self.router.nbytes)
        return n + (self.shared.nbytes if self.shared is not None else 0)

    # ------------------------------------------------------------------ experts
    def grouped_active(self) -> bool:
        """Whether a call runs moe.moe_forward over the expert banks (else the per-expert loop)."""
        return (self.use_grouped is not False and len(self.banks) == len(self.experts) and _moe_api() is not None
                and self.experts["down"][0].N == self.hidden)  # moe_forward's residual-stream shape

    def _grouped(self, x2, w, ids):
        moe = _moe_api()[1]
        gu = self.banks["gate_up"] if "gate_up" in self.banks else (self.banks["gate"], self.banks["up"])
        return moe.moe_forward(x2, gu, self.banks["down"], ids, w)

    def _expert_mlp(self, e: int, a):
        ex = self.experts
        if "gate_up" in ex:
            gu = matmul(a, ex["gate_up"][e])
            I = gu.shape[1] // 2
            h = _silu_mul(gu[:, :I], gu[:, I:])
        else:
            h = _silu_mul(matmul(a, ex["gate"][e]), matmul(a, ex["up"][e]))
        return matmul(h, ex["down"][e])

    def _loop(self, x2, w, ids):
        return loop_experts(x2, w, ids, self._expert_mlp)

    def __call__(self, x):
        """x [..., H] (NumPy, CuPy or torch; fp16/bf16) -> [..., H_out] in x's type and dtype."""
        with gpu_call(x):  # torch CUDA tensors: views and launches on torch's current stream
            xa, kd = to_backend(x, "x")
            if xa.shape[-1] != self.hidden:
                raise ValueError(f"x's last dimension ({xa.shape[-1]}) must be the hidden size {self.hidden}")
            if is_cupy(xa) != self.gpu:
                raise ValueError(f"x is on the {'GPU' if is_cupy(xa) else 'CPU'} but the experts are not")
            lead = xa.shape[:-1]
            x2 = _xp(xa).ascontiguousarray(xa.reshape(-1, self.hidden))
            if x2.shape[0] == 0:
                return from_backend(_xp(xa).zeros(lead + (self.experts["down"][0].N,), xa.dtype), kd)
            experts = self._grouped if self.grouped_active() else self._loop
            out = moe_block(x2, self.router, self.top_k, experts, self.norm_topk_prob, self.shared, self.shared_gate)
            return from_backend(out.reshape(lead + (out.shape[-1],)), kd)
