#!/usr/bin/env bash
# Fifty-first session (2026-11-29).  From the repo root:  OUT=/tmp/out STEP=c8 bash profiling/run58.sh  (carry .git_rev)
. profiling/run_env.sh
start_run c8
# STEP=c8: the decode GEMV's 8-column groups (plan c8) re-checked on the H200 at M = 1 / 2 / 4, k = 2 / 3 / 4, on the
#   seven dense shapes, both ways (c8=1 / c8=0 against the plan).  Why: the c8 rule (gemv.plan) was fitted on the H100
#   (nineteenth session, c8ab22); on the H200 only k = 4 M = 1 plans were re-checked (thirty-ninth session, `plans`).
#   m1k57 shows k = 3 gate/up at M = 1 slower than k = 4 (4.39 vs 4.25 us, 64 % of SOL) on 16-column groups: 320
#   groups are 2.4 an SM, so a third of the SMs carry a third group; the 640 8-column groups of k = 4 are 4.85 an SM.
# Expect: k = 3 gate/up M = 1 4.39 -> ~4.0-4.1 with c8 (k = 4's c8 gain on the H100 was -6 %); gate/up M = 2 / 4 at
#   k = 3 / 4 -3..-5 %; k = 2 (quad table), Q / linear value (256 groups, even already) and the 128-group shapes at
#   k = 2 equal or slower, as on the H100.  A cell >= 3 % faster in both passes changes the plan rule.
if [ "$STEP" = c8 ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  AB_NOBASE=1 KS=2,3,4 MS=1,2,4 SHAPES=gateup,down,Q,O,KV,lin_key,lin_value AB_PLANS="c8:c8=1;n8:c8=0" CUT=220 \
    gemv_ab_twice c8_58 260
  finish_run run58
fi
# Result (c8, H200, `gemv_c8_58_{1,2}.log`, two passes): k = 3 gate/up M = 1 4.38 / 4.40 -> 4.17 / 4.19 us with c8,
#   M = 2 4.43 / 4.46 -> 4.26 / 4.28, M = 4 4.68 / 4.69 -> 4.78 / 4.72: kept (gemv.plan: gate/up-wide k = 3 at M <= 2).
#   Under the 3 % bar, both passes alike: k = 4 gate/up M = 2 4.61 / 4.66 -> 4.54 / 4.56, k = 4 linear key M = 1 2.72 ->
#   2.66; k = 3 down / O / linear key at M = 2 -1..-3 %.  k = 2: c8 slower everywhere (gate/up M = 1 3.44 -> 3.77), as
#   on the H100.  The 16-column alternative (n8) slower wherever the plan has c8 (KV 1.81 -> 2.07).
# STEP=knobs: the rest of the decode GEMV's plan knobs fitted on the H100 (accumulator chains, the late ring fill,
#   the safe-mode prefetch depth, warps) against the plan on the H200, k = 2 / 3 / 4, M = 1 / 2 / 4, seven shapes, two
#   passes.  The forced warps also switch off c8 (plan), so on c8 cells they compare 16-column forms.
# Expect: the plan within ~2 % of the best column in most cells (the thirty-ninth session found k = 4 M = 1 settled);
#   a knob >= 3 % faster in both passes over a family of cells (a k, an M, a group count) changes the rule.
if [ "$STEP" = knobs ]; then
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  AB_NOBASE=1 KS=2,3,4 MS=1,2,4 SHAPES=gateup,down,Q,O,KV,lin_key,lin_value CUT=260 \
    AB_PLANS="d0:dual=0;d1:dual=1;l0:late=0;l1:late=1;pf1:pf=1;pf2:pf=2;w4:warps=4;w8:warps=8;w16:warps=16" \
    gemv_ab_twice knobs58 280
  finish_run run58
fi
