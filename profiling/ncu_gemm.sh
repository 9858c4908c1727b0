#!/usr/bin/env bash
# ncu of one fused-GEMM launch (profiling/gemm_probe.py ONE=...): speed of light, occupancy,
# warp stall reasons and the top stall sites in SASS.  usage:
#   OUT=dir ONE="gateup,4,16,1" KREGEX=kbit_gemm bash profiling/ncu_gemm.sh
set -u
OUT=${OUT:-/tmp/kbit_out}; mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
tag=$(echo "$ONE" | tr ',' '_')
ncu --clock-control none --cache-control all -k regex:${KREGEX:-kbit_gemm} --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section SourceCounters \
    python3 profiling/gemm_probe.py > "$OUT/ncu_$tag.txt" 2>&1
grep -E "Duration|Throughput|Achieved Occupancy|Registers|Stall|Warp Cycles Per Issued|Issued Ipc|Eligible|No Eligible|Block Limit|Waves|L2 Hit|Mem Busy|Max Bandwidth" "$OUT/ncu_$tag.txt" | head -40
m=""; for r in long_scoreboard short_scoreboard mio_throttle lg_throttle barrier wait math_pipe_throttle not_selected selected dispatch_stall no_instruction branch_resolving membar sleeping tex_throttle drain imc_miss misc; do
  m="$m,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
ncu --clock-control none --cache-control all -k regex:${KREGEX:-kbit_gemm} --launch-skip 2 --launch-count 1 --metrics "${m#,}" \
    python3 profiling/gemm_probe.py > "$OUT/ncu_stalls_$tag.txt" 2>&1
grep -E "stalled" "$OUT/ncu_stalls_$tag.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | sort -k3 -rn | head -12
