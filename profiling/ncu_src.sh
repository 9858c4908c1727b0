#!/usr/bin/env bash
# Per-SASS-instruction executed counts and stall samples of one kbit kernel launch (ncu
# SourceCounters), for instruction budgets (profiling/sass_budget.py reads the CSV):
#   OUT=dir CELLS="STREAM,gateup,4,1 GEMV,gateup,4,1" bash profiling/ncu_src.sh  -> $OUT/src_<tag>.csv
set -u
OUT=${OUT:-/tmp/kbit_out}; mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
export LC_ALL=C
for cell in ${CELLS:-STREAM,gateup,4,1}; do
  IFS=, read -r col shape k m <<< "$cell"
  tag="${col}_${shape}_k${k}_M${m}"
  ncu --clock-control none --cache-control all --profile-from-start off --launch-count 1 \
      --section SourceCounters --section WarpStateStats --section SpeedOfLight --section SchedulerStats \
      -o "$OUT/src_$tag" -f \
      python3 profiling/ncu_driver.py --shape "$shape" --k "$k" --M "$m" --calls 1 --column "$col" > "$OUT/src_$tag.log" 2>&1
  ncu --import "$OUT/src_$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/src_$tag.csv" 2>&1
  ncu --import "$OUT/src_$tag.ncu-rep" --page details > "$OUT/src_${tag}_details.txt" 2>&1
  rm -f "$OUT/src_$tag.ncu-rep"
  echo "== $tag: $(grep -E '^ +Duration' "$OUT/src_${tag}_details.txt" | head -1)"
  head -c 600 "$OUT/src_$tag.csv"; echo
done
