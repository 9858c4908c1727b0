"""Which GPU kernel serves a call C[M, N] = A[M, K] @ W^T:

* ``'gemv'``: the decode GEMV (kbitcupy.gemv, M <= 32; its token split on few columns to 128),
* ``'gemm'``: the fused dequant + MMA kernel (kbitcupy.gemm, tiled weights),
* ``'wgmma'``: the Hopper fused dequant + wgmma kernel (kbitcupy.wgmma, sm_90 only),
* ``'stream'``: the Hopper streaming decode GEMV (kbitcupy.gemv_stream, sm_90, M <= 64),
* ``'dq'``:   dequantize into a reused buffer + cuBLAS (kbitcupy.dequant_matmul).

``choose(M, N, K, k, dtype)`` reads a table of measured crossovers for the current
GPU's family (``gpu_family``: 'H100', 'H200', ... from the device name), falling
back to ``TABLES['default']``.  A table entry:

    {"gemv_max_m": 8,           # gemv for M <= this (never above gemv.MAX_M = 32)
     "gemm_max_m": 64}          # gemm for gemv_max_m < M <= this, dq above

``gemm_max_m`` may also be a dict resolved per call, most specific key first:
``(k, dtype_name)``, ``k``, ``"*"``; each value is an int or a list of size bands
``[(max_weight_elems or None, max_m), ...]`` (first band with N * K <= max_weight_elems;
None = no limit), e.g. ``{4: [(4 << 20, 48), (None, 96)], "*": 64}``.  The same
form is accepted for ``gemv_max_m``.  An entry may also hold ``"shapes"``: exact
crossovers per measured (k, N, K): ``(gemv_max_m, gemm_max_m)`` or
``(gemv_max_m, gemm_max_m, wgmma_lo, wgmma_hi)``: inside the fused band, M in
[wgmma_lo, wgmma_hi] runs the wgmma kernel instead of kbit_gemm (only measured shapes
get it); ``(gemv_max_m, gemm_max_m, wgmma_lo, wgmma_hi, stream_lo, stream_hi)``: M in
[stream_lo, stream_hi] (<= 64) runs the streaming GEMV, whatever the other bands say
(``(1, 0)`` = no wgmma band).  A shape not in ``"shapes"`` takes the bands of the nearest
measured shape of the same k (the smallest |log N/N'| + |log K/K'|) where the entry has
any, so that unmeasured shapes on Hopper also get the wgmma and streaming kernels; the
size bands serve only entries without measured shapes of that k.

Re-tuning (on the GPU to tune, e.g. after a kernel change):
  1. time gemv / gemm / dq per (k, dtype, shape, M) -- profiling/bench.py does this
     with cold L2 and CUDA graphs (``--M 1,2,4,8,16,32,64,128,256,512``; then
     ``python profiling/tune_dispatch.py <its JSON>`` does steps 2-3 and checks every
     cell); ``measure()`` below is a quick warm-L2 variant;
  2. ``entry_from_timings(timings)`` turns {(k, dtype, N, K, M): {'gemv': us,
     'gemm': us, 'dq': us}} into a table entry (per (k, dtype) size bands);
  3. paste it into TABLES under the family name (``gpu_family()`` prints it), or
     at run time ``set_table(family, entry)`` / point the environment variable
     KBITCUPY_DISPATCH_TABLE at a JSON file {family: entry} (JSON keys are strings:
     "4", "4,bfloat16", "*"; bands as [[max_elems or null, max_m], ...]).
"""
from __future__ import annotations

import json
import math
import os
from typing import Dict, Optional

GEMV_MAX_M = 32  # kbitcupy.gemv.MAX_M (defined here: this module stays importable without CuPy)
# The GEMV's token split (kbitcupy.gemv.plan's ts: a shape of few 16-column groups, the tiled layout) runs each 8 rows
# of A on a CTA of their own, so it takes any M; capped here where it was measured.
GEMV_TS_MAX_GROUPS = 64  # 16-column groups at most for the token split (N <= 1024; KV: 32)
GEMV_TS_MAX_M = 128  # (H200, KV: faster than the wgmma kernel to M = 96, slower at 128; run53.sh ts8)


def gemv_token_split_shape(N: int, tiled: bool = True) -> bool:
    """Whether the decode GEMV's plan for N output columns is the token split (past 4 rows): the tiled layout, at
    most GEMV_TS_MAX_GROUPS 16-column groups."""
    return tiled and -(-int(N) // 16) <= GEMV_TS_MAX_GROUPS


def gemv_max_rows(k: int, N: Optional[int] = None, tiled: bool = True) -> int:
    """The most rows of A the decode GEMV takes: GEMV_MAX_M (16 at k = 5: its four-tile ring spills at the
    128-register cap, so four tiles are not instantiated there), GEMV_TS_MAX_M where its plan is the token split
    (N given: gemv_token_split_shape)."""
    if N is not None and gemv_token_split_shape(N, tiled):
        return GEMV_TS_MAX_M
    return 16 if k == 5 else GEMV_MAX_M
STREAM_MAX_M = 64  # kbitcupy.gemv_stream.MAX_M

# Measured crossovers per GPU family (profiling/tune_dispatch.py turns a bench.py JSON
# with M = 1..512 into an entry).  2026-11-25 (fourteenth session): all four rebuilt from their
# files with shapes_from_timings' tile-edge rule (a wgmma or streaming band right after the GEMV's
# starts at gemv_max_m + 1 where its kernel wins the next measured M): only unmeasured M changed,
# e.g. H100 gate/up k = 4 at M = 9..15 from kbit_gemm (~10.5 us at 8 and 16) to the stream (8.4 at 16).
# 2026-11-27 (twenty-seventh session): the wgmma kernels' stages by TMA + bulk copies; all four tables with
# ..._2026-11-27_wg-tune30.json (WGMMA / WGMMA+PDL, k = 2..5, M = 16..256) overlaid last: the wgmma bands reach
# M = 256 on most shapes (dq + cuBLAS above), and under PDL the streaming GEMV's bands end at 16..24 instead of
# 24..32.  final47 (H100 / H200, k = 4, M = 16..128) was measured with exactly these tables (KBITCUPY_DISPATCH_TABLE).
TABLES: Dict[str, dict] = {
    "default": {"gemv_max_m": 8, "gemm_max_m": 64},
    # Measured on NVIDIA H100 80GB HBM3, 2026-11-22 (profiling/results/
    # nvidia-h100-80gb-hbm3_2026-11-22_allm3.json, fp16, M = 1..512, with the wgmma kernel; M = 16..64
    # again after its batched split-K sums: ..._m16-64.json; M = 8..128 again after the fifth
    # session's wgmma loop reorder: ..._m8-128.json, M = 32..128 after its faster split-K sum:
    # ..._m32-128.json; profiling/tune_dispatch.py on all four, later files first: every cell
    # within 5 % of its fastest kernel but k = 4 down at M = 128, 6 %: the wgmma kernel wins at 32
    # and 128 but not at 64, and a shape's wgmma band is one range).  2026-11-25: M = 8..48 again with the
    # streaming GEMV (..._2026-11-25_stream-tune.json, the latest file; the same check: only that cell over 5 %).
    # Eighth session: dq-tune (tiled dequantize), stream-tune2 (split-K publish / sums) and stream64 (M = 48, 64)
    # overlaid (tune_dispatch.py +file): every measured cell within 1.1 % of its fastest kernel.  Ninth session:
    # ..._2026-11-25_stream-tune3.json + ..._stream-tune3b.json (STREAM after the per-unit changes) and
    # ..._lowm-tune.json (M = 1, 2, 4 at k = 4, 5: the stream from M = 4 on k = 5 gate/up, 9.14 vs 10.39 us)
    # overlaid last: every measured cell dispatched to its fastest kernel.
    # Tenth session: ..._2026-11-25_k5-gpb.json (k = 5, M = 1..8, after the k = 5 GEMV's column groups came
    # to share one pair table per SM) overlaid last: the GEMV to M = 8 on k = 5 gate/up and Q / linear
    # value, the stream from 16.
    # Eleventh session: the faster wgmma kernel's column at M = 16..128, all k (..._2026-11-25_wg-tune11.json),
    # then STREAM / WGMMA / dq at M = 32..128, k = 4 / 5 (..._final18.json) overlaid last: every measured cell
    # dispatched to its fastest kernel (the previous table: 10 cells 5-31 % over it on the same timings).
    # Fourteenth session: the dense table at M = 1..16 after the GEMV's absmax decode moved to its use
    # (..._final20.json) overlaid last: the GEMV to M = 16 on k = 2 down and k = 2 / 4 Q / linear value,
    # the stream from 16 on k = 4 gate/up (the table before put k = 2 down at M = 8 on the stream, 12 % slower).
    # Fifteenth session: the wgmma column again after its split-K changes (at most 8 splits, the sum over a
    # thread block cluster; ..._2026-11-25_wg-tune15.json, M = 16..128, all k) overlaid last: wgmma bands
    # now serve O / down / KV / linear key from M = 17 to 48..128 where the stream or dq served them.  And
    # k = 4 at M = 9, 12, 15 (..._2026-11-25_gap15.json, a plain file: new cells): the GEMV's band ended at 16
    # on down, Q, O and linear value while the stream wins from 12 (down: 8.49 vs GEMV 8.66 us; at 15
    # 8.51 vs 9.75) or 15 (Q 7.30 vs 7.82); k = 2, 3, 5 keep the rule's guess between 8 and 16.
    # Twenty-first session: ..._2026-11-26_wg-tune24.json (the wgmma kernel with the default codebook compiled
    # in and its tables built before the PDL wait) and ..._final38.json (k = 2 / 4, M = 16..128, every kernel in
    # one run; it keeps O at M = 24 / 32 on the stream, which wg-tune24 against older stream timings did not)
    # overlaid last; final36 had KV and linear key at M = 64 on dq + cuBLAS 10.6 / 8.5 % over the wgmma kernel.
    # Every measured cell within 1.9 % of its fastest kernel; final38's cells all within 5 % on this table.
    # Twenty-second session: the dense wgmma plan's split rule (wgmma.dense_splits) made the wgmma kernel 2-29 %
    # faster at M = 24..128 on most shapes; ..._2026-11-26_wg-tune25.json (WGMMA, k = 2..5) and ..._final40.json
    # (every kernel, k = 2 / 4) overlaid last: the wgmma bands now reach M = 48..64 where the stream served and
    # M = 128 on linear key; then ..._wg-tune25kv.json (KV's WGMMA, k = 2..5, after fill_tok halved its token tile) and
    # ..._final42.json: KV and Q (k = 4) on the wgmma kernel to M = 128.
    # profiling/retune_tables.py rebuilds the table from its files.
    "H100": {"gemv_max_m": 8, "gemm_max_m": {2: [(1048576, 0), (4194304, 0), (8388608, 0), (None, 0)], 3: [(1048576, 0), (4194304, 0), (8388608, 0), (None, 0)], 4: [(1048576, 0), (4194304, 0), (8388608, 0), (None, 0)], 5: [(1048576, 0), (4194304, 0), (8388608, 0), (None, 0)], '*': 0},
             "shapes": {  # (k, N, K): (gemv up to M, fused up to M[, wgmma from M, to M[, stream from M, to M]]; dq above)
                (2, 512, 2048): (16, 256, 17, 256), (2, 2048, 2048): (16, 128, 17, 128),
                (2, 2048, 4096): (16, 256, 17, 256, 17, 32), (2, 2048, 5120): (16, 256, 17, 256, 17, 32),
                (2, 4096, 2048): (16, 256, 17, 256, 17, 24), (2, 5120, 2048): (16, 128, 17, 128, 17, 32),
                (3, 512, 2048): (16, 256, 17, 256), (3, 2048, 2048): (16, 128, 17, 128),
                (3, 2048, 4096): (16, 128, 17, 128), (3, 2048, 5120): (16, 256, 17, 256, 17, 32),
                (3, 4096, 2048): (16, 256, 17, 256), (3, 5120, 2048): (16, 128, 17, 128),
                (4, 512, 2048): (16, 256, 17, 256), (4, 2048, 2048): (16, 128, 17, 128),
                (4, 2048, 4096): (16, 256, 17, 256, 17, 32), (4, 2048, 5120): (16, 256, 17, 256, 17, 32),
                (4, 4096, 2048): (16, 256, 17, 256, 17, 32), (4, 5120, 2048): (16, 128, 17, 128, 17, 32),
                (5, 512, 2048): (16, 128, 17, 128), (5, 2048, 2048): (16, 128, 17, 128),
                (5, 2048, 4096): (16, 256, 17, 256, 14, 24), (5, 2048, 5120): (14, 256, 16, 256, 11, 32),
                (5, 4096, 2048): (15, 256, 16, 256, 11, 24), (5, 5120, 2048): (15, 128, 16, 128, 9, 32),
             }},
    # Measured on NVIDIA H200, 2026-11-22 (profiling/results/nvidia-h200_2026-11-22_allm4.json, fp16
    # activations, M = 1..512, all k, with the wgmma kernel; M = 16..64 again after its batched split-K
    # sums: nvidia-h200_2026-11-22_m16-64.json; M = 8..128 again after the wgmma loop reorder (fifth
    # session): ..._m8-128-k4.json + ..._m8-128-k235.json; M = 32..128 after the faster split-K sum
    # for TOK >= 64: ..._m32-128.json; profiling/tune_dispatch.py on all five, later files first:
    # every cell dispatched to its fastest kernel).  The wgmma kernel wins at M = 32 on most shapes
    # (from M = 16 on k = 3..5 wide ones, from 8 on k = 5 gate/up, up to 128 on k = 5 down / Q);
    # dq + cuBLAS from M = 64 on all but k = 5.  2026-11-25 (seventh session): M = 8..48 again with the
    # streaming GEMV (kbitcupy.gemv_stream; ..._2026-11-25_stream-tune.json, the latest file): it is the
    # fastest kernel at M = 16..32 on most shapes (k = 5 gate/up from M = 8), so those get a stream band;
    # tune_dispatch.py on all six files: every measured cell dispatched to its fastest kernel.  2026-11-25,
    # eighth session: the dq+cuBLAS column at M = 16..512 with the new tiled dequantize kernel
    # (..._2026-11-25_dq-tune.json) and the STREAM column after the streaming GEMV's split-K changes
    # (..._2026-11-25_stream-tune2.json), and the streaming GEMV at M = 48, 64 (MT = 8) beside WGMMA and dq
    # (..._2026-11-25_stream64.json), overlaid on the six (tune_dispatch.py +file): every measured cell within
    # 0.4 % of its fastest kernel.  Ninth session: the STREAM column again after the streaming GEMV's per-unit
    # changes (6-14 % faster; ..._2026-11-25_stream-tune3.json, M = 8..32, + ..._stream-tune3b.json, M = 48, 64)
    # overlaid last: its band now reaches M = 64 on gate/up, Q and O and starts at 8 on k = 4/5 gate/up; and
    # STREAM / GEMV at M = 1, 2, 4 for k = 4, 5 (..._lowm-tune.json): the streaming GEMV from M = 4 on k = 5
    # gate/up (9.27 vs 10.48 us); every measured cell dispatched to its fastest kernel.
    # Tenth session: ..._2026-11-25_k5-gpb.json (k = 5, M = 1..8, after the k = 5 GEMV's column groups came
    # to share one pair table per SM) overlaid last: the GEMV to M = 8 on k = 5 gate/up and Q / linear
    # value, the stream from 16 (gate/up M = 4: 8.28 vs 9.25 us).
    # Eleventh session: the wgmma kernel 5-30 % faster (token tile in the 128-byte swizzle, a faster split-K
    # sum): its column at M = 16..128, all k (..._2026-11-25_wg-tune11.json), then STREAM / WGMMA / dq at
    # M = 32..128, k = 4 / 5 (..._final18.json) overlaid last: wgmma bands reach M = 48..128 on gate/up, Q and
    # linear value at k = 2, 3, 5 and k = 4 gate/up / down; every measured cell dispatched to its fastest kernel
    # (the previous table had 7 cells 5-11 % over it on the same timings).
    # profiling/retune_tables.py rebuilds the table from its files.
    # Exact shapes first, size bands for other shapes (measured with fp16, used for bf16 too).
    # Twenty-first session: ..._2026-11-26_wg-tune24.json (the wgmma kernel with the default codebook compiled in),
    # _final38.json (k = 2 / 4) and _final38b.json (k = 3 / 5), every kernel at M = 16..128 in one H200 run, overlaid
    # last: the table before them had the dispatched call 7.7 % (M = 48) and 11.7 % (M = 64) over the fastest
    # kernel on the k = 4 TOTAL; every one of those 168 cells within 5 % on this table.
    # Twenty-second session (H200): ..._2026-11-26_wg-tune25.json and ..._final40.json overlaid last, after the dense
    # wgmma plan's split rule and fill_tok (the wgmma bands reach M = 128 on the narrow shapes).
    # Forty-fifth session (H200): ..._2026-11-29_sweep52h.json (M = 17 / 24 / 32, k = 2..4, every kernel, after the
    # decode GEMV's four token tiles) and ..._disp52h.json (M = 20 / 28, k = 2 / 4) added last: the GEMV to M = 32 on the
    # K = 2048 shapes; on O and down up to the first measured M its staged A does not fit (matmul runs the streaming
    # GEMV past the fit), the next band from there.
    # Forty-sixth session (H200): ..._2026-11-29_kvts53b.json (KV, k = 2..5, M = 32..128) and ..._kvts53k5.json (KV,
    # k = 5, M = 17..96) added last, after the GEMV's token split took 8 warps a CTA past 32 rows: KV on the GEMV to
    # M = 96 (k = 2..4) / 64 (k = 5), e.g. k = 4 M = 64 4.10 us against the wgmma kernel's 5.73.
    # Fiftieth session (H200): ..._2026-11-29_allm57.json (k = 4, M = 1..512, every kernel in one run), then
    # ..._disp57-1.json / ..._disp57-2.json (M = 192 / 256, WGMMA / dq, twice) overlaid last: down's wgmma band to 256
    # (19.49 / 19.51 us against dq's 20.43 / 19.91), O's to 512 (M = 512 22.81 against dq's 23.45); allm57 had dq
    # faster on O at 256 (16.18 vs 17.38), which both re-runs contradict (18.26 / 18.03 vs 17.28 / 17.35).
    "H200": {"gemv_max_m": 8, "gemm_max_m": {2: [(1048576, 0), (4194304, 0), (8388608, 0), (None, 0)], 3: [(1048576, 0), (4194304, 0), (8388608, 0), (None, 0)], 4: [(1048576, 0), (4194304, 0), (8388608, 0), (None, 0)], 5: [(1048576, 0), (4194304, 0), (8388608, 0), (None, 0)], '*': 0},
             "shapes": {  # (k, N, K): (gemv up to M, fused up to M[, wgmma from M, to M[, stream from M, to M]]; dq above)
                (2, 512, 2048): (96, 256, 97, 256), (2, 2048, 2048): (32, 128, 33, 128),
                (2, 2048, 4096): (27, 128, 28, 128, 28, 32), (2, 2048, 5120): (23, 128, 24, 128, 24, 32),
                (2, 4096, 2048): (32, 256, 33, 256), (2, 5120, 2048): (32, 64, 33, 64),
                (3, 512, 2048): (96, 256, 97, 256), (3, 2048, 2048): (32, 128, 33, 128),
                (3, 2048, 4096): (31, 128, 32, 128, 32, 32), (3, 2048, 5120): (23, 128, 24, 128, 24, 32),
                (3, 4096, 2048): (32, 256, 33, 256), (3, 5120, 2048): (32, 64, 33, 64),
                (4, 512, 2048): (96, 256, 97, 256), (4, 2048, 2048): (32, 128, 33, 128),
                (4, 2048, 4096): (23, 512, 24, 512, 24, 32), (4, 2048, 5120): (19, 256, 20, 256, 20, 32),
                (4, 4096, 2048): (32, 256, 33, 256), (4, 5120, 2048): (32, 128, 33, 128),
                (5, 512, 2048): (64, 128, 65, 128), (5, 2048, 2048): (16, 128, 17, 128),
                (5, 2048, 4096): (16, 128, 17, 128, 15, 32), (5, 2048, 5120): (14, 256, 16, 256, 11, 32),
                (5, 4096, 2048): (15, 256, 16, 256, 11, 32), (5, 5120, 2048): (15, 128, 16, 128, 9, 32),
             }},
    # The same GPU with PDL on (kbitcupy.set_pdl): the fused GEMMs request their first weight tiles before
    # griddepcontrol.wait, dq + cuBLAS gains nothing, so the wgmma kernel wins more cells (M = 16..64 on most
    # shapes, from M = 4 on k = 5 gate/up).  Measured 2026-11-24 with the forced GEMV+PDL / GEMM+PDL /
    # WGMMA+PDL columns and dq+cuBLAS, M = 4..128, all k, fp16 (profiling/results/
    # nvidia-h200_2026-11-24_pdl-tune-k45.json + ..._pdl-tune-k23.json; profiling/tune_dispatch.py --pdl:
    # every cell dispatched to its fastest kernel; M < 4 stays on the GEMV).  2026-11-25: with the streaming GEMV's
    # STREAM+PDL column at M = 8..48 (..._2026-11-25_stream-tune.json, latest; tune_dispatch.py --pdl on the three
    # files: every measured cell dispatched to its fastest kernel).  Eighth session: dq-tune, stream-tune2 and stream64
    # overlaid (STREAM+PDL column), every measured cell dispatched to its fastest kernel.  Ninth session:
    # stream-tune3 + stream-tune3b + lowm-tune overlaid (STREAM+PDL after the per-unit changes; k = 5 gate/up on
    # the stream from M = 4): every measured cell within 0.7 % of its fastest kernel.
    # Tenth session: ..._2026-11-25_k5-gpb.json (k = 5, M = 1..8, after the k = 5 GEMV's column groups came
    # to share one pair table per SM) overlaid last: the GEMV to M = 8 on k = 5 gate/up and Q / linear
    # value, the stream from 16 (gate/up: from 8).
    # Eleventh session: the faster wgmma kernel's WGMMA+PDL column at M = 16..128, all k
    # (..._2026-11-25_wg-tune11.json) overlaid last: every measured cell within 1.7 % of its fastest kernel
    # (the previous table: 16 cells 5-18 % over it on the same timings).
    # profiling/retune_tables.py rebuilds the table from its files.
    # Twenty-first session: ..._2026-11-26_wg-tune24.json overlaid last (WGMMA+PDL).
    # Twenty-second session (H200): ..._2026-11-26_wg-tune25.json overlaid last, after the dense
    # wgmma plan's split rule and fill_tok (the wgmma bands reach M = 128 on the narrow shapes).
    "H200+PDL": {"gemv_max_m": 8, "gemm_max_m": {4: [(1048576, 16), (4194304, 32), (8388608, 16), (None, 16)], 5: [(1048576, 16), (4194304, 32), (8388608, 24), (None, 24)], 2: [(1048576, 16), (4194304, 32), (8388608, 24), (None, 16)], 3: [(1048576, 16), (4194304, 32), (8388608, 24), (None, 16)], '*': 16},
             "shapes": {  # (k, N, K): (gemv up to M, fused up to M[, wgmma from M, to M[, stream from M, to M]]; dq above)
                (2, 512, 2048): (8, 128, 9, 128), (2, 2048, 2048): (8, 128, 9, 128, 9, 16),
                (2, 2048, 4096): (8, 128, 9, 128, 9, 24), (2, 2048, 5120): (8, 128, 9, 128, 8, 24),
                (2, 4096, 2048): (8, 128, 9, 128, 9, 16), (2, 5120, 2048): (8, 128, 9, 128, 9, 16),
                (3, 512, 2048): (8, 128, 9, 128), (3, 2048, 2048): (8, 128, 9, 128, 9, 16),
                (3, 2048, 4096): (8, 128, 9, 128, 9, 24), (3, 2048, 5120): (8, 128, 9, 128, 8, 24),
                (3, 4096, 2048): (8, 128, 9, 128, 9, 16), (3, 5120, 2048): (8, 128, 9, 128, 9, 16),
                (4, 512, 2048): (8, 128, 9, 128), (4, 2048, 2048): (16, 128, 17, 128, 16, 16),
                (4, 2048, 4096): (8, 128, 9, 128, 9, 24), (4, 2048, 5120): (8, 128, 9, 128, 9, 16),
                (4, 4096, 2048): (8, 128, 9, 128, 9, 16), (4, 5120, 2048): (8, 128, 9, 128, 9, 16),
                (5, 512, 2048): (8, 128, 9, 128), (5, 2048, 2048): (8, 128, 9, 128, 9, 16),
                (5, 2048, 4096): (8, 128, 9, 128, 24, 32), (5, 2048, 5120): (8, 128, 9, 128, 24, 32),
                (5, 4096, 2048): (8, 128, 9, 128, 24, 24), (5, 5120, 2048): (8, 128, 9, 128, 8, 32),
             }},
    # NVIDIA H100 80GB HBM3 with PDL on, measured 2026-11-24 as the H200+PDL table
    # (nvidia-h100-80gb-hbm3_2026-11-24_pdl-tune-k45.json + ..._pdl-tune-k23.json; tune_dispatch.py --pdl:
    # every cell within 1.6 % of its fastest kernel).  2026-11-25: with the STREAM+PDL column at M = 8..48
    # (..._2026-11-25_stream-tune.json, latest; every measured cell within 1.6 %).  Eighth session: dq-tune,
    # stream-tune2, stream64 overlaid: every measured cell within 5 % but k = 5 gate/up at M = 24 (6.1 %: the
    # streaming GEMV wins at 16 and 32, the wgmma kernel at 24, and a shape's stream band is one range).  Ninth
    # session: stream-tune3 + stream-tune3b overlaid (STREAM+PDL after the per-unit changes): every measured cell
    # dispatched to its fastest kernel (k = 5 gate/up M = 24 now on the stream too); lowm-tune overlaid too.
    # Tenth session: ..._2026-11-25_k5-gpb.json (k = 5, M = 1..8, after the k = 5 GEMV's column groups came
    # to share one pair table per SM) overlaid last: the GEMV to M = 8 on k = 5 gate/up and Q / linear
    # value, the stream from 16 (gate/up: from 8).
    # Eleventh session: the faster wgmma kernel's WGMMA+PDL column at M = 16..128, all k
    # (..._2026-11-25_wg-tune11.json) overlaid last: every measured cell within 0.6 % of its fastest kernel
    # (the previous table: 15 cells 5-33 % over it on the same timings).
    # Fifteenth session: ..._2026-11-25_wg-tune15.json (the wgmma kernel after its split-K changes) overlaid last.
    # Twenty-first session: ..._2026-11-26_wg-tune24.json overlaid last (every measured cell within 3.7 %).
    # Twenty-second session: ..._2026-11-26_wg-tune25.json (WGMMA+PDL after the dense split rule) overlaid last.
    # profiling/retune_tables.py rebuilds the table from its files.
    "H100+PDL": {"gemv_max_m": 8, "gemm_max_m": {4: [(1048576, 16), (4194304, 32), (8388608, 16), (None, 16)], 5: [(1048576, 16), (4194304, 32), (8388608, 24), (None, 24)], 2: [(1048576, 16), (4194304, 32), (8388608, 32), (None, 16)], 3: [(1048576, 16), (4194304, 32), (8388608, 32), (None, 16)], '*': 16},
             "shapes": {  # (k, N, K): (gemv up to M, fused up to M[, wgmma from M, to M[, stream from M, to M]]; dq above)
                (2, 512, 2048): (16, 128, 17, 128), (2, 2048, 2048): (16, 128, 17, 128, 16, 16),
                (2, 2048, 4096): (8, 128, 9, 128, 9, 16), (2, 2048, 5120): (8, 128, 9, 128, 8, 24),
                (2, 4096, 2048): (8, 128, 9, 128, 9, 16), (2, 5120, 2048): (8, 128, 9, 128, 9, 16),
                (3, 512, 2048): (16, 128, 17, 128), (3, 2048, 2048): (16, 128, 17, 128, 16, 16),
                (3, 2048, 4096): (8, 128, 9, 128, 9, 24), (3, 2048, 5120): (8, 128, 9, 128, 8, 24),
                (3, 4096, 2048): (8, 128, 9, 128, 9, 16), (3, 5120, 2048): (8, 128, 9, 128, 9, 16),
                (4, 512, 2048): (16, 128, 17, 128), (4, 2048, 2048): (16, 128, 17, 128, 16, 16),
                (4, 2048, 4096): (8, 128, 9, 128, 9, 16), (4, 2048, 5120): (8, 128, 9, 128),
                (4, 4096, 2048): (8, 128, 9, 128, 9, 16), (4, 5120, 2048): (8, 128, 9, 128, 9, 16),
                (5, 512, 2048): (16, 128, 17, 128), (5, 2048, 2048): (8, 128, 9, 128, 9, 16),
                (5, 2048, 4096): (8, 128, 9, 128, 24, 32), (5, 2048, 5120): (8, 128, 9, 128, 8, 24),
                (5, 4096, 2048): (8, 128, 9, 128, 24, 32), (5, 5120, 2048): (8, 128, 9, 128, 8, 32),
             }},
}

# (substring of the device name, family), checked in order: more specific first.
FAMILY_PATTERNS = [
    ("GH200", "GH200"),
    ("H200", "H200"),
    ("H100", "H100"),
    ("H800", "H100"),
    ("H20", "H20"),
    ("B200", "B200"),
    ("B100", "B100"),
    ("A100", "A100"),
    ("A800", "A100"),
    ("L40", "L40"),
    ("4090", "RTX4090"),
]

_FAMILY_CACHE: dict = {}
_CHOICES: dict = {}  # (family, M, N, K, k, dtype) -> kind; cleared by set_table
_ENV_LOADED = [False]


def family_of_name(name: str) -> str:
    """GPU family of a device name such as 'NVIDIA H100 80GB HBM3' ('default' if unknown)."""
    up = name.upper()
    for pat, fam in FAMILY_PATTERNS:
        if pat in up:
            return fam
    return "default"


def gpu_family(device_id: Optional[int] = None) -> str:
    """Family of the current (or given) CUDA device; 'default' without a GPU."""
    try:
        import cupy as cp

        dev = cp.cuda.runtime.getDevice() if device_id is None else int(device_id)
    except Exception:
        return "default"
    fam = _FAMILY_CACHE.get(dev)
    if fam is None:
        try:
            name = cp.cuda.runtime.getDeviceProperties(dev)["name"]
            name = name.decode() if isinstance(name, bytes) else str(name)
            fam = family_of_name(name)
        except Exception:
            fam = "default"
        _FAMILY_CACHE[dev] = fam
    return fam


def _parse_key(key: str):
    if key == "*":
        return key
    if "," in key:
        kk, dt = key.split(",", 1)
        return (int(kk), dt.strip())
    return int(key)


def shapes_from_timings(timings: dict) -> dict:
    """{(k, N, K): (gemv_max_m, gemm_max_m[, wgmma_lo, wgmma_hi[, stream_lo, stream_hi]])} from
    {(k, dtype, N, K, M): {'gemv'|'gemm'|'wgmma'|'stream'|'dq': us}}: the largest measured M up
    to which each kind is the fastest (tried in the order gemv, fused, dq as M grows; an M
    between two measured ones takes the lower one's choice); inside the fused band, the
    measured M range where the wgmma kernel beats kbit_gemm; then the measured M range where
    the streaming GEMV beats all of them (its band overrides the others, and dq winning at an M
    the streaming GEMV serves does not end the fused band).  Where the GEMV's band ends at a
    multiple of 8 rows, the wgmma or streaming band starts right after it (gemv_max_m + 1) when
    its kernel wins the next measured M: one more row costs the GEMV a whole 8-row token tile,
    and every kernel computes an M in between in the tiles the next measured M needs, so that M's
    fastest kernel is the one to run (H100 gate/up k = 4: the GEMV 7.65 us at M = 8, the stream
    8.4 at 16, kbit_gemm, which the fused band gave M = 9..15 before, 10.5 at both)."""
    by_shape: dict = {}
    for (k, _dt, N, K, M), us in timings.items():
        by_shape.setdefault((k, N, K), {})[M] = us
    out = {}
    for shape, rows in by_shape.items():
        gemv_max = gemm_max = 0
        wg = []
        st = [M for M in rows if M <= STREAM_MAX_M and rows[M].get("stream") is not None
              and rows[M]["stream"] <= min(x for x in rows[M].values() if x is not None)]
        for M in sorted(rows):
            us = {n: x for n, x in rows[M].items() if x is not None and n != "stream"}
            if not us:  # only the streaming GEMV measured at this M: its band below decides
                continue
            best = min(us, key=us.get)
            if best == "dq" and M in st:  # served by the streaming GEMV: does not end the fused band
                continue
            if best == "gemv" and gemm_max == 0 and M <= gemv_max_rows(k, N):
                gemv_max = M
            elif best in ("gemv", "gemm", "wgmma"):
                gemm_max = M
                if best == "wgmma" or (best == "gemv" and us.get("wgmma", 1e30) < us.get("gemm", 1e30)):
                    wg.append(M)
            else:
                break
        gm = max(gemm_max, gemv_max)
        above = min((M for M in rows if M > gemv_max), default=None)  # the first measured M past the GEMV
        wband = (min(wg), max(wg)) if wg else (1, 0)  # (1, 0): no wgmma band
        # The GEMV measured as not running the next measured M (its plan does not fit: None; O k = 4 fits 22 rows of
        # four tiles, not 24): its band reaches up to that M, and matmul runs the streaming GEMV past what it fits
        # (kbitcupy.matmul._run_kind), so the next kernel's band starts there.
        fit_edge = gemv_max > 0 and above is not None and "gemv" in rows[above] and rows[above]["gemv"] is None
        if fit_edge:
            gemv_max = above - 1
        tile_edge = gemv_max >= 8 and gemv_max % 8 == 0  # the GEMV's next row needs another 8-row tile
        edge = tile_edge or fit_edge  # either way the next kernel's band starts right after the GEMV's
        if wg and edge and wband[0] == above:
            wband = (gemv_max + 1, wband[1])
        if st:  # the fused band reaches at least to the stream band's end (an M below it takes the lower choice)
            lo = gemv_max + 1 if edge and min(st) == above else min(st)
            out[shape] = (gemv_max, max(gm, max(st))) + wband + (lo, max(st))
        else:
            out[shape] = (gemv_max, gm) + (wband if wg else ())
    return out


def _from_json_value(v):
    if isinstance(v, dict):
        return {_parse_key(str(k)): _from_json_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [(None if b[0] is None else int(b[0]), int(b[1])) for b in v]
    return v


def load_tables(path: str) -> None:
    """Merge {family: entry} from a JSON file into TABLES."""
    with open(path) as f:
        data = json.load(f)
    for fam, entry in data.items():
        set_table(fam, {name: ({tuple(int(x) for x in s.split(",")): tuple(v) for s, v in val.items()}
                               if name == "shapes" else _from_json_value(val)) for name, val in entry.items()})


def set_table(family: str, entry: dict) -> None:
    """Install (replace) the entry of a family, after checking that it resolves for every
    k, dtype and weight size (raises ValueError otherwise)."""
    for name in ("gemv_max_m", "gemm_max_m"):
        if name not in entry:
            raise ValueError(f"dispatch entry for {family!r} lacks {name!r}")
        for k in (2, 3, 4, 5):
            for dn in ("float16", "bfloat16"):
                for elems in (1, 1 << 62):
                    _resolve(entry[name], k, dn, elems, name)
    TABLES[family] = dict(entry)
    _CHOICES.clear()
    from ._launch import clear_plans  # cached launch plans embed the old choice

    clear_plans()


def _maybe_load_env():
    if not _ENV_LOADED[0]:
        _ENV_LOADED[0] = True
        path = os.environ.get("KBITCUPY_DISPATCH_TABLE")
        if path:
            load_tables(path)


def _resolve(value, k: int, dtype_name: str, weight_elems: int, what: str = "") -> int:
    if isinstance(value, dict):
        for key in ((k, dtype_name), k, "*"):
            if key in value:
                return _resolve(value[key], k, dtype_name, weight_elems, what)
        raise ValueError(f"dispatch {what}: no entry for k={k}, dtype={dtype_name} and no '*'")
    if isinstance(value, (list, tuple)):
        for band in value:
            lim, m = band
            if lim is None or weight_elems <= lim:
                return int(m)
        raise ValueError(f"dispatch {what}: no size band covers N*K = {weight_elems} (end with a None band)")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"dispatch {what}: expected an int, a dict or a list of bands, got {value!r}")
    return value


_DTYPE_NAMES: dict = {}  # dtype -> name (NumPy's dtype.name costs microseconds per call)


def _dtype_name(dtype) -> str:
    try:
        name = _DTYPE_NAMES.get(dtype)
    except TypeError:  # unhashable: no caching
        name = None
    if name is not None:
        return name
    import numpy as np

    from .reference import bfloat16

    if isinstance(dtype, str):
        return {"bf16": "bfloat16", "fp16": "float16", "half": "float16"}.get(dtype, dtype)
    dt = np.dtype(dtype)
    name = "bfloat16" if bfloat16 is not None and dt == bfloat16 else dt.name
    try:
        if len(_DTYPE_NAMES) < 64:
            _DTYPE_NAMES[dtype] = name
    except TypeError:
        pass
    return name


def entry(family: Optional[str] = None) -> dict:
    _maybe_load_env()
    fam = gpu_family() if family is None else family
    return TABLES.get(fam, TABLES["default"])


PDL_SUFFIX = "+PDL"  # TABLES[family + PDL_SUFFIX]: crossovers measured with PDL on (kbitcupy.set_pdl)


def _pdl_on() -> bool:
    from . import _pdl

    return _pdl.enabled()


def nearest_shape(shapes: dict, k: int, N: int, K: int):
    """The band tuple of the measured shape (k, N', K') nearest to (N, K) in log scale, or None
    if none has this k.  Why: on Hopper the size bands know only the GEMV, kbit_gemm and
    dq + cuBLAS (kbit_gemm loses to both elsewhere), while every measured shape runs the
    streaming GEMV or the wgmma kernel somewhere in M = 9..128 (H100 k = 4 M = 16: the size
    bands' dq + cuBLAS ~15 us against the stream's ~8.6 on gate/up); a nearby shape's bands
    carry that over.  Ties: the smaller (N', K')."""
    if N <= 0 or K <= 0:
        return None
    best = None
    for (kk, n, kd) in sorted(shapes):
        if kk != k:
            continue
        d = abs(math.log(n / N)) + abs(math.log(kd / K))
        if best is None or d < best[0] - 1e-12:
            best = (d, shapes[(kk, n, kd)])
    return best[1] if best else None


# An unmeasured shape over BIG_SHAPE_FACTOR x the largest measured one (same k) does not take the
# nearest shape's streaming-GEMV and dq + cuBLAS bands: H100 k = 4, 2026-11-25 (`shapes17`,
# 4096 x 14336 and 14336 x 4096, 5.6x gate/up): kbit_gemm fastest at M = 9 / 16 (21.7 us against
# the stream's 25.3-26.4 the nearest bands chose), wgmma at M = 32..256 (M = 128: 48.4 us against
# dq + cuBLAS's 108.7, whose dequantize writes 117 MB there; M = 256, `big17`: 97.5 / 84.8 against
# 111.9 / 119.9).  M = 4 on 14336 x 4096: the GEMV 27.0 us, kbit_gemm 22.8 (the GEMV band kept).
BIG_SHAPE_FACTOR = 2
BIG_SHAPE_BANDS = (4, 256, 17, 256)  # (gemv_max, gemm_max, wgmma from, wgmma to); no stream band


def _big_shape_bands(shapes: dict, k: int, elems: int, near: tuple) -> tuple:
    """The nearest shape's bands, or BIG_SHAPE_BANDS (widened to the nearest's where it
    reaches further) for a shape much larger than every measured one with this k."""
    largest = max((n * kd for (kk, n, kd) in shapes if kk == k), default=0)
    if not largest or elems <= BIG_SHAPE_FACTOR * largest:
        return near
    g, m, lo, hi = BIG_SHAPE_BANDS
    return (min(near[0], g), max(near[1], m), lo, max(near[3], hi))


def choose(M: int, N: int, K: int, k: int, dtype="float16", family: Optional[str] = None,
           pdl: Optional[bool] = None) -> str:
    """'gemv' | 'stream' | 'gemm' | 'wgmma' | 'dq' for C[M, N] = A[M, K] @ W^T with a k-bit weight.

    family: table key (default: the current GPU's family, 'default' if unknown).
    pdl (default: kbitcupy.set_pdl's setting): with PDL on, the family's "+PDL" table
    where there is one (the kernels gain differently from PDL: the wgmma GEMM requests
    its weights before its wait, dq + cuBLAS not at all).
    'gemm' and 'gemv' are only meaningful for tiled weights (gemm needs them; for a
    flat weight use 'gemv' for M <= 32 and 'dq' above)."""
    _maybe_load_env()
    fam = gpu_family() if family is None else family
    if (_pdl_on() if pdl is None else pdl) and fam + PDL_SUFFIX in TABLES:
        fam = fam + PDL_SUFFIX
    dn = _dtype_name(dtype)
    key = (fam, M, N, K, k, dn)
    kind = _CHOICES.get(key)
    if kind is None:
        e = TABLES.get(fam, TABLES["default"])
        elems = int(N) * int(K)
        shapes = e.get("shapes", {})
        exact = shapes.get((int(k), int(N), int(K)))  # measured on this very shape
        if exact is None and shapes:
            exact = nearest_shape(shapes, int(k), int(N), int(K))
            if exact is not None and len(exact) >= 4 and exact[3] >= exact[2]:
                exact = _big_shape_bands(shapes, int(k), elems, exact)
        wg_lo, wg_hi = st_lo, st_hi = 1, 0
        if exact is not None:
            gemv_max, gemm_max = min(exact[0], gemv_max_rows(k, N)), exact[1]
            if len(exact) >= 4:
                wg_lo, wg_hi = exact[2], exact[3]
            if len(exact) >= 6:
                st_lo, st_hi = exact[4], min(exact[5], STREAM_MAX_M)
        else:
            gemv_max = min(_resolve(e["gemv_max_m"], k, dn, elems, "gemv_max_m"), gemv_max_rows(k, N))
            gemm_max = _resolve(e["gemm_max_m"], k, dn, elems, "gemm_max_m")
        if st_lo <= M <= st_hi:
            kind = "stream"
        elif M <= gemv_max:
            kind = "gemv"
        elif M <= gemm_max:
            kind = "wgmma" if wg_lo <= M <= wg_hi else "gemm"
        else:
            kind = "dq"
        if len(_CHOICES) > 4096:
            _CHOICES.clear()
        _CHOICES[key] = kind
    return kind


# ----------------------------------------------------------------------------- tuning
def entry_from_timings(timings: dict, gemv_max_m: int = GEMV_MAX_M) -> dict:
    """Table entry from measured times {(k, dtype_name, N, K, M): {'gemm': us, 'dq': us, ...}}.

    Per (k, dtype) and shape, gemm_max_m = the largest measured M such that gemm is not
    slower than dq at every measured M above gemv_max_m up to it (0 if dq wins first).
    Shapes become size bands sorted by N * K: band i covers N * K up to measured shape
    i's and takes its crossover (an unmeasured size gets the next larger measured
    shape's); the last band (None) is the largest shape's.  (k, dtype) pairs without data fall back to '*',
    the smallest crossover overall."""
    per: Dict[tuple, Dict[int, int]] = {}
    grouped: Dict[tuple, Dict[int, dict]] = {}
    for (k, dn, N, K, M), t in timings.items():
        grouped.setdefault((k, dn, N * K), {})[M] = t
    for (k, dn, elems), by_m in grouped.items():
        cross = 0
        for M in sorted(m for m in by_m if m > gemv_max_m):
            t = by_m[M]
            if "gemm" in t and "dq" in t and t["gemm"] <= t["dq"]:
                cross = M
            else:
                break
        per.setdefault((k, dn), {})[elems] = cross
    gemm = {}
    for key, by_size in per.items():
        sizes = sorted(by_size)
        bands = []
        for i, s in enumerate(sizes):
            bands.append((s if i < len(sizes) - 1 else None, by_size[s]))
        gemm[key] = bands
    allm = [m for v in per.values() for m in v.values()]
    gemm["*"] = min(allm) if allm else TABLES["default"]["gemm_max_m"]
    return {"gemv_max_m": gemv_max_m, "gemm_max_m": gemm}


def measure(shapes, ks=(2, 3, 4, 5), Ms=(9, 16, 24, 32, 48, 64, 96, 128, 192, 256), dtype="float16",
            reps: int = 50) -> dict:
    """Quick warm-L2 timings (us) of gemm and dq (and gemv for M <= 32) on the current GPU,
    for entry_from_timings.  shapes: iterable of (N, K).  Needs a GPU."""
    import cupy as cp
    import numpy as np

    from .dequant_matmul import dequant_matmul
    from .gemm import gemm
    from .gemv import gemv
    from .quantize import quantize
    from .reference import bfloat16

    dt = bfloat16 if _dtype_name(dtype) == "bfloat16" else np.dtype(np.float16)
    out: dict = {}
    rng = np.random.default_rng(0)
    for (N, K) in shapes:
        W = cp.asarray(rng.standard_normal((N, K), dtype=np.float32) * 0.02)
        for k in ks:
            qw = quantize(W, k)
            for M in Ms:
                A = cp.asarray(rng.standard_normal((M, K), dtype=np.float32)).astype(dt)
                C = cp.empty((M, N), dtype=dt)
                fns = {"gemm": gemm, "dq": dequant_matmul}
                if M <= gemv_max_rows(k, N):
                    fns["gemv"] = gemv
                res = {}
                for name, fn in fns.items():
                    fn(A, qw, C)  # warm-up: compile, workspaces
                    start, stop = cp.cuda.Event(), cp.cuda.Event()
                    start.record()
                    for _ in range(reps):
                        fn(A, qw, C)
                    stop.record()
                    stop.synchronize()
                    res[name] = cp.cuda.get_elapsed_time(start, stop) * 1e3 / reps
                out[(k, _dtype_name(dt), N, K, M)] = res
    return out


if __name__ == "__main__":  # python -m kbitcupy.dispatch: print this GPU's family and entry
    fam = gpu_family()
    print(fam, entry(fam))
