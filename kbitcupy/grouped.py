"""Expert banks and the grouped (MoE) matmul over them.

An expert bank holds E experts of one shape W_e[N, K] in the tiled layout, all in ONE
allocation per array (packed [E, words_per_expert], absmax [E, absmax_per_expert]),
one shared codebook and a float32 tensor scale per expert.  ``grouped_matmul`` runs,
in one launch, C[offsets[s]:offsets[s+1]] = A[offsets[s]:offsets[s+1]] @ W_{expert_ids[s]}^T
for every slot s; routing never copies weights.

Slots are independent: an expert id may appear in several slots (each slot is
computed on its own), slots with no tokens cost one early exit, and rows of A that no
slot covers leave their output rows untouched.

Device-side guards (``expert_ids`` / ``offsets`` given as device arrays are not read on
the host): a slot whose expert id is outside [0, E) or whose offsets are out of order
or outside A's rows writes nothing and sets a bit in a per-device error flag, read and
cleared with ``read_errors()``; ``check=True`` validates on the host first (one sync),
then checks the flag after the launch (another sync).  NumPy ``expert_ids`` /
``offsets`` are always validated on the host before anything runs.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace

import numpy as np

from . import _pdl
from . import reference as R
from . import wgmma as WG
from .gemv import GROUPED_MAX_TOKENS, _sm_count, grouped_gemv, grouped_is_slices, lut_bytes
from ._arrays import (ACT_DTYPES, check_no_overlap, check_same_device, dtype_name, from_backend, is_int, kind,
                      out_array, stream_ctx, to_backend)
from ._capture import capturing, gpu_call
from ._compile import Family, register
from .quantize import CTYPE, QUANT, _check_codebook, _grid
from .reference import bfloat16
from .weight import KbitWeight, gpu_copy, is_default_codebook

# ----------------------------------------------------------------------------- kernels
MCS = (1, 2, 4)  # 16-row MMA chunks held in registers: 16, 32, 64 token rows per pass
_ACT = ("float16", "bfloat16")
_WT = ("float32", "float16", "bfloat16")


def _instances():
    inst = {}
    for k in (2, 3, 4, 5):
        for t in _ACT:
            for mc in MCS:
                inst[("mm", k, t, mc)] = f"kbit_grouped<{k}, {CTYPE[t]}, {mc}>"
    for t in _ACT:
        inst[("silu", t)] = f"kbit_silu_mul<{CTYPE[t]}>"
        for w in _WT:
            inst[("combine", t, w)] = f"kbit_moe_combine<{CTYPE[t]}, {CTYPE[w]}>"
    inst[("route",)] = "kbit_moe_route"
    inst[("route", "warp")] = "kbit_moe_route_warp"
    for part in ("count", "scan", "scatter"):
        inst[("route", part)] = f"kbit_moe_route_{part}"
    inst[("gather", "u16")] = "kbit_gather_rows<unsigned short>"
    inst[("gather", "u128")] = "kbit_gather_rows<uint4>"
    return inst


GROUPED = register("grouped", Family("kbit_grouped.cu", _instances(),
                                     group_of=lambda key: key[:3] if key[0] == "mm" else ("moe",)))

ERR_EXPERT_ID, ERR_OFFSETS, ERR_MAX_TOKENS, ERR_ROWS = 1, 2, 4, 8  # (ERR_ROWS: moe.gather_rows / moe_combine)
# method='auto' without the wgmma kernel: grouped kernel up to here, dequant + cuBLAS above.
# With it (sm_90) the kernel for any count: H200, profiling/results/nvidia-h200_2026-11-22_moe_large.log,
# 8-10 experts, 64..1024 tokens each: 2.6-25x faster than the per-expert dequant + cuBLAS loop.
MAX_TOKENS_KERNEL = 64
MAX_WARPS = 8
SM_COUNT = 132
# plan(): blocks per SM below which the column groups per block (cg) are halved.  H100, 2026-11-26
# (profiling/results/nvidia-h100-80gb-hbm3_2026-11-26_mmaplan26.log, down 2048 x 512, 9 / 12 / 16 tokens):
# with 2 per SM, 8 experts got cg = 4 (512 blocks of 4 warps) and ran slower than 10 experts on cg = 8
# (k = 2: 8.55 / 8.69 / 9.05 us against 7.02 / 7.04 / 7.13); cg = 8 at 8 experts: 7.10 / 7.00 / 7.08 (k = 3
# 7.74..8.33 -> 7.39..7.44, k = 5 11.4..12.6 -> 8.7).  k = 4 keeps 2 (cg = 4: 7.86 / 8.05 / 7.27 against
# cg = 8's 7.92 / 7.92 / 7.98).
_MIN_BLOCKS_PER_SM = {4: 2}
# choose_impl: the grouped GEMV up to this many tokens per expert where the wgmma kernel exists
GEMV_MAX_TOKENS = 8
# choose_impl: down-like banks (K < 1024) at 9..16 tokens take the wgmma kernel from this many of its tiles
# (slots x 128-column strips: two waves of two CTAs per SM); measured 8 / 10 experts (128 / 160 tiles: the mma
# kernel as fast or 12 % faster) and 128 / 512 (2048 / 8192 tiles: wgmma 7-12 % faster)
WGMMA_MANY_TILES = 4 * SM_COUNT
# choose_impl: at 9..16 tokens per expert the grouped GEMV where slots x tokens per expert is at most this (measured:
# 8 x 16 and 10 x 12 win, 10 x 16 loses)
GEMV_TWO_TILE_ROWS = 128


# ----------------------------------------------------------------------------- bank
@dataclass(frozen=True, eq=False)
class KbitExpertBank:
    """E k-bit experts of one shape W_e[N, K] (PyTorch Linear layout), tiled layout.

    packed:       uint32 [E, words_per_expert]   (one allocation; row e = expert e)
    absmax:       uint8  [E, absmax_per_expert]  (E4M4 codes, tiled)
    codebook:     float32 [2^k], shared by all experts
    tensor_scale: float32 [E] (same backend as packed): expert e's power-of-two scale
    tensor_scale_host: the same as a NumPy array (no device read needed on the host)
    Arrays are all NumPy (CPU) or all CuPy (GPU).
    """

    packed: object
    absmax: object
    codebook: object
    tensor_scale: object
    k: int
    shape: tuple
    dtype: object = np.dtype(np.float16)
    tensor_scale_host: np.ndarray = field(default=None, repr=False)

    @property
    def num_experts(self) -> int:
        return int(self.packed.shape[0])

    E = num_experts

    @property
    def N(self) -> int:
        return self.shape[0]

    @property
    def K(self) -> int:
        return self.shape[1]

    @property
    def words_per_expert(self) -> int:
        return int(self.packed.shape[1])

    @property
    def absmax_per_expert(self) -> int:
        return int(self.absmax.shape[1])

    @property
    def on_gpu(self) -> bool:
        return kind(self.packed) == "cupy"

    @property
    def nbytes(self) -> int:
        return int(self.packed.nbytes + self.absmax.nbytes + self.codebook.nbytes + self.tensor_scale.nbytes)

    def __post_init__(self):
        # the grouped GEMV's levels from immediates where this is the default codebook (as KbitWeight)
        object.__setattr__(self, "default_codebook", is_default_codebook(self.codebook, self.k))

    def __len__(self) -> int:
        return self.num_experts

    def __repr__(self) -> str:
        dev = f"cuda:{self.packed.device.id}" if self.on_gpu else "cpu"
        return (f"KbitExpertBank(E={self.num_experts}, shape={self.shape}, k={self.k}, device={dev}, "
                f"{self.nbytes / 2**20:.2f} MiB)")

    @classmethod
    def from_weights(cls, weights) -> "KbitExpertBank":
        """Bank from KbitWeights of one shape, k and codebook (see ``stack_experts``)."""
        return stack_experts(weights)

    def _ts_host(self) -> np.ndarray:
        if self.tensor_scale_host is not None:
            return self.tensor_scale_host
        ts = self.tensor_scale
        return np.asarray(ts.get() if hasattr(ts, "get") else ts, dtype=np.float32)

    def expert(self, e: int) -> KbitWeight:
        """Expert e as a KbitWeight (views into the bank, no copy)."""
        E = self.num_experts
        if isinstance(e, bool) or not isinstance(e, (int, np.integer)) or not -E <= int(e) < E:
            raise ValueError(f"expert index must be an integer in [0, {E}), got {e!r}")
        e = int(e) % E
        return KbitWeight(self.packed[e], self.absmax[e], self.codebook, self.k, self.shape, "tiled",
                          float(self._ts_host()[e]), np.dtype(self.dtype))

    def cuda(self, device=None) -> "KbitExpertBank":
        """This bank on GPU ``device`` (as KbitWeight.cuda): itself when it is there, else a copy."""
        return gpu_copy(self, device, ("packed", "absmax", "tensor_scale"), tensor_scale_host=self._ts_host())

    def cpu(self) -> "KbitExpertBank":
        if not self.on_gpu:
            return self
        return replace(self, packed=self.packed.get(), absmax=self.absmax.get(), codebook=self.codebook.get(),
                       tensor_scale=self.tensor_scale.get(), tensor_scale_host=self._ts_host())

    numpy = cpu

    def validate(self, read_scales: bool = True) -> "KbitExpertBank":
        """Raise ValueError naming the field that does not fit the format.  read_scales=False skips the power-of-two
        check of GPU scales that have no host copy (reading them back syncs: not during a capture)."""
        k = R.check_k(self.k)
        if len(self.shape) != 2:
            raise ValueError(f"shape must be (N, K), got {self.shape}")
        N, K = self.shape
        if N <= 0 or K <= 0 or K % R.BLOCKSIZE:
            raise ValueError(f"shape {self.shape}: N must be positive and K a positive multiple of 32")
        nw, na = R.tiled_sizes(N, K, k)
        if self.packed.ndim != 2 or self.packed.shape[1] != nw or self.packed.dtype != np.uint32:
            raise ValueError(f"packed must be uint32 [E, {nw}] for shape {self.shape}, k={k}; "
                             f"got {self.packed.dtype} {tuple(self.packed.shape)}")
        E = self.packed.shape[0]
        if E <= 0:
            raise ValueError("an expert bank needs at least one expert")
        if self.absmax.shape != (E, na) or self.absmax.dtype != np.uint8:
            raise ValueError(f"absmax must be uint8 [E={E}, {na}], got {self.absmax.dtype} {tuple(self.absmax.shape)}")
        if self.codebook.shape != (1 << k,) or self.codebook.dtype != np.float32:
            raise ValueError(f"codebook must be float32 with {1 << k} entries for k={k}")
        if self.tensor_scale.shape != (E,) or self.tensor_scale.dtype != np.float32:
            raise ValueError(f"tensor_scale must be float32 [E={E}], got {self.tensor_scale.dtype} "
                             f"{tuple(self.tensor_scale.shape)}")
        for nm, a in (("packed", self.packed), ("absmax", self.absmax), ("tensor_scale", self.tensor_scale)):
            if not a.flags.c_contiguous:
                raise ValueError(f"{nm} must be C-contiguous")
        kinds = {kind(a) for a in (self.packed, self.absmax, self.codebook, self.tensor_scale)}
        if len(kinds) != 1:
            raise ValueError(f"bank arrays must all be on the CPU or all on the GPU, got {kinds}")
        if self.on_gpu:
            devs = {a.device.id for a in (self.packed, self.absmax, self.codebook, self.tensor_scale)}
            if len(devs) != 1:
                raise ValueError(f"bank arrays are on different devices {devs}")
        if not read_scales and self.on_gpu and self.tensor_scale_host is None:
            return self
        ts = self._ts_host()
        if ts.shape != (E,) or not np.all((ts > 0) & np.isfinite(ts)) or np.any(np.log2(ts) != np.round(np.log2(ts))):
            raise ValueError("tensor scales must be positive powers of two")
        return self


_CHECKED_BANKS = weakref.WeakSet()  # banks validated by an entry point (a bank object is immutable)


def checked_bank(bank, name: str = "bank") -> KbitExpertBank:
    """A bank handed to a kernel entry point: a KbitExpertBank, validated once per object.  The package's builders
    validate theirs; a hand-made one (dataclasses.replace with a wrong-length tensor_scale, say) would read out of
    bounds in the kernels.  While a CUDA graph captures, a GPU bank without its host copy of the scales is checked
    without them (reading them back would break the capture) and checked again at its next call."""
    if not isinstance(bank, KbitExpertBank):
        raise TypeError(f"{name} must be a KbitExpertBank, got {type(bank).__name__}")
    if bank in _CHECKED_BANKS:
        return bank
    full = not bank.on_gpu or bank.tensor_scale_host is not None or not capturing()
    try:
        bank.validate(read_scales=full)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    if full:
        _CHECKED_BANKS.add(bank)
    return bank


def _empty_bank(E, N, K, k, xp, codebook, dtype):
    nw, na = R.tiled_sizes(N, K, k)
    return xp.zeros((E, nw), dtype=np.uint32), xp.zeros((E, na), dtype=np.uint8)


def quantize_experts(W, k: int = 4, codebook=None, dtype=None) -> KbitExpertBank:
    """Quantize W[E, N, K] (E experts in PyTorch Linear layout) into one expert bank.

    NumPy input runs the reference per expert (NumPy bank); CuPy arrays / CUDA torch
    tensors run the quantize and repack kernels per expert straight into the bank
    (one host sync in total, to pick the per-expert tensor scales).  NaN/Inf raise.
    """
    k = R.check_k(k)
    Wa, kd = to_backend(W, "W")
    if Wa.ndim != 3:
        raise ValueError(f"W must be 3-D [E, N, K] (E experts of shape [N, K]), got shape {tuple(Wa.shape)}")
    E, N, K = (int(s) for s in Wa.shape)
    if E == 0 or N == 0 or K == 0:
        raise ValueError(f"W is empty (shape {tuple(Wa.shape)})")
    if K % R.BLOCKSIZE:
        raise ValueError(f"W: K = {K} must be a multiple of 32 (the quantization block size)")
    dn = dtype_name(Wa.dtype)
    if dn not in ("float16", "bfloat16", "float32", "float64"):
        raise ValueError(f"W must be float16, bfloat16, float32 or float64, got {dn}")
    if not Wa.flags.c_contiguous:
        raise ValueError("W must be C-contiguous ([E, N, K] row-major)")
    out_dtype = np.dtype(dtype) if dtype is not None else (Wa.dtype if dn in _ACT else np.dtype(np.float16))
    if kd in ("numpy", "torch_cpu"):
        from .quantize import quantize

        cb = _check_codebook(codebook, k, np)
        packed, absmax = _empty_bank(E, N, K, k, np, cb, out_dtype)
        ts = np.empty(E, dtype=np.float32)
        for e in range(E):
            x = np.asarray(Wa[e], dtype=np.float32)
            if not np.all(np.isfinite(x)):
                raise ValueError(f"W[{e}] contains NaN or Inf; it cannot be quantized")
            qw = quantize(x, k, cb)
            packed[e], absmax[e], ts[e] = qw.packed, qw.absmax, qw.tensor_scale
        return KbitExpertBank(packed, absmax, cb, ts, k, (N, K), out_dtype, ts.copy()).validate()
    with stream_ctx(W):
        return _quantize_experts_gpu(Wa, k, codebook, out_dtype)


def _quantize_experts_gpu(W, k, codebook, out_dtype):
    import cupy as cp

    cb = _check_codebook(codebook, k, cp)
    check_same_device(W=W, codebook=cb)
    if dtype_name(W.dtype) == "float64":
        W = W.astype(cp.float32)
    E, N, K = W.shape
    nblocks = N * K // R.BLOCKSIZE
    # per-expert (max block absmax, min nonzero block absmax), one sync for all experts
    stats = cp.empty((E, 2), dtype=cp.float32)
    step = max(1, (1 << 26) // max(1, N * K))  # bound the float32 temporary to ~256 MB
    for e0 in range(0, E, step):
        blk = cp.abs(W[e0:e0 + step].reshape(-1, nblocks, R.BLOCKSIZE).astype(cp.float32)).max(axis=2)
        stats[e0:e0 + step, 0] = blk.max(axis=1)
        stats[e0:e0 + step, 1] = cp.where(blk > 0, blk, cp.inf).min(axis=1)
    st = stats.get()
    bad = np.nonzero(~np.isfinite(st[:, 0]))[0]
    if bad.size:
        raise ValueError(f"W[{int(bad[0])}] contains NaN or Inf; it cannot be quantized")
    ts = np.array([R.choose_tensor_scale(np.array([a, m if np.isfinite(m) else a], np.float32)) for a, m in st],
                  dtype=np.float32)
    packed, absmax = _empty_bank(E, N, K, k, cp, cb, out_dtype)
    p_flat = cp.empty(nblocks * k, dtype=cp.uint32)
    a_flat = cp.empty(nblocks, dtype=cp.uint8)
    fq = QUANT.function(("q", dtype_name(W.dtype), k, "uint8"))
    frp = QUANT.function(("rp", k, "uint8"))
    nw, na = R.tiled_sizes(N, K, k)
    for e in range(E):
        fq((_grid(nblocks, 8),), (256,), (W[e], cb, p_flat, a_flat, np.int64(nblocks), np.float32(ts[e])))
        frp((_grid(na),), (256,), (p_flat, a_flat, packed[e], absmax[e], np.int32(N), np.int32(K), np.float32(1.0)))
    return KbitExpertBank(packed, absmax, cb, cp.asarray(ts), k, (N, K), out_dtype, ts.copy()).validate()


def stack_experts(weights) -> KbitExpertBank:
    """Build a bank from KbitWeights of one shape, k and codebook (tiled layout; flat ones
    are repacked).  Copies their data into the bank's single allocation."""
    from .quantize import repack

    ws = [repack(w) for w in weights]
    if not ws:
        raise ValueError("weights is empty")
    w0 = ws[0]
    on_gpu = w0.on_gpu
    xp = __import__("cupy") if on_gpu else np
    cb0 = np.asarray(w0.codebook.get() if on_gpu else w0.codebook)
    for i, w in enumerate(ws):
        if w.shape != w0.shape or w.k != w0.k or w.on_gpu != on_gpu:
            raise ValueError(f"weights[{i}] has shape {w.shape}, k={w.k}, on_gpu={w.on_gpu}; "
                             f"weights[0] has {w0.shape}, k={w0.k}, on_gpu={on_gpu}")
        cb = np.asarray(w.codebook.get() if on_gpu else w.codebook)
        if not np.array_equal(cb, cb0):
            raise ValueError(f"weights[{i}] has a different codebook; a bank shares one codebook")
    packed = xp.stack([w.packed for w in ws])
    absmax = xp.stack([w.absmax for w in ws])
    ts = np.array([w.tensor_scale for w in ws], dtype=np.float32)
    return KbitExpertBank(packed, absmax, w0.codebook, xp.asarray(ts), w0.k, w0.shape, w0.dtype, ts).validate()


def dequantize_experts(bank: KbitExpertBank, dtype=np.float32) -> np.ndarray:
    """All experts dequantized on the host: float array [E, N, K] (the test oracle)."""
    b = bank.cpu()
    return np.stack([R.dequantize_tiled(b.packed[e], b.absmax[e], b.codebook, b.k, b.shape,
                                        float(b._ts_host()[e]), dtype) for e in range(b.num_experts)])


# ----------------------------------------------------------------------------- planning
def a_row_bytes(K: int) -> int:
    return ((K * 2 + 127) // 128) * 128


def _pow2_floor(x: int) -> int:
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


def smem_bytes(k: int, K: int, warps: int, cg: int, mc: int, pass_rows: int) -> int:
    kw = warps // cg
    return lut_bytes(k) + 32 * 4 + (warps * mc * 4 * 32 * 4 if kw > 1 else 0) + pass_rows * a_row_bytes(K)


def plan(N: int, K: int, k: int, n_slots: int, max_tokens: int, warps=None, cg=None, pass_rows=None,
         smem_limit: int = 227 * 1024) -> dict:
    """Launch plan: warps per block, column groups per block (cg), K-split warps (kw =
    warps / cg), token rows per pass, MMA chunks (mc), dynamic smem, grid.x.

    Defaults: each warp keeps ~4 K-steps of 128 (the register ring depth) -> kw = KS/4
    (1..8), cg = 8 / kw column groups so one pair table serves 8 warps; cg is halved
    while the grid would have fewer than 1 block per SM (k = 4: 2; _MIN_BLOCKS_PER_SM).  A pass stages min(64,
    max_tokens) token rows (fewer if shared memory would overflow)."""
    KS = -(-K // 128)
    groups = -(-N // 8)
    if warps is None and cg is None:
        kw = _pow2_floor(max(1, min(MAX_WARPS, KS // 4)))
        cg = max(1, min(MAX_WARPS // kw, _pow2_floor(groups)))
        while cg > 1 and max(1, n_slots) * (-(-groups // cg)) < _MIN_BLOCKS_PER_SM.get(k, 1) * SM_COUNT:
            cg //= 2
        warps = kw * cg
    elif warps is None:
        cg = int(cg)
        warps = cg * _pow2_floor(max(1, min(MAX_WARPS // cg, KS // 4)))
    elif cg is None:
        warps = int(warps)
        cg = max(1, warps // _pow2_floor(max(1, min(warps, KS // 4))))
    warps, cg = int(warps), int(cg)
    if not (1 <= warps <= MAX_WARPS and cg >= 1 and warps % cg == 0 and cg & (cg - 1) == 0 and cg <= 16):
        raise ValueError(f"plan: warps={warps}, cg={cg}: need 1 <= warps <= {MAX_WARPS}, cg a power of two "
                         "(<= 16) dividing warps")
    if pass_rows is None:
        pass_rows = min(16 * MCS[-1], max(1, int(max_tokens)))
        while pass_rows > 1 and smem_bytes(k, K, warps, cg, _mc_for(pass_rows), pass_rows) > smem_limit:
            pass_rows = (pass_rows // 16) * 16 - 16 if pass_rows > 16 else pass_rows // 2
            pass_rows = max(1, pass_rows)
    pass_rows = int(pass_rows)
    if not 1 <= pass_rows <= 16 * MCS[-1]:
        raise ValueError(f"plan: pass_rows must be in 1..{16 * MCS[-1]}, got {pass_rows}")
    mc = _mc_for(pass_rows)
    smem = smem_bytes(k, K, warps, cg, mc, pass_rows)
    if smem > smem_limit:
        raise ValueError(f"plan: {smem} bytes of shared memory exceed the limit {smem_limit} "
                         f"(K={K}, k={k}, pass_rows={pass_rows})")
    return dict(warps=warps, cg=cg, kw=warps // cg, mc=mc, pass_rows=pass_rows, smem=smem,
                grid_x=-(-groups // cg))


def _mc_for(rows: int) -> int:
    for mc in MCS:
        if rows <= 16 * mc:
            return mc
    return MCS[-1]


# ----------------------------------------------------------------------------- error flag
_ERR: dict = {}
_SMEM_SET: dict = {}
_PLANS: dict = {}
_SMEM_LIMIT: dict = {}


def _err_buffer():
    import cupy as cp

    dev = cp.cuda.Device().id
    buf = _ERR.get(dev)
    if buf is None:
        buf = _ERR[dev] = cp.zeros(1, dtype=cp.int32)
    return buf


def describe_errors(flags: int) -> list:
    msgs = []
    if flags & ERR_EXPERT_ID:
        msgs.append("expert_ids: a slot's expert id was outside [0, E); that slot wrote nothing")
    if flags & ERR_OFFSETS:
        msgs.append("offsets: a slot had offsets[s] < 0, offsets[s+1] < offsets[s] or offsets[s+1] > A's rows; "
                    "that slot wrote nothing")
    if flags & ERR_MAX_TOKENS:
        msgs.append("max_tokens: an expert had more tokens than max_tokens (computed correctly, in several passes)")
    if flags & ERR_ROWS:
        msgs.append("routing: a sorted_token entry outside x's rows or a pos entry outside C_sorted's rows (a "
                    "hand-made MoeRouting); gather_rows gathered zeros there, moe_combine read row 0 with weight 0")
    return msgs


def read_errors(reset: bool = True) -> int:
    """The current device's sticky error flag of the grouped kernel (bits ERR_*);
    synchronises the current stream.  reset=True clears it."""
    buf = _err_buffer()
    v = int(buf.get()[0])
    if reset:
        buf.fill(0)
    return v


# ----------------------------------------------------------------------------- validation
def _on_device(x) -> bool:
    k = kind(x)
    return k == "cupy" or (k == "torch" and x.is_cuda)


def _is_int_dtype(dt) -> bool:
    return np.issubdtype(np.dtype(dt), np.integer)


def _host_index_array(x, name):
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if a.size and not _is_int_dtype(a.dtype):
        raise ValueError(f"{name} must hold integers, got {a.dtype}")
    return a.astype(np.int64)


def _host_rows(x, name, n: int, size=None, note: str = ""):
    """_host_index_array with every entry in [0, n) (and `size` = tokens * topk entries, for a routing array): an
    index NumPy would wrap, or a kernel read out of bounds with, raises ValueError naming the entry (note: appended
    to the message).  The expert ids here, MoeRouting's row indices in kbitcupy.moe."""
    a = _host_index_array(x, name)
    if size is not None and a.size != size:
        raise ValueError(f"{name} must have tokens * topk = {size} entries, got {a.size}")
    if a.size and (a.min() < 0 or a.max() >= n):
        bad = int(np.nonzero((a < 0) | (a >= n))[0][0])
        raise ValueError(f"{name}[{bad}] = {int(a[bad])} is outside [0, {n}){note}")
    return a


def validate_routing(expert_ids, offsets, num_experts: int, rows: int, max_tokens=None):
    """Host check of (expert_ids, offsets) -> (ids int32, offsets int32, largest token count).
    Raises ValueError naming the argument."""
    ids = _host_rows(expert_ids, "expert_ids", num_experts, note=" (the bank's experts)")
    offs = _host_index_array(offsets, "offsets")
    if offs.size != ids.size + 1:
        raise ValueError(f"offsets must have len(expert_ids) + 1 = {ids.size + 1} entries, got {offs.size}")
    if offs[0] < 0:
        raise ValueError(f"offsets[0] = {int(offs[0])} is negative")
    d = np.diff(offs)
    if np.any(d < 0):
        bad = int(np.nonzero(d < 0)[0][0])
        raise ValueError(f"offsets must be non-decreasing: offsets[{bad}] = {int(offs[bad])} > "
                         f"offsets[{bad + 1}] = {int(offs[bad + 1])}")
    if offs[-1] > rows:
        raise ValueError(f"offsets[-1] = {int(offs[-1])} exceeds the {rows} rows of A_sorted")
    mt = int(d.max()) if d.size else 0
    if max_tokens is not None and mt > max_tokens:
        raise ValueError(f"max_tokens = {max_tokens} is smaller than the largest expert's token count ({mt})")
    return ids.astype(np.int32), offs.astype(np.int32), mt


def _device_index_array(x, name, n=None):
    a, _ = to_backend(x, name)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(a.shape)}")
    if a.dtype != np.int32:
        raise ValueError(f"{name} must be int32 on the GPU (got {a.dtype}); convert once outside the hot path")
    if n is not None and a.size != n:
        raise ValueError(f"{name} must have {n} entries, got {a.size}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be contiguous")
    return a


def _check_max_tokens(max_tokens):
    if not is_int(max_tokens) or int(max_tokens) < 0:
        raise ValueError(f"max_tokens must be a non-negative Python int (a host-side upper bound of the tokens "
                         f"of any one expert), got {max_tokens!r}")
    return int(max_tokens)


# ----------------------------------------------------------------------------- public API
def grouped_matmul(A_sorted, bank: KbitExpertBank, expert_ids, offsets, max_tokens: int, out=None, *,
                   check: bool = False, method: str = "auto", impl=None, plan_override=None,
                   ids_stable: bool = False, chained: bool = False):
    """C_sorted[offsets[s]:offsets[s+1]] = A_sorted[offsets[s]:offsets[s+1]] @ W_{expert_ids[s]}^T.

    A_sorted: [rows, K] float16/bfloat16 (tokens sorted by expert slot); CuPy, CUDA torch
      (torch's current stream; torch in -> torch out) or NumPy (reference, CPU bank).
    expert_ids: [n_slots] int32 bank indices (any order; repeats allowed: slots are
      independent).  offsets: [n_slots + 1] int32, non-decreasing, within [0, rows].
      NumPy/list values are validated on the host (then uploaded: not capturable);
      device arrays must be int32 and are guarded on the device (see module doc).
    max_tokens: host-side upper bound of any slot's token count (no device->host sync).  The
      kernels are planned for it (a pass holds at most that many rows); a slot with more rows
      is still computed correctly, in more passes (slower), and sets ERR_MAX_TOKENS.
    out: optional [rows, N] output (same dtype as A); rows no slot covers are untouched (a new
      result is zero there, as on the CPU: host offsets zero just those rows, device offsets the
      whole array first -- pass out= on the hot path).
    method: 'auto' (the kernel; without the sm_90 wgmma kernel only if max_tokens <= 64,
      else dequant), 'kernel' (any max_tokens; more rows than a pass holds are done in
      several passes), 'dequant' (per-expert dequantize + cuBLAS; reads offsets on the host:
      syncs, not capturable).
    check: validate device expert_ids/offsets on the host before the launch and check
      the device error flag after it (two syncs), raising ValueError.
    The 'kernel' path with device index arrays and ``out`` given allocates nothing and
    never syncs: it can be captured in a CUDA graph.
    ids_stable: by default a grouped kernel launched as a programmatic dependent waits for
      the previous kernel before it reads expert_ids / offsets (device routing may have
      just written them), so only its launch overlaps that kernel.  True promises that the
      kernel launched right before this call does not write them (moe_forward: down after
      gate/up, or the row gather / silu_mul in between).  With full PDL
      (kbitcupy.set_pdl(True)) the GEMV and wgmma kernels then request the experts'
      weights and build their tables before waiting, as the dense kernels do; in the
      default safe mode the GEMV and the wgmma kernel (grids of one wave) read the ids and
      only prefetch their first weights into L2 before waiting (a hint: safe whatever the
      previous kernel wrote to the weights; the wgmma kernel at k >= 4 also builds the
      default codebook's tables there, shared memory only).
    chained: promises more than ids_stable (and implies it): the kernel launched right before
      this call on its stream is one of this package's (a grouped or helper kernel of
      moe_forward's sequence), which writes none of this call's weights, expert_ids or
      offsets.  Such a kernel lets its dependents launch only after its own PDL wait, so no
      kernel before it can still be running when this one starts: in the default safe mode the
      wgmma kernel then requests its weights and builds its tables before its wait, as with
      full PDL.  moe_forward passes it above the decode sizes (gate/up after the row gather,
      down after silu_mul).  The grouped GEMV keeps its safe early mode (the full PDL order
      was slower there: H200, 2026-11-28, close49h-moe), the mma.sync kernel waits at entry.
    """
    checked_bank(bank)
    if method not in ("auto", "kernel", "dequant"):
        raise ValueError(f"method must be 'auto', 'kernel' or 'dequant', got {method!r}")
    if impl is not None and impl not in IMPLS:
        raise ValueError(f"impl must be None or one of {IMPLS}, got {impl!r}")
    max_tokens = _check_max_tokens(max_tokens)
    A_, kd = to_backend(A_sorted, "A_sorted")
    N, K = bank.shape
    if A_.ndim != 2:
        raise ValueError(f"A_sorted must be 2-D [rows, K], got shape {tuple(A_.shape)}")
    if A_.shape[1] != K:
        raise ValueError(f"A_sorted's last dimension ({A_.shape[1]}) must equal the experts' K ({K})")
    if A_.dtype not in ACT_DTYPES:
        raise ValueError(f"A_sorted must be float16 or bfloat16, got {dtype_name(A_.dtype)}")
    if not A_.flags.c_contiguous:
        raise ValueError("A_sorted must be C-contiguous")
    rows = int(A_.shape[0])
    if kd in ("numpy", "torch_cpu"):
        return _grouped_cpu(A_, kd, bank, expert_ids, offsets, max_tokens, out)
    if not bank.on_gpu:
        raise ValueError("A_sorted is on the GPU but the bank is on the CPU; call bank.cuda()")
    if A_.device.id != bank.packed.device.id:
        raise ValueError(f"A_sorted is on device {A_.device.id} but the bank on device {bank.packed.device.id}")
    if A_.data.ptr % 16:
        raise ValueError("A_sorted's data pointer must be 16-byte aligned")
    import cupy as cp

    E = bank.num_experts
    host_idx = not (_on_device(expert_ids) and _on_device(offsets))
    # method='auto': the kernel path where it is the faster one (see MAX_TOKENS_KERNEL)
    wg = impl == "wgmma" or (impl is None and max_tokens > MAX_TOKENS_KERNEL)
    wg = wg and wgmma_ok(A_, bank)
    auto_kernel = max_tokens <= MAX_TOKENS_KERNEL or wg
    with gpu_call(A_sorted):
        if host_idx:
            for nm, x in (("expert_ids", expert_ids), ("offsets", offsets)):
                if _on_device(x):
                    raise ValueError(f"{nm} is a device array but the other index array is not; pass both on the "
                                     "host (NumPy) or both on the device")
            ids_h, offs_h, real_max = validate_routing(expert_ids, offsets, E, rows, max_tokens)
            max_tokens = real_max  # exact on the host: a tighter plan
            ids, offs = cp.asarray(ids_h), cp.asarray(offs_h)
        else:
            ids = _device_index_array(expert_ids, "expert_ids")
            offs = _device_index_array(offsets, "offsets", ids.size + 1)
            check_same_device(A_sorted=A_, expert_ids=ids, offsets=offs)
            ids_h = offs_h = None
            if check or method == "dequant" or (method == "auto" and not auto_kernel):
                ids_h, offs_h, real_max = validate_routing(ids.get(), offs.get(), E, rows, max_tokens)
                max_tokens = real_max
        out_ = out_array(out, (rows, N), A_.dtype, inputs={"A_sorted": A_, "expert_ids": ids, "offsets": offs})
        if kind(out_) != "cupy" or out_.device.id != A_.device.id:
            raise ValueError("out must be on the same GPU as A_sorted")
        if out_.data.ptr % 4:
            raise ValueError("out's data pointer must be 4-byte aligned")
        if out is None:  # a new result: rows no slot covers are zero (the CPU path's np.zeros)
            if offs_h is None:
                out_.fill(0)
            else:
                lo, hi = int(offs_h[0]), int(offs_h[-1])
                if lo > 0:
                    out_[:lo] = 0
                if hi < rows:
                    out_[hi:] = 0
        n_slots = int(ids.size)
        if n_slots and rows:
            use = method if method != "auto" else ("kernel" if auto_kernel else "dequant")
            if use == "kernel":
                if check:
                    read_errors(reset=True)
                if impl == "wgmma" and not wg:
                    raise ValueError("impl='wgmma' needs a compute capability 9.0 GPU (H100/H200) and a "
                                     "16-byte aligned bank")
                _launch(A_, bank, ids, offs, out_, max_tokens, plan_override, impl, ids_stable or chained, chained)
                if check:
                    flags = read_errors(reset=True)
                    if flags & (ERR_EXPERT_ID | ERR_OFFSETS):
                        raise ValueError("grouped_matmul: " + "; ".join(describe_errors(flags)))
            else:
                _dequant_path(A_, bank, ids_h, offs_h, out_)
        return out if out is not None else from_backend(out_, kd)  # (on the call's device and stream)


def _smem_limit() -> int:
    import cupy as cp

    dev = cp.cuda.Device().id
    v = _SMEM_LIMIT.get(dev)
    if v is None:
        try:
            v = int(cp.cuda.Device(dev).attributes["MaxSharedMemoryPerBlockOptin"])
        except Exception:  # pragma: no cover - attribute name differences
            v = 227 * 1024
        _SMEM_LIMIT[dev] = v
    return v


def use_grouped_gemv(max_tokens: int, K: int) -> bool:
    """Grouped GEMV (kbit_gemv_grouped) or a grouped MMA kernel for this many tokens per expert.

    H200, 2026-11-22 (profiling/moe_ab.py, k = 4, 8 and 10 experts): the GEMV wins up to
    8 tokens everywhere; at 9..16 it still wins for gate/up (K = 2048: 15.7 vs 17.9 us)
    but loses for down (K = 512, four K steps: 10.2 vs 8.3 us, 10 experts 13.0 vs 9.4)."""
    return max_tokens <= 8 or (max_tokens <= GROUPED_MAX_TOKENS and K >= 1024)


IMPLS = ("gemv", "mma", "wgmma")


def wgmma_ok(A, bank) -> bool:
    """Whether the grouped wgmma kernel can run these arrays (sm_90, 16-byte aligned bank)."""
    return WG.supported(A.device.id) and bank.packed.data.ptr % 16 == 0 and bank.absmax.data.ptr % 16 == 0


def choose_impl(A, bank, max_tokens: int, pdl_stable: bool = False, n_slots: int = 0) -> str:
    """Which grouped kernel runs for this many tokens per expert (host bound).

    H200, 2026-11-22 (profiling/results/nvidia-h200_2026-11-22_moe-wg1.md, k = 4, 8 and 10
    experts): up to 8 the grouped GEMV; 9..16 the wgmma kernel where K >= 1024 (gate/up:
    9.6 vs 10.3 us GEMV, 10 experts fused 14.9 vs 21.3) and the mma.sync kernel for down
    (K = 512: 8.3 vs 9.0 us wgmma, 10.3 GEMV); from 17 the wgmma kernel (down at 32:
    10.4 vs 15.0 us mma, gate/up 11.7 vs 38.1).  Without sm_90 the old rule
    (use_grouped_gemv, else the mma.sync kernel).
    pdl_stable (PDL on and ids_stable): the wgmma kernel requests its weights before its
    wait and the mma.sync kernel does not, so down takes wgmma at 9..16 too (H200,
    2026-11-24, profiling/results/nvidia-h200_2026-11-24_pdl9.md: 6.98 vs 7.61 us at 8
    experts, 7.84 vs 8.73 at 10).  Also in safe PDL with ids_stable, where the wgmma kernel
    L2-prefetches its first weights before the wait (H100, 2026-11-26, safe26.log: down at 16
    tokens k = 2 / 4, 8 experts 6.53 / 7.24 us, 10 experts 7.23 / 8.26, against the mma
    kernel's 7.08 / 7.27 and 7.13 / 8.29 in mmaplan26.log).  And where the wgmma grid is several
    waves (n_slots x column strips >= WGMMA_MANY_TILES; H100, 2026-11-26, moe-many26: down at 12 / 16
    tokens, 128 and 512 experts, k = 2 / 4: 7-12 % faster than the mma kernel, e.g. 512 experts k = 4
    252 against 271 / 283 us).
    Few experts at 9..16 tokens (n_slots x max_tokens <= GEMV_TWO_TILE_ROWS, the slot count known): the grouped
    GEMV, since it stages A row by row at two token tiles (H200, 2026-11-27, moe-sweep43h, k = 2 / 4, default
    launch): 8 experts at 9 / 12 / 16 tokens and 10 at 9 / 12 it is the fastest kernel or within 1 % on every MoE
    shape (16 tokens, 8 experts, k = 4: gate/up fused 9.69 vs wgmma 10.41 us, down 6.81 vs mma 7.11 / wgmma 6.94);
    at 10 x 16 the wgmma / mma kernels stay 1-7 % faster.  Not measured with pdl_stable (the old rule there).
    And wherever the grouped GEMV's plan at 9..16 tokens is the slices form (an SM's share of the groups in one
    block, one wave: gemv.grouped_plan), with stable ids too: H200, 2026-11-28 (forty-second session, run49.sh
    moeval, k = 2..4, 2..32 experts, 9 / 12 / 16 tokens): in every such cell the fastest kernel, e.g. 16 tokens k = 4
    down 10 / 16 experts 6.37 / 7.75 us (mma 7.99 / 11.44, wgmma 8.93 / 9.03; stable 6.37 / 7.75 against wgmma's
    7.65 / 8.55), gate/up fused 10 / 32 experts 8.92 / 20.44 (wgmma 12.29 / 25.36)."""
    if max_tokens <= GEMV_MAX_TOKENS:
        return "gemv"
    wg = wgmma_ok(A, bank)
    if (wg and max_tokens <= GROUPED_MAX_TOKENS and n_slots > 0
            and grouped_is_slices(*bank.shape, bank.k, n_slots, max_tokens,
                                  _sm_count(A.device.id) if A is not None else 132)):
        return "gemv"
    if wg and not pdl_stable and max_tokens <= GROUPED_MAX_TOKENS and 0 < n_slots * max_tokens <= GEMV_TWO_TILE_ROWS:
        return "gemv"
    if use_grouped_gemv(max_tokens, bank.K) and not wg:
        return "gemv"
    many = n_slots * -(-bank.shape[0] // WG.TILE_N) >= WGMMA_MANY_TILES  # the wgmma grid: several waves
    if max_tokens <= GROUPED_MAX_TOKENS and bank.K < 1024 and not (wg and (pdl_stable or bank.k == 5 or many)):
        return "mma"
    return "wgmma" if wg else "mma"


def _launch(A, bank, ids, offs, out, max_tokens, plan_override=None, impl=None, ids_stable=False, chained=False):
    """The grouped kernel on validated CuPy arrays (no allocation after the first call
    per device, no sync).  impl: None (choose_impl) or one of IMPLS; plan_override
    (kbit_grouped plan keywords) implies 'mma'."""
    N, K = bank.shape
    if impl is None:
        dev = A.device.id
        impl = "mma" if plan_override is not None else choose_impl(
            A, bank, max_tokens, ids_stable and (_pdl.active(dev) or (_pdl.safe_active(dev) and WG.SAFE_EARLY)),
            int(ids.size))
    if impl == "gemv":
        # decode-sized experts: the GEMV design (weights as the MMA A operand, one pair
        # table per block for several column groups)
        return grouped_gemv(A, bank, ids, offs, out, max_tokens, _err_buffer(), ids_stable=ids_stable)
    if impl == "wgmma":
        return WG.grouped_wgmma(A, bank, ids, offs, out, max_tokens, _err_buffer(), ids_stable=ids_stable,
                                chained=chained)
    E = bank.num_experts
    n_slots = int(ids.size)
    key = (N, K, bank.k, n_slots, max_tokens, tuple(sorted(plan_override.items())) if plan_override else None)
    p = _PLANS.get(key)
    if p is None:
        p = plan(N, K, bank.k, n_slots, max_tokens, smem_limit=_smem_limit(), **(dict(plan_override or {})))
        _PLANS[key] = p
    tname = "bfloat16" if A.dtype == bfloat16 else "float16"
    fn = GROUPED.function(("mm", bank.k, tname, p["mc"]))
    smem = p["smem"]
    if _SMEM_SET.get(id(fn), 0) < smem:
        fn.max_dynamic_shared_size_bytes = max(smem, 48 * 1024)
        _SMEM_SET[id(fn)] = smem
        _SMEM_SET[("keep", id(fn))] = fn  # keep fn alive so its id stays unique
    err = _err_buffer()
    pdl = _pdl.grouped_mode(A.device.id, False)  # kbit_grouped always waits at entry
    rows = int(A.shape[0])
    args_tail = (np.int32(N), np.int32(K), np.int32(E), np.int32(rows), np.int64(bank.words_per_expert),
                 np.int64(bank.absmax_per_expert), np.int32(p["cg"]), np.int32(p["pass_rows"]),
                 np.int32(max_tokens), err, np.int32(pdl))
    for s0 in range(0, n_slots, 65535):  # grid.y limit
        ns = min(65535, n_slots - s0)
        i_, o_ = (ids, offs) if ns == n_slots else (ids[s0:s0 + ns], offs[s0:s0 + ns + 1])
        args = (A, bank.packed, bank.absmax, bank.codebook, bank.tensor_scale, i_, o_, out) + args_tail
        _pdl.launch(fn, (p["grid_x"], ns), (p["warps"] * 32,), args, smem, pdl=pdl)
    return out


def grouped_gemv_fused(A, bank, ids, offs, rows: int, max_tokens: int, *, a_rows=None, a_silu: bool = False,
                       out=None, ids_stable: bool = False, check_devices: bool = True):
    """The grouped GEMV with a MoE step fused into its A staging (kbitcupy.moe.moe_forward):
    a_rows (device int32 [rows]): output row r multiplies A[a_rows[r]] (the row gather; A
    is the unsorted [T, K] input, a row index outside [0, T) reads as zeros); a_silu: A is
    [rows, 2K] = [gate | up] and the row multiplied is silu(gate) * up, rounded to A's
    dtype once (as silu_mul).  Device ids / offsets as for grouped_matmul (guarded on the
    device); PDL and ids_stable as for grouped_matmul.  Returns out (a new [rows, N] array if
    None); no sync.  check_devices: refuse a CPU bank and arrays off the current device (moe_forward checked
    its arrays once and passes False)."""
    import cupy as cp

    checked_bank(bank)
    max_tokens = _check_max_tokens(max_tokens)  # (as grouped_matmul: the kernels plan their passes by it)
    N, K = bank.shape
    if check_devices:
        if not bank.on_gpu:
            raise ValueError("bank is on the CPU; call bank.cuda()")
        check_same_device(A=A, bank=bank.packed, ids=ids, offs=offs, a_rows=a_rows, out=out)
    if A.shape[1] != (2 * K if a_silu else K):
        raise ValueError(f"A must have {2 * K if a_silu else K} columns, got {A.shape[1]}")
    if a_rows is None and A.shape[0] != rows:
        raise ValueError(f"A must have {rows} rows, got {A.shape[0]}")
    if A.data.ptr % 16 or not A.flags.c_contiguous:
        raise ValueError("A must be C-contiguous and 16-byte aligned")
    if out is None:
        out = cp.empty((rows, N), dtype=A.dtype)
    else:
        if out.shape != (rows, N) or out.dtype != A.dtype or not out.flags.c_contiguous:
            raise ValueError(f"out must be a contiguous [{rows}, {N}] array of A's dtype")
        if check_devices:  # (moe_forward passes its own new arrays)
            check_no_overlap(out, "out", {"A": A, "a_rows": a_rows, "ids": ids, "offs": offs})
    if rows and ids.size:
        grouped_gemv(A, bank, ids, offs, out, max_tokens, _err_buffer(), ids_stable=ids_stable, a_rows=a_rows,
                     a_silu=a_silu)
    return out


def _dequant_path(A, bank, ids_h, offs_h, out):
    """Per slot: dequantize the expert into the reused buffer of kbitcupy.dequant_matmul,
    then one cuBLAS GEMM.  A host loop over the slots (their offsets must be on the host:
    device offsets were synced), so this path is not capturable."""
    from .dequant_matmul import dequant_matmul

    for s in range(ids_h.size):
        r0, r1 = int(offs_h[s]), int(offs_h[s + 1])
        if r1 > r0:
            dequant_matmul(A[r0:r1], bank.expert(int(ids_h[s])), out[r0:r1])
    return out


def _grouped_cpu(A, kd, bank, expert_ids, offsets, max_tokens, out):
    if bank.on_gpu:
        raise ValueError("A_sorted is on the CPU but the bank is on the GPU; move one of them")
    N, K = bank.shape
    rows = A.shape[0]
    for nm, x in (("expert_ids", expert_ids), ("offsets", offsets)):
        if _on_device(x):
            raise ValueError(f"{nm} is on the GPU but A_sorted is on the CPU")
    ids = expert_ids.numpy() if kind(expert_ids) == "torch" else expert_ids
    offs = offsets.numpy() if kind(offsets) == "torch" else offsets
    ids, offs, _ = validate_routing(ids, offs, bank.num_experts, rows, max_tokens)
    if out is not None:
        o, _ = to_backend(out, "out")
        if o.shape != (rows, N) or o.dtype != A.dtype:
            raise ValueError(f"out must be a {dtype_name(A.dtype)} array of shape {(rows, N)}")
        check_no_overlap(o, "out", {"A_sorted": A})
    else:
        o = np.zeros((rows, N), dtype=A.dtype)
    _per_slot_reference(A, bank, ids, offs, o, np.float32)
    return out if out is not None else from_backend(o, kd)


def _per_slot_reference(A, bank, ids, offs, out, dtype):
    """out[r0:r1] = A[r0:r1] @ W_e^T for every slot, in `dtype` arithmetic, with each
    expert dequantized once (the NumPy backend and the oracle share this loop)."""
    cache = {}
    for s in range(ids.size):
        r0, r1 = int(offs[s]), int(offs[s + 1])
        if r1 == r0:
            continue
        e = int(ids[s])
        if e not in cache:
            w = bank.expert(e)
            cache[e] = R.dequantize_tiled(w.packed, w.absmax, w.codebook, w.k, w.shape, w.tensor_scale,
                                          np.float32).astype(dtype)
        out[r0:r1] = (A[r0:r1].astype(dtype) @ cache[e].T).astype(out.dtype)


def reference_grouped_matmul(A_sorted, bank: KbitExpertBank, expert_ids, offsets) -> np.ndarray:
    """float64 oracle [rows, N]: each slot's rows times its expert's float64 dequantized
    weight; rows that no slot covers are NaN."""
    A_, _ = to_backend(A_sorted, "A_sorted")
    A = np.asarray(A_.get() if hasattr(A_, "get") else A_).astype(np.float64)
    ids = np.asarray(expert_ids.get() if hasattr(expert_ids, "get") else expert_ids).astype(np.int64)
    offs = np.asarray(offsets.get() if hasattr(offsets, "get") else offsets).astype(np.int64)
    b = bank.cpu()
    out = np.full((A.shape[0], b.N), np.nan)
    _per_slot_reference(A, b, ids, offs, out, np.float64)
    return out
