# Sourced by the profiling/*_run*.sh device scripts: output folder, import path, CuPy cache.
set -u
OUT=${OUT:-/tmp/kbit_out}
mkdir -p "$OUT"
export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
# gpu_tests LOG TIMEOUT [pytest args]: GPU tests into LOG, headed by GPU, date and command; prints the summary.
gpu_tests() {
  local log=$1 t=$2; shift 2
  echo "# $GPU, $(date -I): pytest -q -m gpu $*" > "$log"
  timeout "$t" python3 -m pytest -q -m gpu "$@" >> "$log" 2>&1
  tail -1 "$log"
}
# gpu_suite A|B|C LOG: the whole GPU suite in three parts (each fits one 600 s device call cold; on an H200 A ~380 s,
# B + C was ~560 s and outgrew one call at 414 tests) into LOG; prints the summary and any failure.
gpu_suite() {
  if [ "$1" = A ]; then
    gpu_tests "$2" 560 -rs tests/test_devices_gpu.py tests/test_gemv_gpu.py tests/test_checks_gpu.py tests/test_gemm_gpu.py \
      tests/test_quantize_gpu.py tests/test_bench.py tests/test_torch_ops.py
  elif [ "$1" = B ]; then
    gpu_tests "$2" 560 tests/test_wgmma_gpu.py tests/test_grouped_gpu.py
  else
    gpu_tests "$2" 560 tests/test_pdl_gpu.py tests/test_layers_gpu.py tests/test_launch_gpu.py tests/test_gemv_stream_gpu.py
  fi
  grep -E "^E  |FAILED" "$2" | head -20
}
# memcheck FILE: compute-sanitizer memcheck over profiling/sanitize_driver.py into FILE; prints the verdict.
memcheck() {
  compute-sanitizer --tool memcheck --error-exitcode 3 python3 profiling/sanitize_driver.py > "$1" 2>&1
  echo "memcheck: exit $? ($(grep -c 'rel err' "$1") checks; $(grep -E 'ERROR SUMMARY|BAD' "$1" | tr '\n' ' '))"
}
# start_run DEFAULT_STEP: W (work folder under $OUT), GPU (its name), STEP (default DEFAULT_STEP); prints
# and keeps the run's header (GPU, date, git revision from .git_rev, step).
start_run() {
  W=$OUT/work; mkdir -p "$W"
  GPU=$(python3 -c "import cupy as c; print(c.cuda.runtime.getDeviceProperties(0)['name'].decode())")
  STEP=${STEP:-$1}
  echo "# $GPU, $(date -I), git $(cat .git_rev 2>/dev/null || echo '?'), STEP=$STEP" | tee "$W/header.txt"
}
# moe_wg LOG TIMEOUT VARIANTS: profiling/moe_ab.py with only the grouped wgmma columns VARIANTS (its MOE_WG;
# MS / ES / KS / SHAPES from the environment) into LOG; prints the table.
moe_wg() {
  MOE_GEMV=0 MOE_MMA=0 MOE_WG="$3" timeout "$2" python3 profiling/moe_ab.py --out "$W" > "$1" 2>&1
  grep -vE "^\s*$" "$1" | tail -16
}
# final_tables TAG: the dense table M = 16..128 (k = 4; STREAM, WGMMA, dq+cuBLAS, matmul, matmul+PDL) tagged TAG
# and the MoE table (1..64 tokens per expert) tagged moe-TAG into $W; prints their TOTAL rows.
final_tables() {
  timeout 110 python3 profiling/bench.py --out "$W" --M 16,32,64,128 --k 4 \
      --columns STREAM,WGMMA,dq+cuBLAS,matmul,matmul+PDL --reps 15 --tag "$1" > "$W/bench.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench.log"
  timeout 110 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 \
      --columns Grouped,g-WGMMA,Grouped+PDL --reps 15 --tag "moe-$1" > "$W/bench_moe.log" 2>&1
  grep -E "TOTAL" "$W/bench_moe.log" | head -20
}
# sanitize TOOL FILE TIMEOUT SCRIPT: compute-sanitizer --tool TOOL over python3 SCRIPT into FILE; prints the verdict.
sanitize() {
  timeout "$3" compute-sanitizer --tool "$1" --error-exitcode 3 python3 "$4" > "$2" 2>&1
  echo "$1 $4: exit $? ($(grep -c 'rel err' "$2") checks; $(grep -E 'SUMMARY|BAD' "$2" | tr '\n' ' '))"
}
# wgmma A/B helpers (run33.sh, run34.sh).  wg_arm TAG OPTS MS LABEL: bench.py's WGMMA column (k = $KS, default 4;
# the five dense shapes; M = MS) built with KBIT_WGMMA_OPTS=OPTS, tagged TAG, log $W/bench_TAG.log; prints LABEL,
# then each M's shape times (shape, time) on one line.
wg_arm() {
  KBIT_WGMMA_OPTS="$2" timeout 100 python3 profiling/bench.py --out "$W" --M "$3" --k "${KS:-4}" --columns WGMMA \
    --shapes gateup,down,Q,O,KV --reps 15 --tag "$1" > "$W/bench_$1.log" 2>&1
  echo "$4"; grep -E "^### M|^\| (gateup|down|Q|O|KV|TOTAL) \| [2-5] " "$W/bench_$1.log" | awk -F'|' '{printf "%s%s%s", $2, $3, $4} /###/{print ""} END{print ""}'
}
# ab_passes NAME HOOK [BASE]: two alternations of the build with BASE options (default none) and with HOOK (arm
# NAME), M = ${MS:-16,32,64,128,256}, tagged NAME$RUN-ARM-PASS.
ab_passes() {
  for pass in 1 2; do
    for arm in base "$1"; do
      wg_arm "${1}${RUN:-}-$arm-$pass" "$([ "$arm" = base ] && echo "${3:-}" || echo "$2")" "${MS:-16,32,64,128,256}" \
        "## $arm pass $pass"
    done
  done
}
# hook_tests NAME HOOK TIMEOUT: the wgmma GPU tests with KBIT_WGMMA_OPTS=HOOK into $W/gpu_tests_NAME_$RUN.log.
hook_tests() {
  (export KBIT_WGMMA_OPTS=$2
   python3 profiling/warm_cache.py wgmma 2>&1 | tail -1
   gpu_tests "$W/gpu_tests_$1_${RUN:-}.log" "$3" tests/test_wgmma_gpu.py
   grep -E "^E  |FAILED" "$W/gpu_tests_$1_${RUN:-}.log" | head -10)
}
# m1_table NAME: the dense M = 1 / 4 table (k = 2..5, matmul and matmul+PDL) tagged NAME-m1; prints its TOTAL rows.
m1_table() {
  timeout 110 python3 profiling/bench.py --out "$W" --M 1,4 --k 2,3,4,5 --columns matmul,matmul+PDL --reps 15 \
      --tag "$1-m1" > "$W/bench_$1.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_$1.log"
}
# finish_run PREFIX: pack the step's work folder into $OUT/PREFIX_$STEP.tgz (what the device tool brings back).
finish_run() {
  tar -czf "$OUT/$1_$STEP.tgz" -C "$W" . && rm -rf "$W"
}
# tree_bench DIR NAME DEST TAG [bench.py args]: profiling/bench.py of the package tree DIR (its own import path and
# kernel cache, warmed for the families in $WARM -- none: not warmed, compiled as used; timeout $AB_TIMEOUT) into
# tables tagged TAG-NAME and the log DEST/TAG_NAME.log.  Same-run A/Bs of whole trees (tree_ab.sh, the run scripts'
# tree steps).
tree_bench() {
  local d=$1 n=$2 dest=$3 tag=$4
  shift 4
  (cd "$d" && export PYTHONPATH=$(pwd) KBITCUPY_CACHE_DIR=/tmp/kbit_cache_$n
   [ "${WARM:-}" = none ] || python3 profiling/warm_cache.py ${WARM:-} 2>&1 | tail -1
   timeout "${AB_TIMEOUT:-200}" python3 profiling/bench.py "$@" --out "$dest" --tag "$tag-$n" > "$dest/${tag}_$n.log" 2>&1)
}
# dense_closing TAG TIMEOUT: the dense closing table (k = 4, M = 16..128; STREAM, WGMMA, dq+cuBLAS, matmul,
# matmul+PDL) tagged TAG into $W/bench_TAG.log; prints its TOTAL rows.  moe_closing TAG TIMEOUT: the MoE one (k = 4,
# 8 / 10 experts, 1..64 tokens; Grouped, Grouped:stable, Grouped+PDL); prints the "as moe_forward" lines.
dense_closing() {
  timeout "$2" python3 profiling/bench.py --out "$W" --M 16,32,64,128 --k 4 \
    --columns STREAM,WGMMA,dq+cuBLAS,matmul,matmul+PDL --reps 15 --tag "$1" > "$W/bench_$1.log" 2>&1
  grep -E "^### M|TOTAL" "$W/bench_$1.log"
}
moe_closing() {
  timeout "$2" python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4,16,32,64 --experts 8,10 \
    --columns Grouped,Grouped:stable,Grouped+PDL --reps 15 --tag "$1" > "$W/bench_$1.log" 2>&1
  grep -E "as moe_forward" "$W/bench_$1.log" | head -40
}

# gemv_ab_twice NAME TIMEOUT: profiling/gemv_ab.py (its SHAPES / KS / MS / AB_* from the environment) twice, logs
# $W/gemv_NAME_1.log and _2.log; prints each pass's rows (cut at $CUT, default 200 columns).
gemv_ab_twice() {
  for pass in 1 2; do
    timeout "$2" python3 profiling/gemv_ab.py --out "$W" > "$W/gemv_$1_$pass.log" 2>&1
    echo "## pass $pass"; grep -vE "^\s*$" "$W/gemv_$1_$pass.log" | cut -c1-"${CUT:-200}" | tail -30
  done
}
# gemm_ab_log NAME TIMEOUT: profiling/gemm_ab.py (its SHAPES / KS / MS / GAB_* from the environment) into
# $W/gemm_ab_NAME.log; prints it.
gemm_ab_log() {
  timeout "$2" python3 profiling/gemm_ab.py --out "$W" > "$W/gemm_ab_$1.log" 2>&1
  cat "$W/gemm_ab_$1.log"
}
# moe_ab_twice NAME TIMEOUT: profiling/moe_ab.py (its SHAPES / KS / MS / ES / MOE_* from the environment) twice, logs
# $W/moe_NAME_1.log and _2.log; prints each pass's table (cut at $CUT, default 200 columns).
moe_ab_twice() {
  for pass in 1 2; do
    timeout "$2" python3 profiling/moe_ab.py --out "$W" > "$W/moe_$1_$pass.log" 2>&1
    echo "## pass $pass"; grep -vE "^\s*$" "$W/moe_$1_$pass.log" | cut -c1-"${CUT:-200}" | tail -8
  done
}
# dense_checks TESTS MEMCHECK [T_TESTS T_MEMCHECK]: the decode GEMV's GPU tests into $W/gpu_tests_TESTS.log and memcheck
# over sanitize_c8.py into $W/memcheck_MEMCHECK.log (timeouts default 200 / 100 s).
dense_checks() {
  python3 profiling/warm_cache.py gemv 2>&1 | tail -1
  gpu_tests "$W/gpu_tests_$1.log" "${3:-200}" tests/test_gemv_gpu.py
  grep -E "^E  |FAILED" "$W/gpu_tests_$1.log" | head
  sanitize memcheck "$W/memcheck_$2.log" "${4:-100}" profiling/sanitize_c8.py
}
# ab_trees NAME WARM ARGS...: bench.py of this tree (new) and of the previous tree copied to ab_prev/tree (carried to the
# device: old), tagged NAME-new / NAME-old, logs $W/NAME_{new,old}.log; prints the TOTAL rows, the "as moe_forward" lines
# and the 4-token down rows.  Same-run A/Bs of whole trees (run40.sh, run41.sh).
ab_trees() {
  local name=$1 warm=$2
  shift 2
  for t in new:$(pwd) old:$(pwd)/ab_prev/tree; do
    WARM="$warm" AB_TIMEOUT=${AB_TIMEOUT:-150} tree_bench "${t#*:}" "${t%%:*}" "$W" "$name" "$@"
    echo "== ${t%%:*}"; grep -E "^### M|^\| TOTAL|as moe_forward|^\| moe_dn \| (8|10) \| 4 " "$W/${name}_${t%%:*}.log" | head -30
  done
}
# env_ab VAR ON TAG KS: two alternations, process level, of an environment hook (off: VAR=0, on: VAR=ON) over
# bench.py's dense M = 1 / 4 table (k = KS; gate/up, down, Q, O, KV) and its MoE one (k = 4, 8 / 10 experts, 1 / 4
# tokens), tagged TAG-{off,on}-PASS and TAGmoe-...; prints each run's shape and TOTAL rows on one line (run40.sh r256,
# run41.sh apad).
env_ab() {
  local var=$1 on=$2 tag=$3 ks=$4
  for pass in 1 2; do
    for arm in off on; do
      export "$var=$([ $arm = on ] && echo "$on" || echo 0)"
      timeout 100 python3 profiling/bench.py --out "$W" --M 1,4 --k "$ks" --columns matmul --shapes gateup,down,Q,O,KV \
        --reps 15 --tag "$tag-$arm-$pass" > "$W/${tag}_$arm$pass.log" 2>&1
      timeout 100 python3 profiling/bench.py --out "$W" --shapes moe --k 4 --moe-M 1,4 --experts 8,10 \
        --columns Grouped,Grouped:stable --reps 15 --tag "${tag}moe-$arm-$pass" > "$W/${tag}moe_$arm$pass.log" 2>&1
      echo "## $arm $pass"; grep -E "^\| (gateup|down|Q|O|KV|TOTAL) \| [2-5] \||^\| moe_(dn|gu_fused) \|" \
        "$W/${tag}_$arm$pass.log" "$W/${tag}moe_$arm$pass.log" | cut -d'|' -f2-7 | tr '\n' ';'; echo
    done
  done
  unset "$var"
}
# ksweep_summary LOG: profiling/gemm_probe.py's wgmma sweep LOG, one line a cell: the plan's time, the fastest variant
# and by how much (run48.sh / run56.sh sweep).
ksweep_summary() {
  python3 - "$1" <<'PY'
import re, sys
for line in open(sys.argv[1]):
    m = re.match(r"(\S+)\s+k=(\d) M=\s*(\d+) (.*)", line)
    if not m:
        continue
    cells = dict(re.findall(r"(wg[^=\s]*)=\s*([\d.]+)!?", m.group(4)))
    base = float(cells.pop("wg"))
    best = min(cells.items(), key=lambda kv: float(kv[1]))
    print(f"{m.group(1):9} M={m.group(3):3} plan {base:6.2f}  best {best[0]:14} {float(best[1]):6.2f}  "
          f"({(float(best[1]) / base - 1) * 100:+.1f} %)")
PY
}
