#!/usr/bin/env bash
# Thirtieth session (2026-11-27).  From the repo root:  OUT=/tmp/out STEP=ids bash profiling/run37.sh
#   (kind nvidia-h100-x1)
. profiling/run_env.sh
start_run ids
RUN=37
# STEP=ids: issue 5's open question, after run36.sh gtrace (gtrace36_*.log): in the default (wait-first) launch
#   the grouped GEMV's blocks take 2.2 us from the wait to the end of the prologue, the stable mode's 0.95 us;
#   all of the 0.9-1.2 us a launch between them is there.  The guess forms (twenty-ninth session) read the ids
#   after the wait again, every thread of every block at the same instant (256 blocks x 8-16 warps x 3 loads of
#   one line); the stable mode reads them before the wait, spread over the blocks' entries.  Hypothesis: that
#   read is a same-line hot spot.  Expect: the trace's "wait passed -> ids read" several hundred ns in wait
#   mode and much less with -DKBIT_GROUPED_IDS_BCAST (three threads read, the block shares them through shared
#   memory); if so, the default launch 0.3-0.6 us faster a kernel (moe_ab bcast column).  -DKBIT_GEMV_A_FIRST
#   (A requested before the weights) tests whether A's loads wait behind the weights' DRAM misses.
if [ "$STEP" = ids ]; then
  for o in "" "-DKBIT_GROUPED_IDS_BCAST" "-DKBIT_GEMV_A_FIRST"; do
    for sh in moe_dn moe_gu_fused; do
      echo "=== $sh OPTS=$o"
      SHAPE=$sh E=8 M=1 OPTS="$o" MODES=wait,stable timeout 120 python3 profiling/grouped_trace.py 2>&1 | grep -v "^$"
    done
  done > "$W/gtrace37.log" 2>&1
  grep -E "===|^## |ids read|requested|prologue done|first step-0|-> exit" "$W/gtrace37.log"
  MOE_MMA=0 MOE_VARIANTS="bcast:-DKBIT_GROUPED_IDS_BCAST=1;afirst:-DKBIT_GEMV_A_FIRST=1;both:-DKBIT_GROUPED_IDS_BCAST=1 -DKBIT_GEMV_A_FIRST=1;stable:+stable=1;bcast_st:-DKBIT_GROUPED_IDS_BCAST=1 +stable=1" \
    MS=1,4 ES=8,10 KS=4 timeout 200 python3 profiling/moe_ab.py --out "$W" > "$W/moe_ids37.log" 2>&1
  grep -vE "^\s*$" "$W/moe_ids37.log" | tail -24
fi
# STEP=l2 (after ids: bcast / afirst slower, hypothesis rejected; the trace put "wait passed -> ids read" at
#   610-990 ns, the ids' DRAM round trip: the benchmark gave every launch its own ids array, evicted by the cold-L2
#   rotation before its next read, where a real pipeline's ids were just written by the routing kernel or read by
#   the grouped kernel before).  bench.py's MoE cells now default to one shared ids array and bank views
#   (KBITCUPY_MOE_IDS=l2).  Expect: the default launch 0.3-0.5 us faster a kernel with l2 than cold, stable about
#   equal; pf0 (stable without the L2 prefetch of the first weights) between, telling the prefetch's share.
if [ "$STEP" = l2 ]; then
  for pass in 1 2; do
    for mode in cold l2; do
      echo "=== pass $pass ids $mode"
      KBITCUPY_MOE_IDS=$mode MOE_MMA=0 MOE_VARIANTS="stable:+stable=1;pf0:-DKBIT_GROUPED_PF_STEPS=0 +stable=1" \
        MS=1,4 ES=8,10 KS=4 timeout 150 python3 profiling/moe_ab.py --out "$W" 2>&1 | grep -E "^(moe_|TOTAL)"
    done
  done > "$W/moe_l2_37.log" 2>&1
  cat "$W/moe_l2_37.log"
  SHAPE=moe_dn E=8 M=1 IDS=l2 MODES=wait,stable timeout 120 python3 profiling/grouped_trace.py > "$W/gtrace37_l2.log" 2>&1
  grep -E "^## |ids read|requested|prologue done|first step-0|-> exit" "$W/gtrace37_l2.log"
fi
#   Got (moe_l2_37.log, gtrace37_l2.log): no difference.  Two passes, 8 / 10 experts 1 token TOTAL default cold 11.71 /
#   13.98, l2 11.73 / 13.95; the trace's "wait passed -> ids read" is 576-960 ns with the ids in L2 too, and in the
#   stable mode the same read before the wait takes ~700 ns from entry.  pf0 (stable, no weights prefetch) is 0.05-0.3
#   us slower than stable, still 1.2-1.5 us faster than the default: the gain is the ids' read being off the path.
# STEP=pf: a fresh block's first load takes ~700 ns whether its line is in L2 or not: an address translation miss?
#   (the cold-L2 rotation walks 270+ MB of bank, 2 MB pages, through the TLBs.)  -DKBIT_GROUPED_PF_IDS: thread 0 of
#   each block L2-prefetches the ids', offsets', A's, tensor scales' and codebook's lines before the wait (hints:
#   they change nothing the loads after the wait return).  Expect, if so: "wait passed -> ids read" ~250 ns and the
#   default launch 0.3-0.45 us faster a kernel.  -DKBIT_GEMV_PF_A: the decode GEMV's (and the stable mode's) A and
#   codebook the same way before the wait (the dense M = 1 prologue waits on A's first load after the wait).
if [ "$STEP" = pf ]; then
  SHAPE=moe_dn E=8 M=1 OPTS="-DKBIT_GROUPED_PF_IDS" MODES=wait timeout 120 python3 profiling/grouped_trace.py \
    > "$W/gtrace37_pf.log" 2>&1
  grep -E "^## |ids read|requested|prologue done|first step-0|-> exit" "$W/gtrace37_pf.log"
  MOE_MMA=0 MOE_VARIANTS="pfids:-DKBIT_GROUPED_PF_IDS=1;stable:+stable=1;pfa_st:-DKBIT_GEMV_PF_A=1 +stable=1" \
    MS=1,4 ES=8,10 KS=4 timeout 150 python3 profiling/moe_ab.py --out "$W" > "$W/moe_pf37.log" 2>&1
  grep -vE "^\s*$" "$W/moe_pf37.log" | tail -13
  SHAPES=gateup,down,Q,O,KV KS=2,4 MS=1,4 AB_VARIANTS="pfa:-DKBIT_GEMV_PF_A=1" \
    timeout 200 python3 profiling/gemv_ab.py --out "$W" > "$W/gemv_pf37.log" 2>&1
  cut -c1-200 "$W/gemv_pf37.log" | grep -vE "^\s*$" | tail -30
fi
#   Got (gtrace37_pf.log, moe_pf37.log): "ids read" 608 ns (was 736) but the default launch no faster (moe_dn 8 experts
#   1 token 4.73 -> 4.85); pfa_st equal to stable.  Not a translation miss worth having; the hooks are removed.  The
#   SASS shows the other half of the gap: in the wait-first order ~180 instructions a warp of gemv_block's set-up
#   (address math, a division) run between the ids' arrival and the first weight loads; the stable mode runs them
#   before its wait.
# STEP=bind: the wait-first launch with its wait and ids read inside gemv_block's first pass (LateBind), after the
#   expert-independent set-up (SASS: ~60 instructions from the ids to the weight loads, was ~180).  Expect: the default
#   launch 0.2-0.4 us faster a kernel at 1-8 tokens (4 warps a scheduler x ~120 instructions), stable and plain equal.
#   Columns: base = 5658505's kbit_gemv.cu (profiling/baseline_gemv_5658505.cu, carried), new = this tree, off =
#   this tree with -DKBIT_GROUPED_BIND_OFF (the old order in the new loop).  Then the grouped / PDL GPU tests.
if [ "$STEP" = bind ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_bind37.log" 300 tests/test_grouped_gpu.py tests/test_pdl_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_bind37.log" | head
  MOE_MMA=0 MOE_VARIANTS="base:src=profiling/baseline_gemv_5658505.cu;off:-DKBIT_GROUPED_BIND_OFF=1;stable:+stable=1;base_st:src=profiling/baseline_gemv_5658505.cu +stable=1" \
    MS=1,4,8 ES=8,10 KS=2,4,5 timeout 300 python3 profiling/moe_ab.py --out "$W" > "$W/moe_bind37.log" 2>&1
  grep -vE "^\s*$" "$W/moe_bind37.log" | grep -E "^(shape|moe_|TOTAL)" | tail -40
  SHAPE=moe_dn E=8 M=1 MODES=wait timeout 120 python3 profiling/grouped_trace.py > "$W/gtrace37_bind.log" 2>&1
  grep -E "^## |ids read|requested|prologue done|first step-0|-> exit" "$W/gtrace37_bind.log"
fi
#   Got (moe_bind37.log, gtrace37_bind.log): the trace build's wait mode 5.61 -> 5.23 us a launch (wait passed -> exit
#   p50 4608 -> 4192 ns), but in the real kernels mixed: k = 2 / 5 0.1-0.5 us faster a kernel, k = 4 down 8 experts
#   1 / 4 tokens 0.2 / 0.1 us slower, and the stable mode slower everywhere (k = 4 down 8 experts 1 token 4.03 -> 4.55):
#   one inline of gemv_block for both kinds of pass changed the register allocation (k = 4 slices 123 -> 98).  The
#   GPU tests ran out of their 300 s at 63 % (all passed so far).
# STEP=twice: the late pass as a second inline (-DKBIT_GROUPED_BIND_TWICE; spills in 11 k = 4 / 5 MT = 2 or SwiGLU
#   instantiations, none in the k = 2 / 4 one-tile kernels measured here).  Expect, if the merged inline was what
#   cost: twice's default launch as fast as new's at k = 2 and faster at k = 4, its stable mode as base's.
if [ "$STEP" = twice ]; then
  MOE_MMA=0 MOE_VARIANTS="twice:-DKBIT_GROUPED_BIND_TWICE=1;base:src=profiling/baseline_gemv_5658505.cu;stable:+stable=1;twice_st:-DKBIT_GROUPED_BIND_TWICE=1 +stable=1;base_st:src=profiling/baseline_gemv_5658505.cu +stable=1" \
    MS=1,4 ES=8,10 KS=2,4 timeout 300 python3 profiling/moe_ab.py --out "$W" > "$W/moe_twice37.log" 2>&1
  grep -E "^(shape|moe_|TOTAL)" "$W/moe_twice37.log" | tail -30
fi
#   Got (moe_twice37.log): twice's default launch 0.5-0.9 us SLOWER than new (k = 2 down 8 experts 1 token 3.64 ->
#   4.52), its stable mode 0.1-0.3 us faster than base's at k = 4 (down 8 experts 1 token 4.02 -> 3.89).  The late pass
#   and the other passes in one kernel move each other's schedule; not understood from the SASS.
# STEP=lb: the wait-first launch's kernel as an instantiation of its own would be (-DKBIT_GROUPED_LB_ONLY: every pass
#   bound, the first after the wait; pdl 1 only, so only the default column is meaningful; no spills in any
#   instantiation, k = 4 slices 106 registers).  The other modes would keep base's kernel (base_st).  Expect: lb at
#   least as fast as new everywhere; if so, the grouped kernels gain an LB template parameter for pdl 1.
if [ "$STEP" = lb ]; then
  MOE_MMA=0 MOE_VARIANTS="lb:-DKBIT_GROUPED_LB_ONLY=1;base:src=profiling/baseline_gemv_5658505.cu;base_st:src=profiling/baseline_gemv_5658505.cu +stable=1" \
    MS=1,4,8 ES=8,10 KS=2,4,5 timeout 300 python3 profiling/moe_ab.py --out "$W" > "$W/moe_lb37.log" 2>&1
  grep -E "^(shape|moe_|TOTAL)" "$W/moe_lb37.log" | tail -60
fi
#   Got (moe_lb37.log): lb faster than base in every cell, 0.3-0.9 us a gate/up + down pair (k = 4 1 token 8 / 10 experts
#   TOTAL 11.70 / 13.91 -> 11.39 / 13.38, 4 tokens 11.96 / 14.05 -> 11.62 / 13.58, 8 tokens 13.56 / 15.38 -> 12.97 /
#   14.86; k = 2 -0.4..-0.7, k = 5 -0.6..-0.9), and faster than new except k = 4 10 experts 4 tokens (+0.1).  Made an
#   instantiation of its own (kbit_gemv_grouped*'s LB; kbitcupy.gemv.lb_key), run by the wait-first launch only.
# STEP=tests: the GPU tests of the grouped kernels and PDL on that tree (the LB kernels now serve every default
#   launch of the grouped GEMV).
if [ "$STEP" = tests ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_lb37.log" 540 tests/test_pdl_gpu.py tests/test_grouped_gpu.py --durations=12
  grep -E "^E  |FAILED|passed|failed|slowest|s call" "$W/gpu_tests_lb37.log" | head -30
fi
# STEP=lbv: compute-sanitizer over the LB kernels (profiling/sanitize_grouped_lb.py: k = 2..5, fp16 / bf16, plain /
#   gather / SwiGLU staging, 0-row slots, passes, back-to-back launches, a bad id), then the closing MoE table (k = 4)
#   and the MoE layer step.
if [ "$STEP" = lbv ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  sanitize memcheck "$W/memcheck_lb37.log" 240 profiling/sanitize_grouped_lb.py
  sanitize racecheck "$W/racecheck_lb37.log" 240 profiling/sanitize_grouped_lb.py
  sanitize synccheck "$W/synccheck_lb37.log" 240 profiling/sanitize_grouped_lb.py
  timeout 200 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,2,4,8,16 --experts 8,10 \
      --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag moe-final52 > "$W/bench_moe52.log" 2>&1
  grep -E "TOTAL|as moe_forward" "$W/bench_moe52.log" | head -40
fi
#   Got (gpu_tests_lb37.log, lbv): 227 GPU tests passed (test_pdl_gpu + test_grouped_gpu, 334 s); memcheck / racecheck /
#   synccheck over sanitize_grouped_lb.py 48 checks each, 0 errors; moe-final52 (k = 4): moe_forward 1 / 2 / 4 tokens
#   2.02x / 2.02x / 1.97x (8 experts), 2.06x / 2.06x / 2.03x (10); down alone 1.80x / 1.78x at 1 token.
# STEP=pfa: the same idea in the safe modes' prologue after the wait, dense decode GEMV and the grouped stable mode
#   (SASS of kbit_gemv k = 4 gate/up: the first group's word offsets computed again after the wait, ~50
#   instructions, and stage_A's chunk loop dividing by the row's chunks, ~40 more, before A's cp.async): the offsets
#   kept from before the wait (-DKBIT_GEMV_PF_RECOMPUTE turns it off) and the chunk loop without a division, its
#   start split before the wait (-DKBIT_GEMV_STAGE_DIV off).  SASS: wait -> first weight load 57 -> 30 lines, wait
#   -> A's cp.async 170 -> 85.  Expect: the decode GEMV at M = 1 0.05-0.2 us faster a shape (issue 3's k = 2 needs
#   0.76 us of 16.44 over the five), the grouped stable mode a little.
if [ "$STEP" = pfa ]; then
  SHAPES=gateup,down,Q,O,KV KS=2,4 MS=1,4 AB_VARIANTS="old:-DKBIT_GEMV_PF_RECOMPUTE=1 -DKBIT_GEMV_STAGE_DIV=1;addr:-DKBIT_GEMV_STAGE_DIV=1;stage:-DKBIT_GEMV_PF_RECOMPUTE=1" \
    timeout 300 python3 profiling/gemv_ab.py --out "$W" > "$W/gemv_pfa37.log" 2>&1
  grep -vE "^\s*$" "$W/gemv_pfa37.log" | cut -c1-220 | tail -40
  MOE_MMA=0 MOE_VARIANTS="old:-DKBIT_GEMV_PF_RECOMPUTE=1 -DKBIT_GEMV_STAGE_DIV=1;stable:+stable=1;old_st:-DKBIT_GEMV_PF_RECOMPUTE=1 -DKBIT_GEMV_STAGE_DIV=1 +stable=1" \
    MS=1,4 ES=8,10 KS=2,4 timeout 200 python3 profiling/moe_ab.py --out "$W" > "$W/moe_pfa37.log" 2>&1
  grep -E "^(shape|moe_|TOTAL)" "$W/moe_pfa37.log" | tail -30
fi
#   Got (gemv_pfa37.log, moe_pfa37.log): dense TOTAL (old = both off, addr = the offsets kept only, stage = the
#   division-free staging only): k = 2 M = 1 old 16.57, addr 16.33, stage 17.86, both 16.44; k = 4 M = 1 18.62 /
#   18.40 / 19.98 / 18.77; M = 4 k = 2 19.06 / 18.98 / 19.92 / 18.49, k = 4 20.89 / 20.62 / 22.00 / 20.75.  The staging
#   change cost up to 1 us a shape (Q), not kept; addr kept for the dense kernel only (KEEP): with both, the grouped
#   stable mode was 0.2-0.45 us slower a pair.
# STEP=final: the dense GEMV's GPU tests and memcheck (c8 and slices drivers) with the kept change, its A/B at every k
#   (old = -DKBIT_GEMV_PF_RECOMPUTE) and the closing M = 1 / 4 table.
if [ "$STEP" = final ]; then
  dense_checks gemv37 c8_37
  sanitize memcheck "$W/memcheck_slices37.log" 100 profiling/sanitize_slices.py
  SHAPES=gateup,down,Q,O,KV KS=2,3,4,5 MS=1,2,4 AB_VARIANTS="old:-DKBIT_GEMV_PF_RECOMPUTE=1" \
    timeout 150 python3 profiling/gemv_ab.py --out "$W" > "$W/gemv_final37.log" 2>&1
  grep -E "^TOTAL" "$W/gemv_final37.log"
  m1_table final53
fi
#   Got (gpu_tests_gemv37.log, memcheck_*37.log, gemv_final37.log, final53-m1): 101 GPU tests passed; memcheck c8 99
#   checks, slices 15, 0 errors; new vs old TOTAL faster at every k and M (k = 2 M = 1 16.58 -> 16.38, k = 4 18.70 ->
#   18.37, k = 5 27.60 -> 26.71); final53-m1 k = 2 / 3 / 4 / 5 M = 1 2.90x / 2.44x / 2.55x / 1.79x fp16, k = 4 % of SOL
#   gate/up 81, down 84, Q 90, O 89, linear value 89.
# STEP=nodiv: the dense kernel's A staging without its division by the row's chunks, stepped locally (the pinned
#   precompute of pfa cost registers): -DKBIT_GEMV_STAGE_NODIV (its SASS: wait -> A's cp.async ~20-40 instructions
#   shorter).  Expect: M = 1 0.02-0.05 us a shape, or nothing.
if [ "$STEP" = nodiv ]; then  # (since kept: the default; -DKBIT_GEMV_STAGE_DIV gives the old loop)
  # (ran at 117e60d with AB_VARIANTS="nodiv:-DKBIT_GEMV_STAGE_NODIV=1"; the same A/B now:)
  SHAPES=gateup,down,Q,O,KV KS=2,3,4,5 MS=1,4 AB_VARIANTS="div:-DKBIT_GEMV_STAGE_DIV=1" \
    timeout 200 python3 profiling/gemv_ab.py --out "$W" > "$W/gemv_nodiv37.log" 2>&1
  grep -vE "^\s*$" "$W/gemv_nodiv37.log" | cut -c1-150 | tail -48
fi
#   Got (gemv_nodiv37.log): TOTAL M = 1 k = 2 / 3 / 4 / 5 16.37 / 19.23 / 18.35 / 26.61 -> 16.26 / 19.12 / 18.39 / 26.49,
#   M = 4 18.99 / 21.68 / 20.65 / 28.27 -> 18.74 / 21.17 / 20.64 / 27.92.  Kept as the default (the hook now reads
#   -DKBIT_GEMV_STAGE_DIV, the old loop).
# STEP=close: the tree at the session's end (the dense staging change included): the dense GEMV's GPU tests and memcheck,
#   the closing M = 1 / 4 table (k = 2..5) and the MoE table (k = 4, 1..16 tokens, 8 / 10 experts).
if [ "$STEP" = close ]; then
  dense_checks close37 c8_close37
  sanitize memcheck "$W/memcheck_lb_close37.log" 150 profiling/sanitize_grouped_lb.py
  m1_table final54
  timeout 200 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,2,4,8,16 --experts 8,10 \
      --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag moe-final54 > "$W/bench_moe54.log" 2>&1
  grep -E "TOTAL|as moe_forward" "$W/bench_moe54.log" | head -40
fi
#   Got (close): 101 GPU tests passed, memcheck c8 99 checks / grouped LB 48 checks 0 errors; final54-m1 M = 1 k = 2 / 3 /
#   4 / 5 2.92x / 2.48x / 2.56x / 1.80x fp16 (16.08 / 18.96 / 18.35 / 26.08 us); moe-final54 moe_forward 1 / 2 / 4
#   tokens 2.04x / 2.03x / 1.97x (8 experts), 2.05x / 2.06x / 2.03x (10).
# STEP=cbd: the grouped GEMV with the default codebook compiled in at k = 2 / 4 too (GROUPED_CBD_KS; the eighteenth
#   session measured it slower there, not understood).  In the LB kernel the codebook's load and the pair table's
#   build after the wait are on the path to the first step; with CBD the table is built before the wait.  A copy of
#   the tree with GROUPED_CBD_KS = (2, 3, 4, 5), two alternations.  Expect: the default launch 0.1-0.3 us faster a kernel
#   at k = 2 / 4 if that path matters.
if [ "$STEP" = cbd ]; then
  rm -rf /tmp/cbdtree && mkdir -p /tmp/cbdtree && cp -r kbitcupy cuda_src profiling /tmp/cbdtree/
  sed -i 's/^GROUPED_CBD_KS = (5,)$/GROUPED_CBD_KS = (2, 3, 4, 5)/' /tmp/cbdtree/kbitcupy/gemv.py
  grep -n "^GROUPED_CBD_KS" /tmp/cbdtree/kbitcupy/gemv.py
  for pass in 1 2; do
    for t in main:$(pwd) cbd:/tmp/cbdtree; do
      echo "=== pass $pass ${t%%:*}"
      (cd ${t#*:} && PYTHONPATH=$(pwd) CUPY_CACHE_DIR=/tmp/cupy_cache_${t%%:*} KBITCUPY_CACHE_DIR=/tmp/kbit_cache_${t%%:*} MOE_MMA=0 MOE_VARIANTS="stable:+stable=1" \
        MS=1,4 ES=8,10 KS=2,4 timeout 150 python3 profiling/moe_ab.py 2>&1 | grep -E "^(moe_|TOTAL)")
    done
  done > "$W/moe_cbd37.log" 2>&1
  cat "$W/moe_cbd37.log"
fi
#   Got (moe_cbd37.log): mixed to slower (8 experts k = 4 1 token TOTAL 11.35 -> 11.49 / stable 10.22 -> 10.59; 10 experts
#   13.34 -> 13.12 / stable 12.50 -> 13.13): GROUPED_CBD_KS stays (5,).
# STEP=cb: the LB kernel requests its codebook right after the wait, before the ids (it is a weight: not before the
#   wait), so the load and the pair table's build run beside the ids' read and the set-up instead of after the weight
#   loads (k = 2..4 load it; k = 5 has it compiled in).  Columns: new, cblate = -DKBIT_GROUPED_LB_CB_LATE (the request
#   after the ids), prev = 3944f42's kbit_gemv.cu (profiling/baseline_gemv_3944f42.cu, carried).  Expect: the default
#   launch 0.1-0.3 us faster a kernel at k = 2 / 4 if the codebook's latency was on the path (trace: "loads requested"
#   sits ~500 ns after the ids, behind the codebook's load and a barrier).
#   Got (moe_cb37.log): slower.  TOTAL 1 token new / cblate / prev: k = 2 8 experts 9.59 / 9.26 / 9.24, k = 3 11.76 / 10.82 /
#   10.93, k = 4 11.63 / 11.48 / 11.38 (10 experts k = 4 13.31 / 13.47 / 13.37).  Reverted (the kernel is 3944f42's again).
if [ "$STEP" = cb ]; then
  MOE_MMA=0 MOE_VARIANTS="cblate:-DKBIT_GROUPED_LB_CB_LATE=1;prev:src=profiling/baseline_gemv_3944f42.cu;stable:+stable=1" \
    MS=1,4 ES=8,10 KS=2,3,4 timeout 250 python3 profiling/moe_ab.py --out "$W" > "$W/moe_cb37.log" 2>&1
  grep -E "^(shape|moe_|TOTAL)" "$W/moe_cb37.log" | tail -40
fi
# STEP=keep: the grouped stable mode (moe_forward's down) keeping its first word offsets from before the wait, as the
#   dense kernel now does (-DKBIT_GROUPED_KEEP_ADDR=true; pfa measured it only together with the staging change, which
#   made the stable mode 0.2-0.45 us a pair slower).  Expect: stable 0-0.15 us faster a kernel, or slower as in pfa.
#   Got (moe_keep37.log): slower, in both alternations: k = 4 1 token TOTAL (stable mode) 10.24 / 12.55 -> 10.67 / 12.87
#   (8 / 10 experts), 4 tokens 10.57 / 12.75 -> 10.86 / 13.01; k = 2 equal to +0.13.  The hook stays, off.
if [ "$STEP" = keep ]; then
  MOE_MMA=0 MOE_GEMV=0 MOE_VARIANTS="stable:+stable=1;keep_st:-DKBIT_GROUPED_KEEP_ADDR=true +stable=1;stable2:+stable=1;keep_st2:-DKBIT_GROUPED_KEEP_ADDR=true +stable=1" \
    MS=1,4 ES=8,10 KS=2,4 timeout 250 python3 profiling/moe_ab.py --out "$W" > "$W/moe_keep37.log" 2>&1
  grep -E "^(shape|moe_|TOTAL)" "$W/moe_keep37.log" | tail -30
fi
finish_run run37
