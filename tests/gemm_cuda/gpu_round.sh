#!/usr/bin/env bash
# One GPU call of a GEMM tuning round, within a fixed time (ROUND_SECONDS, default 400): configure
# and build only what the grouped GEMM needs (the library, tests/gemm_cuda, the nn CUDA test) for
# sm_90a, run those tests, the grouped GEMM benchmark (bench/gpu/grouped_gemm.sh; GEMM_BENCH_*
# variables pass through, e.g. GEMM_BENCH_SWEEP=1), with ROUND_PROFILE=1 the ncu profile of
# tools/gpu/gemm_profile.sh (PROFILE_CASES), then compute-sanitizer (sanitize.sh) for the
# time left. Logs under $OUT. Run from the repository root on the device:
#   TESSERA_GPU_DEPS=<.gpu-deps> bash tests/gemm_cuda/gpu_round.sh
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/tessera-out}"
mkdir -p "$OUT"
t_start=$(date +%s)
left() { echo $(( ${ROUND_SECONDS:-400} - ($(date +%s) - t_start) )); }
source "$ROOT/tools/gpu/device_env.sh"  # deps (.gpu-deps), LD_LIBRARY_PATH, PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
cmake -S . -B build-gpu "${GPU_CMAKE_FLAGS[@]}" -DTESSERA_WERROR=ON -DTESSERA_BUILD_PYTHON=OFF \
  > "$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
TESTS="test_grouped_gemm_sm90 test_grouped_gemm_sm90_graph test_grouped_gemm_cuda_api test_grouped_gemm_cuda_fp8 test_grouped_gemm_cuda_a_row_starts test_fp8_operand_map test_grouped_nn_cuda"
# shellcheck disable=SC2086
cmake --build build-gpu -j "$(nproc)" --target tessera $TESTS > "$OUT/build.log" 2>&1 \
  || { grep -B2 -A12 -m3 -E "error|ptxas_guard" "$OUT/build.log"; exit 1; }
echo "build: ok at $(( $(date +%s) - t_start )) s"
for t in $TESTS; do
  exe=$(find build-gpu/tests -name "$t" -type f | head -1)
  timeout "${ROUND_TEST_SECONDS:-120}" "$exe" > "$OUT/$t.log" 2>&1  # a hang costs no more
  echo "$t: rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/$t.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$OUT/$t.log" | head -5
done
echo "tests: done at $(( $(date +%s) - t_start )) s"
if [ "${ROUND_BENCH:-1}" = 1 ]; then
  BUILD_DIR="$ROOT/build-gpu" OUT="$OUT" timeout $(( $(left) - 20 )) bash bench/gpu/grouped_gemm.sh \
    > "$OUT/bench_grouped_gemm.log" 2>&1
  echo "bench: rc=$? at $(( $(date +%s) - t_start )) s"
  sed -n '/^SUMMARY/,$p' "$OUT/bench_grouped_gemm.log"
fi
if [ "${ROUND_PROFILE:-0}" = 1 ]; then
  BUILD_DIR="$ROOT/build-gpu" OUT="$OUT" timeout $(( $(left) - 20 )) bash tools/gpu/gemm_profile.sh \
    > "$OUT/profile.log" 2>&1
  echo "profile: rc=$? at $(( $(date +%s) - t_start )) s"
  sed -n '/^PROFILE/,$p' "$OUT/profile.log"
  grep -m5 -iE "error|==ERR" "$OUT/profile.log"
fi
if [ "${ROUND_SANITIZE:-1}" = 1 ] && [ "$(left)" -gt 30 ]; then
  per=$(( ($(left) - 10) / 8 ))
  BUILD_DIR="$ROOT/build-gpu" OUT="$OUT" SANITIZE_SECONDS="${SANITIZE_SECONDS:-$per}" \
    bash tests/gemm_cuda/sanitize.sh
fi
echo "round: done at $(( $(date +%s) - t_start )) s"
