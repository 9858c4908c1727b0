"""The memory of calls captured in a CUDA graph.

A graph replays its kernels on the addresses they had when it was captured.  CuPy's memory
pool does not know about graphs (torch's allocator gives each capture a private pool): a
temporary that a call frees during the capture (moe_forward's gate/up output, the routing's
arrays, a CuPy op's scratch) goes back to the pool, a later allocation is handed the same
block, and every replay then writes into that array.  So while the current stream captures,
``keep_alive()`` records every block a kbitcupy call allocates and keeps it out of the pool
until ``release_graph_memory()``, which a caller runs once the graphs are gone; under
torch.cuda.graph it allocates through torch instead, into the graph's private pool.  Outside a
capture it costs a stream query or two.
"""
from __future__ import annotations

import contextlib
import sys
import threading

_TLS = threading.local()  # depth: open keep_alive() contexts of this thread (an outer one decided)
_KEPT: list = []          # blocks allocated during captures, held until release_graph_memory()
_LOCK = threading.Lock()


def _torch_capturing() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001
        return False


def _capture_kind():
    """"torch" while torch captures its current stream (torch.cuda.graph), "cupy" while CuPy's current stream is
    captured, else None."""
    import cupy as cp

    if _torch_capturing():
        return "torch"
    try:
        return "cupy" if cp.cuda.get_current_stream().is_capturing() else None
    except cp.cuda.runtime.CUDARuntimeError:  # a query CUDA forbids while another stream captures: one is under way
        return "cupy"


def capturing() -> bool:
    """Whether the current stream (CuPy's, or torch's where torch is in use) is being captured."""
    return _capture_kind() is not None


def _torch_allocator(dev: int):
    """CuPy allocations served by torch's allocator: under torch.cuda.graph they come from the graph's private
    pool, which torch keeps for the graph's lifetime (and it allocates new memory in a way capture allows: CuPy's
    pool calling cudaMalloc during a global-mode capture is refused, cudaErrorStreamCaptureUnsupported)."""
    import cupy as cp
    import torch

    device = torch.device("cuda", dev)

    def alloc(size):
        t = torch.empty(size, dtype=torch.uint8, device=device)
        return cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(t.data_ptr(), size, t, dev), 0)
    return alloc


@contextlib.contextmanager
def keep_alive():
    """Around a GPU call (inside its device / stream context), during a capture: under torch.cuda.graph every
    block the call allocates comes from the graph's pool (torch's allocator); under CuPy's capture it stays
    allocated until release_graph_memory().  Nested calls share the outermost context's decision."""
    depth = getattr(_TLS, "depth", 0)
    kind = None if depth else _capture_kind()
    if kind is None:
        _TLS.depth = depth + 1
        try:
            yield
        finally:
            _TLS.depth = depth
        return
    import cupy as cp

    kept = []
    if kind == "torch":
        alloc = _torch_allocator(cp.cuda.Device().id)
    else:
        inner = cp.cuda.get_allocator()

        def alloc(size):
            mem = inner(size)
            kept.append(mem)
            return mem

    _TLS.depth = 1
    try:
        with cp.cuda.using_allocator(alloc):
            yield
    finally:
        _TLS.depth = 0
        with _LOCK:
            _KEPT.extend(kept)


def _bytes(blocks) -> int:
    return sum(int(m.mem.size) for m in blocks)


def release_graph_memory() -> int:
    """Return the blocks kept for captured calls to CuPy's pool (call it once no graph that used them
    will be replayed again); the number of bytes released."""
    with _LOCK:
        n = _bytes(_KEPT)
        _KEPT.clear()
    return n


def kept_bytes() -> int:
    """Bytes currently kept for captured calls."""
    with _LOCK:
        return _bytes(_KEPT)


@contextlib.contextmanager
def gpu_call(orig):
    """A GPU entry point's context: ``stream_ctx(orig)`` (its array's device and stream), then keep_alive();
    for a CPU array nothing."""
    from ._arrays import gpu_index_of, stream_ctx

    if gpu_index_of(orig) is None:
        yield
        return
    with stream_ctx(orig), keep_alive():
        yield
