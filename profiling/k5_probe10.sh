#!/usr/bin/env bash
# Tenth session: where k = 5's extra time goes on the decode GEMV (stage removal at k = 4 and 5),
# and the k = 5 pair-table copies (KBIT_K5_LOG2_COPIES 3 / 4 / 5 = 8 / 16 / 32 copies; 32 copies =
# 128 KB, conflict-free lookups) on the GEMV and the streaming GEMV at M = 1, 2, 4.
#   OUT=/tmp/out bash profiling/k5_probe10.sh
. profiling/run_env.sh
python3 profiling/gemv_stages.py --k 4,5 --shapes gateup,down,Q > "$OUT/stages.log" 2>&1
KBIT_K5_LOG2_COPIES=5 python3 profiling/gemv_stages.py --k 5 --shapes gateup,down,Q > "$OUT/stages_c5.log" 2>&1
cat "$OUT/stages.log" "$OUT/stages_c5.log"
for c in 4 3 5; do
  KBIT_K5_LOG2_COPIES=$c python3 profiling/bench.py --out "$OUT" --shapes gateup,down,Q,O,KV --k 5 --M 1,2,4 \
      --columns GEMV,STREAM,GEMV+PDL,STREAM+PDL --reps 15 --tag k5-copies$c > "$OUT/k5_$c.log" 2>&1
  echo "KBIT_K5_LOG2_COPIES=$c"; grep -E "^### M|^\| (gateup|down|Q|O|KV|TOTAL) " "$OUT/k5_$c.log"
done
