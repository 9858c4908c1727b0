#!/usr/bin/env bash
# Per-SASS-instruction stall sampling of one wgmma GEMM launch (gemm_probe.py ONE=... ONE_WG=1):
#   OUT=dir ONE="gateup,4,32," bash profiling/ncu_wg_source.sh   -> $OUT/wg_src_<tag>.csv
set -u
OUT=${OUT:-/tmp/kbit_out}; mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
tag=$(echo "$ONE" | tr ',' '_')
ONE_WG=1 ncu --clock-control none --cache-control all -k regex:${KREGEX:-kbit_wgmma} --launch-skip 2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight -o "$OUT/wg_src_$tag" -f \
    python3 profiling/gemm_probe.py > "$OUT/wg_src_$tag.log" 2>&1
ncu --import "$OUT/wg_src_$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/wg_src_$tag.csv" 2>&1
ncu --import "$OUT/wg_src_$tag.ncu-rep" --page details > "$OUT/wg_src_${tag}_details.txt" 2>&1
rm -f "$OUT/wg_src_$tag.ncu-rep"
grep -E "Duration|Throughput" "$OUT/wg_src_${tag}_details.txt" | head -8
