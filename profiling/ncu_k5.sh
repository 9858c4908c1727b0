#!/usr/bin/env bash
# Tenth session: ncu sections of one decode-GEMV launch, gate/up M = 1, k = 4 against k = 5 (why k = 5's
# loads alone take 5.9 us against 3.4 us SOL: profiling/gemv_stages.py).  Cold caches, clocks not locked.
#   OUT=/tmp/out bash profiling/ncu_k5.sh
. profiling/run_env.sh
for k in ${KS:-4 5}; do
  ncu --clock-control none --cache-control all --profile-from-start off \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
      --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
      --metrics l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,lts__t_sectors_srcunit_tex_op_read.sum,smsp__inst_executed.sum,dram__bytes_read.sum \
      --page details python3 profiling/ncu_driver.py --shape ${SHAPE:-gateup} --k $k --M 1 --calls 1 --column GEMV \
      > "$OUT/ncu_gemv_k$k.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Stall|l1tex__|lts__|dram__bytes|smsp__inst|Registers|Block Size|Grid Size" "$OUT/ncu_gemv_k$k.txt" | head -40
done
