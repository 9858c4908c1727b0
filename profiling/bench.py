#!/usr/bin/env python
"""Kernel benchmark: kbit columns vs cuBLAS and speed of light, cold L2, CUDA graphs.

    python profiling/bench.py --M 1,2,4,8 --k 2,3,4,5 --shapes dense --plot
    python profiling/bench.py --M 1,2,4,8,16,32,64,128,256,512 --tag dense_allM   # GEMV, GEMM, dq+cuBLAS, matmul
    python profiling/bench.py --shapes moe --tag moe          # grouped experts vs fp16 loop / bmm, E = 8, 10
    python profiling/bench.py --shapes none --moe-layer --tag moe_layer   # full MoE layer step vs torch fp16
    python profiling/bench.py --quick --shapes all --moe-layer            # fewer points of everything
    python profiling/bench.py --help

Writes profiling/results/<gpu>_<date>_<tag>.{md,json[,png]} and prints the tables.
The harness itself is kbitcupy/bench.py (argparse included), so the package CLI can reuse it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from kbitcupy.bench import main  # noqa: E402

if __name__ == "__main__":
    main(sys.argv[1:])
