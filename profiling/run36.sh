#!/usr/bin/env bash
# Prepared in the twenty-ninth session (2026-11-27) for the next one.  From the repo root:
#   OUT=/tmp/out STEP=gtrace bash profiling/run36.sh      (kind nvidia-h100-x1; ~2 min)
. profiling/run_env.sh
start_run gtrace
RUN=36
# STEP=gtrace: issue 5's open question (NOTES.md, twenty-ninth session, section 5): the grouped GEMV's stable mode (pdl
#   3) is ~0.7 us a kernel faster than the default wait-first mode (pdl 1); the default mode with the stable mode's
#   pre-wait work (a checked guess of the ids) was not; the stable mode with its wait at entry was slower than the
#   default.  profiling/grouped_trace.py records each block's entry, wait passed, prologue, first weights and exit in
#   the graph of back-to-back launches (the last launch), for the modes wait / stable / plain.  What to look for:
#   whether the stable mode's blocks pass their wait earlier after the previous launch (entry -> wait passed, wait
#   passed from the first entry), or reach their weights sooner after it (wait passed -> first step-0 weights).
#   A second run with OPTS="-DKBIT_GROUPED_SAFE_EARLY_WAITFIRST" (the stable path waiting at entry) for comparison.
if [ "$STEP" = gtrace ]; then
  for sh in moe_dn moe_gu_fused; do
    SHAPE=$sh E=8 M=1 timeout 120 python3 profiling/grouped_trace.py > "$W/gtrace36_$sh.log" 2>&1
    cat "$W/gtrace36_$sh.log"
  done
  SHAPE=moe_dn E=8 M=1 MODES=stable OPTS="-DKBIT_GROUPED_SAFE_EARLY_WAITFIRST" timeout 120 \
    python3 profiling/grouped_trace.py > "$W/gtrace36_swf.log" 2>&1
  cat "$W/gtrace36_swf.log"
fi
finish_run run36
