#!/usr/bin/env bash
# Twenty-eighth session (2026-11-27): why kbit_wgmma_pd (producer dequantize) ran 1.5-2.4x slower than the TMA
# kernel in run32 (H200, k = 4: gate/up M = 128 14.4 -> 30.0 us, M = 64 10.9 -> 25.9; two producer warpgroups
# only 10 % better).  From the repo root:  OUT=/tmp/out STEP=diag bash profiling/run33.sh
# A record: the hooks of steps diag (kbit_wgmma_pd's KBIT_WG_PD_*), issue (KBIT_WG_TOK_ISSUER / KBIT_WG_W_ISSUER),
# prol (KBIT_WG_ISSUE_SPREAD / KBIT_WG_ONE_EXPECT), pw (KBIT_WG_PW, kept as profiling/patches/
# session28-producer-warp.patch) and prmt (KBIT_WG_PRMT, profiling/patches/session28-prmt-decode.patch) were removed after they measured no gain; steps trace and l2 run on the tree as it
# is (wgmma_trace.py, -DKBIT_WG_NO_TOKENS).  Results and reading: profiling/NOTES.md, twenty-eighth session.
. profiling/run_env.sh
start_run "$STEP"
RUN=33  # the A/B helpers' tag and log suffix (wg_arm, ab_passes, hook_tests in run_env.sh)
# STEP=diag: stage removal with the timing hooks (results wrong) and one per-SASS profile.  Got (gate/up M = 64 /
#   128): pd 26.6 / 30.4 us, no dequantize 17.8 / 21.9, no MMA 23.3 / 26.1, neither 15.2 / 17.9 (the TMA kernel
#   10.9 / 14.4), no fence 25.9 / 29.5, lag 2 25.5 / 29.4; ncu: the consumers wait on the producer.
#   Expected, if the producer's dequantize is the limit: NODQ near the TMA kernel or faster, NOMMA ~ pd; if
#   the hand-off is (the producer's TMA issue waiting on the consumers' last group, the proxy fence): LAG2 /
#   NOFENCE recover most of it.
if [ "$STEP" = diag ]; then
  bench_pd() {  # TAG OPTS
    KBIT_WG_PD=1 KBIT_WGMMA_OPTS="$2" timeout 90 python3 profiling/bench.py --out "$W" --M 64,128 --k 4 \
      --columns WGMMA --shapes gateup,down,Q --reps 15 --tag "pd33-$1" > "$W/bench_pd33_$1.log" 2>&1
    echo "## $1 ($2)"; grep -E "^### M|^\| (gateup|down|Q) \| 4" "$W/bench_pd33_$1.log" | awk -F'|' '{printf "%s%s", $2, $4} /###/{print ""} END{print ""}'
  }
  KBIT_WG_PD=0 timeout 90 python3 profiling/bench.py --out "$W" --M 64,128 --k 4 --columns WGMMA \
      --shapes gateup,down,Q --reps 15 --tag pd33-tma > "$W/bench_pd33_tma.log" 2>&1
  echo "## tma"; grep -E "^### M|^\| (gateup|down|Q) \| 4" "$W/bench_pd33_tma.log" | awk -F'|' '{printf "%s%s", $2, $4} /###/{print ""} END{print ""}'
  bench_pd pd ""
  bench_pd nodq "-DKBIT_WG_PD_NODQ=1"
  bench_pd nomma "-DKBIT_WG_PD_NOMMA=1"
  bench_pd nofence "-DKBIT_WG_PD_NOFENCE=1"
  bench_pd lag2 "-DKBIT_WG_PD_ISSUE_LAG=2"
  bench_pd nodq_nomma "-DKBIT_WG_PD_NODQ=1 -DKBIT_WG_PD_NOMMA=1"
  # per-SASS warp samples of kbit_wgmma_pd, gate/up M = 128, 1 split
  ONE=gateup,4,128,1 ONE_WG=1 GEMM=0 DQ=0 KBIT_WG_PD=1 timeout 150 ncu --clock-control none --cache-control all \
    -k regex:'kbit_wgmma_pd' --launch-skip 2 --launch-count 1 --section WarpStateStats --section SourceCounters \
    --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables -o "$W/rep_pd33" python3 profiling/gemm_probe.py > "$W/ncu_pd33.log" 2>&1
  ncu -i "$W/rep_pd33.ncu-rep" --page source --print-source sass --csv > "$W/src_pd33.csv" 2>&1
  ncu -i "$W/rep_pd33.ncu-rep" --page details > "$W/details_pd33.txt" 2>&1
  python3 profiling/ncu_src_top.py "$W/src_pd33.csv" 40 > "$W/src_top_pd33.txt" 2>&1
  head -75 "$W/src_top_pd33.txt"
  grep -E "Duration|Throughput|bank|Bank|Shared" "$W/details_pd33.txt" | head -20
  rm -f "$W"/*.ncu-rep
fi
# STEP=trace: the TMA kernel's timeline (wgmma_trace.py; per-iteration phases of thread 0: "proxy fence" is the
#   TMA wait of tile it + 1) at gate/up M = 64 / 128 (default plan and 1 split) and down M = 128, with and
#   without the MMA (-DKBIT_WG_NO_MMA): is the K-tile loop waiting for data (the pd skeleton's floor) or working?
if [ "$STEP" = trace ]; then
  export CASES="d:5120,2048,64;d:5120,2048,128;d:5120,2048,128,1;d:2048,5120,128;d:4096,2048,128"
  KBIT_WGMMA_OPTS=-DKBIT_WG_TRACE timeout 200 python3 profiling/wgmma_trace.py 2>&1 | tee "$W/wgmma_trace33.log"
  KBIT_WGMMA_OPTS="-DKBIT_WG_TRACE -DKBIT_WG_NO_MMA" CASES="d:5120,2048,128;d:5120,2048,128,1" timeout 200 \
    python3 profiling/wgmma_trace.py 2>&1 | tee "$W/wgmma_trace33_nomma.log"
fi
# STEP=issue (run, not kept): the weights' copies issued by thread 128 (a second arrival), or the tokens' by
#   thread 32 and the weights' by 160: no faster (gate/up M = 128 14.45 -> 14.87 / 14.99 us); thread 0's copy
#   issue fell 176 -> 65 ns and its dequantize rose 196 -> 296 ns (wgmma_trace33_t32w160.log).
# STEP=prol (got: spread M = 16 / 32 -1.5 %, M = 64 / 128 +1.2 / +0.7 %; one expect: equal; the prologue's
#   1.2 us became 0.7 and tile 0 landed 0.7 us later instead).  The copy issue in the prologue (hooks KBIT_WG_ISSUE_SPREAD, KBIT_WG_ONE_EXPECT).  Thread 0 issues
#   dist = 6 stages x 3 copies + 2 mbarrier ops before the main loop (the trace's "tables" phase, 1.2 us, ~60 ns
#   an op).  Expected: spread over 8 warps -> that phase ~0.3 us if the ~60 ns is the issuing thread's, not the
#   SM's TMA unit's: -0.5..-0.9 us a call at every M (gate/up M = 64 10.9 -> ~10.2 us); the K loop unchanged.
if [ "$STEP" = prol ]; then
  for pass in 1 2; do
    for arm in base spread oneexp both; do
      case $arm in base) o="";; spread) o="-DKBIT_WG_ISSUE_SPREAD=1";; oneexp) o="-DKBIT_WG_ONE_EXPECT=1";;
        both) o="-DKBIT_WG_ISSUE_SPREAD=1 -DKBIT_WG_ONE_EXPECT=1";; esac
      wg_arm "prol33-$arm-$pass" "$o" 16,32,64,128 "## $arm pass $pass"
    done
  done
  KBIT_WGMMA_OPTS="-DKBIT_WG_TRACE -DKBIT_WG_ISSUE_SPREAD=1 -DKBIT_WG_ONE_EXPECT=1" CASES="d:5120,2048,64;d:5120,2048,128" \
    timeout 200 python3 profiling/wgmma_trace.py 2>&1 | tee "$W/wgmma_trace33_both.log" | grep -E "^##|it: (copy|dequant|whole)|main loop|tables|landed"
fi
# STEP=l2: is the K-tile loop bound by the token tiles' traffic (each of N / 128 column strips reads the whole
#   token tile: at TOK = 128, 16 KB of tokens against 4.3 KB of weights a tile; 120 CTAs x 20 KB a 548 ns tile
#   = 4.4 TB/s from L2)?  -DKBIT_WG_NO_TOKENS (TMA: the stage's arrival without the copy; results wrong).
#   Expected if so: gate/up M = 128 loop 548 -> ~300 ns a tile, TOTAL M = 128 59 -> ~45 us.
if [ "$STEP" = l2 ]; then
  for arm in base notok; do
    o=$([ $arm = notok ] && echo -DKBIT_WG_NO_TOKENS || true)
    wg_arm "l2-33-$arm" "$o" 64,128,256 "## $arm"
  done
  KBIT_WGMMA_OPTS="-DKBIT_WG_TRACE -DKBIT_WG_NO_TOKENS" CASES="d:5120,2048,64;d:5120,2048,128;d:5120,2048,256" \
    timeout 200 python3 profiling/wgmma_trace.py 2>&1 | tee "$W/wgmma_trace33_notok.log" | grep -E "^##|it: |main loop|tables|landed|split-K|epilogue"
fi
# STEP=l2 result: no.  Without the token copies gate/up M = 128 14.46 -> 14.24 us, the K tile 551 ns; thread 0's copy
#   issue 176 -> 139 ns (the weights' two bulk copies alone) and the dequantize took up the rest.
# STEP=pw: a producer warp (-DKBIT_WG_PW=1: kbit_wgmma_tma at 288 threads; warp 8 issues every stage's copies
#   and meets the per-tile barrier only).  Why: thread 0 pays ~140-180 ns of copy issue in each ~550 ns K tile
#   and the barrier holds the other 7 warps for it; moving the issue to another MMA warp (STEP=issue) only
#   moved it.  Expected: the K tile -> ~380-420 ns (the chain without the issue), gate/up M = 128 main loop
#   6.3 -> ~4.6 us, TOTAL M = 128 59.3 -> ~53 us, M = 256 82.6 -> ~68 us; M = 16 / 32 less (fewer tiles).
#   First the wgmma GPU tests and memcheck with the hook (bit-exact with the reference paths, all TOKs, split-K
#   both ways, graph capture).
if [ "$STEP" = pw ]; then
  (export KBIT_WGMMA_OPTS=-DKBIT_WG_PW=1
   python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
   gpu_tests "$W/gpu_tests_pw33.log" 240 tests/test_wgmma_gpu.py -k "not pd"
   grep -E "^E  |FAILED|Error" "$W/gpu_tests_pw33.log" | head -20
   SAN_QUICK=1 sanitize memcheck "$W/memcheck_pw33.log" 150 profiling/sanitize_tma.py)
  ab_passes pw -DKBIT_WG_PW=1
  KBIT_WGMMA_OPTS="-DKBIT_WG_TRACE -DKBIT_WG_PW=1" CASES="d:5120,2048,64;d:5120,2048,128;d:5120,2048,256" \
    timeout 200 python3 profiling/wgmma_trace.py 2>&1 | tee "$W/wgmma_trace33_pw.log" | grep -E "^##|it: |main loop|tables|landed|split-K|epilogue"
fi
# STEP=pw result: every launch of the hook trapped (a stage mbarrier initialized by thread 0 while the producer
#   warp, thread 256, already issued its first copies on it); the trace build happened to run: thread 0's copy
#   issue 176 -> 15 ns, its dequantize 196 -> 313 ns, the K tile 548 -> 573 ns (wgmma_trace33_pw.log).
# STEP=pw2: the producer warp with the mbarriers initialized by the issuing thread, as the patch
#   profiling/patches/session28-producer-warp.patch (applied to a copy of the tree in ab_prev/, carried): the
#   wgmma GPU tests and the A/B against the working tree, two alternations.  Expected from the trace: no gain.
if [ "$STEP" = pw2 ]; then
  (cd ab_prev && export PYTHONPATH=$(pwd) KBIT_WGMMA_OPTS=-DKBIT_WG_PW=1 KBITCUPY_CACHE_DIR=/tmp/kbit_cache_pw
   gpu_tests "$W/gpu_tests_pw2_33.log" 200 tests/test_wgmma_gpu.py
   grep -E "^E  |FAILED" "$W/gpu_tests_pw2_33.log" | head -10)
  for pass in 1 2; do
    for arm in base pw; do
      if [ $arm = pw ]; then
        (cd ab_prev && export PYTHONPATH=$(pwd) KBITCUPY_CACHE_DIR=/tmp/kbit_cache_pw
         wg_arm "pw2-33-$arm-$pass" -DKBIT_WG_PW=1 16,32,64,128,256 "## $arm pass $pass")
      else
        wg_arm "pw2-33-$arm-$pass" "" 16,32,64,128,256 "## $arm pass $pass"
      fi
    done
  done
fi
# STEP=prmt: the k = 4 dequantize without the shared-memory pair table (-DKBIT_WG_PRMT=1: prmt_decode4, the 16
#   levels' bytes in 8 registers; SASS of dense TMA TOK = 128: LDS 110 -> 66, PRMT 89 -> 221, LOP3 119 -> 202, 3300 ->
#   3500 instructions).  Why: the K tile absorbs every saving into the dequantize's shared-memory loads (STEPs issue,
#   prol, l2, pw); this removes 16 of a thread's 28 loads a tile.  Expected if those loads are the bound: the K tile
#   548 -> ~420-450 ns, TOTAL M = 128 59.4 -> ~53 us; if the ALU chain is: slower.  Tests first (every wgmma test, the
#   hook in both the TMA and the cp.async kernel: the float64 reference checks catch a wrong level).
#   Got: correct (36 wgmma GPU tests), 7-11 % slower (TOTAL M = 128 59.5 -> 63.8 us; K tile 548 -> 630 ns); reverted,
#   kept as profiling/patches/session28-prmt-decode.patch.
if [ "$STEP" = prmt ]; then
  hook_tests prmt -DKBIT_WG_PRMT=1 230
  ab_passes prmt -DKBIT_WG_PRMT=1
  for arm in base prmt; do
    o=$([ $arm = prmt ] && echo -DKBIT_WG_PRMT=1 || true)
    KBIT_WGMMA_OPTS="$o" timeout 100 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 16,32,64 \
      --experts 8,10 --columns Grouped --reps 15 --tag "prmt33-moe-$arm" > "$W/bench_prmt33_moe_$arm.log" 2>&1
    echo "## moe $arm"; grep -E "as moe_forward|^\| moe" "$W/bench_prmt33_moe_$arm.log" | head -16
  done
  KBIT_WGMMA_OPTS="-DKBIT_WG_TRACE -DKBIT_WG_PRMT=1" CASES="d:5120,2048,128" \
    timeout 100 python3 profiling/wgmma_trace.py 2>&1 | tee "$W/wgmma_trace33_prmt.log" | grep -E "^##|it: |main loop"
fi
# STEP=final: the tree as committed (the pd kernel removed, default kernels byte-identical): the wgmma GPU tests and
#   memcheck over sanitize_tma.py.
if [ "$STEP" = final ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_final33.log" 240 tests/test_wgmma_gpu.py tests/test_pdl_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_final33.log" | head -10
  sanitize memcheck "$W/memcheck_final33.log" 200 profiling/sanitize_tma.py
fi
# STEP=row256 (run as a hook; now the default, so its A/B needs -DKBIT_WG_K4_ROW256=0 as the base): the k = 4 pair
#   table at 64 copies (256-byte rows) for TOK >= 128 (-DKBIT_WG_K4_ROW256=1), so one PRMT
#   gives a lookup's offset (SASS: PRMT + LDS [R + UR] where it was PRMT + IMAD + LDS: 16 instructions fewer a thread
#   a K tile).  Why: STEP=prmt showed the K tile follows the dequantize's instruction count (+6 % -> +15 %).
#   Expected: the K tile 548 -> ~480-500 ns at TOK = 128, TOTAL M = 128 59.4 -> ~56 us; the 64 KB table costs 1 stage
#   (8 -> 7) and ~0.1-0.2 us more table build.  M <= 64 (TOK <= 64) unchanged.
if [ "$STEP" = row256 ]; then
  hook_tests row256 -DKBIT_WG_K4_ROW256=1 200
  ab_passes row256 -DKBIT_WG_K4_ROW256=1
  KBIT_WGMMA_OPTS="-DKBIT_WG_TRACE -DKBIT_WG_K4_ROW256=1" CASES="d:5120,2048,128" \
    timeout 100 python3 profiling/wgmma_trace.py 2>&1 | tee "$W/wgmma_trace33_row256.log" | grep -E "^##|it: |main loop|tables"
fi
# STEP=row256 got: correct (36 wgmma GPU tests), TOTAL M = 128 59.35 -> 58.52, M = 256 82.5 -> 80.3 us, M <= 64 equal,
#   K tile 548 -> 540 ns: made the default (-DKBIT_WG_K4_ROW256=0 gives back the 32-copy table).
# STEP=final2: the default-on tree: memcheck over sanitize_tma.py.
if [ "$STEP" = final2 ]; then
  python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
  sanitize memcheck "$W/memcheck_final2_33.log" 200 profiling/sanitize_tma.py
fi
finish_run run33
