#!/usr/bin/env bash
# ncu cross-check of the benchmark's graph timing (MEASURING.md): per call, the sum of every
# kernel that call launches, cold caches (--cache-control all), clocks not locked; beside it
# the harness's cold-L2 graph time for the same cell.  The two should agree within ~10 %.
#
#   bash profiling/ncu_check.sh                                  # gateup down Q O KV, k=4, M=1
#   SHAPES="gateup KV" KS="2 4" MS="1 4" COLUMN=GEMV CALLS=10 bash profiling/ncu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SHAPES=${SHAPES:-"gateup down Q O KV"}
KS=${KS:-4}
MS=${MS:-1}
CALLS=${CALLS:-10}
COLUMN=${COLUMN:-matmul}
PY=${PYTHON:-python}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
[ -x "$NCU" ] || { echo "ncu not found; set NCU=/path/to/ncu" >&2; exit 1; }
export LC_ALL=C  # '.' as decimal point in ncu's CSV

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=()
for s in $SHAPES; do
  for k in $KS; do
    for m in $MS; do
      log="$tmp/${s}_k${k}_M${m}.csv"
      echo "== $s k=$k M=$m ($COLUMN)" >&2
      "$NCU" --clock-control none --cache-control all --profile-from-start off \
        --metrics gpu__time_duration.sum --csv --log-file "$log" \
        "$PY" profiling/ncu_driver.py --shape "$s" --k "$k" --M "$m" --calls "$CALLS" --column "$COLUMN" >/dev/null
      ncu_us=$("$PY" profiling/ncu_driver.py --parse "$log" --calls "$CALLS" --quiet)
      graph_us=$("$PY" profiling/ncu_driver.py --shape "$s" --k "$k" --M "$m" --column "$COLUMN" --graph --quiet)
      rows+=("$(awk -v s="$s" -v k="$k" -v m="$m" -v n="$ncu_us" -v g="$graph_us" \
        'BEGIN { printf "%-10s %2s %3s %10.2f %10.2f %9.2f", s, k, m, n, g, n / g }')")
    done
  done
done
printf "%-10s %2s %3s %10s %10s %9s\n" shape k M ncu_us graph_us ncu/graph
printf "%s\n" "${rows[@]}"
