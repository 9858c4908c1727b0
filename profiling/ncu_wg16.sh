#!/usr/bin/env bash
# Sixteenth session: ncu of the wgmma kernels where they miss their targets -- grouped gate/up at 64 tokens
# per expert (8 experts), dense gate/up at M = 128 and M = 16 (k = 4): speed of light, pipe utilisation,
# issue slots, warp stall reasons.  usage (GPU machine): OUT=dir bash profiling/ncu_wg16.sh
. profiling/run_env.sh
start_run ncu
SECS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section InstructionStats"
m=""; for r in long_scoreboard short_scoreboard mio_throttle lg_throttle barrier wait math_pipe_throttle not_selected selected dispatch_stall no_instruction branch_resolving membar sleeping tex_throttle drain misc; do
  m="$m,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
m="$m,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,lts__t_bytes.sum,dram__bytes_read.sum,gpu__time_duration.sum"
run() {  # tag kregex command...
  local tag=$1 kre=$2; shift 2
  timeout 120 ncu --clock-control none --cache-control all -k regex:$kre --launch-skip 2 --launch-count 1 $SECS "$@" > "$W/ncu_$tag.txt" 2>&1
  timeout 120 ncu --clock-control none --cache-control all -k regex:$kre --launch-skip 2 --launch-count 1 --metrics "${m#,}" "$@" > "$W/ncu_m_$tag.txt" 2>&1
  echo "== $tag"; grep -E "Duration|Issue Slots Busy|Issued Ipc Active|No Eligible|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" "$W/ncu_$tag.txt" | head -9
  grep -E "stalled|pct|sum" "$W/ncu_m_$tag.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '{print $1, $(NF)}' | sort -k2 -rn | head -16
}
ONE=8,64,1024,2048,4 run g64 kbit_wgmma_grouped python3 profiling/ncu_grouped.py
ONE=gateup,4,128, ONE_WG=1 run d128 '^kbit_wgmma$' python3 profiling/gemm_probe.py
ONE=gateup,4,16, ONE_WG=1 run d16 '^kbit_wgmma$' python3 profiling/gemm_probe.py
tar -czf "$OUT/ncu16.tgz" -C "$W" . && rm -rf "$W"
