#!/usr/bin/env bash
# Issue 19 stress run, on the device after a build into $BUILD_DIR (tools/gpu/check.sh builds
# build-gpu; CHECK_BENCH=0 CHECK_PYTEST=0 keeps that short):
#   1. every test program with CUDA cases, STRESS_REPEAT runs each (until its first failure),
#      STRESS_JOBS processes at once, beside STRESS_LOAD background GPU load processes
#      (tools/gpu/gpu_load.cu, built here with nvcc), so that the GPU is time-sliced between
#      processes as under `ctest -j`;
#   2. compute-sanitizer memcheck, racecheck, synccheck and initcheck on the grouped quantize
#      programs (gtest filters: the graph replays and one split sweep per kernel family).
# Prints one line per program and per (tool, program); logs under $OUT/stress. Exit status 1
# when a run failed, a program did not reach its repeats, or a tool reported errors.
# With the defaults it ends within ~7.5 minutes on an H200 (phase 1 stops starting runs after
# STRESS_SECONDS; a run still going is killed STRESS_GRACE seconds later).
#
# Device calls (the build and the stress run do not fit one 10-minute call together; build-gpu
# stays on the warm machine between calls):
#   run(command="CHECK_TESTS=0 CHECK_BENCH=0 CHECK_PYTEST=0 bash tools/gpu/check.sh", carry=[".gpu-deps"])
#   run(command="bash tools/gpu/stress.sh", carry=[".gpu-deps"])
# Environment (defaults):
#   BUILD_DIR (<repo>/build-gpu)  OUT (/tmp/tessera-out)
#   STRESS_REPEAT (20)  STRESS_JOBS (8)  STRESS_SECONDS (200)  STRESS_GRACE (20)
#   STRESS_LOAD (2) load processes, 0 = none; STRESS_LOAD_MS (5) duration of one load kernel
#   STRESS_PROGRAMS (every program with CUDA cases, below)  STRESS_GTEST_FILTER (*)
#   STRESS_SUBSET (1): TESSERA_TEST_SUBSET=1 in phase 1 (fewer shapes and dtypes in the quantize
#     programs, every kernel path kept; 0 runs their full sweeps, which takes longer)
#   SANITIZE (1)  SANITIZE_TOOLS (memcheck racecheck synccheck initcheck)
#   SANITIZE_SECONDS (25) per (tool, program)  SANITIZE_QUANT_FILTER  SANITIZE_RECIPES_FILTER
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
export BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
export OUT="${OUT:-/tmp/tessera-out}"
SD="$OUT/stress"
if [ ! -d "$BUILD_DIR/tests" ]; then
  echo "stress.sh: no test build in $BUILD_DIR; build first (CHECK_TESTS=0 CHECK_BENCH=0" \
    "CHECK_PYTEST=0 bash tools/gpu/check.sh builds build-gpu)"
  exit 2
fi
rm -rf "$SD"
mkdir -p "$SD"
export SD
[ -f "$ROOT/tools/gpu/device_env.sh" ] && source "$ROOT/tools/gpu/device_env.sh"
export STRESS_REPEAT="${STRESS_REPEAT:-20}"
JOBS="${STRESS_JOBS:-8}"
LOAD="${STRESS_LOAD:-2}"
export STRESS_GRACE="${STRESS_GRACE:-20}"
export STRESS_GTEST_FILTER="${STRESS_GTEST_FILTER:-*}"
[ "${STRESS_SUBSET:-1}" = 1 ] && export TESSERA_TEST_SUBSET=1
t_start=$(date +%s)
export DEADLINE=$(( t_start + ${STRESS_SECONDS:-200} ))
# Longest first (the grouped quantize programs, which failed under load), then the rest.
PROGRAMS="${STRESS_PROGRAMS:-test_grouped_recipes_cuda test_grouped_quantize_cuda test_quantize_cuda \
test_grouped_cuda test_scan test_token_padding test_grouped_gemm_sm90_graph test_grouped_nn_cuda \
test_grouped_gemm_cuda_api test_grouped_gemm_cuda_fp8 test_grouped_gemm_sm90 test_fp8_operand_map \
test_core test_formats}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1
status=0

program_path() { find "$BUILD_DIR/tests" -maxdepth 2 -type f -perm -u+x -name "$1" | head -1; }
export -f program_path

# One run of program $1 (repeat $2); appends "pass|fail|kill|skip <ms> ..." to $SD/$1.runs
# (kill: timed out at the deadline or hung; skip: not started, past the deadline). Once a run of
# the program has failed (marker $SD/$1.fail) its later runs are not started (until-fail).
stress_run() {
  local name=$1 i=$2
  [ -e "$SD/$name.fail" ] && return 0
  local left=$(( DEADLINE - $(date +%s) ))
  if [ "$left" -le 0 ]; then echo "skip 0" >> "$SD/$name.runs"; return 0; fi
  local exe log="$SD/$name.$i.log" t0 rc ms
  exe=$(program_path "$name")
  t0=$(date +%s%N)
  (cd "$(dirname "$exe")" && exec timeout "$(( left + STRESS_GRACE ))" "$exe" \
     --gtest_filter="$STRESS_GTEST_FILTER") > "$log" 2>&1
  rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ "$rc" -eq 0 ]; then
    echo "pass $ms" >> "$SD/$name.runs"
    [ -e "$SD/$name.pass.log" ] || mv "$log" "$SD/$name.pass.log"
    rm -f "$log"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then  # killed at the deadline (or hung)
    echo "kill $ms run=$i" >> "$SD/$name.runs"
    mv "$log" "$SD/$name.kill.$i.log"
  else
    echo "fail $ms rc=$rc run=$i" >> "$SD/$name.runs"
    touch "$SD/$name.fail"
    mv "$log" "$SD/$name.fail.$i.log"
  fi
}
export -f stress_run

# ---- background load ----------------------------------------------------------------------
load_pids=()
stop_load() {
  for p in "${load_pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${load_pids[@]}"; do wait "$p" 2>/dev/null; done
  load_pids=()
}
trap stop_load EXIT
LOADER="$BUILD_DIR/gpu_load"
if [ "$LOAD" -gt 0 ]; then
  if nvcc -O2 -arch=sm_90 -o "$LOADER" "$ROOT/tools/gpu/gpu_load.cu" > "$SD/gpu_load_build.log" 2>&1; then
    for ((k = 0; k < LOAD; ++k)); do
      "$LOADER" $(( ${STRESS_SECONDS:-200} + STRESS_GRACE + 30 )) "${STRESS_LOAD_MS:-5}" 256 \
        > "$SD/gpu_load_$k.log" 2>&1 &
      load_pids+=($!)
    done
  else
    echo "WARNING: gpu_load did not build (see $SD/gpu_load_build.log): no background load"
    status=1
  fi
fi

# ---- phase 1: repeated runs under load -----------------------------------------------------
missing=()
present=()
for p in $PROGRAMS; do
  if [ -n "$(program_path "$p")" ]; then present+=("$p"); else missing+=("$p"); fi
done
( sleep 20; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader \
    > "$SD/utilization.txt" 2>&1 ) &
util_pid=$!
# Runs in round-robin order (repeat 1 of every program, then repeat 2, ...), so that the slots
# stay busy and several copies of a long program run at once.
for ((i = 1; i <= STRESS_REPEAT; ++i)); do
  for p in "${present[@]}"; do echo "$p $i"; done
done | xargs -P "$JOBS" -n 2 bash -c 'stress_run "$0" "$1"'
stop_load
kill "$util_pid" 2>/dev/null
wait "$util_pid" 2>/dev/null
echo "stress: ${#present[@]} programs x $STRESS_REPEAT runs, $JOBS at once, $LOAD load" \
  "processes, subset=${TESSERA_TEST_SUBSET:-0}; $(( $(date +%s) - t_start )) s;" \
  "GPU 20 s in: $(cat "$SD/utilization.txt" 2>/dev/null | tr "\n" " ")"
for p in "${present[@]}"; do
  runs="$SD/$p.runs"
  pass=$(grep -c '^pass' "$runs" 2>/dev/null)
  fail=$(grep -c '^fail' "$runs" 2>/dev/null)
  mean=$(awk '$1 == "pass" { s += $2; n++ } END { if (n) printf "%.1f", s / n / 1000; else print "-" }' \
         "$runs" 2>/dev/null)
  killed=$(grep -c '^kill' "$runs" 2>/dev/null)
  tests=$(grep -E '^\[  (PASSED|SKIPPED) ' "$SD/$p.pass.log" 2>/dev/null | tr -s ' ' | tr '\n' ' ')
  if [ "${fail:-0}" -gt 0 ]; then
    flog=$(ls "$SD/$p".fail.*.log | head -1)
    echo "  FAIL $p: $pass passed, failed $(grep -m1 '^fail' "$runs" | cut -d' ' -f3-);" \
      "$(grep -m3 -E '^\[  FAILED  \]' "$flog" | sed 's/\[  FAILED  \] //' | tr '\n' ' ')log $flog"
    grep -m3 -E 'replay|vs CPU|Failure' "$flog" | sed 's/^/      /'
    status=1
  elif [ "${pass:-0}" -lt "$STRESS_REPEAT" ]; then
    echo "  INCOMPLETE $p: $pass/$STRESS_REPEAT passed before the deadline, ${killed:-0} killed" \
      "past it (mean ${mean} s) $tests"
    status=1
  else
    echo "  PASS $p: $pass/$STRESS_REPEAT (mean ${mean} s) $tests"
  fi
done
[ ${#missing[@]} -gt 0 ] && echo "  MISSING (not built): ${missing[*]}" && status=1
others=$(find "$BUILD_DIR/tests" -maxdepth 2 -type f -perm -u+x -name 'test_*' -printf '%f\n' \
         | sort | while read -r n; do [[ " $PROGRAMS " == *" $n "* ]] || echo -n "$n "; done)
echo "  not stressed (no CUDA cases): ${others:-none}"

# ---- phase 2: compute-sanitizer on the grouped quantize programs ---------------------------
if [ "${SANITIZE:-1}" = 1 ]; then
  CS="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  [ -x "$CS" ] || { echo "  sanitize: compute-sanitizer not found"; status=1; }
  QF="${SANITIZE_QUANT_FILTER:-*GraphReplays*:*SplitCases*/mxfp8_both:*SplitCases*/mxfp8_swizzled_both:*SplitCases*/fp8_rowwise}"
  RF="${SANITIZE_RECIPES_FILTER:-*GraphReplays*/block128x128_no_pow2_rowwise:*GraphReplays*/block128x128_both:*GraphReplays*/tensor_delayed_both:*GraphReplays*/rowwise_both:*GraphReplays*/nvfp4_rht_sr_both:*GraphReplays*/nvfp4_swizzled_sr_both:*GraphReplays*/tensor_current_both:*DeviceSplits*/block1x128_both}"
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
    for t in test_grouped_quantize_cuda test_grouped_recipes_cuda; do
      exe=$(program_path "$t")
      [ -n "$exe" ] || { echo "  sanitize $tool $t: MISSING"; status=1; continue; }
      filter=$QF
      [ "$t" = test_grouped_recipes_cuda ] && filter=$RF
      log="$SD/sanitize_${tool}_$t.log"
      TESSERA_TEST_SUBSET=1 timeout "${SANITIZE_SECONDS:-25}" "$CS" --tool "$tool" \
        --error-exitcode 9 "$exe" --gtest_filter="$filter" > "$log" 2>&1
      rc=$?
      verdict=$(grep -E '^\[  (PASSED|FAILED) |ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tr '\n' ' ')
      [ "$rc" -eq 124 ] && verdict="TIMEOUT after $(grep -cE '^\[       OK \]' "$log") tests ok $verdict"
      echo "  sanitize $tool $t: rc=$rc $verdict"
      [ "$rc" -eq 0 ] || status=1
    done
  done
fi
echo "stress.sh: done in $(( $(date +%s) - t_start )) s, status $status"
exit "$status"
