#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over the CUDA grouped GEMM tests (both schedules, TMA
# and register epilogues, K-grouped setup kernel, graph replay). Each run is bounded by
# SANITIZE_SECONDS; logs under $OUT. Prints one line per (tool, test) with the gtest verdicts and
# the tool's summary.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
OUT="${OUT:-/tmp/tessera-out}"
CS="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
LIMIT="${SANITIZE_SECONDS:-100}"
TESTS="${SANITIZE_TESTS:-test_grouped_gemm_sm90 test_grouped_gemm_sm90_graph test_grouped_gemm_cuda_api test_grouped_gemm_cuda_fp8}"
for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
  for t in $TESTS; do
    timeout "$LIMIT" "$CS" --tool "$tool" --error-exitcode 9 \
      "$BUILD_DIR/tests/gemm_cuda/$t" --gtest_filter="${SANITIZE_FILTER:-*}" \
      > "$OUT/sanitize_${tool}_$t.log" 2>&1
    rc=$?
    echo "sanitize $tool $t: rc=$rc $(grep -cE '^\[       OK \]' "$OUT/sanitize_${tool}_$t.log") ok," \
      "$(grep -E '^\[  (PASSED|FAILED) |ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_${tool}_$t.log" | tr '\n' ' ')"
  done
done
