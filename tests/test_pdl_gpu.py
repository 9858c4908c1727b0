"""GPU tests of programmatic dependent launch (kbitcupy.set_pdl): bit-exact with the
default launch, a chain of matmuls each reading the previous one's output right away
(eager, both launch paths, and in a CUDA graph), torch tensors."""
import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy import _launch as L

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _pdl_off_after():
    old = kb.set_pdl(False)
    L.clear_plans()
    yield
    kb.set_pdl(old)
    L.clear_plans()


def _cp_hopper():
    cp = pytest.importorskip("cupy")
    if int(cp.cuda.Device().compute_capability) < 90:
        pytest.skip("programmatic dependent launch needs compute capability 9.0")
    return cp


def _q(cp, rng, N, K, k):
    return kb.quantize(cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02), k)


def _bits(x):
    return x.view(np.uint16).get()


def _check_graph_replay(cp, step, xs, ref, out):
    """Capture step(xin) in a CUDA graph on a fresh stream (after one warm call there: plans,
    workspace), replay it for every input and compare `out` bit for bit with ref."""
    xin = cp.empty(xs[0].shape, xs[0].dtype)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        step(xin)
        s.synchronize()
        s.begin_capture()
        step(xin)
        g = s.end_capture()
        for x, r in zip(xs, ref):
            xin[...] = x
            out.fill(np.nan)
            g.launch(s)
            np.testing.assert_array_equal(_bits(out), r)


def _f32(bits, dt):
    """float32 values of fp16 / bf16 bit patterns (uint16)."""
    if dt == "bfloat16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return bits.view(np.float16).astype(np.float32)


@pytest.mark.parametrize("k", [2, 4, 5])
@pytest.mark.parametrize("M", [1, 3, 8, 16])
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_pdl_bit_exact(rng, k, M, dt):
    """matmul with PDL on is bit-exact with the same kernel launched without it.  The PDL
    dispatch table may pick another kernel than the default one (H100, k = 4, M = 16 on this
    size: dq + cuBLAS by default, kbit_gemm with PDL), so the reference is the kernel PDL's
    table picks, run alone with PDL off; the default matmul must then agree to rounding."""
    from kbitcupy import dispatch as D
    from kbitcupy.matmul import _run_kind

    cp = _cp_hopper()
    N, K = 1536, 2048
    q = _q(cp, rng, N, K, k)
    A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(dt)
    kind = D.choose(M, N, K, k, dt, pdl=True)
    ref_out = cp.full((M, N), np.nan, dt)
    _run_kind(kind, A, q, ref_out)  # what matmul runs for that choice, PDL off
    ref = _bits(ref_out)
    plain = kb.matmul(A, q)
    if D.choose(M, N, K, k, dt, pdl=False) == kind:
        np.testing.assert_array_equal(_bits(plain), ref)
    else:
        tol = 2e-2 if dt == "bfloat16" else 2e-3
        np.testing.assert_allclose(_f32(ref, dt), _f32(_bits(plain), dt), rtol=tol, atol=tol)
    with kb.pdl():
        for _ in range(3):  # general path, then the fast path's plan
            out = cp.full((M, N), np.nan, dt)
            kb.matmul(A, q, out=out)
            np.testing.assert_array_equal(_bits(out), ref)


@pytest.mark.parametrize("M", [1, 4])
def test_pdl_chain_reads_previous_output(rng, M):
    """y1 = x W1^T, y2 = y1 W2^T, y3 = y2 W1'^T back to back, no sync between steps: a
    launch that read A before its predecessor finished would see the previous step's
    buffer contents.  20 steps with fresh x, eager and graph-replayed, against PDL off."""
    cp = _cp_hopper()
    H, I = 2048, 4096
    q1, q2, q3 = _q(cp, rng, I, H, 4), _q(cp, rng, H, I, 3), _q(cp, rng, I, H, 5)
    xs = [cp.asarray(rng.standard_normal((M, H), dtype=np.float32)).astype(cp.float16) for _ in range(20)]
    b1, b2, b3 = cp.empty((M, I), cp.float16), cp.empty((M, H), cp.float16), cp.empty((M, I), cp.float16)

    def step(x):
        kb.matmul(x, q1, out=b1)
        kb.matmul(b1, q2, out=b2)
        kb.matmul(b2, q3, out=b3)

    def run_all():
        res = []
        for x in xs:
            step(x)
            res.append(b3.copy())  # a CuPy kernel between the chains
        return [_bits(r) for r in res]

    ref = run_all()
    for r in ref:
        assert np.isfinite(r.view(np.float16).astype(np.float32)).all()
    with kb.pdl():
        for _ in range(2):  # general path, then the fast path
            got = run_all()
            for g, r in zip(got, ref):
                np.testing.assert_array_equal(g, r)
        # the same chain captured in a graph (programmatic edges), replayed per input
        _check_graph_replay(cp, step, xs, ref, b3)


@pytest.mark.parametrize("M", [1, 4, 16, 40, 100])
def test_safe_pdl_weight_written_right_before(rng, M):
    """PDL's safe mode (set_pdl("safe")): every kernel waits for the previous grid before
    touching memory, so a matmul right after kernels that write its weight (elementwise kernels
    into the weight's own packed / absmax buffers) sees the new contents -- what the full mode
    may not -- and the next matmul reads its output.  The dispatched kernel at each M (GEMV,
    streaming GEMV, wgmma, dq + cuBLAS), eager (both launch paths) and graph-replayed with the
    weight poisoned before every replay, bit-exact against PDL off."""
    cp = _cp_hopper()
    N, K = 2048, 4096
    qs = [_q(cp, rng, N, K, 4) for _ in range(3)]
    w = _q(cp, rng, N, K, 4)  # the weight buffer each step writes one of qs into
    q_back = _q(cp, rng, K, N, 4)
    xs = [cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16) for _ in range(6)]
    out, y2 = cp.empty((M, N), cp.float16), cp.empty((M, K), cp.float16)

    def step(x, src):
        cp.add(src.packed, 0, out=w.packed)  # kernels writing the weight right before its matmul
        cp.add(src.absmax, 0, out=w.absmax)
        kb.matmul(x, w, out=out)
        kb.matmul(out, q_back, out=y2)

    def run_all():
        res = []
        for j, x in enumerate(xs):
            step(x, qs[j % len(qs)])
            res.append((_bits(out), _bits(y2)))
        return res

    ref = run_all()
    gref = []
    for x in xs:  # the graph's reference: one source weight, PDL off
        step(x, qs[1])
        gref.append(_bits(y2))
    old = kb.set_pdl("safe")
    try:
        for _ in range(2):  # general path, then the fast path
            for g, r in zip(run_all(), ref):
                np.testing.assert_array_equal(g[0], r[0])
                np.testing.assert_array_equal(g[1], r[1])
        xin = cp.empty_like(xs[0])
        st = cp.cuda.Stream(non_blocking=True)
        with st:
            step(xin, qs[1])
            st.synchronize()
            st.begin_capture()
            step(xin, qs[1])
            graph = st.end_capture()
            for x, r in zip(xs, gref):
                xin[...] = x
                w.packed.fill(0xFFFFFFFF)  # poison: a matmul reading before the copy would see it
                w.absmax.fill(0xFF)
                y2.fill(np.nan)
                graph.launch(st)
                np.testing.assert_array_equal(_bits(y2), r)
            st.synchronize()
    finally:
        kb.set_pdl(old)


def _routing(cp, rng, mt, K):
    """Five slots of 12 experts around mt tokens each (one empty): host offsets, A, zeroed device
    ids / offsets for a kernel to write, and the values to write."""
    counts = np.array([mt, 0, mt, mt // 2 + 1, mt], np.int32)
    offs_h = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    ids_h = np.array([3, 7, 0, 11, 5], np.int32)
    A = cp.asarray(rng.standard_normal((int(offs_h[-1]), K), dtype=np.float32)).astype(cp.float16)
    return offs_h, A, cp.zeros(5, cp.int32), cp.zeros(6, cp.int32), cp.asarray(ids_h), cp.asarray(offs_h)


def test_safe_pdl_grouped(rng):
    """grouped_matmul in PDL's safe mode: expert ids and offsets written by a kernel right
    before (device routing), bit-exact against PDL off, for the grouped GEMV and wgmma sizes."""
    cp = _cp_hopper()
    from kbitcupy.grouped import grouped_matmul, quantize_experts

    E, N, K = 12, 512, 2048
    bank = quantize_experts(cp.asarray(rng.standard_normal((E, N, K), dtype=np.float32) * 0.02), 4)
    for mt in (1, 4, 32):
        offs_h, A, ids, offs, ids_src, offs_src = _routing(cp, rng, mt, K)

        def call():
            cp.add(ids_src, 0, out=ids)  # the routing written by a kernel right before
            cp.add(offs_src, 0, out=offs)
            return grouped_matmul(A, bank, ids, offs, mt, method="kernel")

        ref = _bits(call())
        old = kb.set_pdl("safe")
        try:
            for _ in range(2):
                np.testing.assert_array_equal(_bits(call()), ref)
        finally:
            kb.set_pdl(old)


_LATE_COPY = r"""
extern "C" __global__ void late_copy(const unsigned char* src, unsigned char* dst, long long n, long long spin) {
    // let the next grid launch at once (its programmatic dependent may start now), then write late
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const long long t0 = clock64();
    while (clock64() - t0 < spin) {}
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
"""


def _late_copy(cp):
    """A copy kernel that triggers its dependents at entry and writes ~60 us later: a dependent
    that reads what it writes before griddepcontrol.wait (e.g. a load the compiler hoisted above
    the wait) reads the old contents."""
    fn = cp.RawKernel(_LATE_COPY, "late_copy")

    def copy(src, dst):
        assert src.nbytes == dst.nbytes
        fn((64,), (256,), (src, dst, np.int64(src.nbytes), np.int64(100_000)))
    return copy


def _safe_matches_plain(call, out, what):
    """call() (poison, late writes, the kernel; returns out's bits) with PDL off, then three times
    in safe PDL: bit-exact, every output written."""
    ref = call()
    assert not np.isnan(out.get()).any(), what
    old = kb.set_pdl("safe")
    try:
        for _ in range(3):
            np.testing.assert_array_equal(call(), ref, err_msg=what)
    finally:
        kb.set_pdl(old)


@pytest.mark.parametrize("impl", ["gemv", "mma", "wgmma"])
def test_safe_pdl_grouped_late_writer(rng, impl):
    """Safe PDL: expert ids and offsets written by a kernel that lets its dependents launch at
    once and writes ~60 us later (the zeros before mean every slot empty).  Every grouped kernel
    must read them only after its wait (the grouped GEMV and mma kernels once read them before
    it: ld.global.nc hoisted by ptxas, profiling/sass_wait_check.py).  Bit-exact against PDL off."""
    cp = _cp_hopper()
    if impl == "wgmma":
        _sm90()
    from kbitcupy.grouped import grouped_matmul, quantize_experts

    copy = _late_copy(cp)
    E, N, K = 12, 512, 2048
    bank = quantize_experts(cp.asarray(rng.standard_normal((E, N, K), dtype=np.float32) * 0.02), 4)
    for mt in ((1, 4) if impl == "gemv" else (16,)):
        offs_h, A, ids, offs, ids_src, offs_src = _routing(cp, rng, mt, K)
        out = cp.empty((int(offs_h[-1]), N), cp.float16)

        def call():
            ids.fill(0)
            offs.fill(0)
            out.fill(np.nan)
            copy(ids_src, ids)
            copy(offs_src, offs)
            grouped_matmul(A, bank, ids, offs, mt, out=out, impl=impl)
            return _bits(out)

        _safe_matches_plain(call, out, "grouped")


def test_safe_pdl_grouped_gemv_stale_ids(rng):
    """Safe PDL, the grouped GEMV's wait-first mode: the ids and offsets before the late writer's writes
    are a valid routing of their own (other experts and counts), so a kernel that read them before its
    wait (as the twenty-ninth session's guess experiment did, unchecked) computes the wrong experts on most
    slots.  Bit-exact against PDL off, every row written."""
    cp = _cp_hopper()
    from kbitcupy.grouped import grouped_matmul, quantize_experts

    copy = _late_copy(cp)
    E, N, K = 12, 512, 2048
    bank = quantize_experts(cp.asarray(rng.standard_normal((E, N, K), dtype=np.float32) * 0.02), 4)
    for mt in (1, 4):
        offs_h, A, ids, offs, ids_src, offs_src = _routing(cp, rng, mt, K)
        counts = np.diff(offs_h)
        stale_counts = counts[[4, 3, 2, 0, 1]]  # the same total, so every stale slot is in range
        stale_offs = cp.asarray(np.concatenate([[0], np.cumsum(stale_counts)]).astype(np.int32))
        stale_ids = cp.asarray(np.array([5, 11, 0, 7, 3], np.int32))
        out = cp.empty((int(offs_h[-1]), N), cp.float16)

        def call():
            cp.copyto(ids, stale_ids)
            cp.copyto(offs, stale_offs)
            out.fill(np.nan)
            copy(ids_src, ids)
            copy(offs_src, offs)
            grouped_matmul(A, bank, ids, offs, mt, out=out, impl="gemv")
            return _bits(out)

        _safe_matches_plain(call, out, f"grouped gemv, stale ids, {mt} tokens")


@pytest.mark.parametrize("T", [1, 8, 150])
def test_safe_pdl_route_and_combine_late_writer(rng, T):
    """Safe PDL: the one-block routing kernel (a programmatic dependent at decode sizes) reads topk
    ids a late writer writes ~60 us after letting it launch (the ids before: all expert 0), and
    the combine reads C_sorted / weights written so: both bit-exact against PDL off."""
    cp = _cp_hopper()
    from kbitcupy.moe import moe_combine, moe_route

    copy = _late_copy(cp)
    E, topk, H = 512, 10, 512
    ids_src = cp.asarray(np.stack([rng.permutation(E)[:topk] for _ in range(T)]).astype(np.int32))
    ids = cp.zeros_like(ids_src)
    C_src = cp.asarray(rng.standard_normal((T * topk, H), dtype=np.float32)).astype(cp.float16)
    C = cp.zeros_like(C_src)
    w_src = cp.asarray(rng.random((T, topk), dtype=np.float32))
    w = cp.zeros_like(w_src)
    r0 = moe_route(ids_src, E)

    def call():
        ids.fill(0)
        C.fill(0)
        w.fill(0)
        copy(ids_src, ids)
        r = moe_route(ids, E)
        copy(C_src, C)
        copy(w_src, w)
        o = moe_combine(C, r0, w)
        return [a.get() for a in (r.sorted_token, r.pos, r.expert_ids, r.offsets)] + [_bits(o)]

    old = kb.set_pdl(False)
    try:
        ref = call()
    finally:
        kb.set_pdl(old)
    assert (ref[2] != 0).any()
    for mode in ("safe", True):
        old = kb.set_pdl(mode)
        try:
            for _ in range(3):
                for a, b in zip(call(), ref):
                    np.testing.assert_array_equal(a, b, err_msg=str(mode))
        finally:
            kb.set_pdl(old)


@pytest.mark.parametrize("impl,k,ntok,dt", [("gemv", 4, 1, "float16"), ("gemv", 4, 4, "bfloat16"),
                                            ("gemv", 5, 1, "bfloat16"), ("gemv", 2, 8, "float16"),
                                            ("gemv", 3, 20, "bfloat16"), ("wgmma", 4, 16, "float16"),
                                            ("wgmma", 2, 40, "bfloat16"), ("wgmma", 5, 64, "float16"),
                                            ("wgmma", 3, 130, "bfloat16")])
def test_safe_pdl_grouped_stable_weight_late_writer(rng, impl, k, ntok, dt):
    """Safe PDL with ids_stable (the grouped GEMV and wgmma kernels read the ids and L2-prefetch
    their first weights before their wait): the bank's packed words, absmax and tensor scales
    written by a kernel that lets its dependents launch at once and writes ~60 us later.  k = 5
    has the default codebook compiled in (the GEMV's table built before the wait); ntok 20 runs
    three GEMV passes, 130 three wgmma token tiles; slot 1 has no tokens (its blocks still wait);
    fp16 and bf16.  Bit-exact against PDL off, every output written."""
    cp = _sm90()[0] if impl == "wgmma" else _cp_hopper()
    from dataclasses import replace

    from kbitcupy.grouped import grouped_matmul, quantize_experts

    copy = _late_copy(cp)
    E, N, K, S = 16, 512, 2048, 6
    src = quantize_experts(cp.asarray(rng.standard_normal((E, N, K), dtype=np.float32) * 0.05), k)
    src = replace(src, tensor_scale=cp.asarray(rng.choice([0.5, 1.0, 2.0, 4.0], E).astype(np.float32)),
                  tensor_scale_host=None)
    bank = replace(src, packed=cp.zeros_like(src.packed), absmax=cp.zeros_like(src.absmax),
                   tensor_scale=cp.zeros_like(src.tensor_scale), tensor_scale_host=None)
    counts = np.full(S, ntok, np.int32)
    counts[1] = 0
    A = cp.asarray(rng.standard_normal((int(counts.sum()), K), dtype=np.float32)).astype(dt)
    ids = cp.asarray(rng.permutation(E)[:S].astype(np.int32))
    offs = cp.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    out = cp.empty((A.shape[0], N), A.dtype)

    def call():
        for a in (bank.packed, bank.absmax, bank.tensor_scale):
            a.fill(0)
        out.fill(np.nan)
        copy(src.packed, bank.packed)
        copy(src.absmax, bank.absmax)
        copy(src.tensor_scale, bank.tensor_scale)
        grouped_matmul(A, bank, ids, offs, ntok, out=out, method="kernel", impl=impl, ids_stable=True)
        return _bits(out)

    _safe_matches_plain(call, out, f"grouped stable {impl} k={k} ntok={ntok}")


@pytest.mark.parametrize("pf", [1, 2])
@pytest.mark.parametrize("N", [5120, 2048])
def test_safe_pdl_gemv_prefetch_depth(rng, pf, N):
    """The decode GEMV in safe PDL prefetching one ring step or the whole ring (the kernel's pdl
    argument PDL_SAFE_PF1 / PDL_SAFE, gemv.safe_prefetch_steps), its weights written by a late
    writer right before: bit-exact against PDL off, every output written."""
    cp = _cp_hopper()
    from dataclasses import replace

    from kbitcupy.gemv import gemv

    copy = _late_copy(cp)
    K = 2048
    src = _q(cp, rng, N, K, 4)
    w = replace(src, packed=cp.zeros_like(src.packed), absmax=cp.zeros_like(src.absmax))
    x = cp.asarray(rng.standard_normal((1, K), dtype=np.float32)).astype(cp.float16)
    out = cp.empty((1, N), cp.float16)

    def call():
        w.packed.fill(0)
        w.absmax.fill(0)
        out.fill(np.nan)
        copy(src.packed, w.packed)
        copy(src.absmax, w.absmax)
        gemv(x, w, out, (("pf", pf),))
        return _bits(out)

    _safe_matches_plain(call, out, f"gemv N={N} pf={pf}")


@pytest.mark.parametrize("kernel", ["matmul", "gemm", "stream"])
def test_safe_pdl_weight_late_writer(rng, kernel):
    """Safe PDL: a weight with its own codebook (loaded by every kernel) whose packed words,
    absmax and codebook are written by a kernel that lets its dependents launch at once and
    writes ~60 us later.  The dispatched matmul at M = 1 / 4 / 16 / 40 / 100, kbit_gemm (whose
    codebook read was once hoisted above its wait) and the streaming GEMV; bit-exact against
    PDL off."""
    cp = _cp_hopper()
    from dataclasses import replace

    copy = _late_copy(cp)
    N, K = 1024, 2048
    other = cp.asarray(np.linspace(-1, 1, 16, dtype=np.float32) ** 3)
    src = replace(_q(cp, rng, N, K, 4), codebook=other)
    w = replace(_q(cp, rng, N, K, 4), codebook=cp.zeros(16, cp.float32))
    assert not src.default_codebook and not w.default_codebook
    if kernel == "gemm":
        from kbitcupy.gemm import gemm as fn
    elif kernel == "stream":
        from kbitcupy.gemv_stream import gemv_stream as fn
    else:
        def fn(x, q, out):
            kb.matmul(x, q, out=out)
    for M in ((1, 4, 16, 40, 100) if kernel == "matmul" else (4, 16)):
        x = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(cp.float16)
        out = cp.empty((M, N), cp.float16)

        def call():
            w.packed.fill(0)
            w.absmax.fill(0)
            w.codebook.fill(0)
            out.fill(np.nan)
            copy(src.packed, w.packed)
            copy(src.absmax, w.absmax)
            copy(src.codebook, w.codebook)
            fn(x, w, out)
            return _bits(out)

        _safe_matches_plain(call, out, f"{kernel} M={M}")


def test_pdl_torch_tensors(rng):
    cp = _cp_hopper()
    torch = pytest.importorskip("torch")
    q = _q(cp, rng, 1024, 2048, 4)
    A = torch.randn(2, 2048, device="cuda", dtype=torch.float16)
    ref = kb.matmul(A, q).clone()
    with kb.pdl():
        for _ in range(3):
            out = torch.full((2, 1024), float("nan"), device="cuda", dtype=torch.float16)
            kb.matmul(A, q, out=out)
            assert torch.equal(out.view(torch.int16), ref.view(torch.int16))


def _sm90():
    cp = _cp_hopper()
    from kbitcupy import wgmma as WG

    if not WG.supported(cp.cuda.Device().id):
        pytest.skip("the wgmma kernels need compute capability 9.0")
    return cp, WG


@pytest.mark.parametrize("kernel", ["gemm", "wgmma"])
@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_pdl_fused_gemm_chain(rng, kernel, k, dt):
    """The fused GEMMs (mma.sync kbit_gemm, Hopper wgmma) as programmatic dependents
    (weights and tables before the wait): y1 = x W1^T -> y2 = y1 W2^T -> y3 = y2 W3^T back
    to back with forced split-K, so each launch reads the previous one's output and
    reuses the stream's split-K workspace and counters right after it.  Several token
    tiles, K % 64 == 32; eager and graph-replayed, bit-exact against PDL off."""
    if kernel == "wgmma":
        cp, mod = _sm90()
        gemm_fn = mod.wgmma_gemm
    else:
        cp = _cp_hopper()
        from kbitcupy.gemm import gemm as gemm_fn

    class WG:  # the chain below calls WG.wgmma_gemm
        wgmma_gemm = staticmethod(gemm_fn)
    H, I = 1056, 1536  # H % 64 == 32: a half K tile
    q1, q2, q3 = _q(cp, rng, I, H, k), _q(cp, rng, H, I, k), _q(cp, rng, I, H, k)
    for M, splits in ((16, 3), (40, 2), (100, 3), (130, 1)):
        xs = [cp.asarray(rng.standard_normal((M, H), dtype=np.float32)).astype(dt) for _ in range(6)]
        b1, b2, b3 = cp.empty((M, I), dt), cp.empty((M, H), dt), cp.empty((M, I), dt)

        def step(x):
            WG.wgmma_gemm(x, q1, b1, k_splits=splits)
            WG.wgmma_gemm(b1, q2, b2, k_splits=splits)
            WG.wgmma_gemm(b2, q3, b3, k_splits=min(splits, 2))

        def run_all():
            res = []
            for x in xs:
                step(x)
                res.append(b3.copy())
            return [_bits(r) for r in res]

        ref = run_all()
        assert all(np.any(r) for r in ref)
        with kb.pdl():
            for g, r in zip(run_all(), ref):
                np.testing.assert_array_equal(g, r)
            _check_graph_replay(cp, step, xs, ref, b3)


def _grouped_setup(cp, rng, E, N, K, S, ntok, k):
    """A bank of E experts, A for S slots of up to ntok rows, 8 routings (device ids, device
    offsets; one slot of each full) and an output per routing."""
    from kbitcupy.grouped import quantize_experts

    bank = quantize_experts(cp.asarray(rng.standard_normal((E, N, K), dtype=np.float32) * 0.05), k)
    A = cp.asarray(rng.standard_normal((S * ntok, K), dtype=np.float32)).astype(cp.float16)
    routes = []
    for _ in range(8):
        counts = rng.integers(0, ntok + 1, size=S)
        counts[rng.integers(S)] = ntok
        offs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        routes.append((cp.asarray(rng.permutation(E)[:S].astype(np.int32)), cp.asarray(offs)))
    return bank, A, routes, [cp.empty((S * ntok, N), cp.float16) for _ in routes]


def _check_routings_pdl(cp, grouped_matmul, bank, A, routes, outs, ntok, impl, ids_stable):
    """Each routing copied into the index arrays by kernels right before its call (with
    ids_stable, one more kernel that writes no routing sits between), all calls back to
    back without a sync; twice with PDL on, bit-exact against PDL off."""
    S = int(routes[0][0].size)
    ids_d, offs_d, spacer = cp.zeros(S, cp.int32), cp.zeros(S + 1, cp.int32), cp.zeros(1 << 16, cp.float32)

    def run_all():
        for (i, o), out in zip(routes, outs):
            out.fill(0)
            cp.add(i, 0, out=ids_d)  # kernels writing the routing right before the call
            cp.add(o, 0, out=offs_d)
            if ids_stable:
                cp.add(spacer, 1, out=spacer)  # the kernel right before the call writes no routing
            grouped_matmul(A, bank, ids_d, offs_d, ntok, out=out, method="kernel", impl=impl, ids_stable=ids_stable)
        return [_bits(o) for o in outs]

    ref = run_all()
    assert any(np.any(r) for r in ref)
    with kb.pdl():
        for _ in range(2):
            for g, r in zip(run_all(), ref):
                np.testing.assert_array_equal(g, r)
    old = kb.set_pdl("safe")  # the default mode (with ids_stable the GEMV reads the ids before its wait)
    try:
        for g, r in zip(run_all(), ref):
            np.testing.assert_array_equal(g, r)
    finally:
        kb.set_pdl(old)


@pytest.mark.parametrize("impl,ntok", [("gemv", 1), ("gemv", 4), ("gemv", 8), ("mma", 12), ("wgmma", 16),
                                       ("wgmma", 40)])
def test_pdl_grouped_ids_written_right_before(rng, impl, ntok):
    """Grouped kernels as programmatic dependents: their expert ids and offsets are
    written by the kernel right before each call (as device routing does), so the kernel
    must not read them before its wait.  8 different routings back to back without a
    sync, bit-exact against PDL off."""
    cp, _ = _sm90() if impl == "wgmma" else (_cp_hopper(), None)
    from kbitcupy.grouped import grouped_matmul

    E, S = 32, 6
    bank, A, routes, outs = _grouped_setup(cp, rng, E, 512, 1024, S, ntok, 4)
    _check_routings_pdl(cp, grouped_matmul, bank, A, routes, outs, ntok, impl, ids_stable=False)


def test_pdl_moe_forward(rng):
    """The whole MoE forward (device routing, gather, grouped gate/up, silu, grouped
    down, combine) with PDL on: bit-exact with PDL off, for decode and prefill sizes.
    At T = 96 (6 rows per expert) moe_forward plans for 16 rows, where down runs the mma
    kernel in a plain launch and the wgmma one with stable ids under PDL (grouped.choose_impl,
    measured per mode): bit-exact with max_tokens = 96 (wgmma both ways), and the default
    plan in every mode against the float reference."""
    cp = _cp_hopper()
    from kbitcupy.grouped import quantize_experts
    from kbitcupy.moe import moe_forward, moe_forward_reference

    E, H, I, topk = 64, 1024, 256, 4
    bgu = quantize_experts(cp.asarray(rng.standard_normal((E, 2 * I, H), dtype=np.float32) * 0.05), 4)
    bd = quantize_experts(cp.asarray(rng.standard_normal((E, H, I), dtype=np.float32) * 0.05), 4)
    for T in (1, 8, 96):
        x = cp.asarray(rng.standard_normal((T, H), dtype=np.float32)).astype(cp.float16)
        ids = cp.asarray(np.array([rng.choice(E, topk, replace=False) for _ in range(T)], np.int32))
        w = cp.asarray(rng.random((T, topk)).astype(np.float32))
        mt = T if T > 16 else None
        ref = _bits(moe_forward(x, bgu, bd, ids, w, max_tokens=mt))
        with kb.pdl():
            np.testing.assert_array_equal(_bits(moe_forward(x, bgu, bd, ids, w, max_tokens=mt)), ref)
        with kb.pdl("safe"):  # the default mode; above the decode sizes its grouped calls are chained
            np.testing.assert_array_equal(_bits(moe_forward(x, bgu, bd, ids, w, max_tokens=mt)), ref)
        if T > 16:
            exp = moe_forward_reference(x.get(), bgu, bd, ids.get(), w.get(), round=True).astype(np.float64)
            for mode in (False, "safe", True):
                old = kb.set_pdl(mode)
                try:
                    got = moe_forward(x, bgu, bd, ids, w).get().astype(np.float64)
                finally:
                    kb.set_pdl(old)
                assert np.abs(got - exp).max() < 2e-2 * np.abs(exp).max(), mode


@pytest.mark.parametrize("T", [1, 3])
def test_pdl_moe_forward_pair_route_late_ids(rng, T):
    """moe_forward's decode routing (pair_route) has no routing kernel: gate/up reads the caller's topk_ids itself.
    Ids written by a kernel that lets its dependents launch at once and writes ~60 us later (zeros before: every
    choice expert 0), right before moe_forward: gate/up must read them after its wait, down (ids_stable) after
    gate/up's.  Bit-exact against PDL off in the safe and full modes, three times each."""
    cp = _cp_hopper()
    from kbitcupy.grouped import quantize_experts
    from kbitcupy.moe import moe_forward

    copy = _late_copy(cp)
    E, H, I, topk = 64, 1024, 256, 10
    bgu = quantize_experts(cp.asarray(rng.standard_normal((E, 2 * I, H), dtype=np.float32) * 0.05), 4)
    bd = quantize_experts(cp.asarray(rng.standard_normal((E, H, I), dtype=np.float32) * 0.05), 4)
    x = cp.asarray(rng.standard_normal((T, H), dtype=np.float32)).astype(cp.float16)
    ids_src = cp.asarray(np.stack([rng.permutation(E - 1)[:topk] + 1 for _ in range(T)]).astype(np.int32))
    w_src = cp.asarray(rng.random((T, topk), dtype=np.float32))
    ids, w = cp.zeros_like(ids_src), cp.zeros_like(w_src)

    def call():
        ids.fill(0)
        w.fill(0)
        copy(w_src, w)
        copy(ids_src, ids)  # the last kernel before moe_forward
        return _bits(moe_forward(x, bgu, bd, ids, w))

    old = kb.set_pdl(False)
    try:
        ref = call()
        stale = _bits(moe_forward(x, bgu, bd, cp.zeros_like(ids_src), w_src))
    finally:
        kb.set_pdl(old)
    assert not np.array_equal(ref, stale)  # (a read of the old ids would show)
    for mode in ("safe", True):
        old = kb.set_pdl(mode)
        try:
            for _ in range(3):
                np.testing.assert_array_equal(call(), ref, err_msg=str(mode))
        finally:
            kb.set_pdl(old)


@pytest.mark.parametrize("impl,ntok", [("gemv", 1), ("gemv", 8), ("gemv", 20), ("mma", 12), ("wgmma", 16),
                                       ("wgmma", 40)])
def test_pdl_grouped_ids_stable(rng, impl, ntok):
    """ids_stable=True (the routing is written two kernels back, as in moe_forward): the
    GEMV and wgmma kernels request the experts' weights before their wait.  8 routings
    back to back, each read by a call right after another kernel, bit-exact against PDL
    off; ntok 20 runs the grouped GEMV in three passes; error bits set in that mode
    survive a reset by the kernel right before."""
    cp, _ = _sm90() if impl == "wgmma" else (_cp_hopper(), None)
    from kbitcupy.grouped import ERR_EXPERT_ID, _err_buffer, grouped_matmul, read_errors

    E, S = 32, 6
    bank, A, routes, outs = _grouped_setup(cp, rng, E, 384, 1056, S, ntok, 5)
    _check_routings_pdl(cp, grouped_matmul, bank, A, routes, outs, ntok, impl, ids_stable=True)
    with kb.pdl():
        bad = routes[0][0].copy()
        bad[2] = E + 3
        cp.cuda.get_current_stream().synchronize()
        _err_buffer().fill(0)  # the reset kernel right before the dependent call
        grouped_matmul(A, bank, bad, routes[0][1], ntok, out=outs[0], method="kernel", impl=impl, ids_stable=True)
        assert read_errors(reset=True) & ERR_EXPERT_ID
    old = kb.set_pdl("safe")  # the default mode: the GEMV and wgmma kernels read the ids before their wait there
    try:
        bad = routes[1][0].copy()
        bad[0] = -1
        cp.cuda.get_current_stream().synchronize()
        _err_buffer().fill(0)
        grouped_matmul(A, bank, bad, routes[1][1], ntok, out=outs[1], method="kernel", impl=impl, ids_stable=True)
        assert read_errors(reset=True) & ERR_EXPERT_ID
    finally:
        kb.set_pdl(old)


@pytest.mark.parametrize("impl,ntok,k,dt", [("wgmma", 16, 4, "float16"), ("wgmma", 40, 2, "bfloat16"),
                                            ("wgmma", 64, 5, "float16"), ("wgmma", 130, 4, "bfloat16"),
                                            ("gemv", 4, 4, "float16"), ("mma", 12, 3, "float16")])
def test_safe_pdl_grouped_chained(rng, impl, ntok, k, dt):
    """chained=True in the default safe mode (moe_forward above the decode sizes): the wgmma kernel requests its
    weights before its wait, behind a grouped call of this package that writes its A right before.  Per routing
    (ids written by kernels before the first call) h = A W1^T, then y = h W2^T chained; 8 routings back to back
    without a sync, eager and graph-replayed, bit-exact against PDL off (the GEMV and mma kernels ignore the
    flag); 130 tokens run three wgmma token tiles; slots with no tokens."""
    cp = _sm90()[0] if impl == "wgmma" else _cp_hopper()
    from kbitcupy.grouped import grouped_matmul, quantize_experts

    E, S, H, I = 24, 6, 1024, 512
    bank1 = quantize_experts(cp.asarray(rng.standard_normal((E, I, H), dtype=np.float32) * 0.05), k)
    bank2 = quantize_experts(cp.asarray(rng.standard_normal((E, H, I), dtype=np.float32) * 0.05), k)
    A = cp.asarray(rng.standard_normal((S * ntok, H), dtype=np.float32)).astype(dt)
    routes = []
    for _ in range(8):
        counts = rng.integers(0, ntok + 1, size=S)
        counts[rng.integers(S)] = ntok
        routes.append((cp.asarray(rng.permutation(E)[:S].astype(np.int32)),
                       cp.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))))
    ids_d, offs_d = cp.zeros(S, cp.int32), cp.zeros(S + 1, cp.int32)
    hs = [cp.empty((S * ntok, I), A.dtype) for _ in routes]
    ys = [cp.empty((S * ntok, H), A.dtype) for _ in routes]

    def run_all():
        for (i, o), h, y in zip(routes, hs, ys):
            cp.add(i, 0, out=ids_d)  # the routing written by kernels right before the first call
            cp.add(o, 0, out=offs_d)
            grouped_matmul(A, bank1, ids_d, offs_d, ntok, out=h, method="kernel", impl=impl)
            grouped_matmul(h, bank2, ids_d, offs_d, ntok, out=y, method="kernel", impl=impl, chained=True)

    def poison():
        for a in hs + ys:
            a.fill(np.nan)

    poison()
    run_all()
    ref = [_bits(y) for y in ys]
    assert all(np.any(r) for r in ref)
    old = kb.set_pdl("safe")
    try:
        for _ in range(2):
            poison()
            run_all()
            for y, r in zip(ys, ref):
                np.testing.assert_array_equal(_bits(y), r)
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            run_all()
            s.synchronize()
            s.begin_capture()
            run_all()
            g = s.end_capture()
            poison()
            g.launch(s)
            s.synchronize()
        for y, r in zip(ys, ref):
            np.testing.assert_array_equal(_bits(y), r)
    finally:
        kb.set_pdl(old)
