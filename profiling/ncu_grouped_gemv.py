"""ncu target: five plain launches of the grouped GEMV (kbit_gemv_grouped / _sl, the package's plan) over E
experts of a 64-expert bank, with the default codebook compiled in (CBD=1: the instantiation built here from
the current source, for any k) or loaded (CBD=0).  Why: the CBD kernel measured 0.2-0.5 us slower per launch
at k = 2 / 4, plain launches too (eighteenth session, fix20; not instruction fetch: ic-ab-b / ic-ab-c).
env ONE="E,M,N,K,k" (tokens per expert M, expert weight N x K; default MoE down at 8 experts, 1 token).
usage (GPU machine):
  CBD=1 ncu -k regex:kbit_gemv_grouped --launch-skip 2 --launch-count 1 --section ... python3 profiling/ncu_grouped_gemv.py"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from kbitcupy import gemv as G  # noqa: E402
from kbitcupy._compile import _options, read_source  # noqa: E402
from kbitcupy.grouped import _err_buffer, quantize_experts  # noqa: E402

E, M, N, K, k = (int(x) for x in os.environ.get("ONE", "8,1,2048,512,4").split(","))
cbd = os.environ.get("CBD", "1") == "1"
bank = quantize_experts((cp.random.standard_normal((64, N, K), dtype=cp.float32) * 0.02).astype(cp.float16), k)
assert bank.default_codebook
if not cbd:  # the loading instantiation for the same data
    object.__setattr__(bank, "default_codebook", False)
ids = cp.arange(0, 64, 64 // E, dtype=cp.int32)[:E]
offs = cp.arange(E + 1, dtype=cp.int32) * M
A = cp.random.standard_normal((E * M, K), dtype=cp.float32).astype(cp.float16)
out = cp.empty((E * M, N), cp.float16)
_mods = {}


def kernel(key):
    """Every grouped key built from the current source with CBD as asked (GROUPED_CBD_KS aside)."""
    if key not in _mods:
        kind, kk, t, mt = key[:4]
        amode = key[4] if kind != "grouped" else 0
        name = "kbit_gemv_grouped_sl" if kind == "grouped_sl" else "kbit_gemv_grouped"
        expr = f"{name}<{kk}, {'__half' if t == 'float16' else '__nv_bfloat16'}, {mt}, {amode}{', true' if cbd else ''}>"
        _mods[key] = cp.RawModule(code=read_source("kbit_gemv.cu"), options=_options(()),
                                  name_expressions=[expr]).get_function(expr)
    return _mods[key]


for _ in range(5):
    G.grouped_gemv(A, bank, ids, offs, out, M, _err_buffer(), kernel=kernel)
cp.cuda.runtime.deviceSynchronize()
print("cbd", cbd, "plan", G.grouped_plan(N, K, k, E, M))
