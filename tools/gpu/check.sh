#!/usr/bin/env bash
# The one GPU call: unpack the carried build dependencies, build tessera for sm_90a, run every
# C++ test (the CUDA ones included), the Python tests, and the GPU benchmarks, then print a short
# summary table. Logs go to $OUT (the device tool brings them back).
#
# On this machine, first: bash tools/gpu/fetch_deps.sh   (downloads the .debs into .gpu-deps/)
# Then on the device:     run(command="bash tools/gpu/check.sh", carry=[".gpu-deps"])
# Options (environment): CHECK_TESTS=0 skips tests, CHECK_BENCH=0 skips benchmarks,
#   CHECK_FILTER=regex limits ctest, BENCH_FILTER=regex limits benchmarks, CHECK_PYTEST=0 skips
#   the Python tests (PYTEST_ARGS: extra pytest arguments, e.g. a file), CHECK_TRAIN=0 skips the
#   training-step benchmark (python -m tessera.bench train; TRAIN_ARGS: its options), CHECK_SUMS=0
#   skips the per-program GoogleTest counts, CHECK_TARGETS="t1 t2" builds only those targets
#   (with CHECK_FILTER / CHECK_BENCH=0 / CHECK_TRAIN=0 for a quick round). Wheels carried in .whl (torchao) are installed first.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/tessera-out}"
mkdir -p "$OUT"
summary=()

# ---- dependencies the device image lacks (GoogleTest, Google Benchmark, OpenBLAS) -----------
source "$ROOT/tools/gpu/device_env.sh"  # deps (.gpu-deps), LD_LIBRARY_PATH, PATH
if ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$ROOT"/.whl/*.whl && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"

# ---- build -------------------------------------------------------------------------------
t0=$(date +%s)
cmake -S . -B build-gpu "${GPU_CMAKE_FLAGS[@]}" -DTESSERA_BUILD_PYTHON=ON > "$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build-gpu -j "$(nproc)" ${CHECK_TARGETS:+--target $CHECK_TARGETS} > "$OUT/build.log" 2>&1 \
  || { grep -B2 -A12 -m3 "error" "$OUT/build.log"; exit 1; }
summary+=("build: ok in $(( $(date +%s) - t0 )) s")

# ---- tests -------------------------------------------------------------------------------
if [ "${CHECK_TESTS:-1}" = 1 ]; then
  ctest --test-dir build-gpu --output-on-failure ${CHECK_FILTER:+-R "$CHECK_FILTER"} > "$OUT/ctest.log" 2>&1
  grep -E "tests passed|Failed|Skipped|\*\*\*" "$OUT/ctest.log" | head -40
  summary+=("ctest: $(grep -E 'tests passed' "$OUT/ctest.log")")
  # Per-test counts of GoogleTest cases run/skipped (CUDA tests skip without a device).
  [ "${CHECK_SUMS:-1}" = 1 ] && for exe in build-gpu/tests/*/test_*; do
    [ -x "$exe" ] || continue
    case "$exe" in *.c|*.o) continue;; esac
    if [ -n "${CHECK_FILTER:-}" ] && ! [[ "$exe" =~ $CHECK_FILTER ]]; then continue; fi
    r=$("$exe" 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) " | tr '\n' ' ')
    summary+=("$(basename "$exe"): $r")
  done
  # Which C++ runtimes the Python process holds once tessera is imported (diagnostics).
  PYTHONPATH="$ROOT/build-gpu/python" python3 -c "import numpy, ml_dtypes, tessera; print('python C++ runtimes:', sorted({l.split()[-1] for l in open('/proc/self/maps') if 'stdc++' in l or 'libgcc_s' in l}))" 2>&1 | tail -1
  if [ "${CHECK_PYTEST:-1}" = 1 ] && python3 -c "import ml_dtypes, pytest" 2>/dev/null; then
    TESSERA_BUILD_DIR="$ROOT/build-gpu" python3 -m pytest -q -p no:logging ${PYTEST_ARGS:-tests/python} \
      > "$OUT/pytest.log" 2>&1
    grep -E "passed|failed|FAILED|Error" "$OUT/pytest.log" | tail -15
    summary+=("pytest: $(tail -1 "$OUT/pytest.log")")
  fi
fi

# ---- benchmarks ----------------------------------------------------------------------------
if [ "${CHECK_BENCH:-1}" = 1 ] && [ -d bench/gpu ]; then
  for b in bench/gpu/*.sh; do
    [ -f "$b" ] || continue
    if [ -n "${BENCH_FILTER:-}" ] && ! [[ "$b" =~ $BENCH_FILTER ]]; then continue; fi
    name=$(basename "$b" .sh)
    BUILD_DIR="$ROOT/build-gpu" bash "$b" > "$OUT/bench_$name.log" 2>&1
    summary+=("bench $name: rc=$? (table in bench_$name.log)")
    tail -40 "$OUT/bench_$name.log"
  done
fi

# ---- the training step through tessera.torch, next to torch and torchao --------------------
if [ "${CHECK_TRAIN:-1}" = 1 ]; then
  PYTHONPATH="$ROOT/build-gpu/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m tessera.bench train \
    ${TRAIN_ARGS:-} --json "$OUT/train.json" > "$OUT/train.log" 2>&1
  summary+=("bench train: rc=$? (table in train.log)")
  sed -n '/^| suite/,$p' "$OUT/train.log"
  grep -E "Error|error" "$OUT/train.log" | head -5
  # The same step through the public C++ API (no PyTorch): tessera bench train.
  build-gpu/tools/tessera bench train ${TRAIN_CPP_ARGS:-} > "$OUT/train_cpp.log" 2>&1
  summary+=("tessera bench train (C++): rc=$? (table in train_cpp.log)")
  cat "$OUT/train_cpp.log"
fi

echo
echo "================ summary ================"
for s in "${summary[@]}"; do echo "$s"; done
