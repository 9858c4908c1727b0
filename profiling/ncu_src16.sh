#!/usr/bin/env bash
# Sixteenth session: per-SASS warp-state samples of the grouped wgmma kernel (gate/up, 8 experts x 64 tokens,
# k = 4) and the dense one at M = 16 (gate/up): the report's source page as CSV, parsed here with
# profiling/ncu_src_top.py.  usage (GPU machine): OUT=dir bash profiling/ncu_src16.sh
. profiling/run_env.sh
start_run src
src() {  # tag kregex command...
  local tag=$1 kre=$2; shift 2
  timeout 150 ncu --clock-control none --cache-control all -k regex:$kre --launch-skip 2 --launch-count 1 \
      --section WarpStateStats --section SourceCounters -o "$W/rep_$tag" "$@" > "$W/ncu_src_$tag.log" 2>&1
  ncu -i "$W/rep_$tag.ncu-rep" --page source --print-source sass --csv > "$W/src_$tag.csv" 2>&1
  echo "== $tag: $(wc -l < "$W/src_$tag.csv") rows"
}
ONE=8,64,1024,2048,4 src g64 kbit_wgmma_grouped python3 profiling/ncu_grouped.py
ONE=gateup,4,16, ONE_WG=1 src d16 '^kbit_wgmma$' python3 profiling/gemm_probe.py
rm -f "$W"/*.ncu-rep
tar -czf "$OUT/ncu_src16.tgz" -C "$W" . && rm -rf "$W"
