"""Argument checks of the low-level kernel entry points (gemv, gemv_stream, gemm, wgmma_gemm,
dequant_matmul): what ``kbitcupy.matmul`` checks before it dispatches, for callers that use
them directly.  Why: the kernels take K from A, so an A wider than the weight would make a
kernel read past the weight's words; nothing may reach a launch unchecked.  matmul's own
dispatch passes ``validate=False`` (it has checked already; its general path stays as cheap)."""
from __future__ import annotations

from ._arrays import ACT_DTYPES, check_no_overlap, current_device, dtype_name, is_cupy, is_numpy


def check_rows(fn: str, M: int, min_m: int, max_m: int | None, m_note="") -> None:
    """Raise a ValueError naming ``fn`` unless min_m <= M <= max_m (None: no upper limit); m_note: what the limit
    depends on (in the message after "rows of A"), a string or a function giving one -- formatted only for the error,
    not on every call."""
    if M < min_m or (max_m is not None and M > max_m):
        note = m_note() if callable(m_note) else m_note
        raise ValueError(f"{fn} handles M = {min_m}..{max_m} rows of A{note}, got M = {M}; use kbitcupy.matmul")


def check_kernel_call(A, qw, out, fn: str, max_m=None, min_m: int = 0) -> None:
    """Raise a TypeError / ValueError naming ``fn`` and the argument unless A [M, K] and out
    [M, N] are contiguous CuPy arrays of one activation dtype on the weight's GPU, K is the
    weight's K, A is 16-byte aligned and min_m <= M <= max_m.  Shapes and dtypes are checked
    before the array kind, so the CPU tests reach every rule.  max_m: an int, None, or a function of the
    (checked) weight returning (max_m, what it depends on: as check_rows' m_note) for a limit that varies with the
    weight."""
    from .weight import KbitWeight

    if not isinstance(qw, KbitWeight):
        raise TypeError(f"{fn}: qw must be a KbitWeight, got {type(qw).__name__}")
    for name, a in (("A", A), ("out", out)):
        if not (is_cupy(a) or is_numpy(a)):
            raise TypeError(f"{fn}: {name} must be a CuPy array, got {type(a).__name__} "
                            "(kbitcupy.matmul also takes NumPy arrays and torch tensors)")
    N, K = qw.shape
    if A.ndim != 2 or A.shape[1] != K:
        raise ValueError(f"{fn}: A must be [M, K = {K}] (the weight's K), got shape {tuple(A.shape)}")
    M = int(A.shape[0])
    check_rows(fn, M, min_m, *(max_m(qw) if callable(max_m) else (max_m,)))
    if A.dtype not in ACT_DTYPES:
        raise ValueError(f"{fn}: A must be float16 or bfloat16, got {dtype_name(A.dtype)}")
    if tuple(out.shape) != (M, N) or out.dtype != A.dtype:
        raise ValueError(f"{fn}: out must be a {dtype_name(A.dtype)} array of shape {(M, N)}, got "
                         f"{dtype_name(out.dtype)} {tuple(out.shape)}")
    if not A.flags.c_contiguous or not out.flags.c_contiguous:
        raise ValueError(f"{fn}: A and out must be C-contiguous")
    for name, a in (("A", A), ("out", out)):
        if not is_cupy(a):
            raise TypeError(f"{fn}: {name} must be a CuPy array (the kernels run on the GPU), got a NumPy array")
    if not qw.on_gpu:
        raise ValueError(f"{fn}: the weight is on the CPU; call qw.cuda()")
    if A.data.ptr % 16:
        raise ValueError(f"{fn}: A's data pointer must be 16-byte aligned")
    check_no_overlap(out, f"{fn}: out", {"A": A})
    devs = {"A": A.data.device_id, "out": out.data.device_id, "the weight": qw.packed.data.device_id}
    if len(set(devs.values())) > 1:
        raise ValueError(f"{fn}: A, out and the weight must be on one device, got {devs}")
    cur = current_device()
    if devs["A"] != cur:  # the kernel handle, plan and launch are the current device's
        raise ValueError(f"{fn}: A, out and the weight are on device {devs['A']} but the current CuPy device is {cur}; "
                         f"call it under cupy.cuda.Device({devs['A']}) (kbitcupy.matmul switches by itself)")
