"""GPU tests of the grouped (MoE) kernel, expert banks and the MoE forward.

Every output is poisoned with NaN first: rows a call must write are checked finite
and against the float64 reference of each expert's dequantized weight; rows it must
not write stay NaN."""
import numpy as np
import pytest

from kbitcupy.grouped import (ERR_EXPERT_ID, ERR_MAX_TOKENS, ERR_OFFSETS, grouped_matmul, plan, quantize_experts,
                              read_errors, reference_grouped_matmul)
from kbitcupy.moe import (moe_combine, moe_forward, moe_forward_reference, moe_route, reference_route, silu_mul)
from kbitcupy.reference import bfloat16
from test_gemm_gpu import other_codebook

DTYPES = [np.float16, bfloat16]
TOL = {np.dtype(np.float16): 5e-3, bfloat16: 2.5e-2}  # max |C - ref| / max |ref|


def _cp():
    import cupy

    return cupy


def _dev(a):
    """NumPy (incl. bfloat16) -> CuPy, bit-exact."""
    cp = _cp()
    a = np.ascontiguousarray(a)
    if a.dtype == bfloat16:
        return cp.asarray(a.view(np.uint16)).view(bfloat16)
    return cp.asarray(a)


def _host(a):
    """CuPy -> NumPy, bit-exact (2-byte floats go through a uint16 view)."""
    if a.dtype == np.float16 or a.dtype == bfloat16:
        return a.view(_cp().uint16).get().view(a.dtype)
    return a.get()


def _nan(shape, dtype):
    cp = _cp()
    bits = 0x7E00 if np.dtype(dtype) == np.float16 else 0x7FC0
    return cp.full(shape, bits, dtype=cp.uint16).view(dtype)


def _offsets(counts):
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)


def _bank(rng, E, N, K, k, on_gpu_quant=False):
    W = (rng.standard_normal((E, N, K)) * 0.05).astype(np.float32)
    if on_gpu_quant:
        return quantize_experts(_cp().asarray(W), k)
    return quantize_experts(W, k).cuda()


def _check(out_d, A, bank, ids, offs, dtype):
    out = _host(out_d).astype(np.float64)
    ref = reference_grouped_matmul(A, bank, ids, offs)
    covered = np.zeros(out.shape[0], bool)
    for s in range(len(ids)):
        covered[offs[s]:offs[s + 1]] = True
    assert np.all(np.isfinite(out[covered])), "covered rows not written (NaN left)"
    assert np.all(np.isnan(out[~covered])), "rows no slot covers were written"
    if covered.any():
        err = np.abs(out[covered] - ref[covered]).max() / max(np.abs(ref[covered]).max(), 1e-30)
        assert err < TOL[np.dtype(dtype)], f"relative error {err:.3g}"
    return out


def _run(A, bank, ids, offs, max_tokens, dtype, device_index=True, **kw):
    cp = _cp()
    out = _nan((A.shape[0], bank.N), dtype)
    ids_a = cp.asarray(ids, dtype=cp.int32) if device_index else np.asarray(ids)
    offs_a = cp.asarray(offs, dtype=cp.int32) if device_index else np.asarray(offs)
    r = grouped_matmul(_dev(A), bank, ids_a, offs_a, max_tokens, out=out, **kw)
    assert r is out
    return out


# ----------------------------------------------------------------------------- bank
@pytest.mark.gpu
@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("wdtype", ["float32", "float16", "bfloat16"])
def test_gpu_quantize_experts_matches_reference(rng, k, wdtype):
    E, N, K = 5, 136, 96
    W = (rng.standard_normal((E, N, K)) * 0.05).astype(np.float32)
    W[2] *= 1e-4  # an expert needing its own tensor scale
    W[4] *= 40.0
    Wt = W.astype(bfloat16) if wdtype == "bfloat16" else W.astype(wdtype)
    ref = quantize_experts(np.asarray(Wt, dtype=np.float32), k)
    bank = quantize_experts(_dev(Wt), k)
    assert bank.on_gpu
    np.testing.assert_array_equal(bank.packed.get(), ref.packed)
    np.testing.assert_array_equal(bank.absmax.get(), ref.absmax)
    np.testing.assert_array_equal(bank.tensor_scale.get(), ref.tensor_scale)
    e = bank.expert(4)
    assert e.on_gpu and e.tensor_scale == float(ref.tensor_scale[4])


# ----------------------------------------------------------------------------- correctness
@pytest.mark.gpu
@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_k_dtype_uneven(rng, k, dtype):
    # odd N, K not a multiple of 128, uneven counts with empty slots, any order, repeated ids
    E, N, K = 16, 44, 224
    bank = _bank(rng, E, N, K, k)
    counts = [3, 0, 7, 1, 16, 0, 2, 5]
    ids = np.array([9, 3, 0, 15, 9, 4, 9, 1], np.int32)
    offs = _offsets(counts)
    A = rng.standard_normal((offs[-1] + 3, K)).astype(dtype)  # 3 trailing rows no slot covers
    out = _run(A, bank, ids, offs, max(counts), dtype)
    _check(out, A, bank, ids, offs, dtype)
    # odd N exercises the scalar store path too
    bank19 = _bank(rng, 4, 19, 64, k)
    o19 = _run(A[:, :64].copy(), bank19, ids[:3] % 4, offs[:4], 7, dtype)
    _check(o19, A[:, :64].copy(), bank19, ids[:3] % 4, offs[:4], dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("ntok", [1, 2, 4, 8, 16, 32, 64])
def test_tokens_per_expert(rng, ntok):
    E, N, K, dtype = 12, 128, 512, np.float16
    bank = _bank(rng, E, N, K, 4)
    ids = np.array([7, 2, 11, 0, 5], np.int32)
    offs = _offsets([ntok] * len(ids))
    A = rng.standard_normal((offs[-1], K)).astype(dtype)
    out = _run(A, bank, ids, offs, ntok, dtype)
    _check(out, A, bank, ids, offs, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_one_expert_all_tokens(rng, dtype):
    E, N, K = 32, 64, 256
    bank = _bank(rng, E, N, K, 4)
    counts = [0] * 10
    counts[6] = 64
    ids = np.arange(10, dtype=np.int32)[::-1].copy()
    offs = _offsets(counts)
    A = rng.standard_normal((64, K)).astype(dtype)
    out = _run(A, bank, ids, offs, 64, dtype)
    _check(out, A, bank, ids, offs, dtype)


@pytest.mark.gpu
def test_many_experts_active(rng):
    dtype = np.float16
    bank = _bank(rng, 128, 32, 128, 3)
    ids = rng.permutation(128)[:64].astype(np.int32)
    counts = rng.integers(0, 6, size=64)
    offs = _offsets(counts)
    A = rng.standard_normal((offs[-1], 128)).astype(dtype)
    _check(_run(A, bank, ids, offs, int(counts.max()), dtype), A, bank, ids, offs, dtype)
    # a 512-expert bank of small shape, 300 slots (some repeated, some empty)
    bank512 = _bank(rng, 512, 24, 64, 4)
    ids = rng.integers(0, 512, size=300).astype(np.int32)
    counts = rng.integers(0, 4, size=300)
    offs = _offsets(counts)
    A = rng.standard_normal((offs[-1], 64)).astype(dtype)
    _check(_run(A, bank512, ids, offs, int(counts.max()), dtype), A, bank512, ids, offs, dtype)
    # more than 16 column groups per SM (200 slots x 17 groups): small slice blocks over several waves
    bank_w = _bank(rng, 64, 264, 1056, 4)
    ids = rng.integers(0, 64, size=200).astype(np.int32)
    counts = rng.integers(0, 3, size=200)
    offs = _offsets(counts)
    A = rng.standard_normal((offs[-1], 1056)).astype(dtype)
    from kbitcupy.gemv import grouped_plan
    assert grouped_plan(264, 1056, 4, 200, 2)[4::-4] == (4, 2)  # 4 groups of 2 warps per block
    _check(_run(A, bank_w, ids, offs, int(counts.max()), dtype), A, bank_w, ids, offs, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("shape,slots", [((1024, 2048), 48), ((2048, 512), 48), ((256, 1024), 400)])
def test_many_slots_small_block_plans(rng, k, shape, slots):
    # the several-wave plans of grouped_plan: gate/up (48 slots) 4 x 2-warp groups (4 x 1 at k = 2),
    # down 4 (k = 5: 8) one-warp groups, K of 8 steps at 400 slots (over 48 groups per SM) 8 x 1 (4 x 1
    # at k = 2);
    # repeated ids, empty slots, up to 3 rows a slot
    from kbitcupy.gemv import grouped_kernel_key, grouped_plan

    N, K = shape
    dtype = DTYPES[k % 2]
    want = {(1024, 2048): (4, 1) if k == 2 else (4, 2), (2048, 512): (8, 1) if k == 5 else (4, 1),
            (256, 1024): (4, 1) if k == 2 else (8, 1)}[shape]
    p = grouped_plan(N, K, k, slots, 8)
    assert p[4::-4] == want
    # 4-warp blocks at k = 2, 4: the 96-register kernel (grouped_slw)
    assert grouped_kernel_key(k, "float16", 0, False, p, slots)[0] == (
        "grouped_slw" if want[0] * want[1] == 4 and k in (2, 4) else "grouped_sl")
    bank = _bank(rng, 24, N, K, k, on_gpu_quant=True)
    ids = rng.integers(0, 24, size=slots).astype(np.int32)
    counts = rng.integers(0, 4, size=slots)
    offs = _offsets(counts)
    A = rng.standard_normal((offs[-1], K)).astype(dtype)
    _check(_run(A, bank, ids, offs, 8, dtype), A, bank, ids, offs, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,dtype", [((1024, 2048), np.float16), ((512, 2048), bfloat16),
                                         ((2048, 512), np.float16), ((2048, 512), bfloat16)])
@pytest.mark.parametrize("counts", [[1] * 10, [8, 3, 0, 12, 1, 5, 2, 9, 4, 6], [40, 64, 17]])
def test_real_moe_shapes_k4(rng, shape, dtype, counts):
    N, K = shape
    E = 16
    bank = _bank(rng, E, N, K, 4, on_gpu_quant=True)
    ids = rng.permutation(E)[:len(counts)].astype(np.int32)
    offs = _offsets(counts)
    A = rng.standard_normal((offs[-1], K)).astype(dtype)
    out = _run(A, bank, ids, offs, max(counts), dtype)
    _check(out, A, bank, ids, offs, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,slots", [((2048, 512), 10), ((1024, 2048), 8), ((1024, 2048), 20)])
def test_grouped_gemv_two_tile_slices(rng, k, dtype, shape, slots):
    """9..16 tokens an expert where the grouped GEMV's plan is the slices form (an SM's share of all slots' groups side
    by side in one block, one wave; gemv.grouped_plan) and grouped_matmul runs it (choose_impl): down-like with 10
    slots (10 groups x 1 warp a block), gate/up-like with 8 (4 x 4) and 20 (11 x 1: a slot's last block 9 groups);
    uneven counts of 9..16 with an empty slot, fresh random inputs, against the reference."""
    from kbitcupy.gemv import grouped_plan
    from kbitcupy.grouped import choose_impl
    N, K = shape
    bank = _bank(rng, 24, N, K, k, on_gpu_quant=True)
    counts = rng.integers(9, 17, size=slots)
    counts[1] = 0
    ids = rng.permutation(24)[:slots].astype(np.int32)
    offs = _offsets(counts)
    A = rng.standard_normal((offs[-1], K)).astype(dtype)
    assert grouped_plan(N, K, k, slots, 16, sms=_cp().cuda.Device().attributes["MultiProcessorCount"])[4] > 0
    assert choose_impl(_dev(A), bank, 16, False, slots) == "gemv"
    out = _run(A, bank, ids, offs, 16, dtype)
    _check(out, A, bank, ids, offs, dtype)


@pytest.mark.gpu
def test_matches_kernel_emulation(rng):
    # near bit-level agreement with the NumPy model of the kernel (same B rounding)
    from test_grouped import emulate_grouped

    dtype, k = np.float16, 5
    bank = _bank(rng, 3, 136, 96, k)
    ids, offs = np.array([0, 2], np.int32), _offsets([4, 17])
    A = rng.standard_normal((offs[-1], 96)).astype(dtype)
    p = plan(136, 96, k, 2, 17, warps=4, cg=2)
    out = _host(_run(A, bank, ids, offs, 17, dtype, plan_override=dict(warps=4, cg=2))).astype(np.float64)
    emu = emulate_grouped(A, bank.cpu(), ids, offs, p, dtype).astype(dtype).astype(np.float64)
    np.testing.assert_allclose(out, emu, rtol=2e-3, atol=1e-4)


# ----------------------------------------------------------------------------- plans / passes
@pytest.mark.gpu
@pytest.mark.parametrize("pover", [dict(warps=1, cg=1), dict(warps=8, cg=1), dict(warps=8, cg=8),
                                   dict(warps=4, cg=2, pass_rows=8), dict(warps=2, cg=2, pass_rows=3)])
def test_plan_overrides(rng, pover):
    dtype = bfloat16
    bank = _bank(rng, 6, 72, 640, 4)
    counts = [5, 0, 21, 2]
    ids, offs = np.array([1, 3, 5, 1], np.int32), _offsets(counts)
    A = rng.standard_normal((offs[-1], 640)).astype(dtype)
    _check(_run(A, bank, ids, offs, 21, dtype, plan_override=pover), A, bank, ids, offs, dtype)


@pytest.mark.gpu
def test_understated_max_tokens_is_still_correct(rng):
    dtype = np.float16
    bank = _bank(rng, 4, 64, 256, 4)
    counts = [3, 50, 7]
    ids, offs = np.array([2, 0, 3], np.int32), _offsets(counts)
    A = rng.standard_normal((offs[-1], 256)).astype(dtype)
    read_errors(reset=True)
    out = _run(A, bank, ids, offs, 8, dtype)  # device indices: no host check, several passes
    _check(out, A, bank, ids, offs, dtype)
    assert read_errors(reset=True) == ERR_MAX_TOKENS
    with pytest.raises(ValueError, match="max_tokens = 8 is smaller"):
        _run(A, bank, ids, offs, 8, dtype, device_index=False)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [2, 4, 5])
def test_grouped_gemv_slices(rng, k):
    """The grouped GEMV with column groups side by side (grouped_plan gpb >= 1,
    kbit_gemv_grouped_sl): a last block the groups do not fill, K % 128 != 0, empty slots, a
    repeated id, a slot over max_tokens (two passes, flagged, still correct), the fused row
    gather and SwiGLU; bit-identical with the group loop at the same warps per group."""
    from kbitcupy.gemv import grouped_gemv
    from kbitcupy.grouped import _err_buffer

    cp = _cp()
    E, N, K = 6, 200, 608
    bank = _bank(rng, E, N, K, k)
    counts = [3, 0, 11, 1, 5, 2]
    ids = np.array([4, 1, 0, 4, 2, 5], np.int32)
    offs = _offsets(counts)
    ids_d, offs_d = cp.asarray(ids), cp.asarray(offs)
    plans = [(("gpb", 0), ("warps", 4)), (("gpb", 3), ("warps", 4)), (("gpb", 4), ("warps", 4)),
             (("gpb", 5), ("warps", 3)), (("gpb", 16), ("warps", 1))]
    for dtype in DTYPES:
        A = rng.standard_normal((offs[-1] + 2, K)).astype(dtype)
        res = {}
        for ov in plans:
            read_errors(reset=True)
            out = _nan((A.shape[0], N), dtype)
            grouped_gemv(_dev(A), bank, ids_d, offs_d, out, 8, _err_buffer(), plan_override=ov)
            res[ov] = _check(out, A, bank, ids, offs, dtype)
            assert read_errors(reset=True) == ERR_MAX_TOKENS, ov
        for ov in plans[1:3]:
            np.testing.assert_array_equal(res[plans[0]], res[ov])
    # the fused MoE steps (row gather; SwiGLU of [gate | up] rows) in the slices kernel
    dtype = np.float16
    x = rng.standard_normal((9, K)).astype(dtype)
    rows_idx = rng.integers(0, 10, size=offs[-1]).astype(np.int32)  # 9: outside x, reads zeros
    h = rng.standard_normal((offs[-1], 2 * K)).astype(dtype)
    for kw, src in ((dict(a_rows=cp.asarray(rows_idx)), x), (dict(a_silu=True), h)):
        got = {}
        for ov in (plans[0], plans[1]):
            out = _nan((offs[-1], N), dtype)
            grouped_gemv(_dev(src), bank, ids_d, offs_d, out, 11, _err_buffer(), plan_override=ov, **kw)
            got[ov] = _host(out).view(np.uint16)
        np.testing.assert_array_equal(got[plans[0]], got[plans[1]])
        if "a_rows" in kw:
            Ax = np.where((rows_idx < 9)[:, None], x[np.minimum(rows_idx, 8)], 0).astype(dtype)
            _check(_dev(got[plans[1]].view(dtype)), Ax, bank, ids, offs, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_gemv_ten_experts_down_two_blocks(rng, dtype):
    """10 experts' down at k = 4: grouped_plan's two blocks of 5 groups x 2 warps per SM on the 96-register
    kernel (kbit_gemv_grouped_slw), in the wait-first and the stable launch, with plain rows and moe_forward's
    SwiGLU staging, 0..4 tokens a slot, against the reference."""
    from kbitcupy.gemv import grouped_gemv, grouped_kernel_key, grouped_plan
    from kbitcupy.grouped import _err_buffer

    cp = _cp()
    N, K, E = 2048, 512, 24
    p = grouped_plan(N, K, 4, 10, 4)
    assert p[4::-4] == (5, 2) and grouped_kernel_key(4, "float16", 0, False, p, 10)[0] == "grouped_slw"
    bank = _bank(rng, E, N, K, 4, on_gpu_quant=True)
    ids = rng.permutation(E)[:10].astype(np.int32)
    counts = rng.integers(0, 5, size=10)
    counts[rng.integers(0, 10)] = 4
    offs = _offsets(counts)
    ids_d, offs_d = cp.asarray(ids), cp.asarray(offs)
    A = rng.standard_normal((offs[-1], K)).astype(dtype)
    h = rng.standard_normal((offs[-1], 2 * K)).astype(dtype)
    act = silu_mul(h[:, :K], h[:, K:])  # (the NumPy path: fp32 math, one rounding, as the kernel's staging)
    for src, kw, ref_A in ((A, {}, A), (h, dict(a_silu=True), act)):
        for stable in (False, True):
            out = _nan((offs[-1], N), dtype)
            grouped_gemv(_dev(src), bank, ids_d, offs_d, out, 4, _err_buffer(), ids_stable=stable, **kw)
            _check(out, ref_A, bank, ids, offs, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [2, 4])
def test_grouped_gemv_passes_of_max_tokens(rng, k):
    """The grouped GEMV stages at most max_tokens rows a pass (its shared memory is reserved for
    that many): a slot over it runs more passes, flagged, bit-identical with a plan for 8 rows
    (a row's result does not depend on the pass), in the loop, the slices and the 96-register
    slices kernel; the fused SwiGLU too."""
    from kbitcupy.gemv import grouped_gemv
    from kbitcupy.grouped import _err_buffer

    cp = _cp()
    E, N, K = 5, 200, 608
    bank = _bank(rng, E, N, K, k)
    counts = [1, 7, 0, 2, 3]
    ids, offs = np.array([3, 0, 1, 4, 3], np.int32), _offsets(counts)
    ids_d, offs_d = cp.asarray(ids), cp.asarray(offs)
    A = rng.standard_normal((offs[-1], K)).astype(np.float16)
    h = rng.standard_normal((offs[-1], 2 * K)).astype(np.float16)
    # ("sms", 1): the plan's device of one SM, so that 4-warp slice blocks count as several waves (slw)
    for ov in ((("gpb", 0), ("warps", 4)), (("gpb", 3), ("warps", 4)), (("gpb", 4), ("warps", 1), ("sms", 1)), None):
        for src, kw in ((A, {}), (h, dict(a_silu=True))):
            got = {}
            for mt in (8, 2, 1):
                read_errors(reset=True)
                out = _nan((offs[-1], N), np.float16)
                grouped_gemv(_dev(src), bank, ids_d, offs_d, out, mt, _err_buffer(), plan_override=ov, **kw)
                got[mt] = _host(out).view(np.uint16)
                assert read_errors(reset=True) == (0 if mt == 8 else ERR_MAX_TOKENS), (ov, mt)
            np.testing.assert_array_equal(got[8], got[2])
            np.testing.assert_array_equal(got[8], got[1])
            if not kw:
                _check(_dev(got[1].view(np.float16)), A, bank, ids, offs, np.float16)


@pytest.mark.gpu
def test_grouped_gemv_plan_follows_max_tokens(rng):
    """The grouped GEMV's cached launch follows grouped_plan for every max_tokens, whatever was
    called before (a key of only "max_tokens > 8" once let a 1-token call's two-block plan serve
    8-token calls): 8 experts of MoE gate/up fused, 1 -> 8 -> 1 -> 4 tokens, results checked."""
    from kbitcupy import gemv as G
    from kbitcupy.grouped import _err_buffer

    cp = _cp()
    E, N, K, S = 12, 1024, 2048, 8
    bank = _bank(rng, E, N, K, 4)
    ids = np.arange(S, dtype=np.int32)
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    for mt in (1, 8, 1, 4):
        offs = _offsets([mt] * S)
        A = rng.standard_normal((offs[-1], K)).astype(np.float16)
        out = _nan((offs[-1], N), np.float16)
        launched = []
        real = G._pdl.launch
        try:
            G._pdl.launch = lambda fn, grid, block, *a, **kw: (launched.append(block), real(fn, grid, block, *a, **kw))
            G.grouped_gemv(_dev(A), bank, cp.asarray(ids), cp.asarray(offs), out, mt, _err_buffer())
        finally:
            G._pdl.launch = real
        warps, _, _, _, gpb = G.grouped_plan(N, K, 4, S, mt, sms=sms)
        assert launched == [(warps * 32, max(gpb, 1))], (mt, launched)
        _check(out, A, bank, ids, offs, np.float16)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_grouped_gemv_default_codebook(rng, k):
    """A bank with the default codebook runs the grouped GEMV with the levels compiled in (CBD,
    for k in GROUPED_CBD_KS); in safe PDL (the grouped kernels wait at entry) its pair table is
    built before the wait, once for every row chunk.  Against the same bank flagged not default
    (the codebook loaded), bit for bit, in every launch mode, the slices and the group-loop
    kernels, the fused row gather and SwiGLU, more rows than max_tokens (several chunks) and both
    dtypes; a forced flag on another codebook gives the default levels' result where CBD is
    used (the CBD kernel really ran) and its own levels' result elsewhere; a bank with another
    codebook is not flagged and matches its own reference."""
    import kbitcupy as kb
    from dataclasses import replace

    from kbitcupy.gemv import GROUPED_CBD_KS, grouped_gemv
    from kbitcupy.grouped import _err_buffer

    cp = _cp()
    E, N, K = 5, 96, 480
    bank = _bank(rng, E, N, K, k)
    assert bank.default_codebook
    loaded = replace(bank)
    object.__setattr__(loaded, "default_codebook", False)
    counts = [2, 0, 19, 1, 6]  # 19 > max_tokens: chunks of 8 rows
    ids = np.array([3, 1, 0, 4, 3], np.int32)
    offs = _offsets(counts)
    ids_d, offs_d = cp.asarray(ids), cp.asarray(offs)
    plans = [(("gpb", 0), ("warps", 4)), (("gpb", 3), ("warps", 4))]
    x = rng.standard_normal((7, K)).astype(np.float16)
    rows_idx = rng.integers(0, 8, size=offs[-1]).astype(np.int32)  # 7: outside x, reads zeros
    h = rng.standard_normal((offs[-1], 2 * K)).astype(np.float16)
    old = kb.set_pdl(False)
    try:
        for mode in (False, "safe", True):
            kb.set_pdl(mode)
            for dtype in DTYPES:
                A = rng.standard_normal((offs[-1] + 2, K)).astype(dtype)
                for ov in plans:
                    for stable in ((False, True) if mode is True else (False,)):
                        got = []
                        for b in (bank, loaded):
                            out = _nan((A.shape[0], N), dtype)
                            grouped_gemv(_dev(A), b, ids_d, offs_d, out, 8, _err_buffer(), plan_override=ov,
                                         ids_stable=stable)
                            got.append(_check(out, A, bank, ids, offs, dtype))
                        np.testing.assert_array_equal(got[0], got[1], err_msg=f"{mode} {ov} {stable}")
            for kw, src in ((dict(a_rows=cp.asarray(rows_idx)), x), (dict(a_silu=True), h)):
                got = []
                for b in (bank, loaded):
                    out = _nan((offs[-1], N), np.float16)
                    grouped_gemv(_dev(src), b, ids_d, offs_d, out, 8, _err_buffer(), plan_override=plans[1], **kw)
                    got.append(_host(out).view(np.uint16))
                np.testing.assert_array_equal(got[0], got[1], err_msg=f"{mode} {list(kw)}")
    finally:
        kb.set_pdl(old)
    read_errors(reset=True)
    # another codebook: not flagged, its own levels loaded; the flag forced onto it gives the
    # default levels' result instead
    ob, forced = other_codebook(bank, k)
    A = rng.standard_normal((offs[-1], K)).astype(np.float16)
    for b, ref_bank in ((ob, ob), (forced, bank if k in GROUPED_CBD_KS else ob)):
        for ov in plans:
            out = _nan((offs[-1], N), np.float16)
            grouped_gemv(_dev(A), b, ids_d, offs_d, out, 8, _err_buffer(), plan_override=ov)
            _check(out, A, ref_bank, ids, offs, np.float16)
    read_errors(reset=True)


# ----------------------------------------------------------------------------- guards
@pytest.mark.gpu
def test_bad_host_offsets_rejected_before_any_kernel(rng):
    dtype = np.float16
    bank = _bank(rng, 4, 32, 64, 4)
    A = _dev(rng.standard_normal((10, 64)).astype(dtype))
    out = _nan((10, 32), dtype)
    for offs, msg in (([0, 6, 4, 10], "non-decreasing"), ([0, 4, 6, 11], "exceeds the 10 rows"),
                      ([-1, 4, 6, 10], "negative"), ([0, 4, 10], "len\\(expert_ids\\) \\+ 1")):
        with pytest.raises(ValueError, match=msg):
            grouped_matmul(A, bank, np.array([0, 1, 2], np.int32), np.array(offs, np.int32), 10, out=out)
    with pytest.raises(ValueError, match=r"expert_ids\[1\] = 4"):
        grouped_matmul(A, bank, np.array([0, 4, 2], np.int32), np.array([0, 4, 6, 10], np.int32), 10, out=out)
    assert np.all(np.isnan(_host(out).astype(np.float32)))
    cp = _cp()
    with pytest.raises(ValueError, match="int32"):
        grouped_matmul(A, bank, cp.array([0, 1], dtype=cp.int64), cp.array([0, 4, 10], dtype=cp.int32), 10, out=out)
    with pytest.raises(ValueError, match="offsets must have 3"):
        grouped_matmul(A, bank, cp.array([0, 1], dtype=cp.int32), cp.array([0, 10], dtype=cp.int32), 10, out=out)


@pytest.mark.gpu
def test_device_guards(rng):
    cp = _cp()
    dtype = np.float16
    E = 4
    bank = _bank(rng, E, 32, 64, 4)
    A_h = rng.standard_normal((10, 64)).astype(dtype)
    A = _dev(A_h)
    ids = cp.array([0, 7, 2], dtype=cp.int32)  # slot 1 names expert 7 of 4
    offs = cp.array([0, 4, 6, 10], dtype=cp.int32)
    # check=True: host validation first, nothing runs
    out = _nan((10, 32), dtype)
    with pytest.raises(ValueError, match=r"expert_ids\[1\] = 7"):
        grouped_matmul(A, bank, ids, offs, 4, out=out, check=True)
    assert np.all(np.isnan(_host(out).astype(np.float32)))
    # no check: the bad slot writes nothing and flags it, the others are computed
    read_errors(reset=True)
    grouped_matmul(A, bank, ids, offs, 4, out=out)
    flags = read_errors(reset=True)
    assert flags == ERR_EXPERT_ID
    o = _host(out).astype(np.float64)
    assert np.all(np.isnan(o[4:6])) and np.all(np.isfinite(o[:4])) and np.all(np.isfinite(o[6:]))
    ref = reference_grouped_matmul(A_h, bank, np.array([0, 0, 2]), np.array([0, 4, 6, 10]))
    for rows in (slice(0, 4), slice(6, 10)):
        assert np.abs(o[rows] - ref[rows]).max() < TOL[np.dtype(dtype)] * np.abs(ref[rows]).max()
    # non-monotone device offsets: slot 1 ([6, 5)) is skipped and flagged
    out2 = _nan((10, 32), dtype)
    grouped_matmul(A, bank, cp.array([0, 1, 2], dtype=cp.int32), cp.array([0, 6, 5, 10], dtype=cp.int32), 6,
                   out=out2)
    assert read_errors(reset=True) & ERR_OFFSETS
    with pytest.raises(ValueError, match="non-decreasing"):
        grouped_matmul(A, bank, cp.array([0, 1, 2], dtype=cp.int32), cp.array([0, 6, 5, 10], dtype=cp.int32), 6,
                       out=out2, check=True)
    # offsets past A's rows: flagged, nothing read out of bounds
    out3 = _nan((10, 32), dtype)
    grouped_matmul(A, bank, cp.array([0], dtype=cp.int32), cp.array([4, 400], dtype=cp.int32), 64, out=out3)
    assert read_errors(reset=True) == ERR_OFFSETS
    assert np.all(np.isnan(_host(out3).astype(np.float32)))


# ----------------------------------------------------------------------------- capture
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_graph_capture(rng, dtype):
    cp = _cp()
    bank = _bank(rng, 16, 256, 512, 4)
    counts = [2, 0, 9, 1, 30]
    ids = cp.asarray(np.array([3, 8, 15, 3, 0], np.int32))
    offs = cp.asarray(_offsets(counts))
    A = _dev(rng.standard_normal((sum(counts), 512)).astype(dtype))
    out1, out2 = _nan((sum(counts), 256), dtype), _nan((sum(counts), 256), dtype)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        grouped_matmul(A, bank, ids, offs, 30, out=out1)  # warm: compile, plan, error buffer
        s.begin_capture()
        grouped_matmul(A, bank, ids, offs, 30, out=out2)
        graph = s.end_capture()
        graph.launch(stream=s)
    s.synchronize()
    np.testing.assert_array_equal(_host(out2).view(np.uint16), _host(out1).view(np.uint16))
    # replay with new activations in the same buffer
    A2 = _dev(rng.standard_normal((sum(counts), 512)).astype(dtype))
    A.view(cp.uint16)[...] = A2.view(cp.uint16)
    graph.launch(stream=s)
    s.synchronize()
    _check(out2, _host(A2), bank, _host(ids), _host(offs), dtype)


# ----------------------------------------------------------------------------- fallback, torch
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_dequant_fallback(rng, dtype):
    bank = _bank(rng, 8, 64, 256, 4)
    counts = [100, 0, 3, 70]
    ids, offs = np.array([5, 1, 5, 2], np.int32), _offsets(counts)
    A = rng.standard_normal((offs[-1], 256)).astype(dtype)
    _check(_run(A, bank, ids, offs, 100, dtype), A, bank, ids, offs, dtype)  # auto: dequant (wgmma on sm_90)
    _check(_run(A, bank, ids, offs, 100, dtype, method="kernel"), A, bank, ids, offs, dtype)
    _check(_run(A, bank, ids, offs, 100, dtype, method="dequant", device_index=False), A, bank, ids, offs, dtype)


@pytest.mark.gpu
def test_torch_tensors(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    bank = _bank(rng, 8, 64, 128, 4)
    counts = [3, 5, 0, 2]
    ids, offs = np.array([7, 0, 3, 7], np.int32), _offsets(counts)
    A = rng.standard_normal((offs[-1], 128)).astype(np.float32)
    At = torch.from_numpy(A).to("cuda", torch.bfloat16)
    out = grouped_matmul(At, bank, torch.from_numpy(ids).cuda(), torch.from_numpy(offs).cuda(), 5)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.shape == (offs[-1], 64)
    ref = reference_grouped_matmul(At.float().cpu().numpy(), bank, ids, offs)
    err = np.abs(out.float().cpu().numpy() - ref).max() / np.abs(ref).max()
    assert err < TOL[bfloat16]


# ----------------------------------------------------------------------------- MoE
@pytest.mark.gpu
def test_moe_route_gpu_matches_reference(rng):
    cp = _cp()
    # (300, 10, 512) .. (1100, 8, 64): the grid kernels (> 2048 choices; 3000, 5000: partial last blocks, 64 / 512
    # experts; 1100 x 8: every expert in every block); (300, 10, 9000): the CuPy path (more experts than the kernels')
    for T, topk, E in ((1, 10, 512), (33, 4, 16), (200, 10, 512), (5, 2, 4), (300, 10, 512), (500, 10, 512),
                       (1024, 10, 512), (1100, 8, 64), (300, 10, 9000)):
        ids = np.array([rng.choice(E, topk, replace=False) for _ in range(T)], np.int32)
        ref = reference_route(ids, E)
        r = moe_route(cp.asarray(ids), E)
        for nm in ("sorted_token", "pos", "expert_ids", "offsets"):
            np.testing.assert_array_equal(getattr(r, nm).get(), getattr(ref, nm), err_msg=nm)
        assert r.max_tokens == T
    read_errors(reset=True)
    moe_route(cp.asarray(np.array([[0, 1], [2, 5]], np.int32)), 4)  # id 5 of 4 experts
    assert read_errors(reset=True) == ERR_EXPERT_ID
    # the grid kernels: bad ids parked after every valid row, the flag raised, valid rows as the reference's
    ids = np.array([rng.choice(16, 4, replace=False) for _ in range(700)], np.int32)
    ids[3, 1], ids[650, 2] = 16, -2
    r = moe_route(cp.asarray(ids), 16)
    assert read_errors(reset=True) == ERR_EXPERT_ID
    good = (ids >= 0) & (ids < 16)
    nvalid = int(good.sum())
    assert r.offsets.get()[np.searchsorted(r.expert_ids.get(), 15) + 1] == nvalid
    pos = r.pos.get().reshape(ids.shape)
    assert sorted(pos[~good].tolist()) == [nvalid, nvalid + 1]
    np.testing.assert_array_equal(r.expert_ids.get(), np.unique(ids[good]))
    st = r.sorted_token.get()
    for e in range(16):  # each expert's rows: its tokens in order
        rows = st[r.offsets.get()[e]:r.offsets.get()[e + 1]]
        np.testing.assert_array_equal(rows, np.nonzero((ids == e).any(1))[0])
    with pytest.raises(ValueError, match="outside"):
        moe_route(cp.asarray(np.array([[0, 1], [2, 5]], np.int32)), 4, check=True)


@pytest.mark.gpu
def test_moe_route_warp_matches_block_kernel(rng, monkeypatch):
    """The one-warp routing (P <= ROUTE_WARP_MAX_PAIRS) writes the one-block kernel's arrays bit for bit: 1..32
    choices, 1..10 a token, 2..8192 experts, repeated ids in a token, bad ids (parked, flagged), every PDL mode; and
    the reference's where the ids are valid."""
    import kbitcupy as kb
    import kbitcupy.moe as MOE

    cp = _cp()
    W = MOE.ROUTE_WARP_MAX_PAIRS  # (the loop below patches the module's value)
    cases = [(1, 10, 512), (2, 10, 512), (3, 10, 512), (1, 1, 2), (32, 1, 4), (4, 8, 16), (5, 6, 8192), (16, 2, 3)]
    old = kb.set_pdl(False)
    try:
        for mode in (False, "safe", True):
            kb.set_pdl(mode)
            for T, topk, E in cases:
                for variant in ("distinct", "repeats", "bad"):
                    if variant == "distinct" and topk > E:
                        continue
                    ids = (np.array([rng.choice(E, topk, replace=False) for _ in range(T)], np.int32)
                           if variant == "distinct" else rng.integers(0, E, (T, topk)).astype(np.int32))
                    if variant == "bad":
                        ids.flat[rng.integers(ids.size)] = E
                        ids.flat[rng.integers(ids.size)] = -1
                    got = {}
                    for warp_max in (W, 0):
                        monkeypatch.setattr(MOE, "ROUTE_WARP_MAX_PAIRS", warp_max)
                        read_errors(reset=True)
                        r = moe_route(cp.asarray(ids), E)
                        flags = read_errors(reset=True)
                        got[warp_max] = [getattr(r, nm).get() for nm in ("sorted_token", "pos", "expert_ids",
                                                                          "offsets")] + [flags]
                    msg = f"{mode} {T} {topk} {E} {variant}"
                    for a, b in zip(got[0], got[W]):
                        np.testing.assert_array_equal(a, b, err_msg=msg)
                    assert got[0][4] == (ERR_EXPERT_ID if variant == "bad" else 0), msg  # (a -1 always there)
                    if variant != "bad":
                        ref = reference_route(ids, E)
                        for nm, a in zip(("sorted_token", "pos", "expert_ids", "offsets"), got[W]):
                            np.testing.assert_array_equal(a, getattr(ref, nm), err_msg=f"{msg} {nm}")
    finally:
        kb.set_pdl(old)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fused,skewed", [(True, False), (False, False), (True, True), (True, "few")])
def test_moe_forward_gpu(rng, dtype, fused, skewed):
    cp = _cp()
    E, H, I, T, topk = 16, 128, 64, 9, 4
    mt = None
    if skewed is True:  # few rows per expert on average, but expert 3 in every token: planned for 8 rows, 40 real
        E, H, T = 64, 1024, 40
    elif skewed == "few":  # 8 slots x 16 rows planned (grouped.choose_impl: the GEMV's two token tiles on Hopper,
        E, H, T, topk, mt = 8, 1024, 13, 2, 16  # gather and SwiGLU fused in), expert 3 in all 13 tokens
    W_gu = (rng.standard_normal((E, 2 * I, H)) * 0.1).astype(np.float32)
    W_d = (rng.standard_normal((E, H, I)) * 0.1).astype(np.float32)
    bd = quantize_experts(W_d, 4).cuda()
    if fused:
        bgu = quantize_experts(W_gu, 4).cuda()
    else:
        bgu = (quantize_experts(W_gu[:, :I].copy(), 4).cuda(), quantize_experts(W_gu[:, I:].copy(), 4).cuda())
    x = rng.standard_normal((T, H)).astype(dtype)
    ids = np.array([rng.choice(E, topk, replace=False) for _ in range(T)], np.int32)
    if skewed:
        ids = np.array([[3] + list(rng.choice(np.delete(np.arange(E), 3), topk - 1, replace=False)) for _ in range(T)],
                       np.int32)
    w = rng.random((T, topk)).astype(np.float32)
    out = moe_forward(_dev(x), bgu, bd, cp.asarray(ids), cp.asarray(w), max_tokens=mt)
    ref = moe_forward_reference(x, bgu, bd, ids, w, round=True)
    o = _host(out).astype(np.float64)
    assert o.shape == (T, H) and np.all(np.isfinite(o))
    assert np.abs(o - ref).max() < 2 * TOL[np.dtype(dtype)] * np.abs(ref).max()
    # host routing next to device x also works: the device-sorted routing's bits (device int32 ids of <= 40 choices
    # take pair_route's slots by default: another plan)
    out_h = moe_forward(_dev(x), bgu, bd, ids, w, max_tokens=mt)
    out_s = moe_forward(_dev(x), bgu, bd, cp.asarray(ids), cp.asarray(w), max_tokens=mt,
                        routing=moe_route(cp.asarray(ids), E))
    np.testing.assert_array_equal(_host(out_h).view(np.uint16), _host(out_s).view(np.uint16))


def _moe_banks(rng, E, H, I, k):
    return (quantize_experts((rng.standard_normal((E, 2 * I, H)) * 0.05).astype(np.float32), k).cuda(),
            quantize_experts((rng.standard_normal((E, H, I)) * 0.05).astype(np.float32), k).cuda())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_moe_forward_pair_route_gpu(rng, monkeypatch, dtype, k):
    """Device int32 topk_ids of at most PAIR_ROUTE_MAX_PAIRS choices: moe_forward runs no routing (moe_route is not
    called) over pair_route's one-row slots.  T = 1 / 2 / 3 at top-10 of 64 experts (T = 3: four experts that tokens 0
    and 2 both chose, read by two slots each) at the reference; T = 1 bit-identical to the sorted routing (the same
    one-row slots in another order); torch int32 ids the same bits; an id outside the bank raises ERR_EXPERT_ID;
    int64 ids, max_tokens or more choices take moe_route."""
    import kbitcupy.moe as MOE

    cp = _cp()
    E, H, I = 64, 1024, 256
    bgu, bd = _moe_banks(rng, E, H, I, k)
    routed = []
    real_route = MOE.moe_route
    monkeypatch.setattr(MOE, "moe_route", lambda *a, **kw: routed.append(a[0]) or real_route(*a, **kw))
    tol = 2 * TOL[np.dtype(dtype)]
    for T in (1, 2, 3):
        ids_h = np.array([rng.choice(E, 10, replace=False) for _ in range(T)], np.int32)
        if T == 3:  # token 2 shares four experts with token 0
            ids_h[2] = np.concatenate([ids_h[0, 6:], rng.choice(np.setdiff1d(np.arange(E), ids_h[0, 6:]), 6, False)])
        x_h = rng.standard_normal((T, H)).astype(dtype)
        w_h = rng.random((T, 10)).astype(np.float32)
        x, ids, w = _dev(x_h), cp.asarray(ids_h), cp.asarray(w_h)
        routed.clear()
        out = _host(moe_forward(x, bgu, bd, ids, w))
        assert not routed, T
        ref = moe_forward_reference(x_h, bgu, bd, ids_h, w_h, round=True)
        o = out.astype(np.float64)
        assert np.all(np.isfinite(o)) and np.abs(o - ref).max() < tol * np.abs(ref).max(), T
        srt = _host(moe_forward(x, bgu, bd, ids, w, routing=real_route(ids, E)))
        if T == 1:
            np.testing.assert_array_equal(out.view(np.uint16), srt.view(np.uint16))
        else:
            assert np.abs(srt.astype(np.float64) - ref).max() < tol * np.abs(ref).max(), T
    import torch

    out_t = moe_forward(x, bgu, bd, torch.from_numpy(ids_h).cuda(), w)
    assert not routed
    np.testing.assert_array_equal(_host(out_t).view(np.uint16), out.view(np.uint16))
    read_errors(reset=True)
    bad = ids_h.copy()
    bad[1, 3] = E
    moe_forward(x, bgu, bd, cp.asarray(bad), w)
    assert read_errors(reset=True) & ERR_EXPERT_ID
    for call in (lambda: moe_forward(x, bgu, bd, ids.astype(cp.int64), w),
                 lambda: moe_forward(x, bgu, bd, ids, w, max_tokens=3)):
        routed.clear()
        np.testing.assert_array_equal(_host(call()).view(np.uint16), srt.view(np.uint16))
        assert len(routed) == 1
    big = ids.astype(cp.int64)
    big[0, 0] = 2**32 + int(ids_h[0, 1])  # would wrap into the bank: flagged, through moe_route and pair_route
    for call in (lambda: moe_forward(x, bgu, bd, big, w), lambda: MOE.pair_route(big, E)):
        read_errors(reset=True)
        call()
        assert read_errors(reset=True) & ERR_EXPERT_ID
    routed.clear()
    monkeypatch.setattr(MOE, "PAIR_ROUTE_MAX_PAIRS", 29)
    assert np.abs(_host(moe_forward(x, bgu, bd, ids, w)).astype(np.float64) - ref).max() < tol * np.abs(ref).max()
    assert len(routed) == 1


@pytest.mark.gpu
def test_moe_forward_pair_route_graph(rng, monkeypatch):
    """moe_forward with pair_route's layout captured in a CUDA graph (its index constants uploaded by an eager call
    before), replayed with new ids and weights in the same buffers: the eager result.  A capture that meets a new
    (T, topk) first cannot upload its constants: it takes moe_route, and is right too.  The new ids / weights are
    allocated after the capture: before kbitcupy._capture kept the capture's temporaries, CuPy's pool handed them
    a block the replay then overwrote (gate/up's output)."""
    import kbitcupy.moe as MOE
    from kbitcupy._capture import kept_bytes

    cp = _cp()
    E, H, I, T = 64, 1024, 256, 2
    bgu, bd = _moe_banks(rng, E, H, I, 4)
    x = _dev(rng.standard_normal((T, H)).astype(np.float16))

    def draw():
        return (cp.asarray(np.array([rng.choice(E, 10, replace=False) for _ in range(T)], np.int32)),
                cp.asarray(rng.random((T, 10)).astype(np.float32)))

    for fresh in (False, True):
        ids, w = draw()
        MOE._PAIR_CONSTS.clear()
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            if not fresh:
                moe_forward(x, bgu, bd, ids, w)  # warm: compile, plans, the pair constants
            else:
                moe_forward(x, bgu, bd, ids, w, routing=MOE.moe_route(ids, E))  # warm all but the constants
            s.synchronize()
            s.begin_capture()
            out = moe_forward(x, bgu, bd, ids, w)
            graph = s.end_capture()
            assert bool(MOE._PAIR_CONSTS) is not fresh
            assert kept_bytes() > 0  # the capture's temporaries stay out of CuPy's pool (draw() below allocates)
            for _ in range(2):
                ids2, w2 = draw()
                ids[...] = ids2
                w[...] = w2
                out.view(cp.uint16).fill(0x7E00)
                graph.launch(stream=s)
                s.synchronize()
                exp = moe_forward(x, bgu, bd, ids2, w2, routing=MOE.moe_route(ids2, E) if fresh else None)
                s.synchronize()
                np.testing.assert_array_equal(_host(out).view(np.uint16), _host(exp).view(np.uint16), str(fresh))


@pytest.mark.gpu
@pytest.mark.parametrize("T", [1, 40])
def test_moe_forward_torch_graph_keeps_its_memory(rng, T):
    """moe_forward on torch tensors captured by torch.cuda.graph (decode: pair_route; T = 40: moe_route and the grouped
    kernels' prefill plan).  Its DLPack exchanges run on torch's stream (from CuPy's legacy stream they broke the
    capture) and its allocations come from the graph's pool through torch's allocator (CuPy's pool may not cudaMalloc
    during a global-mode capture, and would hand the capture's freed temporaries to later arrays): CuPy arrays
    allocated on the capture stream after it keep their contents through replays, and each replay with new inputs
    copied in gives the eager result."""
    import torch

    import kbitcupy as kb
    from kbitcupy._arrays import torch_stream
    from kbitcupy._capture import kept_bytes

    cp = _cp()
    E, H, I = 64, 1024, 256
    bgu, bd = _moe_banks(rng, E, H, I, 4)
    kb.release_graph_memory()

    def draw():
        ids = np.array([rng.choice(E, 10, replace=False) for _ in range(T)], np.int32)
        return (torch.from_numpy(rng.standard_normal((T, H)).astype(np.float16)).cuda(), torch.from_numpy(ids).cuda(),
                torch.from_numpy(rng.random((T, 10)).astype(np.float32)).cuda())

    x, ids, w = draw()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            moe_forward(x, bgu, bd, ids, w)  # warm: compile, plans, constants
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out = moe_forward(x, bgu, bd, ids, w)
    assert kept_bytes() == 0  # (torch's graph pool holds them, not kbitcupy)
    with torch.cuda.stream(s), torch_stream(x):  # CuPy's pool reuses a block on the stream that freed it
        marks = [cp.full(n, 7, cp.int32) for n in (T * 10 * 2 * I // 2, T * 10 * H // 2, T * 10, T * 10 + 1) * 4]
        s.synchronize()
    for _ in range(2):
        x2, ids2, w2 = draw()
        x.copy_(x2)
        ids.copy_(ids2)
        w.copy_(w2)
        g.replay()
        torch.cuda.synchronize()
        exp = moe_forward(x2, bgu, bd, ids2, w2)
        torch.cuda.synchronize()
        assert torch.equal(out.view(torch.int16), exp.view(torch.int16))
        assert all(bool((m == 7).all()) for m in marks)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [2, 4])
def test_moe_forward_prefill_plan_overflow(rng, k):
    """A prefill batch planned below its largest expert (moe.plan_tokens: 16 rows per expert on
    average -> planned for 32; expert 3 is in every one of the 300 tokens): the wgmma kernel's
    first split runs that expert's extra token tiles; against the float reference."""
    cp = _cp()
    from kbitcupy.moe import plan_tokens

    E, H, I, T, topk = 64, 512, 128, 300, 4
    bgu = quantize_experts((rng.standard_normal((E, 2 * I, H)) * 0.1).astype(np.float32), k).cuda()
    bd = quantize_experts((rng.standard_normal((E, H, I)) * 0.1).astype(np.float32), k).cuda()
    ids = np.array([[3] + list(rng.choice(np.delete(np.arange(E), 3), topk - 1, replace=False)) for _ in range(T)],
                   np.int32)
    assert plan_tokens(moe_route(cp.asarray(ids), E)) == 32
    x = rng.standard_normal((T, H)).astype(np.float16)
    w = rng.random((T, topk)).astype(np.float32)
    out = moe_forward(_dev(x), bgu, bd, cp.asarray(ids), cp.asarray(w))
    ref = moe_forward_reference(x, bgu, bd, ids, w, round=True)
    o = _host(out).astype(np.float64)
    assert np.all(np.isfinite(o)) and np.abs(o - ref).max() < 2 * TOL[np.dtype(np.float16)] * np.abs(ref).max()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,topk,E", [(1, 10, 64), (8, 10, 64), (5, 4, 8)])
def test_moe_forward_fused_gemv_matches_unfused(rng, monkeypatch, dtype, T, topk, E):
    """moe_forward's decode path (gather and SwiGLU fused into the grouped GEMV) is
    bit-identical to the separate gather / silu_mul kernels; (5, 4, 8): experts with
    several tokens."""
    import kbitcupy.moe as MOE

    cp = _cp()
    H, I = 1024, 256
    bgu = quantize_experts((rng.standard_normal((E, 2 * I, H)) * 0.05).astype(np.float32), 4).cuda()
    bd = quantize_experts((rng.standard_normal((E, H, I)) * 0.05).astype(np.float32), 5).cuda()
    x = _dev(rng.standard_normal((T, H)).astype(dtype))
    ids = cp.asarray(np.array([rng.choice(E, topk, replace=False) for _ in range(T)], np.int32))
    w = cp.asarray(rng.random((T, topk)).astype(np.float32))
    rt = moe_route(ids, E)
    assert MOE._decode_fusions(x, bgu, bd, MOE.plan_tokens(rt), int(rt.expert_ids.size)) == (True, True)
    decide = MOE._decode_fusions
    for routing in (None, rt):  # pair_route's one-row slots (T * topk <= 32 here), the sorted routing's slots
        monkeypatch.setattr(MOE, "_decode_fusions", decide)
        fused = _host(moe_forward(x, bgu, bd, ids, w, routing=routing)).view(np.uint16)
        for fus in ((False, False), (True, False), (False, True)):  # every other combination of the two fusions
            monkeypatch.setattr(MOE, "_decode_fusions", lambda *a, f=fus: f)
            np.testing.assert_array_equal(_host(moe_forward(x, bgu, bd, ids, w, routing=routing)).view(np.uint16),
                                          fused, err_msg=f"{fus} {routing is None}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_moe_forward_two_tile_slices(rng, monkeypatch, dtype):
    """moe_forward at 10 tokens per expert (16 experts, each in exactly 10 of 40 tokens' top-4; moe.plan_tokens plans
    16) runs the grouped GEMV with the gather and SwiGLU fused in, both matmuls in the two-tile slices form (8 groups
    x 2 warps a block, one wave): bit-identical to the separate gather / silu_mul kernels, and at the reference."""
    import kbitcupy.moe as MOE
    from kbitcupy.gemv import grouped_plan

    cp = _cp()
    E, H, I, T = 16, 1024, 512, 40
    W_gu = (rng.standard_normal((E, 2 * I, H)) * 0.05).astype(np.float32)
    W_d = (rng.standard_normal((E, H, I)) * 0.05).astype(np.float32)
    bgu, bd = quantize_experts(W_gu, 4).cuda(), quantize_experts(W_d, 4).cuda()
    ids_h = np.array([[(4 * t + j + t // 4) % E for j in range(4)] for t in range(T)], np.int32)
    assert np.all(np.bincount(ids_h.ravel(), minlength=E) == 10) and all(len(set(r)) == 4 for r in ids_h)
    x = _dev(rng.standard_normal((T, H)).astype(dtype))
    ids, w = cp.asarray(ids_h), cp.asarray(rng.random((T, 4)).astype(np.float32))
    mt = MOE.plan_tokens(moe_route(ids, E))
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    # 16 groups x 1 warp a block for down: 16 x 512 / 512 = 16 SwiGLU evaluations a thread, at the fusion bound
    assert mt == 16 and MOE._decode_fusions(x, bgu, bd, mt, E) == (True, True)
    assert grouped_plan(2 * I, H, 4, E, mt, sms=sms)[4] > 0 and grouped_plan(H, I, 4, E, mt, sms=sms)[4] > 0
    fused = _host(moe_forward(x, bgu, bd, ids, w)).view(np.uint16)
    ref = moe_forward_reference(_host(x), bgu, bd, ids_h, _host(w), round=True)
    o = fused.view(dtype).astype(np.float64)
    assert np.all(np.isfinite(o)) and np.abs(o - ref).max() < 2 * TOL[np.dtype(dtype)] * np.abs(ref).max()
    monkeypatch.setattr(MOE, "_decode_fusions", lambda *a: (False, False))
    plain = _host(moe_forward(x, bgu, bd, ids, w)).view(np.uint16)
    np.testing.assert_array_equal(fused, plain)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_moe_forward_gather_fused_only(rng, monkeypatch, dtype):
    """4 experts x 16 tokens (every token routed to all 4): down's plan would make 64 SwiGLU evaluations a thread, so
    moe_forward fuses only the row gather (gate/up) and runs silu_mul, then down unfused (grouped_matmul's choice:
    the wgmma kernel here): bit-identical to the gather kernel in its place (the same down), at the reference, and
    within it of both fusions (the grouped GEMV's down sums in another order)."""
    import kbitcupy.moe as MOE

    cp = _cp()
    E, H, I, T = 4, 1024, 512, 16
    bgu = quantize_experts((rng.standard_normal((E, 2 * I, H)) * 0.05).astype(np.float32), 4).cuda()
    bd = quantize_experts((rng.standard_normal((E, H, I)) * 0.05).astype(np.float32), 4).cuda()
    ids_h = np.array([rng.permutation(E) for _ in range(T)], np.int32)
    x = _dev(rng.standard_normal((T, H)).astype(dtype))
    ids, w = cp.asarray(ids_h), cp.asarray(rng.random((T, E)).astype(np.float32))
    mt = MOE.plan_tokens(moe_route(ids, E))
    assert mt == 16 and MOE._decode_fusions(x, bgu, bd, mt, E) == (True, False)
    out = _host(moe_forward(x, bgu, bd, ids, w)).view(np.uint16)
    ref = moe_forward_reference(_host(x), bgu, bd, ids_h, _host(w), round=True)
    o = out.view(dtype).astype(np.float64)
    assert np.all(np.isfinite(o)) and np.abs(o - ref).max() < 2 * TOL[np.dtype(dtype)] * np.abs(ref).max()
    monkeypatch.setattr(MOE, "_decode_fusions", lambda *a: (False, False))
    np.testing.assert_array_equal(_host(moe_forward(x, bgu, bd, ids, w)).view(np.uint16), out)
    monkeypatch.setattr(MOE, "_decode_fusions", lambda *a: (True, True))
    both = _host(moe_forward(x, bgu, bd, ids, w)).view(np.uint16).view(dtype).astype(np.float64)
    assert np.abs(both - ref).max() < 2 * TOL[np.dtype(dtype)] * np.abs(ref).max()


@pytest.mark.gpu
def test_grouped_gemv_fused_row_gather_and_swiglu(rng):
    """grouped_gemv_fused directly: rows gathered by index (an index outside A reads as
    zeros) and SwiGLU of [gate | up] rows, against the reference of the explicit inputs."""
    from kbitcupy.grouped import grouped_gemv_fused

    cp = _cp()
    E, N, K = 6, 136, 256
    bank = _bank(rng, E, N, K, 4)
    counts = np.array([2, 0, 3, 1], np.int32)
    offs = _offsets(counts)
    ids = np.array([4, 1, 0, 4], np.int32)
    x = rng.standard_normal((5, K)).astype(np.float16)
    rows_idx = np.array([3, 0, 4, 4, 1, 7], np.int32)  # 7: outside x
    out = grouped_gemv_fused(cp.asarray(x), bank, cp.asarray(ids), cp.asarray(offs), 6, 3,
                             a_rows=cp.asarray(rows_idx))
    A = np.where((rows_idx < 5)[:, None], x[np.minimum(rows_idx, 4)], 0).astype(np.float16)
    ref = reference_grouped_matmul(A, bank, ids, offs)
    o = _host(out).astype(np.float64)
    assert np.abs(o - ref).max() / np.abs(ref).max() < TOL[np.dtype(np.float16)]
    h = rng.standard_normal((6, 2 * K)).astype(np.float16)
    out = grouped_gemv_fused(cp.asarray(h), bank, cp.asarray(ids), cp.asarray(offs), 6, 3, a_silu=True)
    act = _host(silu_mul(cp.asarray(h[:, :K].copy()), cp.asarray(h[:, K:].copy())))
    ref = reference_grouped_matmul(act, bank, ids, offs)
    o = _host(out).astype(np.float64)
    assert np.abs(o - ref).max() / np.abs(ref).max() < TOL[np.dtype(np.float16)]
    # bit-identical with grouped_matmul on the explicit silu_mul output
    exp = grouped_matmul(cp.asarray(act), bank, cp.asarray(ids), cp.asarray(offs), 3, method="kernel",
                         impl="gemv")
    np.testing.assert_array_equal(_host(out).view(np.uint16), _host(exp).view(np.uint16))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul_and_combine_gpu(rng, dtype):
    cp = _cp()
    h = rng.standard_normal((7, 2 * 48)).astype(dtype)
    hd = _dev(h)
    act = silu_mul(hd[:, :48], hd[:, 48:])
    g, u = h[:, :48].astype(np.float64), h[:, 48:].astype(np.float64)
    exp = g / (1 + np.exp(-g)) * u
    np.testing.assert_allclose(_host(act).astype(np.float64), exp, rtol=2 * TOL[np.dtype(dtype)], atol=1e-3)
    T, topk, E, H = 6, 3, 8, 40
    ids = np.array([rng.choice(E, topk, replace=False) for _ in range(T)], np.int32)
    r = moe_route(cp.asarray(ids), E)
    C = rng.standard_normal((T * topk, H)).astype(dtype)
    for wdt in (np.float32, np.float16, bfloat16):
        w = rng.random((T, topk)).astype(wdt)
        o = _host(moe_combine(_dev(C), r, _dev(w))).astype(np.float64)
        exp = (C.astype(np.float64)[r.pos.get()].reshape(T, topk, H) * w.astype(np.float64)[:, :, None]).sum(1)
        np.testing.assert_allclose(o, exp, rtol=2 * TOL[np.dtype(dtype)], atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("H", [2048, 40, 37])
def test_gather_rows_gpu(rng, dtype, H):
    """The gather kernel (16-byte rows where H % 8 == 0, else 2-byte units), bit-exact
    with x[sorted_token]; out= poisoned; an offset (unaligned) x view takes the 2-byte path."""
    from kbitcupy.moe import gather_rows

    cp = _cp()
    T, topk, E = 9, 4, 16
    ids = np.array([rng.choice(E, topk, replace=False) for _ in range(T)], np.int32)
    r = moe_route(cp.asarray(ids), E)
    x = rng.standard_normal((T, H)).astype(dtype)
    exp = x[r.sorted_token.get()]
    out = _nan((T * topk, H), dtype)
    assert gather_rows(_dev(x), r, out=out) is out
    np.testing.assert_array_equal(_host(out).view(np.uint16), exp.view(np.uint16))
    np.testing.assert_array_equal(_host(gather_rows(_dev(x), r)).view(np.uint16), exp.view(np.uint16))
    big = _dev(np.concatenate([x.reshape(-1), x.reshape(-1)[:1]]))  # x at an odd element offset
    xv = big[1:].reshape(T, H)
    exp2 = np.concatenate([x.reshape(-1), x.reshape(-1)[:1]])[1:].reshape(T, H)[r.sorted_token.get()]
    np.testing.assert_array_equal(_host(gather_rows(xv, r)).view(np.uint16), exp2.view(np.uint16))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("H", [256, 37])
def test_hand_made_routing_rows_guarded_gpu(rng, monkeypatch, dtype, H):
    """Row indices outside x / C_sorted in a hand-made device routing: the gather kernel gathers zeros there and the
    combine (its pos checked by CuPy ops first: moe._guard_pos) adds nothing for them, each setting ERR_ROWS (no read
    out of bounds: profiling/sanitize_moe.py runs this under compute-sanitizer); every other row is exact; routings
    moe_route / moe_forward built skip that check.  moe_forward takes a hand-made routing through the
    gather kernel (the fused GEMV's gather reads such rows as zeros without the flag), check=True and a host routing
    refuse bad entries by name, and a non-int32 device pos is refused."""
    from dataclasses import replace

    import kbitcupy.moe as moe_mod
    from kbitcupy.grouped import ERR_ROWS
    from kbitcupy.moe import MoeRouting, gather_rows

    cp = _cp()
    T, topk, E = 7, 3, 16
    P = T * topk
    ids = np.array([rng.choice(E, topk, replace=False) for _ in range(T)], np.int32)
    r = moe_route(cp.asarray(ids), E)
    x = rng.standard_normal((T, H)).astype(dtype)
    st = r.sorted_token.get()
    b0, b1 = rng.choice(P, 2, replace=False)
    st[b0], st[b1] = -1, T + 5
    read_errors(reset=True)
    out = _nan((P, H), dtype)
    gather_rows(_dev(x), replace(r, sorted_token=cp.asarray(st)), out=out)
    assert read_errors(reset=True) == ERR_ROWS
    exp = x[np.clip(st, 0, T - 1)].copy()
    exp[[b0, b1]] = 0
    np.testing.assert_array_equal(_host(out).view(np.uint16), exp.view(np.uint16))

    C = rng.standard_normal((P, H)).astype(dtype)
    w = rng.random((T, topk)).astype(np.float32)
    pos = r.pos.get()
    p0, p1 = rng.choice(P, 2, replace=False)
    pos[p0], pos[p1] = P, -3
    o = moe_combine(_dev(C), replace(r, pos=cp.asarray(pos)), _dev(w))
    assert read_errors(reset=True) == ERR_ROWS
    Cz = np.concatenate([C.astype(np.float64), np.zeros((1, H))])
    exp = (Cz[np.where((pos >= 0) & (pos < P), pos, P)].reshape(T, topk, H) * w[:, :, None]).sum(1)
    np.testing.assert_allclose(_host(o).astype(np.float64), exp, rtol=2 * TOL[np.dtype(dtype)], atol=2e-2)
    guarded = []
    real_guard = moe_mod._guard_pos
    monkeypatch.setattr(moe_mod, "_guard_pos", lambda *a: guarded.append(1) or real_guard(*a))
    o2 = moe_combine(_dev(C), r, _dev(w))  # built by moe_route: no guard
    assert not guarded and read_errors(reset=True) == 0
    exp2 = (C.astype(np.float64)[r.pos.get()].reshape(T, topk, H) * w[:, :, None]).sum(1)
    np.testing.assert_allclose(_host(o2).astype(np.float64), exp2, rtol=2 * TOL[np.dtype(dtype)], atol=2e-2)
    moe_combine(_dev(C), replace(r, max_tokens=r.max_tokens + 1), _dev(w))  # a copy: hand-made, guarded
    assert guarded and read_errors(reset=True) == 0
    guarded.clear()
    with pytest.raises(ValueError, match=r"routing\.pos must be int32"):
        moe_combine(_dev(C), replace(r, pos=r.pos.astype(cp.int64)), _dev(w))
    with pytest.raises(ValueError, match=r"routing\.sorted_token must be int32"):
        gather_rows(_dev(x), replace(r, sorted_token=r.sorted_token.astype(cp.int64)))
    assert read_errors(reset=True) == 0

    if H % 8:
        return
    I = 64
    bgu, bd = _moe_banks(rng, E, H, I, 4)
    xd = _dev(x)
    ref = moe_forward_reference(x, bgu, bd, ids, w, round=True)
    calls = []
    real = moe_mod.gather_rows
    monkeypatch.setattr(moe_mod, "gather_rows", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    moe_forward(xd, bgu, bd, cp.asarray(ids), cp.asarray(w))  # its own routing: no guard
    moe_forward(xd, bgu, bd, cp.asarray(ids), cp.asarray(w), routing=r)  # moe_route's: no guard
    assert not guarded
    calls.clear()
    hand = MoeRouting(r.sorted_token, r.pos, r.expert_ids, r.offsets, T, topk, E, r.max_tokens)
    o = _host(moe_forward(xd, bgu, bd, cp.asarray(ids), cp.asarray(w), routing=hand)).astype(np.float64)
    assert calls and guarded and read_errors(reset=True) == 0
    assert np.all(np.isfinite(o)) and np.abs(o - ref).max() < 2 * TOL[np.dtype(dtype)] * np.abs(ref).max()
    bad = replace(hand, sorted_token=cp.asarray(st))
    o = moe_forward(xd, bgu, bd, cp.asarray(ids), cp.asarray(w), routing=bad)
    assert read_errors(reset=True) & ERR_ROWS and bool(cp.isfinite(o).all())
    with pytest.raises(ValueError, match=r"routing\.sorted_token\[\d+\] = -?\d+ is outside \[0, 7\)"):
        moe_forward(xd, bgu, bd, cp.asarray(ids), cp.asarray(w), routing=bad, check=True)
    host_bad = MoeRouting(st, r.pos.get(), r.expert_ids.get(), r.offsets.get(), T, topk, E, r.max_tokens)
    with pytest.raises(ValueError, match=r"routing\.sorted_token\["):
        moe_forward(xd, bgu, bd, cp.asarray(ids), cp.asarray(w), routing=host_bad)


# ----------------------------------------------------------------------------- grouped wgmma / forced kernels
def _need_sm90():
    if _cp().cuda.Device().compute_capability != "90":
        pytest.skip("the grouped wgmma kernel needs compute capability 9.0")


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["mma", "wgmma"])
@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_impls_uneven(rng, impl, k, dtype):
    """Both MMA kernels forced: odd N, K % 64 == 32, empty slots, repeated ids in any
    order, rows no slot covers; token counts spanning every TOK of the wgmma kernel."""
    if impl == "wgmma":
        _need_sm90()
    E = 16
    for N, K, counts in ((44, 224, [3, 0, 7, 1, 16, 0, 2, 5]), (136, 96, [33, 0, 64, 9]),
                         (19, 64, [1, 100, 0]), (256, 320, [130, 17, 0, 31])):
        bank = _bank(rng, E, N, K, k)
        ids = rng.integers(0, E, size=len(counts)).astype(np.int32)
        ids[-1] = ids[0]  # a repeated expert
        offs = _offsets(counts)
        A = rng.standard_normal((offs[-1] + 3, K)).astype(dtype)
        out = _run(A, bank, ids, offs, max(counts), dtype, method="kernel", impl=impl)
        _check(out, A, bank, ids, offs, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1024, 2048), (512, 2048), (2048, 512)])
@pytest.mark.parametrize("ntok", [9, 16, 32, 64])
def test_grouped_wgmma_moe_shapes(rng, shape, ntok):
    """Qwen3-Coder-Next expert shapes at prefill-sized token counts, 10 active experts,
    uneven counts around ntok, fp16 and bf16, every k."""
    _need_sm90()
    N, K = shape
    for k in (2, 3, 4, 5):
        bank = _bank(rng, 24, N, K, k, on_gpu_quant=True)
        ids = rng.permutation(24)[:10].astype(np.int32)
        counts = np.minimum(ntok, rng.integers(max(0, ntok - 8), ntok + 1, size=10))
        counts[3] = ntok
        offs = _offsets(counts)
        dtype = DTYPES[k % 2]
        A = rng.standard_normal((offs[-1], K)).astype(dtype)
        _check(_run(A, bank, ids, offs, ntok, dtype, impl="wgmma"), A, bank, ids, offs, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_wgmma_k5_fewer_table_copies(rng, dtype):
    """k = 5 with 8 pair-table copies (grouped_plan's choice for 10 experts at 64 tokens on a 132-SM
    Hopper): bit-identical to the 16-copy kernel at the same split count (cluster and workspace sums),
    and against the reference with uneven counts, an empty slot, a repeated expert and the bank's
    default codebook or another."""
    _need_sm90()
    from kbitcupy.grouped import _err_buffer
    from kbitcupy.wgmma import GROUPED_K5_LC, grouped_plan, grouped_wgmma

    cp = _cp()
    tname = "bfloat16" if dtype == bfloat16 else "float16"
    read_errors()  # (clears flags earlier tests left)
    chosen = 0
    for N, K in ((1024, 2048), (2048, 512), (1000, 2080)):
        for other_cb in (False, True):
            bank = _bank(rng, 16, N, K, 5, on_gpu_quant=True)
            if other_cb:
                bank = other_codebook(bank, 5)[0]
            ids = rng.permutation(16)[:10].astype(np.int32)
            ids[7] = ids[2]  # a repeated expert
            counts = rng.integers(40, 65, size=10)
            counts[0], counts[5] = 64, 0
            offs = _offsets(counts)
            A_h = rng.standard_normal((offs[-1], K)).astype(dtype)
            A, ids_d, offs_d = _dev(A_h), cp.asarray(ids), cp.asarray(offs)
            p = grouped_plan(N, K, 5, tname, A.device.id, 10, 64, cbd=bank.default_codebook)
            chosen += p.lc == GROUPED_K5_LC
            out = _run(A_h, bank, ids, offs, 64, dtype, impl="wgmma")
            _check(out, A_h, bank, ids, offs, dtype)
            for ks, cl in ((1, None), (3, None), (3, False)):
                outs = []
                for fewer in (True, False):
                    o = _nan((offs[-1], N), dtype)
                    grouped_wgmma(A, bank, ids_d, offs_d, o, 64, _err_buffer(), k_splits=ks, cluster=cl,
                                  fewer_copies=fewer)
                    outs.append(_host(o).view(np.uint16))
                np.testing.assert_array_equal(outs[0], outs[1])
            assert read_errors() == 0
    assert chosen, "no shape took the fewer-copies plan"


@pytest.mark.gpu
def test_grouped_wgmma_forced_splits_toks_deterministic(rng):
    """Forced split-K counts (1, 2, 3, max) and every TOK; repeated calls give bit-identical
    results (the split-K sum order is fixed, the counters reset themselves)."""
    _need_sm90()
    from kbitcupy.grouped import _err_buffer
    from kbitcupy.wgmma import GROUPED_TOK_CHOICES, grouped_wgmma

    cp = _cp()
    dtype, k = np.float16, 4
    N, K = 320, 1056  # 3 strips (the last partial), 17 K tiles (the last a half tile)
    bank = _bank(rng, 6, N, K, k)
    counts = [20, 0, 45, 3, 45]
    ids, offs = np.array([5, 2, 0, 4, 0], np.int32), _offsets(counts)
    A_h = rng.standard_normal((offs[-1], K)).astype(dtype)
    A, ids_d, offs_d = _dev(A_h), cp.asarray(ids), cp.asarray(offs)
    for tok in GROUPED_TOK_CHOICES:
        for ks in (1, 2, 3, 17):
            outs = []
            for _ in range(2):
                out = _nan((offs[-1], N), dtype)
                grouped_wgmma(A, bank, ids_d, offs_d, out, 45, _err_buffer(), k_splits=ks, tok=tok)
                outs.append(out)
            _check(outs[0], A_h, bank, ids, offs, dtype)
            np.testing.assert_array_equal(_host(outs[0]).view(np.uint16), _host(outs[1]).view(np.uint16))
            if 2 <= ks <= 8:  # the cluster sum (the default here) and the workspace sum: the same bits
                out = _nan((offs[-1], N), dtype)
                grouped_wgmma(A, bank, ids_d, offs_d, out, 45, _err_buffer(), k_splits=ks, tok=tok, cluster=False)
                np.testing.assert_array_equal(_host(outs[0]).view(np.uint16), _host(out).view(np.uint16))


@pytest.mark.gpu
def test_grouped_wgmma_cluster_sum_understated_max_tokens(rng):
    """Split-K over a cluster, then split 0 alone on the token tiles max_tokens left out."""
    _need_sm90()
    from kbitcupy.grouped import _err_buffer
    from kbitcupy.wgmma import grouped_wgmma

    cp = _cp()
    dtype = bfloat16
    bank = _bank(rng, 4, 256, 1024, 3)
    counts = [3, 150, 40, 0]
    ids, offs = np.array([2, 0, 3, 1], np.int32), _offsets(counts)
    A_h = rng.standard_normal((offs[-1], 1024)).astype(dtype)
    A, ids_d, offs_d = _dev(A_h), cp.asarray(ids), cp.asarray(offs)
    for ks in (2, 4):
        read_errors(reset=True)
        out = _nan((offs[-1], 256), dtype)
        grouped_wgmma(A, bank, ids_d, offs_d, out, 32, _err_buffer(), k_splits=ks, tok=32, cluster=True)
        _check(out, A_h, bank, ids, offs, dtype)
        assert read_errors(reset=True) == ERR_MAX_TOKENS


@pytest.mark.gpu
def test_grouped_wgmma_understated_max_tokens(rng):
    """max_tokens below a slot's real count: extra token tiles done by split 0, flag set."""
    _need_sm90()
    dtype = bfloat16
    bank = _bank(rng, 4, 256, 1024, 3)
    counts = [3, 150, 40, 0]
    ids, offs = np.array([2, 0, 3, 1], np.int32), _offsets(counts)
    A = rng.standard_normal((offs[-1], 1024)).astype(dtype)
    read_errors(reset=True)
    _check(_run(A, bank, ids, offs, 32, dtype, impl="wgmma"), A, bank, ids, offs, dtype)
    assert read_errors(reset=True) == ERR_MAX_TOKENS


@pytest.mark.gpu
def test_grouped_wgmma_device_guards(rng):
    _need_sm90()
    cp = _cp()
    dtype = np.float16
    bank = _bank(rng, 4, 128, 512, 4)
    A_h = rng.standard_normal((40, 512)).astype(dtype)
    A = _dev(A_h)
    out = _nan((40, 128), dtype)
    read_errors(reset=True)
    grouped_matmul(A, bank, cp.array([0, 7, 2], dtype=cp.int32), cp.array([0, 14, 26, 40], dtype=cp.int32), 14,
                   out=out, impl="wgmma")
    assert read_errors(reset=True) == ERR_EXPERT_ID
    o = _host(out).astype(np.float64)
    assert np.all(np.isnan(o[14:26])) and np.all(np.isfinite(o[:14])) and np.all(np.isfinite(o[26:]))
    out2 = _nan((40, 128), dtype)
    grouped_matmul(A, bank, cp.array([0, 1], dtype=cp.int32), cp.array([30, 20, 400], dtype=cp.int32), 64,
                   out=out2, impl="wgmma")
    assert read_errors(reset=True) == ERR_OFFSETS
    assert np.all(np.isnan(_host(out2).astype(np.float32)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_wgmma_capture_and_streams(rng, dtype):
    """Captured in a CUDA graph (split-K workspace reserved by the warm call), replayed with
    new activations; two streams at once each use their own workspace."""
    _need_sm90()
    cp = _cp()
    bank = _bank(rng, 16, 512, 2048, 4)
    counts = [20, 0, 33, 5, 40, 12]
    ids = cp.asarray(np.array([3, 8, 15, 3, 0, 9], np.int32))
    offs = cp.asarray(_offsets(counts))
    rows = sum(counts)
    A = _dev(rng.standard_normal((rows, 2048)).astype(dtype))
    out1, out2 = _nan((rows, 512), dtype), _nan((rows, 512), dtype)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        grouped_matmul(A, bank, ids, offs, 40, out=out1, impl="wgmma")
        s.begin_capture()
        grouped_matmul(A, bank, ids, offs, 40, out=out2, impl="wgmma")
        graph = s.end_capture()
        graph.launch(stream=s)
    s.synchronize()
    np.testing.assert_array_equal(_host(out2).view(np.uint16), _host(out1).view(np.uint16))
    A2 = _dev(rng.standard_normal((rows, 2048)).astype(dtype))
    A.view(cp.uint16)[...] = A2.view(cp.uint16)
    graph.launch(stream=s)
    s.synchronize()
    _check(out2, _host(A2), bank, _host(ids), _host(offs), dtype)
    # two streams concurrently
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    o1, o2 = _nan((rows, 512), dtype), _nan((rows, 512), dtype)
    for _ in range(3):
        with s1:
            grouped_matmul(A, bank, ids, offs, 40, out=o1, impl="wgmma")
        with s2:
            grouped_matmul(A, bank, ids, offs, 40, out=o2, impl="wgmma")
    s1.synchronize(), s2.synchronize()
    np.testing.assert_array_equal(_host(o1).view(np.uint16), _host(o2).view(np.uint16))
    _check(o1, _host(A2), bank, _host(ids), _host(offs), dtype)


@pytest.mark.gpu
def test_grouped_auto_routes_prefill_to_wgmma(rng, monkeypatch):
    """Dispatch: decode-sized experts -> grouped GEMV, prefill-sized -> wgmma on sm_90."""
    _need_sm90()
    import kbitcupy.wgmma as WG

    calls = []
    real = WG.grouped_wgmma
    monkeypatch.setattr(WG, "grouped_wgmma", lambda *a, **kw: calls.append(a[5]) or real(*a, **kw))
    bank = _bank(rng, 8, 256, 1024, 4)
    for ntok, expect in ((2, 0), (40, 1)):
        counts = [ntok, ntok]
        ids, offs = np.array([1, 6], np.int32), _offsets(counts)
        A = rng.standard_normal((offs[-1], 1024)).astype(np.float16)
        _check(_run(A, bank, ids, offs, ntok, np.float16), A, bank, ids, offs, np.float16)
        assert len(calls) == expect


@pytest.mark.gpu
def test_grouped_auto_many_tokens_is_capturable_on_sm90(rng):
    """sm_90: method='auto' keeps the (wgmma) kernel above 64 tokens per expert, so a call
    with device indices neither syncs nor leaves the graph (the dequant path would)."""
    _need_sm90()
    cp = _cp()
    dtype = np.float16
    bank = _bank(rng, 6, 256, 512, 4)
    counts = [150, 0, 90, 300]
    ids, offs = cp.asarray(np.array([4, 1, 0, 4], np.int32)), cp.asarray(_offsets(counts))
    A_h = rng.standard_normal((sum(counts), 512)).astype(dtype)
    A = _dev(A_h)
    out = _nan((sum(counts), 256), dtype)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        grouped_matmul(A, bank, ids, offs, 300, out=_nan((sum(counts), 256), dtype))  # warm: plan, workspace
        s.begin_capture()
        grouped_matmul(A, bank, ids, offs, 300, out=out)
        graph = s.end_capture()
        graph.launch(stream=s)
    s.synchronize()
    _check(out, A_h, bank, _host(ids), _host(offs), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("device_index", [True, False])
def test_new_output_rows_no_slot_covers_are_zero(rng, device_index):
    """Without out=, rows before offsets[0] and after offsets[-1] come back zero on the GPU, as from the
    CPU path (np.zeros), whatever the memory pool held before (it is filled with NaN first); covered rows
    match the reference.  No slot at all: every row zero."""
    cp = _cp()
    bank = _bank(rng, 5, 256, 512, 4)
    A = (rng.standard_normal((40, 512)) * 0.5).astype(np.float16)
    for ids, offs in (([3, 0], [4, 10, 31]), ([], [7]), ([1], [0, 40])):
        ids_a = cp.asarray(ids, dtype=cp.int32) if device_index else np.asarray(ids, np.int32)
        offs_a = cp.asarray(offs, dtype=cp.int32) if device_index else np.asarray(offs, np.int32)
        cp.get_default_memory_pool().free_all_blocks()
        cp.full((64, 256), np.nan, dtype=cp.float16)  # freed NaN blocks the result may reuse
        out = grouped_matmul(_dev(A), bank, ids_a, offs_a, 40)
        got = _host(out).astype(np.float64)
        cpu = np.asarray(grouped_matmul(A, bank.cpu(), np.asarray(ids, np.int32), np.asarray(offs, np.int32), 40),
                         np.float64)
        lo, hi = offs[0], offs[-1]
        assert not got[:lo].any() and not got[hi:].any() and not cpu[:lo].any() and not cpu[hi:].any()
        if hi > lo:
            ref = reference_grouped_matmul(A, bank, np.asarray(ids), np.asarray(offs))
            err = np.abs(got[lo:hi] - ref[lo:hi]).max() / np.abs(ref[lo:hi]).max()
            assert err < TOL[np.dtype(np.float16)], (ids, offs, err)
