"""MoE routing helpers and a full expert-MLP forward over k-bit expert banks.

Layout produced by ``moe_route`` from per-token top-k routing (topk_ids [T, topk]):

* the P = T * topk (token, choice) pairs are sorted by expert (ties: pair order), so
  sorted row i holds token ``sorted_token[i]``; ``pos[t * topk + j]`` is the sorted row
  of pair (t, j) (the inverse permutation, used by ``moe_combine``);
* slots: S = min(E, P) slots; the first n_active hold the distinct experts in
  increasing id order (``expert_ids[s]``, rows ``offsets[s]:offsets[s+1]``), the rest
  are empty (expert id 0, offsets == P).  Fixed shapes, no device->host sync.

Decode batches (``pair_route``; moe_forward up to PAIR_ROUTE_MAX_PAIRS choices, device int32 ids): no sort
and no routing kernel -- each pair is its own one-row slot in pair order (``expert_ids`` a view of topk_ids,
repeats and any order allowed by the grouped kernels; ``sorted_token[i] = i // topk``, ``pos`` the identity).

On the GPU the routing is a stable sort in kernels (one warp comparing up to 32 choices, a counting
sort in one block up to 2048, three grid passes up to 512K; CuPy's argsort beyond or above 8192 experts), plus small
kernels (gather, SiLU*up, weighted combine); NumPy input runs the same algorithm on the host.
``max_tokens`` (host bound of tokens per expert) defaults to T on the device (exact on
the host): an expert appears at most once in a token's top-k.  A larger real count
is still computed correctly by the grouped kernel (it sets an info bit).
"""
from __future__ import annotations

import os
import weakref
from dataclasses import dataclass

import numpy as np

from . import _pdl
from ._arrays import (ACT_DTYPES, check_same_device, cpu_result, dtype_name, from_backend, kind, out_array,
                      to_backend)
from ._capture import capturing, gpu_call
from .gemv import _sm_count, grouped_swiglu_per_thread
from .grouped import (ERR_EXPERT_ID, ERR_ROWS, GROUPED, _check_max_tokens, _device_index_array, _err_buffer,
                      _host_index_array, _host_rows, checked_bank, choose_impl, dequantize_experts, grouped_gemv_fused,
                      grouped_matmul, validate_routing)


@dataclass(frozen=True, eq=False)
class MoeRouting:
    """Expert-sorted layout of T tokens x topk choices (arrays on the routing's backend).

    sorted_token: int32 [P]     token of sorted row i
    pos:          int32 [P]     sorted row of pair p = t * topk + j
    expert_ids:   int32 [S]     expert of slot s (S = min(E, P); unused slots: 0)
    offsets:      int32 [S + 1] rows of slot s: offsets[s]:offsets[s + 1]
    max_tokens:   host int, upper bound of any slot's rows
    (pair_route's layout: S = P one-row slots in pair order, expert_ids the pairs' experts.)
    """

    sorted_token: object
    pos: object
    expert_ids: object
    offsets: object
    num_tokens: int
    topk: int
    num_experts: int
    max_tokens: int

    @property
    def num_pairs(self) -> int:
        return self.num_tokens * self.topk


# Routings this module built (moe_route, pair_route, uploads it checked), whose row indices are in range by
# construction (do not write into their arrays).  A hand-made one is guarded on the GPU instead: moe_forward gathers
# its rows with the gather kernel (which checks them and sets ERR_ROWS; the fused GEMV would read a row outside x as
# zeros, unflagged), and moe_combine checks its pos first (_guard_pos).
_BUILT: "weakref.WeakSet[MoeRouting]" = weakref.WeakSet()


def _built(r: MoeRouting) -> MoeRouting:
    _BUILT.add(r)
    return r


def check_routing(routing: MoeRouting, num_tokens: int | None = None) -> None:
    """Host check of a routing's row indices (device arrays are copied to the host: a sync): sorted_token [P] in
    [0, T), pos [P] in [0, P), P = num_tokens * topk, offsets one entry more than expert_ids.  Raises ValueError
    naming the array.  moe_forward runs it on a given routing with check=True or host arrays, gather_rows and
    moe_combine on host arrays; on the GPU they guard the rows instead (no sync; the ERR_ROWS flag)."""
    if not isinstance(routing, MoeRouting):
        raise TypeError(f"routing must be a MoeRouting, got {type(routing).__name__}")
    T, P = routing.num_tokens, routing.num_pairs
    if num_tokens is not None and T != num_tokens:
        raise ValueError(f"routing is for {T} tokens, x has {num_tokens}")

    def host(nm):
        a = getattr(routing, nm)
        return a.get() if kind(a) == "cupy" else a.cpu() if kind(a) == "torch" else a

    _host_rows(host("sorted_token"), "routing.sorted_token", T, P)
    _host_rows(host("pos"), "routing.pos", P, P)
    ne, no = (_host_index_array(host(nm), f"routing.{nm}").size for nm in ("expert_ids", "offsets"))
    if no != ne + 1:
        raise ValueError(f"routing.offsets must have len(routing.expert_ids) + 1 = {ne + 1} entries, got {no}")


def _check_topk_ids(ids, num_experts):
    if ids.ndim != 2:
        raise ValueError(f"topk_ids must be 2-D [tokens, topk], got shape {tuple(ids.shape)}")
    if not np.issubdtype(np.dtype(ids.dtype), np.integer):
        raise ValueError(f"topk_ids must hold integers, got {ids.dtype}")
    if isinstance(num_experts, bool) or not isinstance(num_experts, (int, np.integer)) or num_experts <= 0:
        raise ValueError(f"num_experts must be a positive int, got {num_experts!r}")


def reference_route(topk_ids, num_experts: int) -> MoeRouting:
    """NumPy routing (the oracle of moe_route; validates the ids)."""
    ids = np.asarray(topk_ids)
    _check_topk_ids(ids, num_experts)
    T, topk = ids.shape
    P = T * topk
    flat = ids.reshape(-1).astype(np.int64)
    if P and (flat.min() < 0 or flat.max() >= num_experts):
        bad = int(np.nonzero((flat < 0) | (flat >= num_experts))[0][0])
        raise ValueError(f"topk_ids[{bad // topk}, {bad % topk}] = {int(flat[bad])} is outside [0, {num_experts})")
    order = np.argsort(flat * max(P, 1) + np.arange(P), kind="stable")
    sorted_e = flat[order]
    pos = np.empty(P, dtype=np.int32)
    pos[order] = np.arange(P, dtype=np.int32)
    S = min(num_experts, P)
    uniq, start, counts = np.unique(sorted_e, return_index=True, return_counts=True)
    expert_ids = np.zeros(S, dtype=np.int32)
    offsets = np.full(S + 1, P, dtype=np.int32)
    expert_ids[:uniq.size] = uniq
    offsets[:uniq.size] = start
    return MoeRouting((order // max(topk, 1)).astype(np.int32), pos, expert_ids, offsets, T, topk,
                      int(num_experts), int(counts.max()) if counts.size else 0)


def moe_route(topk_ids, num_experts: int, max_tokens: int | None = None, check: bool = False) -> MoeRouting:
    """Build the expert-sorted layout (see module doc) from topk_ids [T, topk].

    CuPy / CUDA torch ids: CuPy ops on the current (torch's) stream, no sync.  Ids
    outside [0, E) are not raised on (unless ``check=True``: one sync); they set the
    ERR_EXPERT_ID bit of ``kbitcupy.grouped.read_errors()`` and the affected tokens'
    outputs are undefined.  NumPy ids: the reference (validated, exact max_tokens).
    """
    ids, kd = to_backend(topk_ids, "topk_ids")
    if max_tokens is not None:
        max_tokens = _check_max_tokens(max_tokens)
    if kd in ("numpy", "torch_cpu"):
        r = reference_route(ids, num_experts)
        if max_tokens is not None:
            if max_tokens < r.max_tokens:
                raise ValueError(f"max_tokens = {max_tokens} is smaller than the largest expert's token count "
                                 f"({r.max_tokens})")
            r = MoeRouting(r.sorted_token, r.pos, r.expert_ids, r.offsets, r.num_tokens, r.topk, r.num_experts,
                           int(max_tokens))
        return _built(r)
    _check_topk_ids(ids, num_experts)
    if check:
        reference_route(ids.get(), num_experts)  # raises on bad ids
    import cupy as cp

    T, topk = (int(s) for s in ids.shape)
    P = T * topk
    E = int(num_experts)
    S = min(E, P)
    with gpu_call(topk_ids):
        if 0 < P <= ROUTE_GRID_MAX_PAIRS and E <= ROUTE_KERNEL_MAX_EXPERTS:
            return _built(_route_kernel(ids, T, topk, E, S, max_tokens))
        flat = ids.reshape(-1).astype(cp.int64)
        order = cp.argsort(flat * max(P, 1) + cp.arange(P, dtype=cp.int64))  # unique keys: deterministic
        sorted_e = flat[order]
        sorted_token = (order // max(topk, 1)).astype(cp.int32)
        pos = cp.empty(P, dtype=cp.int32)
        pos[order] = cp.arange(P, dtype=cp.int32)
        expert_ids = cp.zeros(S + 1, dtype=cp.int32)
        offsets = cp.full(S + 1, P, dtype=cp.int32)
        if P:
            is_first = cp.ones(P, dtype=cp.bool_)
            is_first[1:] = sorted_e[1:] != sorted_e[:-1]
            slot = cp.cumsum(is_first, dtype=cp.int32) - 1
            # first row of every slot scatters (unique indices); other rows go to scratch entry S
            idx = cp.minimum(cp.where(is_first, slot, S), S)
            expert_ids[idx] = sorted_e.astype(cp.int32)
            offsets[idx] = cp.arange(P, dtype=cp.int32)
            offsets[S] = P
            _flag_bad_ids(flat, E)
    mt = T if max_tokens is None else int(max_tokens)
    return _built(MoeRouting(sorted_token, pos, expert_ids[:S], offsets, T, topk, E, mt))


# Decode batches of up to this many choices skip the sort (pair_route; moe_forward on device int32 ids): each
# (token, choice) pair is its own one-row slot, so no routing kernel runs -- its launch and the ids' round trip
# were ~1.75 us of the T = 1 layer step (kbit_moe_route_warp, H200, forty-fourth session).  An expert two tokens
# chose is then read by two slots of one launch.  H200, 2026-11-29 (profiling/run64.sh pairs / pairs2, moe_forward
# per layer step, top-10 of 512, k = 4, sorted -> pairs): T = 1 17.37 -> 15.54 us, 2 29.66 -> 27.85, 3 37.37 ->
# 35.35, 4 46.82 -> 44.21; 5 52.91 -> 55.71, 6 63.02 -> 62.42, 7 67.58 -> 71.20, 8 75.58 -> 78.16.  Env
# KBIT_MOE_PAIR_ROUTE (read at import; experiments): the limit, 0 = off.
PAIR_ROUTE_MAX_PAIRS = int(os.environ.get("KBIT_MOE_PAIR_ROUTE", "").strip() or 40)
_PAIR_CONSTS: dict = {}  # (device, T, topk) -> (sorted_token [P], iota [P + 1]) of pair_route


def pair_route(topk_ids, num_experts: int) -> MoeRouting:
    """The unsorted decode layout of topk_ids [T, topk]: P = T * topk one-row slots in pair order.

    expert_ids = topk_ids flattened (a view for C-contiguous int32 device ids; repeats and any order are fine
    for the grouped kernels), offsets = 0..P, sorted_token[i] = i // topk, pos = the identity; max_tokens 1.
    No kernel runs: the index arrays are per-(device, T, topk) constants uploaded at the first call (so call it
    once outside a CUDA-graph capture).  As moe_route, device ids outside [0, E) are not raised on: the grouped
    kernels set ERR_EXPERT_ID and skip those slots.  NumPy ids: host arrays, validated."""
    ids, kd = to_backend(topk_ids, "topk_ids")
    _check_topk_ids(ids, num_experts)
    T, topk = (int(s) for s in ids.shape)
    E = int(num_experts)
    if kd in ("numpy", "torch_cpu"):
        reference_route(ids, E)  # raises on bad ids
        return _built(_pair_routing(_pair_index(T, topk), ids.reshape(-1).astype(np.int32), T, topk, E))
    with gpu_call(topk_ids):
        consts = _pair_consts(T, topk)
        if consts is None:
            raise RuntimeError(f"pair_route: the index constants of {T} x {topk} choices are made on the first call, "
                               "which cannot be captured: call it once before the capture")
        return _built(_pair_routing(consts, _ids_int32(ids.reshape(-1), E), T, topk, E))


def _ids_int32(flat, E: int):
    """Device ids as contiguous int32 for the kernels.  Another integer type is range-checked first (no sync: the
    ERR_EXPERT_ID bit, as the kernels set it), since the conversion would wrap an id like 2**32 + 1 into range."""
    import cupy as cp

    if flat.dtype != cp.int32:
        _flag_bad_ids(flat, E)
    if flat.dtype != cp.int32 or not flat.flags.c_contiguous:
        flat = cp.ascontiguousarray(flat, dtype=cp.int32)
    return flat


def _flag_bad_ids(flat, E: int):
    """Device ids outside [0, E): raise the grouped kernels' sticky ERR_EXPERT_ID flag (no sync)."""
    import cupy as cp

    err = _err_buffer()
    cp.bitwise_or(err, ((flat < 0) | (flat >= E)).any().astype(cp.int32) * ERR_EXPERT_ID, out=err)


def _pair_routing(consts, flat, T: int, topk: int, E: int) -> MoeRouting:
    """pair_route's layout from its constants (_pair_consts) and the flat int32 ids."""
    return MoeRouting(consts[0], consts[1][:T * topk], flat, consts[1], T, topk, E, min(1, T * topk))


def _pair_index(T: int, topk: int):
    """(sorted_token [P], iota [P + 1]) of pair_route's layout, on the host."""
    iota = np.arange(T * topk + 1, dtype=np.int32)
    return iota[:-1] // max(topk, 1), iota


def _pair_consts(T: int, topk: int, dev=None):
    """pair_route's (sorted_token, iota) for T x topk on device dev (default: the current one), uploaded at the first
    call; None where they are not there yet and a CUDA graph is being captured (a host upload cannot be captured)."""
    import cupy as cp

    key = (cp.cuda.Device().id if dev is None else dev, T, topk)
    c = _PAIR_CONSTS.get(key)
    if c is None and not capturing():
        with cp.cuda.Device(key[0]):
            c = _PAIR_CONSTS[key] = tuple(cp.asarray(a) for a in _pair_index(T, topk))
    return c


def _decode_pair_route(x_, topk_ids, E: int):
    """moe_forward's routing at decode sizes (pair_route) where it applies: device int32 C-contiguous ids on x's
    device, 0 < T * topk <= PAIR_ROUTE_MAX_PAIRS; None elsewhere (moe_route sorts)."""
    ids, kd = to_backend(topk_ids, "topk_ids")
    if (kd in ("numpy", "torch_cpu") or ids.ndim != 2 or ids.dtype != np.int32 or not ids.flags.c_contiguous
            or not 0 < ids.size <= PAIR_ROUTE_MAX_PAIRS or ids.data.device_id != x_.data.device_id):
        return None
    consts = _pair_consts(*ids.shape, dev=x_.data.device_id)  # (a dict lookup once uploaded: no device switch)
    return None if consts is None else _pair_routing(consts, ids.reshape(-1), *ids.shape, E)


# One-block counting-sort routing (kbit_moe_route): decode-sized batches.  Its stable
# rank is O(P^2 / threads), fine up to a few thousand choices; larger batches use the
# CuPy argsort path.
ROUTE_KERNEL_MAX_PAIRS = 2048
# Up to this many choices the one-warp comparison sort (kbit_moe_route_warp; the same arrays): decode steps of 1..3
# tokens at top-10, where kbit_moe_route's per-expert zeroing and scan dominate (see run51.sh route).
ROUTE_WARP_MAX_PAIRS = 32
ROUTE_KERNEL_MAX_EXPERTS = 8192


# Larger batches: the same counting sort in three grid-wide passes (kbit_moe_route_count / _scan /
# _scatter, blocks of 1024 choices); the scan pass walks every block's histogram per expert, so it
# stays below ~512 blocks.  Beyond: the CuPy argsort path.
ROUTE_GRID_MAX_PAIRS = 512 * 1024


def _route_kernel(ids, T: int, topk: int, E: int, S: int, max_tokens):
    """The routing kernels: kbit_moe_route (one block) up to ROUTE_KERNEL_MAX_PAIRS choices, the three
    grid passes above (up to ROUTE_GRID_MAX_PAIRS)."""
    import cupy as cp

    P = T * topk
    flat = _ids_int32(ids.reshape(-1), E)
    sorted_token = cp.empty(P, dtype=cp.int32)
    pos = cp.empty(P, dtype=cp.int32)
    expert_ids = cp.empty(S, dtype=cp.int32)
    offsets = cp.empty(S + 1, dtype=cp.int32)

    def launch(part, grid, threads, args, smem, pdl=False):
        fn = GROUPED.function(("route",) + part)
        if fn.max_dynamic_shared_size_bytes < smem:
            fn.max_dynamic_shared_size_bytes = smem
        _pdl.launch(fn, (grid,), (threads,), args, smem, pdl=pdl)

    if P <= ROUTE_KERNEL_MAX_PAIRS:
        # decode sizes: a programmatic dependent with PDL on (either mode; it waits at entry), so the
        # grouped gate/up after it can be resident when it ends; up to ROUTE_WARP_MAX_PAIRS choices one warp
        # (kbit_moe_route_warp: the same arguments and arrays, no shared memory)
        warp = P <= ROUTE_WARP_MAX_PAIRS
        threads = 32 if warp else 1024 if P > 256 or E > 1024 else 256
        pdl = _helper_pdl()
        launch(("warp",) if warp else (), 1, threads, (flat, np.int32(P), np.int32(topk), np.int32(E), np.int32(S),
                                                       sorted_token, pos, expert_ids, offsets, _err_buffer(),
                                                       np.int32(pdl)),
               0 if warp else 4 * (2 * (E + 1) + 2 * threads + P), pdl=pdl)
    else:
        B = -(-P // 1024)
        ids_c = cp.empty(P, dtype=cp.int32)
        hist = cp.empty(B * (E + 1), dtype=cp.int32)
        launch(("count",), B, 1024, (flat, np.int32(P), np.int32(E), ids_c, hist, _err_buffer()), 4 * (E + 1))
        launch(("scan",), 1, 1024, (np.int32(B), np.int32(P), np.int32(E), np.int32(S), hist, expert_ids, offsets),
               4 * (E + 1 + 2 * 1024))
        launch(("scatter",), B, 1024, (ids_c, np.int32(P), np.int32(topk), np.int32(E), hist, sorted_token, pos),
               4 * (E + 1))
    mt = T if max_tokens is None else int(max_tokens)
    return MoeRouting(sorted_token, pos, expert_ids, offsets, T, topk, E, mt)


def gather_rows(x, routing: MoeRouting, out=None):
    """A_sorted[i] = x[sorted_token[i]]  ([P, H], x's dtype).  Host routing arrays are checked (check_routing); on
    the GPU sorted_token must be int32 (host arrays are uploaded), and an entry outside x's rows gathers zeros and
    sets the ERR_ROWS bit of kbitcupy.grouped.read_errors()."""
    x_, kd = to_backend(x, "x")
    if x_.ndim != 2:
        raise ValueError(f"x must be 2-D [tokens, H], got shape {tuple(x_.shape)}")
    if not isinstance(routing, MoeRouting):
        raise TypeError(f"routing must be a MoeRouting, got {type(routing).__name__}")
    if kd in ("numpy", "torch_cpu"):
        st = _host_rows(routing.sorted_token, "routing.sorted_token", int(x_.shape[0]))
        return cpu_result(np.ascontiguousarray(x_[st]), out, kd, {"x": x_})
    import cupy as cp

    with gpu_call(x):
        st = _gpu_rows(routing.sorted_token, "routing.sorted_token", int(x_.shape[0]))
        check_same_device(x=x_, sorted_token=st)
        P, row_bytes = int(st.size), int(x_.shape[1]) * x_.dtype.itemsize
        if row_bytes % 2:
            raise ValueError(f"x's rows must be a whole number of 2-byte units on the GPU, got {dtype_name(x_.dtype)} "
                             f"x {x_.shape[1]}")
        x_ = cp.ascontiguousarray(x_)  # (a copy only for a strided x)
        # our kernel: it lets the grouped gate/up launch right away under PDL (cp.take would not)
        o = out_array(out, (P, int(x_.shape[1])), x_.dtype, inputs={"x": x_, "routing.sorted_token": st})
        if P and row_bytes:
            vec = row_bytes % 16 == 0 and x_.data.ptr % 16 == 0 and o.data.ptr % 16 == 0
            units = row_bytes // 16 if vec else row_bytes // 2
            fn = GROUPED.function(("gather", "u128" if vec else "u16"))
            _launch_helper(fn, P * units, (x_, st, o, np.int32(P), np.int32(units), np.int32(x_.shape[0]),
                                           _err_buffer()))
    return out if out is not None else from_backend(o, kd)


_I32 = np.dtype(np.int32)


def _gpu_rows(a, name: str, n: int, size: int | None = None):
    """A routing's row-index array for a GPU kernel: device int32 1-D (of `size` entries) as is; a host one (NumPy,
    CPU torch) checked against [0, n) and uploaded (not capturable)."""
    if (getattr(a, "_c_contiguous", False) and a.ndim == 1 and a.dtype == _I32
            and (size is None or a.size == size)):  # (the common case first: a routing this module built)
        return a
    if kind(a) == "numpy" or (kind(a) == "torch" and not a.is_cuda):
        import cupy as cp

        a = cp.asarray(_host_rows(a.numpy() if kind(a) == "torch" else a, name, n).astype(np.int32))
    return _device_index_array(a, name, size)


def silu_mul(gate, up, out=None):
    """out = silu(gate) * up (fp32 math, one rounding).  gate/up: [rows, I] views with
    unit column stride (e.g. the two halves of a fused gate/up output)."""
    g_, kd = to_backend(gate, "gate")
    u_, _ = to_backend(up, "up")
    if g_.shape != u_.shape or g_.ndim != 2 or g_.dtype != u_.dtype:
        raise ValueError(f"gate and up must be 2-D of one shape and dtype, got {tuple(g_.shape)} {g_.dtype} and "
                         f"{tuple(u_.shape)} {u_.dtype}")
    rows, I = (int(s) for s in g_.shape)
    if kd in ("numpy", "torch_cpu"):
        _check_float(g_.dtype, "gate/up")
        g = g_.astype(np.float32)
        r = (g / (np.float32(1) + np.exp(-g)) * u_.astype(np.float32)).astype(g_.dtype)
        return cpu_result(r, out, kd, {"gate": g_, "up": u_}, ("gate", "up"))

    if g_.dtype not in ACT_DTYPES:
        raise ValueError(f"gate/up must be float16 or bfloat16 on the GPU, got {dtype_name(g_.dtype)}")
    for nm, a in (("gate", g_), ("up", u_)):
        if a.strides[1] != a.itemsize or (rows > 1 and a.strides[0] % a.itemsize):
            raise ValueError(f"{nm} must have unit column stride")
    with gpu_call(gate):
        check_same_device(gate=g_, up=u_)
        o = out_array(out, (rows, I), g_.dtype, inputs={"gate": g_, "up": u_}, same_ok=("gate", "up"))
        if rows and I:
            fn = GROUPED.function(("silu", dtype_name(g_.dtype)))
            _launch_helper(fn, rows * I, (g_, u_, o, np.int32(rows), np.int32(I),
                                          np.int64(g_.strides[0] // g_.itemsize), np.int64(u_.strides[0] // u_.itemsize)))
    return out if out is not None else from_backend(o, kd)


def _check_float(dt, name: str):
    """The CPU path's dtypes: the kernels' (float16 / bfloat16) and float32 / float64 (an integer array would come
    back as rounded garbage)."""
    if np.dtype(dt) not in ACT_DTYPES + (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"{name} must be float16, bfloat16, float32 or float64, got {dtype_name(dt)}")


def moe_combine(C_sorted, routing: MoeRouting, topk_weights, out=None, *, check_devices: bool = True,
                trusted: bool | None = None):
    """out[t] = sum_j topk_weights[t, j] * C_sorted[pos[t * topk + j]]  (fp32 math, j in
    order, one rounding to C_sorted's dtype).  Returns [T, H].  check_devices: refuse arrays off C_sorted's device
    (moe_forward checked its arrays once and passes False, as to grouped_gemv_fused).  On the GPU a hand-made
    routing's pos (one moe_route / pair_route did not build) is guarded first, without a sync: an entry outside
    C_sorted's rows reads row 0 with weight 0 and sets ERR_ROWS (_guard_pos).  trusted: whether the routing is one
    of this module's (None: looked up; moe_forward passes what it knows)."""
    c_, kd = to_backend(C_sorted, "C_sorted")
    w_, _ = to_backend(topk_weights, "topk_weights")
    T, topk = routing.num_tokens, routing.topk
    if c_.ndim != 2 or c_.shape[0] != T * topk:
        raise ValueError(f"C_sorted must be [tokens * topk = {T * topk}, H], got shape {tuple(c_.shape)}")
    if tuple(w_.shape) != (T, topk):
        raise ValueError(f"topk_weights must have shape {(T, topk)}, got {tuple(w_.shape)}")
    H = int(c_.shape[1])
    if kd in ("numpy", "torch_cpu"):
        _check_float(c_.dtype, "C_sorted")
        _check_float(w_.dtype, "topk_weights")
        pos = _host_rows(routing.pos, "routing.pos", T * topk, T * topk)
        r = (np.asarray(c_, dtype=np.float32)[pos].reshape(T, topk, H) *
             np.asarray(w_, dtype=np.float32)[:, :, None]).sum(1).astype(c_.dtype)
        return cpu_result(r, out, kd, {"C_sorted": c_, "topk_weights": w_})

    wdt = dtype_name(w_.dtype)
    if wdt not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"topk_weights must be float32, float16 or bfloat16 on the GPU, got {wdt}")
    if c_.dtype not in ACT_DTYPES or not c_.flags.c_contiguous:
        raise ValueError("C_sorted must be a contiguous float16 or bfloat16 array")
    if not w_.flags.c_contiguous:
        raise ValueError("topk_weights must be contiguous")
    with gpu_call(C_sorted):
        pos = _gpu_rows(routing.pos, "routing.pos", T * topk, T * topk)
        if check_devices:
            check_same_device(C_sorted=c_, pos=pos, topk_weights=w_)
        o = out_array(out, (T, H), c_.dtype, inputs={"C_sorted": c_, "topk_weights": w_, "routing.pos": pos})
        wk = w_
        if not (trusted if trusted is not None else routing in _BUILT) and pos.size:
            pos, wk = _guard_pos(pos, w_, T * topk)
        if T and H:
            fn = GROUPED.function(("combine", dtype_name(c_.dtype), wdt))
            _launch_helper(fn, T * H, (c_, pos, wk, o, np.int32(T), np.int32(topk), np.int32(H)))
    return out if out is not None else from_backend(o, kd)


def _guard_pos(pos, w_, n: int):
    """A hand-made routing's pos for the combine kernel, which reads C_sorted[pos] unchecked: entries outside [0, n)
    read row 0 with weight 0 instead and raise ERR_ROWS (CuPy ops, no sync: capturable).  Not in the kernel: a
    bound check there broke its batched loads (the layer step 1.5 us slower, H200, 2026-11-30, run65.sh guards).
    Returns (pos, weights) to launch with."""
    import cupy as cp

    bad = (pos < 0) | (pos >= n)
    err = _err_buffer()
    cp.bitwise_or(err, bad.any().astype(cp.int32) * ERR_ROWS, out=err)
    pos = cp.where(bad, np.int32(0), pos).astype(cp.int32, copy=False)
    bits = cp.uint32 if w_.dtype.itemsize == 4 else cp.uint16  # (bfloat16 through its bits)
    wk = cp.where(bad.reshape(w_.shape), bits(0), w_.view(bits)).astype(bits, copy=False).view(w_.dtype)
    return pos, wk


def _device_routing(routing) -> bool:
    """The routing's arrays are device int32 (moe_route's or uploaded), as the fused
    grouped GEMV reads them."""
    return all(kind(a) == "cupy" and a.dtype == np.int32
               for a in (routing.sorted_token, routing.expert_ids, routing.offsets))


# SwiGLU fused into down's A staging while a thread makes at most this many SwiGLU evaluations a pass (the plan's
# rows x K / threads: gemv.grouped_swiglu_per_thread); above it the silu_mul kernel once, then down unfused.  H200,
# 2026-11-28 (forty-third session, run50.sh paths / paths2, moe_forward's gate/up + down chain, k = 4): two token tiles,
# 4 experts (18 / 24 / 32 a thread at 9 / 12 / 16 tokens) 12.31 / 12.66 / 14.02 -> 11.37 / 11.08 / 11.83 us unfused,
# 10 experts (14.4 / 19.2 / 25.6) 16.58 / 17.63 / 19.08 -> 16.96 / 17.34 / 18.06 (fused only at 9 faster), 8 and 16
# experts (<= 16 a thread) 0.2-0.6 us faster fused; one token tile (<= 12.8) within 0.1 us either way.
SWIGLU_FUSE_MAX_PER_THREAD = 16


def _fuse_gather(x_, bank_gu, mt: int, n_slots: int = 0) -> bool:
    """Whether moe_forward fuses the row gather into gate/up: grouped.choose_impl picks the grouped GEMV for it and x
    is 16-byte aligned for its copies.  n_slots: the routing's slots (0: unknown, choose_impl's rule without it).
    H200, 2026-11-28 (run50.sh paths2): also where down takes another kernel -- 32 experts at 9..16 tokens 2.6-2.8 us
    faster than the gather kernel (41.94 -> 39.34 us at 9 tokens)."""
    return x_.data.ptr % 16 == 0 and choose_impl(x_, bank_gu, mt, False, n_slots) == "gemv"


def _fuse_swiglu(x_, bank_dn, mt: int, n_slots: int = 0) -> bool:
    """Whether moe_forward fuses SwiGLU into down: the grouped GEMV runs down and a thread makes at most
    SWIGLU_FUSE_MAX_PER_THREAD SwiGLU evaluations a pass."""
    return (choose_impl(x_, bank_dn, mt, _pdl.active(x_.device.id), n_slots) == "gemv"
            and grouped_swiglu_per_thread(*bank_dn.shape, bank_dn.k, max(1, n_slots), mt,
                                          _sm_count(x_.device.id)) <= SWIGLU_FUSE_MAX_PER_THREAD)


def _decode_fusions(x_, bank_gu, bank_dn, mt: int, n_slots: int = 0) -> tuple:
    """(gather, swiglu): the fusions moe_forward's expert MLP makes (_fuse_gather, _fuse_swiglu)."""
    return _fuse_gather(x_, bank_gu, mt, n_slots), _fuse_swiglu(x_, bank_dn, mt, n_slots)


def expert_mlp(x_, bank_gu, bank_dn, routing: MoeRouting, mt: int, *, method: str = "kernel", check: bool = False,
               alloc=None, fusions=None):
    """moe_forward's expert MLP on the routing's sorted rows, one fused gate/up bank: gate/up -> SwiGLU -> down,
    returning down's [P, H] output (before the weighted combine).  The decode sizes fuse the row gather into gate/up
    and / or SwiGLU into down (_decode_fusions; fusions=(gather, swiglu) overrides it: moe_forward passes (False,
    False) off the device-routing kernel path, profiling/moe_pair.py its A/B paths).  With the gather fused no kernel runs between the routing and gate/up, so
    gate/up waits before reading the ids (ids_stable=False); down follows gate/up, which does not write them.  The
    other grouped calls are chained (implies ids_stable): the kernel right before each is this package's gather /
    silu_mul / gate/up, which writes none of its weights or ids, so the wgmma kernel requests its weights before its
    PDL wait, in safe mode too.  alloc(name, columns): the output of step name ("A" the gathered rows, "h" gate/up,
    "act" SwiGLU, "y" down), a [P, columns] array or None (the call's own); None: every call's own.  The caller has
    checked that every array is on the current device (moe_forward's _check_devices): the fused steps skip that check."""
    H, I = bank_dn.shape[0], bank_dn.shape[1]
    ids, offs, P = routing.expert_ids, routing.offsets, int(routing.sorted_token.size)

    def out(name, cols):
        return alloc(name, cols) if alloc is not None else None

    fg, fs = fusions if fusions is not None else _decode_fusions(x_, bank_gu, bank_dn, mt, int(ids.size))
    gm = dict(method=method, check=check, chained=True)
    if fg:
        h = grouped_gemv_fused(x_, bank_gu, ids, offs, P, mt, a_rows=routing.sorted_token, out=out("h", 2 * I),
                               check_devices=False)  # (the caller checked, see above)
    else:
        h = grouped_matmul(gather_rows(x_, routing, out=out("A", H)), bank_gu, ids, offs, mt, out=out("h", 2 * I), **gm)
    if fs:
        return grouped_gemv_fused(h, bank_dn, ids, offs, P, mt, a_silu=True, out=out("y", H), ids_stable=True,
                                  check_devices=False)
    return grouped_matmul(silu_mul(h[:, :I], h[:, I:], out=out("act", I)), bank_dn, ids, offs, mt, out=out("y", H),
                          **gm)


def _launch_helper(fn, work: int, args):
    """Launch a MoE helper kernel (gather / silu_mul / combine: 256 threads, grid-stride
    over `work` items) on the current stream; with PDL on as a programmatic dependent
    (the kernel's last argument), kbitcupy/_pdl.py."""
    blocks = int(min(-(-work // 256), 132 * 16))
    pdl = _helper_pdl()
    _pdl.launch(fn, (blocks,), (256,), args + (np.int32(pdl),), 0, pdl=pdl)


def _helper_pdl() -> bool:
    """Whether a helper kernel (gather / silu_mul / combine / the one-block routing:
    moe_helper_prologue waits at entry in either mode) launches as a programmatic dependent:
    PDL on, full or safe, on the current device."""
    import cupy as cp

    dev = cp.cuda.Device().id
    return _pdl.active(dev) or _pdl.safe_active(dev)


def _banks(bank_gate_up, bank_down, H):
    if isinstance(bank_gate_up, (tuple, list)):
        if len(bank_gate_up) != 2:
            raise ValueError("bank_gate_up must be a fused bank or a (bank_gate, bank_up) pair")
        bg, bu = bank_gate_up
        for nm, b in (("bank_gate", bg), ("bank_up", bu)):
            checked_bank(b, nm)
        if bg.shape != bu.shape or bg.num_experts != bu.num_experts:
            raise ValueError(f"bank_gate {bg.shape} x {bg.num_experts} and bank_up {bu.shape} x {bu.num_experts} "
                             "must match")
        I = bg.N
        gate_banks = (bg, bu)
        E, Kg = bg.num_experts, bg.K
    else:
        checked_bank(bank_gate_up, "bank_gate_up")
        if bank_gate_up.N % 2:
            raise ValueError(f"a fused gate/up bank has N = 2 * I rows (gate then up); got N = {bank_gate_up.N}")
        I = bank_gate_up.N // 2
        gate_banks = (bank_gate_up,)
        E, Kg = bank_gate_up.num_experts, bank_gate_up.K
    checked_bank(bank_down, "bank_down")
    if Kg != H:
        raise ValueError(f"the gate/up experts' K ({Kg}) must equal x's hidden size ({H})")
    if bank_down.shape != (H, I):
        raise ValueError(f"bank_down experts must have shape (H, I) = {(H, I)}, got {bank_down.shape}")
    if bank_down.num_experts != E:
        raise ValueError(f"bank_down has {bank_down.num_experts} experts but the gate/up bank {E}")
    return gate_banks, I, E


# plan_tokens' experiment hook (read at import): "bound" (the loose bound T) or a row count
_PLAN_TOKENS_HOOK = os.environ.get("KBIT_MOE_PLAN_TOKENS", "").strip()


def plan_tokens(routing: MoeRouting) -> int:
    """Rows per expert to plan the grouped kernels for (their ``max_tokens``).

    routing.max_tokens is a loose bound on the device (T).  With few rows per active
    expert on average (decode batches), plan for 8: an expert with more rows is still
    computed, in passes of 8 rows (kbit_gemv_grouped; the info bit ERR_MAX_TOKENS is
    set).  H200, 2026-11-22: a 32-token step over 242 experts took 809 us planned for 32
    rows per expert.  More rows per expert (prefill): a power of two over 1.5x the mean
    (below), not T; the wgmma kernel computes a larger expert's extra token tiles in its
    first split.  Only for the kernel path on device indices without
    check=True (host-side validation holds max_tokens as a strict bound); env
    KBIT_MOE_PLAN_TOKENS (experiments): "bound" or a count."""
    P = routing.num_tokens * routing.topk
    mt = routing.max_tokens
    if _PLAN_TOKENS_HOOK:
        return mt if _PLAN_TOKENS_HOOK == "bound" else min(mt, int(_PLAN_TOKENS_HOOK))
    S = min(routing.num_experts, P)
    if mt <= 8 or S <= 0:
        return mt
    # The smallest power of two >= 8 covering 1.5x the mean rows per expert: an expert with more is still
    # computed (the GEMV in passes of 8 rows, the wgmma kernel's first split over its extra token tiles), and
    # that tail costs less than planning every expert's tiles taller.  H100, 2026-11-26 (layer26-pt*, k = 4,
    # top-10 of 512, moe_forward per layer step; planned for 8 / 16 / 32 / 64 rows, the loose bound T before):
    # T = 128 (mean 2.7): 518 / 632 / 647 / 712 us; T = 256 (5.1): 609 / 658 / 690 / 761, bound 1360; T = 512
    # (10): 970 / 702 / 721 / 792, bound 1507; T = 1024 (20): 1702 / 1192 / 785 / 828, bound 1775.  (mean <= 4:
    # 8, the decode rule of 2026-11-22.)  A skewed routing (hot experts at many times the mean) runs those
    # experts' extra tiles serially: pass max_tokens to moe_forward where the routing is known to be skewed.
    b = 8
    while b < 1.5 * P / S:
        b *= 2
    return min(mt, b)


def moe_forward(x, bank_gate_up, bank_down, topk_ids, topk_weights, *, routing: MoeRouting | None = None,
                max_tokens: int | None = None, method: str = "auto", check: bool = False):
    """Expert MLP: out[t] = sum_j w[t, j] * down_e(silu(gate_e(x[t])) * up_e(x[t])), e = topk_ids[t, j].

    x: [T, H] float16/bfloat16 (CuPy / CUDA torch: the kernels; NumPy: the host path).
    bank_gate_up: fused bank with experts [2I, H] (rows 0..I-1 gate, I..2I-1 up), or a
    (bank_gate, bank_up) pair of [I, H] banks; bank_down: experts [H, I].
    Steps: route (unless ``routing`` is given; without max_tokens, device int32 topk_ids of at most
    PAIR_ROUTE_MAX_PAIRS choices take pair_route's unsorted one-row slots: no kernel) -> gather rows -> grouped gate/up ->
    silu(gate) * up -> grouped down -> weighted combine.  Intermediates are rounded to
    x's dtype (the reference ``moe_forward_reference(round=True)`` does the same).
    """
    x_, kd = to_backend(x, "x")
    if x_.ndim != 2:
        raise ValueError(f"x must be 2-D [tokens, hidden], got shape {tuple(x_.shape)}")
    if x_.dtype not in ACT_DTYPES:
        raise ValueError(f"x must be float16 or bfloat16, got {dtype_name(x_.dtype)}")
    if not x_.flags.c_contiguous:
        raise ValueError("x must be C-contiguous")
    T, H = (int(s) for s in x_.shape)
    gate_banks, I, E = _banks(bank_gate_up, bank_down, H)
    on_gpu = kd not in ("numpy", "torch_cpu")
    given = routing is not None
    if routing is None and max_tokens is None and on_gpu and not check and method in ("auto", "kernel"):
        routing = _decode_pair_route(x_, topk_ids, E)  # decode sizes: no routing kernel
    if routing is None:
        routing = moe_route(topk_ids, E, max_tokens, check=check)
    if routing.num_tokens != T or routing.num_experts != E:
        if not given:  # (moe_route made it for E experts)
            raise ValueError(f"topk_ids has {routing.num_tokens} rows but x has {T} tokens")
        raise ValueError(f"routing is for {routing.num_tokens} tokens / {routing.num_experts} experts, "
                         f"x has {T} tokens and the banks {E} experts")
    if max_tokens is not None:
        mt = int(max_tokens)
    elif on_gpu and not check and method in ("auto", "kernel"):
        mt = plan_tokens(routing)
    else:
        mt = routing.max_tokens
    w_, _ = to_backend(topk_weights, "topk_weights")
    if not on_gpu and (kind(routing.sorted_token) == "cupy" or kind(w_) == "cupy"):
        raise ValueError("x is on the CPU but the routing / topk_weights are on the GPU")
    with gpu_call(x):  # on x's device: host routing is uploaded there, and everything else must be there
        if on_gpu:
            routing, w_ = _routing_to_gpu(routing, w_, topk_weights)
            _check_devices(x_, gate_banks, bank_down, routing, w_)
        if given and check:
            check_routing(routing, T)  # (syncs, as check does)
        trusted = not given or routing in _BUILT  # (a given host routing was checked and uploaded: built)
        fuse = on_gpu and not check and method in ("auto", "kernel") and _device_routing(routing)
        fusions = None if fuse else (False, False)
        if fuse and not trusted:
            # a hand-made routing: the row gather by its kernel, which flags rows outside x (the fused GEMV's
            # gather reads them as zeros, unflagged)
            fusions = (False, _fuse_swiglu(x_, bank_down, mt, int(routing.expert_ids.size)))
        ids, offs, P = routing.expert_ids, routing.offsets, int(routing.sorted_token.size)

        if on_gpu:
            import cupy as cp

        def new(n):  # the routing's slots cover every sorted row: no zero fill (grouped_matmul's new out)
            return cp.empty((P, n), dtype=x_.dtype) if on_gpu else None

        if len(gate_banks) == 1:
            y = expert_mlp(x_, gate_banks[0], bank_down, routing, mt, method=method, check=check,
                           alloc=lambda name, n: new(n), fusions=fusions)
        else:
            gm = dict(method=method, check=check, chained=True)  # (expert_mlp's chained)
            A = gather_rows(x_, routing)
            hg = grouped_matmul(A, gate_banks[0], ids, offs, mt, out=new(I), **gm)
            hu = grouped_matmul(A, gate_banks[1], ids, offs, mt, out=new(I), **gm)
            y = grouped_matmul(silu_mul(hg, hu), bank_down, ids, offs, mt, out=new(H), **gm)
        # (_check_devices checked its arrays, y is ours)
        o = moe_combine(y, routing, w_, check_devices=False, trusted=trusted if on_gpu else None)
        return from_backend(o, kd)  # (on the call's device and stream)


def _check_devices(x_, gate_banks, bank_down, routing, w_):
    """moe_forward on the GPU: the banks, the routing and the weights on x's device (a kernel given another
    device's pointer would fault or read another GPU's memory)."""
    banks = dict(zip(("bank_gate_up",) if len(gate_banks) == 1 else ("bank_gate", "bank_up"), gate_banks))
    banks["bank_down"] = bank_down
    for nm, b in banks.items():
        if not b.on_gpu:
            raise ValueError(f"x is on the GPU but {nm} is on the CPU; call {nm}.cuda()")
    devs = {nm: b.packed.data.device_id for nm, b in banks.items()}
    devs.update({f"routing.{nm}": getattr(routing, nm).data.device_id
                 for nm in ("sorted_token", "pos", "expert_ids", "offsets")})
    devs["topk_weights"] = w_.data.device_id
    d = x_.data.device_id
    other = {nm: v for nm, v in devs.items() if v != d}
    if other:
        raise ValueError(f"moe_forward: x is on device {d} but {other}")


def _routing_to_gpu(routing, w_, topk_weights):
    """Host routing / weights next to a GPU x: upload them (a copy; not capturable)."""
    import cupy as cp

    arrays = (routing.sorted_token, routing.pos, routing.expert_ids, routing.offsets)
    if kind(routing.sorted_token) != "cupy":
        host = all(kind(a) == "numpy" for a in arrays)
        if host:  # checked on the host (cheap), so int32 loses nothing and the upload is as good as moe_route's
            check_routing(routing)
            validate_routing(routing.expert_ids, routing.offsets, routing.num_experts, routing.num_pairs)
        routing = MoeRouting(*(cp.asarray(a, dtype=cp.int32) if host else cp.asarray(a) for a in arrays),
                             routing.num_tokens, routing.topk, routing.num_experts, routing.max_tokens)
        if host:
            routing = _built(routing)
    if kind(w_) != "cupy":
        w_ = cp.asarray(np.ascontiguousarray(w_))
    return routing, w_


def moe_forward_reference(x, bank_gate_up, bank_down, topk_ids, topk_weights, round: bool = True) -> np.ndarray:
    """float64 oracle of moe_forward from the dequantized experts, token by token.
    round=True rounds h, silu(g)*u, the down output and the result to x's dtype where
    moe_forward does (so only accumulation order and fp16/bf16 weight rounding differ)."""
    x_, _ = to_backend(x, "x")
    x = np.asarray(x_.get() if hasattr(x_, "get") else x_)
    dt = x.dtype
    T, H = x.shape
    gate_banks, I, E = _banks(bank_gate_up, bank_down, H)
    ids = np.asarray(topk_ids.get() if hasattr(topk_ids, "get") else topk_ids)
    w = np.asarray(topk_weights.get() if hasattr(topk_weights, "get") else topk_weights).astype(np.float64)
    if kind(topk_ids) == "torch":
        ids = topk_ids.cpu().numpy()
    if kind(topk_weights) == "torch":
        w = topk_weights.float().cpu().numpy().astype(np.float64)
    rnd = (lambda v: v.astype(dt).astype(np.float64)) if round else (lambda v: v)
    need = sorted(set(int(e) for e in ids.reshape(-1)))
    Wg = [dequantize_experts(b) for b in gate_banks]
    Wd = dequantize_experts(bank_down)
    xf = x.astype(np.float64)
    out = np.zeros((T, H))
    for e in need:
        tok, j = np.nonzero(ids == e)
        if len(Wg) == 1:
            h = rnd(xf[tok] @ Wg[0][e].astype(np.float64).T)
            g, u = h[:, :I], h[:, I:]
        else:
            g = rnd(xf[tok] @ Wg[0][e].astype(np.float64).T)
            u = rnd(xf[tok] @ Wg[1][e].astype(np.float64).T)
        act = rnd(g / (1.0 + np.exp(-g)) * u)
        y = rnd(act @ Wd[e].astype(np.float64).T)
        np.add.at(out, tok, w[tok, j][:, None] * y)
    return rnd(out) if round else out
