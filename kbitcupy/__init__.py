"""kbitcupy: k-bit (k = 2..5) weight-quantized LLM kernels for CuPy (and torch via DLPack).

NumPy arrays run the NumPy reference (the oracle and CPU backend); CuPy arrays and
CUDA torch tensors run the CUDA kernels, JIT-compiled with NVRTC.
"""
from .reference import BLOCKSIZE, TILE_K, TILE_N, bfloat16, create_codebook
from .weight import KbitWeight, from_packed
from .quantize import quantize, dequantize, repack, quantize_kbit, dequantize_kbit, repack_kbit
from .matmul import matmul, reference_matmul
from ._compile import compile_all
from ._pdl import pdl, set_pdl
from ._capture import release_graph_memory
from .layers import KbitLinear, KbitMLP, KbitMoE

__version__ = "0.1.0"

__all__ = [
    "BLOCKSIZE", "TILE_K", "TILE_N", "bfloat16", "create_codebook", "KbitWeight", "from_packed", "quantize",
    "dequantize", "repack", "quantize_kbit", "dequantize_kbit", "repack_kbit", "matmul", "reference_matmul",
    "compile_all", "pdl", "set_pdl", "release_graph_memory", "KbitLinear", "KbitMLP", "KbitMoE",
]
