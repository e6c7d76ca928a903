#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over the CUDA quantize tests (subset run:
# TESSERA_TEST_SUBSET=1; the exhaustive 2^32 codec test and the 2000x2000 cases are left out,
# they only repeat the same kernels ~10^4 times slower under the tool). Logs under $OUT.
# SANITIZE_TESTS limits the executables (default: all three), SANITIZE_SECONDS bounds each run.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
OUT="${OUT:-/tmp/tessera-out}"
CS="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
LIMIT="${SANITIZE_SECONDS:-100}"
TESTS="${SANITIZE_TESTS:-test_quantize_cuda test_grouped_quantize_cuda test_grouped_recipes_cuda}"
# The grouped recipes under the tools: one split sweep per kernel family (per-tensor delayed,
# per-line, block, NVFP4 with RHT + stochastic rounding, swizzled NVFP4), plus noop and a graph.
GROUPED_FILTER="*DeviceSplits*/tensor_delayed_both:*DeviceSplits*/rowwise_both:*DeviceSplits*/block128x128_both:*DeviceSplits*/block1x128_both:*DeviceSplits*/nvfp4_16x16_rht_sr_both:*DeviceSplits*/nvfp4_swizzled_sr_both:*DeviceSplits*/tensor_current_both:*Noop*/tensor_current_both:*Graph*/nvfp4_both"
for tool in memcheck racecheck; do
  for t in $TESTS; do
    filter='*'
    [ "$t" = test_quantize_cuda ] && filter="${SANITIZE_FILTER:-*ShapeSweep*/*e4m3:*ShapeSweep*/nvfp4:*ShapeSweep*/nvfp4_16x16_rht_sr:*ShapeSweep*/mxfp8_swizzled:*Delayed*}"
    [ "$t" = test_grouped_recipes_cuda ] && filter="${SANITIZE_GROUPED_FILTER:-$GROUPED_FILTER}"
    TESSERA_TEST_SUBSET=1 timeout "$LIMIT" "$CS" --tool "$tool" --error-exitcode 9 \
      "$BUILD_DIR/tests/quantize_cuda/$t" --gtest_filter="$filter" \
      > "$OUT/sanitize_${tool}_$t.log" 2>&1
    rc=$?
    echo "sanitize $tool $t: rc=$rc $(grep -E '^\[  (PASSED|FAILED) |ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_${tool}_$t.log" | tr '\n' ' ')"
  done
done
