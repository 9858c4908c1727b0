#!/usr/bin/env bash
# Thirty-ninth session (2026-11-28).  From the repo root:  OUT=/tmp/out STEP=ab bash profiling/run46.sh
. profiling/run_env.sh
start_run ab
RUN=46
# The decode GEMV's step (kbit_gemv.cu gemv_block, the dense kernel), instruction cuts where the H200's M = 1 is
#   SM-bound (same times as the H100 shape by shape, NOTES thirty-eighth session):
#   - OFF32: the ring's word offsets 32-bit (a step's plane address one IMAD.WIDE.U32, the absmax index an unsigned
#     shift), where the signed 64-bit form took ~20 SASS a slot; registers -6.6 on average over the family;
#   - ZFILL=0: an empty ring slot keeps its old planes (scale 0), no zeroing a step;
#   - SPLIT (k = 4, one token tile): the pair lookups' offset from one PRMT (split keys: 7 key bits in byte 1, the
#     eighth in bit 7 of byte 0 beside 4 * lane; the table at the dynamic shared memory's 0x400 as the LDS
#     immediate) instead of PRMT + LEA: -32 LEA + 16 LOP3 a step.  gate/up k = 4 M = 1 kernel 1512 -> 1424 SASS lines.
# Expect: k = 4 M = 1 / 4 the C8 / C16 shapes 2-5 % faster on the H200 (the step ~270 -> ~240 instructions, the
#   steps ~half of the kernel), k = 2 / 3 / 5 0-2 % (OFF32 / ZFILL only); nothing slower; errors as before.
if [ "$STEP" = ab ]; then
  gpu_tests "$W/gpu_tests_gemv46.log" 300 tests/test_gemv_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_gemv46.log" | head -10
  OLD="-DKBIT_GEMV_OFF32=0 -DKBIT_GEMV_ZFILL=1 -DKBIT_GEMV_SPLIT=0"
  AB_NOBASE=1 KS=4,2,3,5 MS=1,4 AB_VARIANTS="old:$OLD;nosplit:-DKBIT_GEMV_SPLIT=0" CUT=230 gemv_ab_twice ab46 240
  finish_run run46
fi
# Result (ab, H200, two passes, `gemv_ab46_{1,2}.log`): GPU tests 108 passed.  M = 1 TOTAL new (all three) / old /
#   nosplit: k = 4 17.26-17.31 / 17.38-17.39 / 18.85-18.87 us, k = 2 15.43-15.45 / 15.03-15.05, k = 3 17.23-17.30 /
#   18.53-18.56, k = 5 23.14-23.16 / 24.60-24.64; M = 4 k = 4 21.11-21.15 / 19.18 (gate/up 6.69 vs 4.78: SPLIT at 16-column
#   groups), k = 2 18.67-18.71 / 18.09-18.13, k = 3 18.97 / 20.47-20.52, k = 5 24.82-24.85 / 25.96-26.01.  So the k = 4
#   step's ~30 fewer instructions (SPLIT + OFF32) moved k = 4 M = 1 by 0.5 %: the H200 GEMV is not issue-bound in its
#   steps; OFF32 (the signed 64-bit division by 3 / 5 gone) -6..-7 % at k = 3 / 5; k = 2 Q / linear value 2.98 -> 3.37
#   (+13 %) from OFF32 or ZFILL=0.  SPLIT removed (profiling/patches/session39-gemv-split-keys.patch).
# Step ab2: OFF32 and ZFILL apart.  new = OFF32 with zeroed empty slots (ZFILL=1), old = 64-bit, zf0 = OFF32 + ZFILL=0.
# Expect: k = 3 / 5 the gain in new (the division), k = 2's loss in zf0 only.
if [ "$STEP" = ab2 ]; then
  gpu_tests "$W/gpu_tests_gemv46b.log" 300 tests/test_gemv_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_gemv46b.log" | head -10
  AB_NOBASE=1 KS=2,3,4,5 MS=1,4 AB_VARIANTS="old:-DKBIT_GEMV_OFF32=0;zf0:-DKBIT_GEMV_ZFILL=0" CUT=230 gemv_ab_twice ab46b 240
  finish_run run46
fi
# Result (ab2, H200, two passes, `gemv_ab46b_{1,2}.log`): GPU tests 108 passed.  The same shapes swing by 0.4-0.8 us
#   with the build, two modes: Q k = 4 M = 1 old 3.54 / OFF32 4.21 / OFF32 + ZFILL=0 4.18 (and with SPLIT 3.47), O 3.54 /
#   4.33 / 4.28, Q k = 2 2.97 / 3.38 / 3.36, lin_key k = 3 2.67 / 2.96 / 2.94.  The slow mode is where the build's
#   registers let three 256-thread blocks share an SM (<= 80 registers: Q k = 4 old 82, OFF32 76) while the grid (256
#   blocks) needs two: a programmatic dependent's blocks land where the previous grid has left room, three on some SMs.
#   k = 3 / 5 with OFF32: -6..-9 % where the occupancy did not change (the signed division by 3 / 5 gone).
# Step ab3: the resident cap (gemv.resident_cap_smem: dynamic shared memory padded so that at most ceil(blocks / SMs)
#   blocks fit an SM; package default, KBITCUPY_GEMV_RESIDENT_CAP=0 off).  new = OFF32 + ZFILL=0 + cap; old = the
#   package before (64-bit, zeroed, no cap); oldcap = old + cap; nocap = new's source without cap; zf1 = ZFILL=1 + cap.
# Expect: new <= min(old, zf0 of ab2) on every cell: Q / O / linear value k = 2 / 4 back to the fast mode, k = 3 / 5
#   keep OFF32's gain; oldcap = old except KV / lin_key k = 2 (padded there: 64 / 128 blocks).
if [ "$STEP" = ab3 ]; then
  gpu_tests "$W/gpu_tests_gemv46c.log" 300 tests/test_gemv_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_gemv46c.log" | head -10
  OLD="-DKBIT_GEMV_OFF32=0 -DKBIT_GEMV_ZFILL=1"
  AB_NOBASE=1 KS=2,3,4,5 MS=1,4 AB_VARIANTS="old:$OLD +cap=0;oldcap:$OLD +cap=1;nocap:-DKBIT_NOOP=1 +cap=0;zf1:-DKBIT_GEMV_ZFILL=1 +cap=1" \
    CUT=260 gemv_ab_twice ab46c 300
  finish_run run46
fi
# Result (ab3, H200, two passes, `gemv_ab46c_{1,2}.log`): GPU tests 108 passed.  M = 1 TOTAL new / old / oldcap / nocap /
#   zf1: k = 2 14.99-15.01 / 14.94-14.95 / 14.95 / 15.37 / 14.89-14.90; k = 3 17.20 / 18.47 / 18.46 / 17.20 / 17.12-17.16;
#   k = 4 17.33 / 17.31-17.38 / 17.30-17.35 / 18.74-18.79 / 17.15-17.19; k = 5 23.05 / 24.43 / 24.45 / 23.03 / 22.92; M = 4
#   alike (k = 4 19.11 old -> 18.95-18.98 zf1).  The cap put Q / O / linear value back in the fast mode (Q k = 4 3.50,
#   O 3.52); ZFILL=1 a little faster than 0 -> the tree: OFF32, ZFILL=1 (the 0 option removed), the cap.  Cells worse
#   than old by > 1.3 %: linear key k = 2 (2.39 -> 2.52, 128 blocks padded to one an SM) -> the cap only from two blocks
#   an SM (ceil(blocks / SMs) >= 2); KV (64 blocks) +0.5 %.
# Step fin (H200): the final tree.  M = 5..16 (the two-tile and token-split GEMVs, OFF32 and the cap there too) against
#   the old package, then the dense M = 1 / 4 table (matmul, k = 2..5).
if [ "$STEP" = fin ]; then
  AB_NOBASE=1 KS=4,2 MS=8,16 AB_VARIANTS="old:-DKBIT_GEMV_OFF32=0" CUT=200 timeout 200 python3 profiling/gemv_ab.py \
    --out "$W" > "$W/gemv_ab46d.log" 2>&1
  grep -vE "^\s*$" "$W/gemv_ab46d.log" | cut -c1-200 | tail -30
  m1_table final62
  finish_run run46
fi
# Result (fin, H200): M = 1 / 4 TOTAL (`final62-m1`): k = 2 14.91 / 17.92, k = 3 17.15 / 18.98, k = 4 17.12 (2.38x) /
#   19.03, k = 5 22.86 / 24.56 us.  M = 8 (`gemv_ab46d.log`): Q and linear value k = 4 5.55 / 5.54 against old 4.63 / 4.61
#   (the other cells within -3..+1 %): the slow mode back at M = 8 although the cap pads them to two blocks an SM.
# Step m8 (H200): Q / linear value k = 4 at M = 1, 5, 8: old, old + cap, the tree without the cap (nocap), the tree.
if [ "$STEP" = m8 ]; then
  AB_NOBASE=1 KS=4 MS=1,5,8 SHAPES=Q,lin_value,O AB_VARIANTS="old:-DKBIT_GEMV_OFF32=0 +cap=0;oldcap:-DKBIT_GEMV_OFF32=0 +cap=1;nocap:-DKBIT_NOOP=1 +cap=0;cap:-DKBIT_NOOP=2 +cap=1" \
    CUT=230 gemv_ab_twice ab46e 120
  finish_run run46
fi
# Result (m8, H200, two passes, `gemv_ab46e_{1,2}.log`): the tree (cap) Q / linear value / O k = 4 M = 1 / 5 / 8 3.44 /
#   4.08 / 4.54, old 3.53 / 4.15 / 4.62, nocap 4.12 / 4.70 / 5.53: the fin step's slow M = 8 cells were the first use of
#   the kernel at more than 48 KB of shared memory, where the occupancy query (before the attribute was raised) read 0
#   and the cap did nothing.  Fixed (the attribute raised first; test_resident_cap_even_share).
# Step h100 (H100): GPU tests of the dense GEMV and the families beside it; A/B of the tree against old at M = 1 / 4 / 8,
#   k = 2..5 (issue 3's H100 numbers must hold); the M = 1 / 4 table.
if [ "$STEP" = h100 ]; then
  gpu_tests "$W/gpu_tests_gemv46h.log" 300 tests/test_gemv_gpu.py tests/test_gemv_stream_gpu.py tests/test_launch_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_gemv46h.log" | head -10
  AB_NOBASE=1 KS=4,2,3,5 MS=1,4,8 AB_VARIANTS="old:-DKBIT_GEMV_OFF32=0" CUT=200 timeout 200 python3 profiling/gemv_ab.py \
    --out "$W" > "$W/gemv_ab46h.log" 2>&1
  grep -E "TOTAL" "$W/gemv_ab46h.log"
  m1_table final63
  finish_run run46
fi
# Result (h100, H100, the final tree): GPU tests (dense GEMV, streaming GEMV, launch) 197 passed.  Tree vs old TOTAL
#   (`gemv_ab46h.log`): k = 4 M = 1 / 4 / 8 17.58 / 19.32 / 22.28 vs 17.77 / 19.36 / 22.62 us; k = 2 15.03 / 17.81 / 22.75
#   vs 15.06 / 17.97 / 22.96; k = 3 17.46 / 18.80 / 22.12 vs 18.56 / 20.21 / 23.55; k = 5 22.81 / 24.41 / 27.62 vs 24.51 /
#   25.72 / 28.65; no cell more than 1.4 % slower.  M = 1 table (`final63-m1`): k = 2 / 3 / 4 / 5 3.16x / 2.69x / 2.68x /
#   2.09x fp16 (was 3.14x / 2.56x / 2.68x / 1.96x).
# Step close (H100): the dense (M = 16..128) and MoE (1..64 tokens) closing tables on this tree (run45's prepared step:
#   the thirty-eighth session's staged split-K sum had not been through them).
if [ "$STEP" = close ]; then
  dense_closing close46 170
  moe_closing close46-moe 230
  finish_run run46
fi
if [ "$STEP" = closed ]; then  # the dense half alone (what the session's device time left)
  dense_closing close46 170
  finish_run run46
fi
if [ "$STEP" = closem ]; then  # the MoE half alone
  moe_closing close46-moe 230
  finish_run run46
fi
# Step san (the first device time after the close step could not start: the machine was being given back): memcheck of
#   the dense GEMV with the 32-bit offsets (sanitize_c8.py: N % 8 != 0, K % 256 != 0, every block shape, the default
#   plans; sanitize_fsw.py: the two-tile / token-split kernels).
if [ "$STEP" = san ]; then
  sanitize memcheck "$W/memcheck_c8_46.log" 200 profiling/sanitize_c8.py
  sanitize memcheck "$W/memcheck_fsw_46.log" 150 profiling/sanitize_fsw.py
  finish_run run46
fi
# Result (san, H100): memcheck sanitize_c8.py 120 checks, sanitize_fsw.py 200 checks, 0 errors each
#   (`memcheck_{c8,fsw}_46.log`).
# Step plans (H200, with what device time was left): the GEMV's M = 1 k = 4 plans re-checked on the H200 (they were
#   last swept on the H100): warps a group 2 / 8 / 16 and the depth-3 ring against the plan.  Expect: if the steps'
#   latency is what is left (section 2 of NOTES' thirty-ninth session), more steps a warp (fewer warps) or a deeper
#   ring moves gate/up / Q.
if [ "$STEP" = plans ]; then
  AB_NOBASE=1 KS=4 MS=1 SHAPES=gateup,down,Q,O AB_PLANS="w2:warps=2;w8:warps=8;w16:warps=16;d3:depth=3" CUT=200 \
    timeout 200 python3 profiling/gemv_ab.py --out "$W" > "$W/gemv_ab46p.log" 2>&1
  grep -vE "^\s*$" "$W/gemv_ab46p.log" | cut -c1-200 | tail -12
  finish_run run46
fi
# Result (plans, H200, `gemv_ab46p.log`, one pass): the plans stand -- gate/up 4.28 us (w8 4.57, w2 6.78, w16 7.72, d3
#   4.35), down 4.19 (w16 4.15, d3 4.20, w8 4.86), Q 3.45 (w8 = the plan), O 3.60 (w16 = the plan, d3 3.62).  Neither
#   more steps a warp nor the deeper ring moves the H200's M = 1.
# Review (428802b: one KBIT_LD_F4 body for the two 16-byte shared loads, gemv.capped_smem shared by the launcher and
#   gemv_ab; NVRTC cubins of all 165 groups byte-identical): H100, test_gemv_gpu.py -k "resident_cap or (dense_shapes
#   and tiled) or graph_capture or plans_agree": 36 passed (`gpu_tests_review46.log`).
